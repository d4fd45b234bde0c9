"""Latency against load: TTFT and TPOT percentiles (p50, p90, p99) of each candidate as the load
per replica grows, with the knee and the planned operating point; drawn as small multiples, a
row of panels (TTFT, TPOT) per candidate, so that each panel holds three lines.

Load is the offered arrival rate per replica (``stability.offered_requests_per_s`` over the
replica count; the completion rate for a closed loop, which offers none). Different replica
counts of one candidate then fall on one curve: a plan's search points (1, 2, 4, ... replicas
at the base rate), its rate what-ifs and its headroom points (the chosen count at higher
rates); a sweep's runs by swept rate and replica count. Replications of one point are drawn as
their mean, shaded over their range.

- The knee: for a plan, its headroom search (the rate multiple at which the chosen fleet stops
  being ``stable``, ``sim.plan.planner``) times the operating load; for a sweep, the lowest
  load at which most runs of a point were ``near_saturation`` or ``unstable`` (a run too short
  to judge, ``undetermined``, is no evidence either way).
- The operating point: the load per replica at the plan's chosen count, or at the sweep's
  cheapest run that keeps SLO attainment (``sim.report.answer``), one per traffic.
- The SLO: a plan's bounds on these statistics; a run's per-request bounds (``slo.*``).

An autoscaled run (``autoscale.*`` in its summary) has no one replica count: its
``num_replicas`` is the peak, which would put it at a lower load than it carried. Its count is
its time-weighted mean of replicas billed (``autoscale.replicas_mean``), provisioning and
draining ones included, so its load is per replica paid for, a little below the load per
serving replica; the figure's caption says so when a run scaled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.plan.slo import parse
from sim.report.document import Figure
from sim.report.inputs import run_labels, searched_replicas
from sim.report.plotting import Drawing, drawing, plain_log_labels

PERCENTILES = ("p50", "p90", "p99")
METRICS = {"ttft_s": "TTFT", "tpot_s": "TPOT"}
# swept keys that move the load per replica: they are the x axis, not a curve of their own
LOAD_KEYS = {
    "fleet.replicas",
    "workload.qps",
    "workload.rate_scale",
    "workload.request_rate",
    "workload.session_rate",
    "workload.concurrency",
    "sim.arrival_rate_scale",
    "seed",
}
PAST_THE_KNEE = ("near_saturation", "unstable")
SLO_COLOUR = "#b2182b"  # dark red: apart from the curves' palette
# the y axis runs at least to this times the highest SLO bound: on a log axis, room between the
# SLO line's label and the loads written at the panel's top
SLO_HEADROOM = 3.0
MARK_COLOUR = "#4d4d4d"  # dark grey: the knee and the operating point, apart from the curves
# one colour per percentile (seaborn's colorblind palette's first three), the same in every panel
PERCENTILE_COLOURS = {"p50": "#0173b2", "p90": "#de8f05", "p99": "#029e73"}
# Small multiples: a row of panels per group (a plan's candidate, a sweep's curve). Past
# MAX_GROUPS rows the page gets too long to compare panels; the cost table lists them all.
MAX_GROUPS = 12
FIGURE_WIDTH_IN = 11.0  # two panels and the legend across a report's column
PANEL_HEIGHT_IN = 2.7  # tall enough for three lines and an SLO label to be told apart
TITLE_ROOM_IN = 0.8  # the x label and the margins
OFFERED = "stability.offered_requests_per_s"
COMPLETED_RATE = "throughput.requests_per_s"
MEAN_REPLICAS = "autoscale.replicas_mean"  # an autoscaled run's billed replicas over time


@dataclass
class LoadCurves:
    """One row per simulation: ``group`` (its curve), ``point`` (replications of one point
    share it), ``load`` (the point's mean load per replica), the percentiles, ``verdict``."""

    points: pd.DataFrame
    knees: dict[str, float] = field(default_factory=dict)  # group -> load per replica
    # (group, load per replica): a plan's candidates at their counts, a sweep's answers (one
    # per traffic, so a group may have several)
    operating: list[tuple[str, float]] = field(default_factory=list)
    bounds: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # metric -> lines
    scaled: int = 0  # runs whose load is over their mean billed replicas (autoscaled)


def replica_counts(rows: pd.DataFrame, fixed: pd.Series) -> pd.Series:
    """Each row's replica count for its load: an autoscaled run's mean billed replicas
    (``MEAN_REPLICAS``), else ``fixed``."""
    if MEAN_REPLICAS not in rows:
        return fixed
    return rows[MEAN_REPLICAS].where(rows[MEAN_REPLICAS].notna(), fixed).astype(float)


def with_load(rows: pd.DataFrame, replicas: pd.Series, point: pd.Series) -> pd.DataFrame:
    """``rows`` with ``load`` (offered per replica, averaged over each ``point``'s rows) and
    ``point``."""
    rate = rows[OFFERED] if OFFERED in rows else pd.Series(np.nan, index=rows.index)
    if COMPLETED_RATE in rows:
        rate = rate.fillna(rows[COMPLETED_RATE])
    out = rows.assign(point=point.to_numpy(), per_replica=(rate / replicas).to_numpy())
    out["load"] = out.groupby("point")["per_replica"].transform("mean")
    out["verdict"] = rows["stability.verdict"] if "stability.verdict" in rows else None
    return out


def plan_curves(rows: pd.DataFrame | None, plan: dict) -> LoadCurves | None:
    """A plan's curves from ``plan.parquet`` (``rows``) and ``plan.json`` (``plan``)."""
    if rows is None or len(rows) == 0:
        return None
    # steps made slower or faster are another fleet: only the base and more traffic
    same_fleet = rows["scenario"].str.match(r"^(base|rate x|headroom)")
    rows = rows[same_fleet].reset_index(drop=True)
    point = rows["candidate"] + "|" + rows["scenario"] + "|" + rows["replicas"].astype(str)
    curves = LoadCurves(
        with_load(rows, replica_counts(rows, rows["replicas"]), point).rename(
            columns={"candidate": "group"}
        ),
        scaled=_scaled(rows),
    )
    feasible = [c for c in plan.get("candidates") or [] if c.get("feasible")]
    # cheapest first: the figure draws its panels in this order
    feasible.sort(key=lambda c: (_or_inf(c.get("usd_per_hour")), str(c["candidate"])))
    for c in feasible:
        mine = curves.points[
            (curves.points["group"] == c["candidate"])
            & (curves.points["scenario"] == "base")
            & (curves.points["replicas"] == searched_replicas(c))
        ]
        if len(mine) == 0:
            continue
        at = float(mine["load"].iloc[0])
        curves.operating.append((c["candidate"], at))
        past = (c.get("headroom") or {}).get("not_stable_at_rate_x")
        if past:
            curves.knees[c["candidate"]] = at * float(past)
    for text in plan.get("slo") or []:
        add_bound(curves, text)
    return curves


def _or_inf(x: float | None) -> float:
    return math.inf if x is None else float(x)


def add_bound(curves: LoadCurves, text: str) -> None:
    """The line of an SLO constraint (``ttft_s.p99 <= 0.2``) on its metric's panel."""
    constraint = parse(text)
    metric = constraint.metric.split(".")[0]
    line = (constraint.bound, f"SLO {constraint}")
    if metric in METRICS and line not in curves.bounds.setdefault(metric, []):
        curves.bounds[metric].append(line)


def sweep_curves(runs: pd.DataFrame, swept: list[str], chosen: list[object] | None) -> LoadCurves:
    """A sweep's curves from ``runs.parquet``; ``chosen``: the run ids of its answers (one
    per traffic)."""
    groups = run_labels(runs, swept, LOAD_KEYS)
    point = run_labels(runs, swept, {"seed"})  # replications of a point differ by seed only
    replicas = runs["num_replicas"] if "num_replicas" in runs else pd.Series(1, index=runs.index)
    curves = LoadCurves(
        with_load(runs, replica_counts(runs, replicas), point).assign(group=groups.to_numpy()),
        scaled=_scaled(runs),
    )
    for group, mine in curves.points.groupby("group"):
        past = mine.groupby("load")["verdict"].agg(lambda v: (v.isin(PAST_THE_KNEE)).mean() > 0.5)
        if past.any():
            curves.knees[str(group)] = float(past[past].index.min())
    for run_id in chosen or []:
        row = curves.points[curves.points["run_id"].astype(str) == str(run_id)]
        if len(row):
            curves.operating.append((str(row["group"].iloc[0]), float(row["load"].iloc[0])))
    for metric in METRICS:
        column = f"slo.{metric}"
        if column in runs and runs[column].notna().any():
            bound = float(runs[column].dropna().iloc[0])
            curves.bounds.setdefault(metric, []).append(
                (bound, f"per-request SLO {metric} <= {bound:g}")
            )
    return curves


def _scaled(rows: pd.DataFrame) -> int:
    return int(rows[MEAN_REPLICAS].notna().sum()) if MEAN_REPLICAS in rows else 0


def load_figure(curves: LoadCurves | None, name: str = "latency_vs_load") -> Figure | None:
    """TTFT and TPOT percentiles against load per replica, as small multiples: a row of two
    panels (TTFT, TPOT) per group, the groups with an operating point first, at most
    ``MAX_GROUPS`` rows; each panel draws its group's three percentiles, so every line can be
    followed. The axes are shared (x across the figure, y down each column): panels compare
    at a glance. None with fewer than two loads."""
    if curves is None or curves.points["load"].nunique() < 2:
        return None
    columns = [f"{m}.{p}" for m in METRICS for p in PERCENTILES]
    long = curves.points.melt(
        id_vars=["group", "load"],
        value_vars=[c for c in columns if c in curves.points],
        var_name="statistic",
        value_name="seconds",
    ).dropna(subset=["seconds", "load"])
    long = long[long["seconds"] > 0]  # a log axis: a zero latency has no place on it
    long["metric"] = long["statistic"].str.split(".").str[0]
    long["percentile"] = long["statistic"].str.split(".").str[1]
    every = list(dict.fromkeys([g for g, _ in curves.operating] + list(curves.points["group"])))
    groups = every[:MAX_GROUPS]
    size = (FIGURE_WIDTH_IN, TITLE_ROOM_IN + PANEL_HEIGHT_IN * len(groups))
    with drawing(len(groups), len(METRICS), size=size, sharex=True, sharey="col") as d:
        for row, group in enumerate(groups):
            for column, (metric, label) in enumerate(METRICS.items()):
                ax = d.axes[row][column]
                _panel(d, ax, curves, long, group, metric, legend=(row, column) == (0, 1))
                ax.set_title(label if len(every) == 1 else f"{label}: {group}", fontsize=10)
                ax.set_ylabel(f"{label} (s, log)")
                ax.set_xlabel("offered requests/s per replica" if row == len(groups) - 1 else "")
        _legend(d.axes[0][-1], curves)
    knees = "" if curves.knees else " (none found)"
    left_out = (
        f" The first {len(groups)} of {len(every)} groups are drawn (those with an operating "
        "point, cheapest first, then the rest in order)."
        if len(every) > len(groups)
        else ""
    )
    return Figure(
        name,
        "TTFT and TPOT percentiles against the offered load per replica"
        + ("" if len(every) == 1 else ", one row of panels per candidate")
        + " (lines: the mean over replications, shaded: their range). Solid vertical line and "
        "star: the operating point; dotted: the knee, where the fleet stops keeping up"
        f"{knees}; each line labelled with its load (req/s per replica): the operating point's at "
        "the top, the knee's at the bottom. Dashed red: the SLO."
        + left_out
        + (
            f" {curves.scaled} autoscaled run(s): their load is over their mean replicas "
            "billed (autoscale.replicas_mean, provisioning and draining included), so per "
            "serving replica it was somewhat higher."
            if curves.scaled
            else ""
        ),
        d.png,
    )


def _legend(ax: Any, curves: LoadCurves) -> None:
    """One legend, beside the top right panel: the percentiles, then the marks each panel
    may carry (drawn as empty lines, so they add nothing to the axes' data)."""
    handles, labels = ax.get_legend_handles_labels()
    marks = [("SLO", SLO_COLOUR, "--", "")] if curves.bounds else []
    if curves.knees:
        marks.append(("knee", MARK_COLOUR, ":", ""))
    if curves.operating:
        marks.append(("operating point", MARK_COLOUR, "-", "*"))
    for label, colour, style, marker in marks:
        handles += ax.plot([], [], color=colour, linestyle=style, marker=marker, markersize=10)
        labels.append(label)
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9)


