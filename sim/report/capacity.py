"""A capacity plan's report (``fleetcast plan plan.solve=max_rate``, ``sim.plan.capacity``): the
answer paragraph, each SLO statistic against the offered load with its bound and the capacity
found (its interval shaded), and the table of the rate multiples tried.

The load is the fleet's offered requests/s (``stability.offered_requests_per_s``: the rate the
answer is in), each multiple's replications drawn as their mean, shaded over their range. A
statistic the simulations' rows do not hold (a mistyped SLO of an older plan) gets no panel.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sim.output.summary_table import _num
from sim.plan.slo import parse
from sim.report.document import Figure, Table
from sim.report.load import MARK_COLOUR, OFFERED, SLO_COLOUR
from sim.report.plotting import drawing, plain_log_labels

SOLVE = "max_rate"  # plan.json's ``solve`` of a capacity plan
CAPACITY_COLOUR = "#0173b2"  # the statistics' line (the load figure's p50 blue)
PANEL_IN = (5.0, 3.4)  # one panel's width and height, inches
ATTAINMENT = "slo_attainment"  # the SLO grammar's share of requests within slo.* (sim.plan.slo)
# how a bracket ended (sim.plan.rate_search), in words
OUTCOMES = {
    "found": "found",
    "misses_at_lowest": "the SLO fails at the lowest rate tried (plan.min_rate_factor)",
    "meets_at_highest": "every SLO holds at the highest rate allowed (plan.max_rate_factor): "
    "the capacity is above it",
}


def is_capacity(plan: dict[str, Any]) -> bool:
    """Whether ``plan.json``'s object is a capacity plan's."""
    return plan.get("solve") == SOLVE and isinstance(plan.get("capacity"), dict)


def _requests(c: dict[str, Any], k: float | None) -> str | None:
    """The requests/s of rate multiple ``k`` (None: the plan does not record its base rate)."""
    base = c.get("base_requests_per_s")
    return None if k is None or not base else _num(k * base)


def _x(k: float | None) -> str:
    """``x1.59``: a rate multiple."""
    return "-" if k is None else f"x{k:.4g}"


def _rate(c: dict[str, Any], k: float | None) -> str:
    """``79.5 requests/s (x1.59)``, or the multiple alone."""
    if k is None:
        return "-"
    rate = _requests(c, k)
    return f"{rate} requests/s (x{k:.4g})" if rate else f"x{k:.4g} the config's rate"


def capacity_answer(plan: dict[str, Any]) -> str:
    """The answer paragraph: the capacity, its interval, how the bracket ended, the SLOs."""
    c = plan["capacity"]
    slos = ", ".join(plan.get("slo") or []) or "no SLO recorded"
    fleet = f"The fleet as given ({plan.get('replicas', '?')} replica(s))"
    outcome = c.get("outcome")
    if outcome == "misses_at_lowest":
        return (
            f"{fleet} misses its SLO ({slos}) even at the lowest rate tried, "
            f"{_rate(c, c.get('misses_at_rate_x'))}: no capacity found."
        )
    if outcome == "meets_at_highest":
        return (
            f"{fleet} meets every SLO ({slos}) at the highest rate allowed, "
            f"{_rate(c, c.get('rate_x'))}: its capacity is above it (raise "
            "plan.max_rate_factor to find it)."
        )
    sentences = [
        f"{fleet} serves up to {_num(c.get('requests_per_s'))} requests/s "
        f"({_num(c.get('input_tokens_per_s'))} input and {_num(c.get('output_tokens_per_s'))} "
        f"output tokens/s) within every SLO ({slos}): {_x(c.get('rate_x'))} the config's rate; "
        f"it misses at {_x(c.get('misses_at_rate_x'))} (plan.rate_tolerance="
        f"{_num(c.get('rate_tolerance'))})."
    ]
    interval = (c.get("interval") or {}).get("requests_per_s")
    confidence = plan.get("confidence", 0.95)
    if interval:
        sentences.append(
            f"Each replication's own capacity averages {_num(interval['mean'])} requests/s, "
            f"{confidence:.0%} interval [{_num(interval['ci_low'])}, {_num(interval['ci_high'])}] "
            f"over {c.get('replications', '?')} replications."
        )
    stats = [
        f"{name.split()[0]} {_num(s.get('mean'))} [{_num(s.get('ci_low'))}, "
        f"{_num(s.get('ci_high'))}] against {_num(s.get('bound'))}"
        for name, s in (c.get("slo") or {}).items()
    ]
    if stats:
        sentences.append("At it: " + "; ".join(stats) + ".")
    return " ".join(sentences)


def _statistic(rows: pd.DataFrame, metric: str) -> pd.Series | None:
    """Each simulation's value of an SLO statistic (None: the rows do not hold it)."""
    if metric == ATTAINMENT:
        needed = ["goodput_requests_per_s", "duration_s", "num_requests"]
        if not all(c in rows for c in needed):
            return None
        return rows[needed[0]] * rows[needed[1]] / rows[needed[2]]
    return rows[metric].astype(float) if metric in rows else None


