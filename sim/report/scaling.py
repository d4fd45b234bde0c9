"""The fleet over the day: how many replicas a run paid for and what they cost, from its
``scaling.parquet``, and a day plan's three answers side by side.

``scaling.parquet`` (written by the autoscaler) has one row per change of the fleet:

| column | type | meaning |
|---|---|---|
| ``time_s`` | float64 | simulated time of the change |
| ``replicas_ready`` | int32 | serving |
| ``replicas_provisioning`` | int32 | requested, loading weights, already billed |
| ``replicas_draining`` | int32 | no new requests, finishing running ones, billed |
| ``gpus_billed`` | int32 | GPUs paid for from then on |
| ``usd_per_hour`` | float64 | the rate paid from then on |
| ``event`` | string | ``start``, ``scale_up``, ``ready``, ``drain``, ``released``, ``cancelled`` |
| ``replica_id`` | int32 | the replica that became ready, began to drain, was released or was lost |

``replica_id`` is null for ``start``, ``scale_up`` and ``cancelled`` rows. A run with faults
(``sim.fleet.faults``) has one more ``event``, ``failed``: a replica lost to a failure or a spot
reclaim left the fleet; its replacement is the ``scale_up`` that follows at the same time.
``sim.output.scaling`` writes the table; a switch of engine configuration is a ``scale_up``, a
``ready``, a ``drain`` and a ``released``, not an event of its own. Each row's state holds
until the next row, the last one until the run ends, so money and GPU-hours are step
functions integrated over time (``integrate``).

A day plan's figures are drawn against the hours since its runs' start (0 to 24), labelled
with the hour of day: a day that starts at 09:30 runs from 09:30 to 09:30, and its hourly
rates (given by hour of day) are rolled to start there (``day_axis``, ``rates_since_start``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from sim.report.day_plan import DayAnswer, DayPlan
from sim.report.document import Figure, Table
from sim.report.plotting import drawing, hours_or_seconds

SECONDS_PER_HOUR = 3600.0
STATES = ("replicas_ready", "replicas_provisioning", "replicas_draining")


def integrate(scaling: pd.DataFrame, column: str, end_s: float) -> float:
    """The integral over time of ``column`` (a rate per hour, held from each row on until the
    next, the last until ``end_s``; nothing after ``end_s``), in hours x the column's unit:
    dollars for ``usd_per_hour``, GPU-hours for ``gpus_billed``."""
    rows = scaling.sort_values("time_s", kind="stable")
    times = rows["time_s"].to_numpy(float)
    held = np.clip(np.minimum(np.append(times[1:], np.inf), end_s) - times, 0.0, None)
    return float(np.sum(rows[column].to_numpy(float) * held) / SECONDS_PER_HOUR)


def run_end_s(scaling: pd.DataFrame, summary: Mapping) -> float:
    """When the run's bill stops: the end of its span (``duration_s``, from the first arrival,
    taken as time 0), or the last change when the summary has no span. A replica that became
    ready after the run ended is outside it."""
    return float(summary.get("duration_s") or scaling["time_s"].max())


def within(scaling: pd.DataFrame, end_s: float) -> pd.DataFrame:
    """The rows up to ``end_s``, in time order (the first one always)."""
    rows = scaling.sort_values("time_s", kind="stable").reset_index(drop=True)
    return rows[(rows["time_s"] <= end_s) | (rows.index == 0)]


def fixed_fleet(summary: Mapping) -> pd.DataFrame | None:
    """A fleet that never changed (no ``scaling.parquet``), as the one row it would have."""
    replicas, usd = summary.get("num_replicas"), (summary.get("cost") or {}).get("usd_per_hour")
    if replicas is None or usd is None:
        return None
    return pd.DataFrame(
        {
            "time_s": [0.0],
            "replicas_ready": [replicas],
            "replicas_provisioning": [0],
            "replicas_draining": [0],
            "gpus_billed": [summary.get("num_gpus", replicas)],
            "usd_per_hour": [usd],
            "event": ["start"],
            "replica_id": [None],
        }
    )


def billed(scaling: pd.DataFrame) -> pd.Series:
    """Replicas paid for at each change: ready, provisioning and draining."""
    return scaling[[s for s in STATES if s in scaling]].sum(axis=1)


def _step(ax: object, times: np.ndarray, values: np.ndarray, end: float, **style: object) -> None:
    """A step line held from each time on, the last value until ``end``."""
    ax.step(np.append(times, end), np.append(values, values[-1]), where="post", **style)  # type: ignore[attr-defined]


def scaling_figure(
    scaling: pd.DataFrame | None, summary: Mapping, name: str = "scaling"
) -> Figure | None:
    """One run's replicas by state (stacked) and $/hour over time; None without the table."""
    if scaling is None or len(scaling) == 0:
        return None
    end = run_end_s(scaling, summary)
    rows = within(scaling, end)
    scale, unit = hours_or_seconds(end)
    t = np.append(rows["time_s"].to_numpy(float), end) / scale
    with drawing(2, 1, size=(9.0, 5.5), sharex=True) as d:
        fleet, money = d.axes[0][0], d.axes[1][0]
        stacks = [
            np.append(rows[s].to_numpy(float), float(rows[s].iloc[-1])) for s in STATES if s in rows
        ]
        labels = [s.removeprefix("replicas_") for s in STATES if s in rows]
        fleet.stackplot(t, *stacks, labels=labels, step="post", alpha=0.8)
        fleet.set_ylabel("replicas")
        fleet.legend(loc="upper left", fontsize=8)
        _step(money, t[:-1], rows["usd_per_hour"].to_numpy(float), t[-1], color="C3")
        money.set_ylabel("$/hour")
        money.set_ylim(bottom=0)
        money.set_xlabel(f"simulated time ({unit})")
    # the summary's totals are the run's own (over its span); integrating the table is the
    # fallback for a summary without them
    given = summary.get("autoscale")
    totals: Mapping = given if isinstance(given, Mapping) else {}
    usd = totals.get("usd_total")
    usd = integrate(rows, "usd_per_hour", end) if usd is None else usd
    gpu_hours = totals.get("gpu_hours")
    if gpu_hours is None and "gpus_billed" in rows:
        gpu_hours = integrate(rows, "gpus_billed", end)
    events = rows["event"].value_counts().to_dict() if "event" in rows else {}
    counted = ", ".join(f"{n} {e}" for e, n in events.items() if e != "start")
    return Figure(
        name,
        f"Replicas by state and the rate paid over the run: {billed(rows).min():.0f} to "
        f"{billed(rows).max():.0f} replicas billed, ${usd:,.2f} over "
        f"{end / SECONDS_PER_HOUR:.3g} h"
        + (f" ({gpu_hours:,.1f} GPU-hours)" if gpu_hours is not None else "")
        + (f"; changes: {counted}" if counted else "")
        + ".",
        d.png,
    )