def _mark(ax: Any, at: float, where: str) -> None:
    """The load ``at`` written on its vertical line, boxed so the line does not cross it: at
    the ``top`` (the operating point) or the ``bottom`` (the knee), apart when they are close."""
    ax.annotate(
        f"{at:.3g}",
        (at, 0.97 if where == "top" else 0.03),
        xycoords=("data", "axes fraction"),
        ha="center",
        va="top" if where == "top" else "bottom",
        fontsize=8,
        color=MARK_COLOUR,
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
    )


def _panel(
    d: Drawing,
    ax: Any,
    curves: LoadCurves,
    long: pd.DataFrame,
    group: str,
    metric: str,
    legend: bool,
) -> None:
    """One panel: ``group``'s percentiles of ``metric`` with its SLO, knee and operating
    points."""
    mine = long[(long["metric"] == metric) & (long["group"] == group)]
    if len(mine):
        d.sns.lineplot(
            data=mine,
            x="load",
            y="seconds",
            hue="percentile",
            hue_order=list(PERCENTILES),
            palette=PERCENTILE_COLOURS,
            style="percentile",
            style_order=list(PERCENTILES),
            markers=True,
            errorbar=("pi", 100),
            ax=ax,
            legend=legend,
        )
    for bound, text in curves.bounds.get(metric, []):
        ax.axhline(bound, color=SLO_COLOUR, linestyle="--", linewidth=1)
        ax.annotate(
            text,
            (0.01, bound),
            xycoords=("axes fraction", "data"),
            color=SLO_COLOUR,
            fontsize=8,
            va="bottom",
        )
    if group in curves.knees:
        knee = curves.knees[group]
        ax.axvline(knee, color=MARK_COLOUR, linestyle=":", linewidth=1.5)
        _mark(ax, knee, "bottom")
    for where, at in curves.operating:
        if where != group:
            continue
        ax.axvline(at, color=MARK_COLOUR, linestyle="-", linewidth=0.8)
        _mark(ax, at, "top")
        p99 = mine[mine["percentile"] == "p99"]
        near = p99.loc[(p99["load"] - at).abs() < 1e-9 * max(1.0, at), "seconds"]
        if len(near):
            ax.plot(
                at,
                near.mean(),
                marker="*",
                markersize=14,
                color=PERCENTILE_COLOURS["p99"],
                markeredgecolor="black",
            )
    ax.set_yscale("log")
    plain_log_labels(ax.yaxis)
    lines = curves.bounds.get(metric, [])
    if lines:  # room above the SLO line for its label, below the operating point's load
        ax.set_ylim(top=max(ax.get_ylim()[1], SLO_HEADROOM * max(b for b, _ in lines)))
