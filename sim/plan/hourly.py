"""A day plan's answer hour by hour (``sim.plan.day``): the share of requests within the
run's per-request SLO bounds, with a Wilson interval, and the plan's own SLO statistics over
each hour's requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from sim.output.results import distribution
from sim.plan.replications import wilson_interval
from sim.plan.slo import parse

HOURS = 24


def period_length(start_hour: int, end_hour: int) -> int:
    """The hours of a day's period ``[start_hour, end_hour)``, which may wrap past midnight
    (19-01: 6 hours); a period from an hour to itself is the whole day."""
    return (end_hour - start_hour) % HOURS or HOURS


def wilson(successes: int, trials: int) -> tuple[float | None, float | None, float | None]:
    """The share and its 95% Wilson interval (None, None, None for no trials)."""
    found = wilson_interval(successes, trials)
    return (None, None, None) if found is None else found


LATENCIES = ("ttft_s", "tpot_s", "e2e_s")  # the request columns an hour's SLO is read from


def hourly_attainment(
    run: Path, start_hour: float, compression: float, plan_slo: list[str]
) -> dict[str, Any]:
    """How a day's answer did, over the day and per hour of day of the requests' arrival:

    - ``attainment`` (``slo_attainment`` over the day): the share of requests that completed
      within every per-request ``slo.*`` bound of the run, with a Wilson interval;
    - ``plan_slo``: each ``plan.slo`` statistic of a latency (``ttft_s.p99``, ``tpot_s.mean``,
      ...) over the hour's completed requests, as the summary computes it over a run, and
      ``plan_slo_met`` whether all held (``slo_attainment`` constraints read the share above;
      other statistics are not split by hour and are left out). ``hours_plan_slo_met`` counts
      the hours with requests where all held."""
    slo = json.loads((run / "summary.json").read_text())["slo"]
    table = pq.read_table(
        run / "requests.parquet", columns=["arrival_time_s", "status", *LATENCIES]
    )
    arrival = table.column("arrival_time_s").to_numpy()
    completed = np.asarray(table.column("status").to_numpy(zero_copy_only=False) == "completed")
    latency = {
        name: table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
        for name in LATENCIES
    }
    met = completed.copy()
    for name in LATENCIES:
        bound = slo.get(name)
        if bound is not None:
            # one-token outputs have no TPOT: they meet a TPOT SLO (as the summary counts)
            met &= np.nan_to_num(latency[name], nan=0.0 if name == "tpot_s" else np.inf) <= bound
    constraints = [parse(text) for text in plan_slo]
    hour = np.floor(start_hour + arrival * compression / 3600.0).astype(np.int64) % HOURS
    hourly = []
    hours_met = 0
    for h in range(HOURS):
        mine = hour == h
        share, low, high = wilson(int(met[mine].sum()), int(mine.sum()))
        done = mine & completed
        stats: dict[str, Any] = {name: distribution(latency[name][done]) for name in LATENCIES}
        values: dict[str, float | None] = {}
        for constraint in constraints:
            if constraint.metric == "slo_attainment":
                values[str(constraint)] = share
            elif constraint.metric.split(".")[0] in LATENCIES:
                values[str(constraint)] = constraint.value(stats)
        held = [c.met_by(values[str(c)]) for c in constraints if str(c) in values]
        all_held = bool(held) and all(held) if mine.any() else None
        hours_met += bool(all_held)
        hourly.append(
            {
                "hour": h,
                "requests": int(mine.sum()),
                "attainment": share,
                "low": low,
                "high": high,
                "plan_slo": values,
                "plan_slo_met": all_held,
            }
        )
    share, low, high = wilson(int(met.sum()), len(met))
    return {
        "slo_attainment": share,
        "slo_attainment_low": low,
        "slo_attainment_high": high,
        "hours_plan_slo_met": hours_met,
        "hours_with_requests": sum(1 for h in hourly if h["requests"]),
        "hourly": hourly,
    }
