"""Latency against load: TTFT and TPOT percentiles (p50, p90, p99) of each candidate as the load
per replica grows, with the knee and the planned operating point.

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
  cheapest run that keeps SLO attainment (``sim.report.answer``).
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

import numpy as np
import pandas as pd

from sim.plan.slo import parse
from sim.report.document import Figure
from sim.report.inputs import run_labels
from sim.report.plotting import drawing

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
OFFERED = "stability.offered_requests_per_s"
COMPLETED_RATE = "throughput.requests_per_s"
MEAN_REPLICAS = "autoscale.replicas_mean"  # an autoscaled run's billed replicas over time


@dataclass
class LoadCurves:
    """One row per simulation: ``group`` (its curve), ``point`` (replications of one point
    share it), ``load`` (the point's mean load per replica), the percentiles, ``verdict``."""

    points: pd.DataFrame
    knees: dict[str, float] = field(default_factory=dict)  # group -> load per replica
    operating: dict[str, float] = field(default_factory=dict)  # group -> load per replica
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
    for c in plan.get("candidates") or []:
        if not c.get("feasible"):
            continue
        mine = curves.points[
            (curves.points["group"] == c["candidate"])
            & (curves.points["scenario"] == "base")
            & (curves.points["replicas"] == c["replicas"])
        ]
        if len(mine) == 0:
            continue
        at = float(mine["load"].iloc[0])
        curves.operating[c["candidate"]] = at
        past = (c.get("headroom") or {}).get("not_stable_at_rate_x")
        if past:
            curves.knees[c["candidate"]] = at * float(past)
    for text in plan.get("slo") or []:
        add_bound(curves, text)
    return curves


def add_bound(curves: LoadCurves, text: str) -> None:
    """The line of an SLO constraint (``ttft_s.p99 <= 0.2``) on its metric's panel."""
    constraint = parse(text)
    metric = constraint.metric.split(".")[0]
    line = (constraint.bound, f"SLO {constraint}")
    if metric in METRICS and line not in curves.bounds.setdefault(metric, []):
        curves.bounds[metric].append(line)


def sweep_curves(runs: pd.DataFrame, swept: list[str], chosen: object | None) -> LoadCurves:
    """A sweep's curves from ``runs.parquet``; ``chosen`` is the run id of its answer."""
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
    if chosen is not None:
        row = curves.points[curves.points["run_id"].astype(str) == str(chosen)]
        if len(row):
            curves.operating[str(row["group"].iloc[0])] = float(row["load"].iloc[0])
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
    """TTFT and TPOT percentiles against load per replica; None with fewer than two loads."""
    if curves is None or curves.points["load"].nunique() < 2:
        return None
    columns = [f"{m}.{p}" for m in METRICS for p in PERCENTILES]
    long = curves.points.melt(
        id_vars=["group", "load"],
        value_vars=[c for c in columns if c in curves.points],
        var_name="statistic",
        value_name="seconds",
    ).dropna(subset=["seconds", "load"])
    long["metric"] = long["statistic"].str.split(".").str[0]
    long["percentile"] = long["statistic"].str.split(".").str[1]
    groups = list(dict.fromkeys(curves.points["group"]))
    palette = dict(zip(groups, [f"C{i % 10}" for i in range(len(groups))], strict=True))
    with drawing(1, 2, size=(11.0, 4.8)) as d:
        for ax, (metric, label) in zip(d.axes[0], METRICS.items(), strict=True):
            mine = long[long["metric"] == metric]
            if len(mine) == 0:
                continue
            d.sns.lineplot(
                data=mine,
                x="load",
                y="seconds",
                hue="group",
                style="percentile",
                style_order=list(PERCENTILES),
                palette=palette,
                markers=True,
                errorbar=("pi", 100),
                ax=ax,
                legend=ax is d.axes[0][-1],
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
            for group, at in curves.knees.items():
                ax.axvline(at, color=palette.get(group, "grey"), linestyle=":", linewidth=1.5)
            for group, at in curves.operating.items():
                ax.axvline(at, color=palette.get(group, "grey"), linestyle="-", linewidth=0.8)
                p99 = mine[(mine["group"] == group) & (mine["percentile"] == "p99")]
                near = p99.loc[(p99["load"] - at).abs() < 1e-9 * max(1.0, at), "seconds"]
                if len(near):
                    ax.plot(
                        at,
                        near.mean(),
                        marker="*",
                        markersize=14,
                        color=palette[group],
                        markeredgecolor="black",
                    )
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_plain)
            ax.yaxis.set_minor_formatter(_sparse)
            ax.set_xlabel("offered requests/s per replica")
            ax.set_ylabel(f"{label} (s, log scale)")
            ax.set_title(label)
        if d.axes[0][-1].get_legend() is not None:
            d.sns.move_legend(d.axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    knees = "; ".join(f"{g}: {_rate(at)}" for g, at in curves.knees.items()) or "none found"
    operating = "; ".join(f"{g}: {_rate(at)}" for g, at in curves.operating.items()) or "none"
    return Figure(
        name,
        "TTFT and TPOT percentiles against the offered load per replica (lines: the mean over "
        "replications, shaded: their range). Solid vertical line and star: the operating point "
        f"({operating}); dotted: the knee, where the fleet stops keeping up ({knees}); dashed "
        "red: the SLO."
        + (
            f" {curves.scaled} autoscaled run(s): their load is over their mean replicas "
            "billed (autoscale.replicas_mean, provisioning and draining included), so per "
            "serving replica it was somewhat higher."
            if curves.scaled
            else ""
        ),
        d.png,
    )


def _plain(value: float, _: object = None) -> str:
    """A log axis's label as a plain number (0.02, not 2 x 10^-2)."""
    return f"{value:g}"


def _sparse(value: float, _: object = None) -> str:
    """Minor labels at 2 and 5 times a power of ten only: readable where decades are close."""
    if value <= 0:
        return ""
    leading = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if leading in (2, 5) else ""


def _rate(per_replica: float) -> str:
    return "-" if not math.isfinite(per_replica) else f"{per_replica:.3g} req/s per replica"