HOUR_TICKS = 3  # a tick every third hour of day


def day_axis(ax: object, day: DayPlan) -> None:
    """An axis of hours since the day's start (0 to 24), its ticks labelled by hour of day:
    the start and the end, and every ``HOUR_TICKS`` hours of day not within an hour of
    them."""
    every = [day.since_start(h) for h in range(0, 24, HOUR_TICKS)]
    ticks = sorted({0.0, 24.0, *(t for t in every if 1.0 <= t <= 23.0)})
    ax.set_xlim(0, 24)  # type: ignore[attr-defined]
    ax.set_xticks(ticks)  # type: ignore[attr-defined]
    ax.set_xticklabels([_clock(day.start_hour + t) for t in ticks])  # type: ignore[attr-defined]


def _clock(hour: float) -> str:
    """``09:30`` for hour of day 9.5 (or 33.5)."""
    minutes = round((hour % 24) * 60) % (24 * 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _day_label(day: DayPlan) -> str:
    return f"hour of the day (the runs start at {_clock(day.start_hour)})"


def rates_since_start(day: DayPlan) -> tuple[np.ndarray, np.ndarray]:
    """The hourly rates (by hour of day) as a step function of hours since the day's start:
    (times each rate holds from, the rates). A fractional start splits its hour: its end
    comes first, its beginning last."""
    rates = np.asarray(day.hourly_rates_rps, dtype=float)
    first = int(np.floor(day.start_hour))
    times, values = [], []
    for k in range(len(rates) + 1):
        at = max(0.0, first + k - day.start_hour)
        if at < len(rates):
            times.append(at)
            values.append(rates[(first + k) % len(rates)])
    return np.array(times), np.array(values)


def day_fleet_figure(
    day: DayPlan, scalings: Mapping[str, tuple[pd.DataFrame, float]]
) -> Figure | None:
    """The day's offered rate by hour (when the plan gives it), and the replicas billed and
    $/hour of each answer over the day (``scalings``: answer -> (its scaling table, its end in
    simulated seconds)), against the hours since the day's start (``day_axis``); None when no
    answer has a table."""
    shown = {k: v for k, v in scalings.items() if v[0] is not None and len(v[0])}
    if not shown:
        return None
    panels = 3 if day.hourly_rates_rps else 2
    with drawing(panels, 1, size=(9.0, 2.3 * panels + 1.0), sharex=True) as d:
        axes = [row[0] for row in d.axes]
        fleet, money = axes[-2], axes[-1]
        if day.hourly_rates_rps:
            times, rates = rates_since_start(day)
            _step(axes[0], times, rates, float(len(day.hourly_rates_rps)), color="black")
            axes[0].set_ylabel("offered req/s")
            axes[0].set_ylim(bottom=0)
        for period in day.periods:  # where the seasonal fleet switches
            for ax in axes:
                if period.start_hour is not None:
                    at = day.since_start(period.start_hour)
                    ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        for i, (answer, (scaling, end)) in enumerate(shown.items()):
            rows = within(scaling, end)
            hours = np.array([day.hours_since_start(t) for t in rows["time_s"].to_numpy(float)])
            last = day.hours_since_start(end)
            style = {"color": f"C{i}", "label": answer}
            _step(fleet, hours, billed(rows).to_numpy(float), last, **style)
            _step(money, hours, rows["usd_per_hour"].to_numpy(float), last, **style)
        fleet.set_ylabel("replicas billed")
        fleet.set_ylim(bottom=0)
        fleet.legend(loc="upper left", fontsize=8)
        money.set_ylabel("$/hour")
        money.set_ylim(bottom=0)
        money.set_xlabel(_day_label(day))
        day_axis(money, day)
    return Figure(
        "day_fleet",
        ("The offered rate by hour, and " if day.hourly_rates_rps else "")
        + "the replicas billed (ready, provisioning and draining) and the rate paid over the "
        f"day, for each answer that ran, from the runs' start at {_clock(day.start_hour)}; "
        "dotted: where the periods start.",
        d.png,
    )


def hourly_frame(day: DayPlan) -> pd.DataFrame:
    """The answers' hourly SLO attainment, one row per answer and hour of day, with ``at``:
    the hour's middle in hours since the day's start (an hour the day starts within lies at
    both ends of the axis: its point is where its middle falls)."""
    return pd.DataFrame(
        [
            {
                "answer": a.name,
                "hour": h.hour,
                "at": day.since_start(h.hour + 0.5),
                "attainment": h.attainment,
                "low": h.low,
                "high": h.high,
                "requests": h.requests,
                "plan_slo_met": h.plan_slo_met,
            }
            for a in day.answers.values()
            for h in a.hourly
            if h.hour is not None and h.attainment is not None
        ],
        columns=["answer", "hour", "at", "attainment", "low", "high", "requests", "plan_slo_met"],
    )


def hourly_attainment_figure(day: DayPlan) -> Figure | None:
    """Each answer's SLO attainment per hour with its interval, the hours where ``plan.slo``
    did not hold marked; None without hourly data."""
    hourly = hourly_frame(day)
    if len(hourly) == 0:
        return None
    missed = hourly[hourly["plan_slo_met"].eq(False)]
    with drawing(1, 1, size=(9.0, 4.0)) as d:
        ax = d.axes[0][0]
        d.sns.lineplot(
            data=hourly, x="at", y="attainment", hue="answer", marker="o", ax=ax, errorbar=None
        )
        for i, (_, mine) in enumerate(hourly.groupby("answer", sort=False)):
            known = mine.dropna(subset=["low", "high"]).sort_values("at")
            ax.fill_between(known["at"], known["low"], known["high"], alpha=0.15, color=f"C{i}")
        if len(missed):
            ax.scatter(
                missed["at"],
                missed["attainment"],
                marker="x",
                s=60,
                color="black",
                zorder=5,
                label="plan.slo missed",
            )
            ax.legend(loc="lower left", fontsize=8)
        ax.set_xlabel(_day_label(day))
        ax.set_ylabel("SLO attainment (slo.*)")
        day_axis(ax, day)
        # imported here: matplotlib, the report extra (loaded by drawing)
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    slo = ", ".join(day.plan_slo)
    return Figure(
        "day_attainment",
        "SLO attainment per hour, per answer: the share of the hour's requests that met every "
        "per-request bound of the runs' config (slo.*), at the hour's middle (shaded: the "
        "interval the day plan gives for each hour). It is not the plan's SLO"
        + (f" (plan.slo: {slo})" if slo else "")
        + ", which the day plan evaluates on each hour's statistics"
        + ("; x: an hour where plan.slo did not hold" if len(missed) else "")
        + ".",
        d.png,
    )


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def day_answers_table(day: DayPlan) -> Table | None:
    if not day.answers:
        return None
    rows = []
    for a in day.answers.values():
        saving = day.saving_vs_peak.get(a.name)
        rows.append(
            [
                a.name,
                _money(a.usd_per_day),
                "-" if a.gpu_hours is None else f"{a.gpu_hours:,.1f}",
                "-" if saving is None else f"{saving:.1%}",
                "-" if a.slo_attainment is None else f"{a.slo_attainment:.2%}",
                held_text(a) or "-",
                a.run or "-",
            ]
        )
    slo = f" ({', '.join(day.plan_slo)})" if day.plan_slo else ""
    return Table(
        [
            "answer",
            "$/day",
            "GPU-hours",
            "saving vs peak",
            "SLO attainment (slo.*)",
            "hours plan.slo held",
            "run folder",
        ],
        rows,
        "The day plan's three answers. SLO attainment: the share of the day's requests that met "
        "every per-request bound (slo.*); hours plan.slo held: of the hours with requests, "
        f"those whose requests' statistics met the plan's SLO{slo}.",
    )


def held_text(answer: DayAnswer) -> str | None:
    """``24 of 24``: the hours with requests where every plan.slo constraint held; None when
    the day plan does not record it."""
    if answer.hours_plan_slo_met is None or answer.hours_with_requests is None:
        return None
    return f"{answer.hours_plan_slo_met} of {answer.hours_with_requests}"


def periods_table(day: DayPlan) -> Table | None:
    if not day.periods:
        return None
    return Table(
        ["period", "rate (req/s)", "fleet", "replicas", "$/hour"],
        [
            [
                p.label,
                "-" if p.rate_rps is None else f"{p.rate_rps:,.3g}",
                " ".join(p.candidate) or "-",
                "-" if p.replicas is None else str(p.replicas),
                _money(p.usd_per_hour),
            ]
            for p in day.periods
        ],
        "The periods of the day, each sized for its peak hour (a period past midnight wraps).",
    )