def capacity_figure(rows: pd.DataFrame | None, plan: dict[str, Any]) -> Figure | None:
    """Each SLO statistic against the offered requests/s, a panel each: the bound (dashed
    red), the capacity (solid) and its interval (shaded). None without rows or a panel."""
    if rows is None or len(rows) == 0 or OFFERED not in rows or "rate_x" not in rows:
        return None
    c = plan["capacity"]
    panels = []
    for text in plan.get("slo") or []:
        constraint = parse(text)
        values = _statistic(rows, constraint.metric)
        if values is not None and values.notna().any():
            panels.append((constraint, values))
    if not panels:
        return None
    capacity = c.get("requests_per_s") if c.get("outcome") == "found" else None
    interval = (c.get("interval") or {}).get("requests_per_s")
    size = (PANEL_IN[0] * len(panels), PANEL_IN[1])
    with drawing(1, len(panels), size=size) as d:
        for ax, (constraint, values) in zip(d.axes[0], panels, strict=True):
            data = pd.DataFrame({"rate_x": rows["rate_x"], "value": values})
            data["load"] = rows.groupby("rate_x")[OFFERED].transform("mean")
            d.sns.lineplot(
                data=data.dropna(),
                x="load",
                y="value",
                color=CAPACITY_COLOUR,
                marker="o",
                errorbar=("pi", 100),
                ax=ax,
            )
            ax.axhline(constraint.bound, color=SLO_COLOUR, linestyle="--", linewidth=1)
            ax.annotate(
                f"SLO {constraint}",
                (0.01, constraint.bound),
                xycoords=("axes fraction", "data"),
                color=SLO_COLOUR,
                fontsize=8,
                va="bottom",
            )
            if interval:
                ax.axvspan(interval["ci_low"], interval["ci_high"], color=MARK_COLOUR, alpha=0.15)
            if capacity is not None:
                ax.axvline(capacity, color=MARK_COLOUR, linewidth=1.2)
            if constraint.metric.endswith("_s") or "_s." in constraint.metric:
                if (data["value"] > 0).all():  # (a log axis has no zero)
                    ax.set_yscale("log")
                    plain_log_labels(ax.yaxis)
            ax.set_xlabel("offered requests/s (the fleet)")
            ax.set_ylabel(constraint.metric)
            ax.set_title(constraint.metric, fontsize=10)
    found = (
        f" Solid vertical line: the capacity found, {_num(capacity)} requests/s"
        + (
            f"; shaded: the {plan.get('confidence', 0.95):.0%} interval of the replications' "
            "own capacities"
            if interval
            else ""
        )
        + "."
        if capacity is not None
        else f" No capacity drawn: {OUTCOMES.get(str(c.get('outcome')), c.get('outcome'))}."
    )
    return Figure(
        "capacity",
        "Each SLO statistic against the fleet's offered load, at every rate multiple the "
        "search simulated (line: the mean over replications, shaded: their range). Dashed "
        "red: the SLO." + found,
        d.png,
    )


def evaluated_table(plan: dict[str, Any]) -> Table:
    """The rate multiples the search decided, lowest first."""
    c = plan["capacity"]
    rows = [
        [
            _x(e.get("rate_x")),
            _requests(c, e.get("rate_x")) or "-",
            str(e.get("decision")),
            str(e.get("replications")),
            str(e.get("reason")),
        ]
        for e in c.get("evaluated") or []
    ]
    return Table(
        ["rate multiple", "offered", "decision", "replications", "why"],
        rows,
        "Each rate multiple the search tried and its decision over its replications (as the "
        f"fleet-size search decides a count). The bracket: "
        f"{OUTCOMES.get(str(c.get('outcome')), c.get('outcome'))}.",
    )
