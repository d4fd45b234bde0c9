"""What each candidate costs, cheapest first, and how sure the cost per token is.

A fleet's $/hour is exact once its GPUs are chosen; its $ per million output tokens depends on
the tokens the run served, so it varies between replications (seeds) and gets the Student-t
interval over them (``sim.report.intervals``). A plan's candidates are its feasible answers
(each at its chosen replica count, ``plan.json``; its replications in ``plan.parquet``); a
sweep's are its points (runs that differ only by seed are replications of one point), with
whether they keep SLO attainment. Cheapest first: by $/hour, then by $ per million tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.output.summary_table import _num
from sim.report.document import Figure, Table
from sim.report.inputs import run_labels, searched_replicas
from sim.report.intervals import Interval, mean_interval
from sim.report.plotting import drawing
from sim.sweeps.monitor import is_traffic_key

PER_MILLION = "cost.usd_per_million_output_tokens"
# the cost table's last column: its heading, and what it means (the table's caption)
PLAN_NOTE = "P(miss)"
SWEEP_NOTE = "SLO attainment"
NOTES = {
    PLAN_NOTE: "P(miss): the share of its replications that missed an SLO",
    SWEEP_NOTE: "SLO attainment: the share of requests within every slo.* bound, against the "
    "sweep's ranking threshold",
}
MAX_SHOWN = 20  # candidates in the figure; the table lists them all
LABEL_POINTS = 9  # the values written beside the bars, in points
ROOM_FOR_LABELS = 1.45  # each axis runs to this times its longest bar: its label fits beside


@dataclass(frozen=True)
class CandidateCost:
    label: str
    replicas: int | None
    gpus: int | None
    usd_per_hour: float
    per_million: Interval | None  # $ per million output tokens over the replications
    replications: int
    note: str = ""  # the last column: a plan's P(miss), a sweep's SLO attainment
    traffic: str = ""  # a sweep's traffic (``sim.report.answer.traffic_groups``); "" for one


def _values(rows: pd.DataFrame, column: str) -> list[float]:
    return [float(v) for v in rows[column].dropna()] if column in rows else []


def _first(rows: pd.DataFrame, column: str) -> int | None:
    values = _values(rows, column)
    return int(values[0]) if values else None


def plan_costs(plan: dict, rows: pd.DataFrame | None) -> list[CandidateCost]:
    """Each feasible candidate of ``plan.json`` at its chosen count, cheapest first as the
    plan ranks them (``sim.plan.answer``: $/hour, then the candidate's name)."""
    out = []
    for c in plan.get("candidates") or []:
        if not c.get("feasible") or c.get("usd_per_hour") is None:
            continue
        mine = pd.DataFrame()
        if rows is not None and len(rows):
            mine = rows[
                (rows["candidate"] == c["candidate"])
                & (rows["scenario"] == "base")
                & (rows["replicas"] == searched_replicas(c))
            ]
        values = _values(mine, PER_MILLION)
        spares = c.get("spares") or {}
        gpus = _first(mine, "num_gpus")
        if spares.get("usd_per_hour") and "cost.usd_per_hour" in mine and len(values):
            # N's simulations, billed as N + k (the same tokens, the spares' bill added)
            scaled = mine[PER_MILLION] * spares["usd_per_hour"] / mine["cost.usd_per_hour"]
            values = [float(v) for v in scaled.dropna()]
            gpus = int(c["replicas"]) * int(spares["gpus_per_replica"])
        given = c.get("usd_per_million_output_tokens")
        interval = mean_interval(values) or (
            None if given is None else Interval(given, given, given)
        )
        out.append(
            CandidateCost(
                c["candidate"],
                c["replicas"],
                gpus,
                float(c["usd_per_hour"]),
                interval,
                int(c.get("replications") or len(values)),
                f"{c['miss_probability']:.0%}" if c.get("miss_probability") is not None else "-",
            )
        )
    # the plan's own order ($/hour, then the candidate's name): its answer's and its table's
    return sorted(out, key=lambda c: (c.usd_per_hour, c.label))


def sweep_costs(
    runs: pd.DataFrame,
    swept: list[str],
    attained: pd.Series,
    target: float,
    traffic: pd.Series | None = None,
) -> list[CandidateCost]:
    """Each point of a sweep (runs that differ only by seed are replications of one), with its
    mean SLO attainment (``attained`` per run) against ``target``; cheapest first within each
    ``traffic`` (``sim.report.answer.traffic_groups``), the traffics in the order of their
    first run, each point labelled without the traffic its group is headed by."""
    if traffic is None:
        traffic = pd.Series("", index=runs.index, dtype=object)
    several = traffic.nunique() > 1
    leave_out = {"seed"} | ({k for k in swept if is_traffic_key(k)} if several else set())
    labels = run_labels(runs, swept, leave_out)
    out = []
    for (where, label), mine in runs.groupby([traffic.to_numpy(), labels.to_numpy()], sort=False):
        share = attained[mine.index].dropna()
        meets = f"{share.mean():.1%}" if len(share) else "unknown"
        if len(share):
            meets += " (meets)" if share.mean() >= target else " (misses)"
        out.append(
            CandidateCost(
                str(label),
                _first(mine, "num_replicas"),
                _first(mine, "num_gpus"),
                float(np.mean(_values(mine, "cost.usd_per_hour") or [np.nan])),
                mean_interval(_values(mine, PER_MILLION)),
                len(mine),
                meets,
                str(where),
            )
        )
    order = {t: i for i, t in enumerate(dict.fromkeys(traffic.astype(str)))}
    return sorted(out, key=lambda c: (order[c.traffic], *_cheapest(c)))


def by_traffic(costs: list[CandidateCost]) -> dict[str, list[CandidateCost]]:
    """``costs`` split by traffic, in their order (one ``""`` group for a plan)."""
    groups: dict[str, list[CandidateCost]] = {}
    for c in costs:
        groups.setdefault(c.traffic, []).append(c)
    return groups


def _cheapest(c: CandidateCost) -> tuple[float, float, str]:
    per_million = c.per_million.value if c.per_million is not None else float("inf")
    return (c.usd_per_hour, per_million, c.label)


def _interval_text(i: Interval | None) -> str:
    if i is None:
        return "-"
    if i.low == i.high:
        return f"${_num(i.value)}"
    return f"${_num(i.value)} [{_num(i.low)}, {_num(i.high)}]"


def cost_table(costs: list[CandidateCost], note: str = PLAN_NOTE) -> Table | None:
    """The candidates, ranked cheapest first; ``note`` heads the last column (``PLAN_NOTE``,
    ``SWEEP_NOTE``), and a traffic (all ``costs`` share one) heads the caption."""
    if not costs:
        return None
    return Table(
        [
            "rank",
            "candidate",
            "replicas",
            "GPUs",
            "$/hour",
            "$/M output tokens [95% CI]",
            "runs",
            note,
        ],
        [
            [
                str(rank),
                c.label,
                "-" if c.replicas is None else str(c.replicas),
                "-" if c.gpus is None else str(c.gpus),
                f"${c.usd_per_hour:,.2f}",
                _interval_text(c.per_million),
                str(c.replications),
                c.note,
            ]
            for rank, c in enumerate(costs, 1)
        ],
        _traffic_head(costs)
        + "Cost per candidate, cheapest first ($/M output tokens: the mean over the runs with "
        f"its Student-t 95% interval; {NOTES.get(note, note)}).",
    )


def _traffic_head(costs: list[CandidateCost]) -> str:
    """``Traffic workload.rate_scale=4: `` when the costs are one traffic of several."""
    return f"Traffic {costs[0].traffic}: " if costs and costs[0].traffic else ""


def cost_figure(costs: list[CandidateCost], name: str = "cost") -> Figure | None:
    """$/hour and $ per million output tokens (with intervals) per candidate, each bar with
    its value, cheapest at the top; None without candidates. A traffic (all ``costs`` share
    one) heads the caption."""
    if not costs:
        return None
    shown = costs[:MAX_SHOWN]
    labels = [c.label for c in shown]
    height = 1.5 + 0.45 * len(shown)
    with drawing(1, 2, size=(11.0, height), sharey=True) as d:
        hourly, tokens = d.axes[0]
        d.sns.barplot(
            x=[c.usd_per_hour for c in shown], y=labels, ax=hourly, color="C0", orient="h"
        )
        for i, c in enumerate(shown):
            gpus = f"{c.gpus} GPU(s)" if c.gpus is not None else ""
            hourly.text(
                c.usd_per_hour,
                i,
                f" ${c.usd_per_hour:,.2f} {gpus}",
                va="center",
                fontsize=LABEL_POINTS,
            )
        hourly.set_xlabel("$/hour")
        hourly.set_xlim(0, ROOM_FOR_LABELS * max(c.usd_per_hour for c in shown))
        means = [np.nan if c.per_million is None else c.per_million.value for c in shown]
        d.sns.barplot(x=means, y=labels, ax=tokens, color="C2", orient="h")
        for i, c in enumerate(shown):
            if c.per_million is None:
                continue
            if c.per_million.high > c.per_million.low:
                tokens.errorbar(
                    c.per_million.value,
                    i,
                    xerr=[
                        [c.per_million.value - c.per_million.low],
                        [c.per_million.high - c.per_million.value],
                    ],
                    color="black",
                    capsize=3,
                )
            # the value beside its bar, past the interval's whisker
            tokens.text(
                c.per_million.high,
                i,
                f" ${_num(c.per_million.value)}",
                va="center",
                fontsize=LABEL_POINTS,
            )
        highs = [c.per_million.high for c in shown if c.per_million is not None]
        if highs:
            tokens.set_xlim(0, ROOM_FOR_LABELS * max(highs))
        tokens.set_xlabel("$ per million output tokens (95% interval)")
    more = (
        f" The {len(costs) - MAX_SHOWN} dearest are in the table." if len(costs) > MAX_SHOWN else ""
    )
    return Figure(
        name,
        _traffic_head(costs)
        + "Cost per candidate, cheapest first: $/hour of the fleet (its GPUs beside it) and $ per "
        "million output tokens, with its 95% Student-t interval over replications." + more,
        d.png,
    )
