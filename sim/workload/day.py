"""A day's traffic: how the request rate and the request lengths change with the hour of day.

A ``daily`` workload's rate follows 24 hourly multipliers, normalised to mean 1 so that ``qps``
is the day's mean rate (``sim.workload.arrivals.DailyArrivals``). The multipliers are the
config's ``profile``, or the arrivals of a trace (``profile_trace``) counted per hour bin:

- a trace that spans at least 23 h (last minus first ``arrival_time_s``) is binned by hour of
  day: its ``timestamp`` column's hour when it has one (the wall clock of the timestamp's zone
  when it has one), else ``arrival_time_s`` counted from hour 0 (``arrival_time_s = 0`` is
  midnight), wrapping past 24 h. Each hour's count is divided by the number of days the trace
  reaches that hour in, so a 36-h trace does not count half its hours twice; an hour it never
  reaches counts 0;
- a shorter trace (each shipped one spans about an hour) is cut into 24 equal bins of its span,
  and bin i becomes hour i: the trace's shape stretched over a day, not a real day. The
  workload's ``notes`` say which rule was used.

Lengths may change with the hour too. ``periods`` give lengths (any length field) for spans of
hours ``[start_hour, end_hour)``, the workload's own lengths elsewhere; each period draws from
its own streams (``workload.periods.<i>.prompt_tokens`` / ``.output_tokens``), the hours no
period covers from the usual ``workload.prompt_tokens`` / ``workload.output_tokens``. Or
``lengths_trace``: each request's (prompt, output) pair is a row of that trace drawn with
replacement (stream ``workload.lengths``, pairs kept together) among the rows of the request's
hour of day, the trace binned by the rule above; an hour without rows borrows the nearest hour
that has some (the earlier one on a tie).

For the capacity planner, pure numpy: ``hourly_rates`` (the rate at each hour of day),
``split_day`` (the periods that are cheapest to size each for its own peak) and
``period_workload`` (the stationary workload that stands for one period at its peak hour).

Left out: weekdays and holidays (every day is the same day), the shape within an hour (each
hour's rate is flat), and any tie between the rate and the lengths beyond the hour bins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sim.arrow_numpy import column_to_numpy
from sim.config.validation import validate
from sim.config.workload_schema import DailyWorkload
from sim.errors import ConfigError
from sim.resources import resolve_path
from sim.rng import stream
from sim.workload import arrivals, lengths, traces
from sim.workload.arrivals import DEFAULT_DAILY_PROFILE, HOURS_PER_DAY, SECONDS_PER_HOUR

# A trace spanning at least this long is binned by hour of day; a shorter one is stretched.
# 23 h, not 24: a day's trace rarely runs from the first second to the last.
DAY_SPAN_S = 23 * SECONDS_PER_HOUR
TIMESTAMP = "timestamp"
_TICKS_PER_HOUR = {"s": 3_600, "ms": 3_600_000, "us": 3_600_000_000, "ns": 3_600_000_000_000}


@dataclass(frozen=True, eq=False)
class TraceDay:
    """A trace's rows placed in the 24 hours of a day (the rule of the module docstring)."""

    hour: np.ndarray  # int64, each row's hour of day, 0..23
    arrivals_per_hour: np.ndarray  # float64, 24: the rate's shape
    prompt_tokens: np.ndarray  # int64, per row
    output_tokens: np.ndarray  # int64, per row
    note: str  # which rule placed the rows, for the user


def trace_day(path: object, field: str) -> TraceDay:
    """Read a trace (checked as ``workload=trace`` checks it) and bin its rows by hour."""
    trace = traces.load_trace(path, field)
    t = trace.arrival_time_s
    span_s = float(t[-1] - t[0])
    shown = str(path)
    if span_s >= DAY_SPAN_S:
        slot = _timestamp_hours(resolve_path(path, field), field, shown)
        clock = "its timestamp column"
        if slot is None:
            slot = np.floor(t / SECONDS_PER_HOUR).astype(np.int64)
            clock = "arrival_time_s from hour 0"
        hour = slot % HOURS_PER_DAY
        counts = np.bincount(hour, minlength=HOURS_PER_DAY)
        # the days each hour of day appears in between the first and the last arrival
        reached = np.arange(slot.min(), slot.max() + 1) % HOURS_PER_DAY
        days = np.bincount(reached, minlength=HOURS_PER_DAY)
        per_hour = counts / np.maximum(days, 1)
        note = (
            f"{field}={shown}: {span_s / 86_400:.2f} days of arrivals binned by hour of day "
            f"({clock})"
        )
    else:
        if span_s <= 0:
            raise ConfigError(
                field, shown, "every arrival is at the same time: no shape to give a day"
            )
        hour = np.minimum(
            ((t - t[0]) * (HOURS_PER_DAY / span_s)).astype(np.int64), HOURS_PER_DAY - 1
        )
        per_hour = np.bincount(hour, minlength=HOURS_PER_DAY).astype(np.float64)
        note = (
            f"{field}={shown}: the trace spans {span_s / 60:.1f} min, under 23 h: its shape "
            f"stretched over a day (24 bins of {span_s / HOURS_PER_DAY:.1f} s, bin i = hour i)"
        )
    return TraceDay(hour, per_hour, trace.prompt_tokens, trace.output_tokens, note)


def _timestamp_hours(path: Path, field: str, shown: str) -> np.ndarray | None:
    """Each row's hours since 1970-01-01 00:00 on its timestamp's wall clock, or None when the
    trace has no ``timestamp`` column."""
    import pyarrow.compute as pc  # imported here: ~50 ms of CPU; every run imports this module

    if traces.is_csv(path):
        with pacsv.open_csv(path) as reader:
            if TIMESTAMP not in reader.schema.names:
                return None
        options = pacsv.ConvertOptions(include_columns=[TIMESTAMP])
        column = pacsv.read_csv(path, convert_options=options).column(TIMESTAMP)
    else:
        parquet = pq.ParquetFile(path)
        if TIMESTAMP not in parquet.schema_arrow.names:
            return None
        column = parquet.read(columns=[TIMESTAMP]).column(TIMESTAMP)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column = pc.cast(column, pa.timestamp("ns"))
        except pa.ArrowInvalid:
            column = None
    if column is None or not pa.types.is_timestamp(column.type):
        raise ConfigError(
            field, shown, f"column {TIMESTAMP}: not dates and times (e.g. 2023-11-16 18:15:46)"
        )
    if column.null_count:
        raise ConfigError(field, shown, f"column {TIMESTAMP}: {column.null_count} empty cells")
    if column.type.tz is not None:
        column = pc.local_timestamp(column)
    ticks = column_to_numpy(pc.cast(column, pa.int64()))
    return np.floor_divide(ticks, _TICKS_PER_HOUR[column.type.unit]).astype(np.int64)


@dataclass(frozen=True)
class DayProfile:
    """A daily workload's 24 hourly multipliers as given (not yet normalised), and how they
    were found when a trace gave them."""

    values: tuple[float, ...]
    note: str | None = None


def day_profile(spec: DailyWorkload) -> DayProfile:
    """The profile of ``spec``: its ``profile``, its ``profile_trace``'s arrivals per hour, or
    the default diurnal shape."""
    if spec.profile_trace is not None:
        day = trace_day(spec.profile_trace, "workload.profile_trace")
        return DayProfile(tuple(float(v) for v in day.arrivals_per_hour), day.note)
    if spec.profile is not None:
        return DayProfile(tuple(spec.profile))
    return DayProfile(DEFAULT_DAILY_PROFILE)


def _checked(spec: DailyWorkload | Mapping[str, Any]) -> DailyWorkload:
    return spec if isinstance(spec, DailyWorkload) else validate(DailyWorkload, spec, "workload")


# -- lengths by hour ----------------------------------------------------------------------------


def trace_lengths(
    path: str, hour: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, str]:
    """(prompt, output) for requests at ``hour`` (int hours of day): rows of the trace's same
    hour bin, drawn with replacement, pairs kept; and the binning's note."""
    day = trace_day(path, "workload.lengths_trace")
    counts = np.bincount(day.hour, minlength=HOURS_PER_DAY)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    by_hour = np.argsort(day.hour, kind="stable")  # rows grouped by hour, in file order
    source = _nearest_filled(counts)[hour]
    # one uniform per request, in arrival order: the draw does not depend on the binning
    offset = (rng.random(hour.size) * counts[source]).astype(np.int64)
    rows = by_hour[first[source] + offset]
    return day.prompt_tokens[rows], day.output_tokens[rows], day.note


def _nearest_filled(counts: np.ndarray) -> np.ndarray:
    """For each hour, itself when it has rows, else the nearest hour that has (around the
    clock; the earlier one on a tie)."""
    nearest = np.empty(HOURS_PER_DAY, dtype=np.int64)
    for hour in range(HOURS_PER_DAY):
        for distance in range(HOURS_PER_DAY // 2 + 1):
            before, after = (hour - distance) % HOURS_PER_DAY, (hour + distance) % HOURS_PER_DAY
            if counts[before] or counts[after]:
                nearest[hour] = before if counts[before] else after
                break
    return nearest


def period_lengths(
    spec: DailyWorkload, day_hour: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) for requests at ``day_hour`` (float hours of day): each period's
    lengths in its hours, the workload's own elsewhere (streams in the module docstring)."""
    periods = spec.periods or []
    own_prompt, own_output = lengths.build_lengths(spec)
    # the stream prefix and the two distributions of the hours no period covers, then of each
    # period (every one built, so a bad one is refused even when no request falls in it)
    draws = [("workload", own_prompt, own_output)]
    for i, period in enumerate(periods):
        name = f"workload.periods.{i}"
        prompt, output = period.prompt_tokens, period.output_tokens
        draws.append(
            (
                name,
                own_prompt
                if prompt is None
                else lengths.build_length(prompt, f"{name}.prompt_tokens"),
                own_output
                if output is None
                else lengths.build_length(output, f"{name}.output_tokens"),
            )
        )
    group = np.zeros(day_hour.size, dtype=np.int64)  # 0: no period, i + 1: period i
    for i, period in enumerate(periods):
        group[(day_hour >= period.start_hour) & (day_hour < period.end_hour)] = i + 1
    prompt_tokens = np.empty(day_hour.size, dtype=np.int64)
    output_tokens = np.empty(day_hour.size, dtype=np.int64)
    for g, (name, prompt_dist, output_dist) in enumerate(draws):
        mine = group == g
        count = int(mine.sum())
        prompt_tokens[mine] = prompt_dist.sample(stream(seed, f"{name}.prompt_tokens"), count)
        output_tokens[mine] = output_dist.sample(stream(seed, f"{name}.output_tokens"), count)
    return prompt_tokens, output_tokens


# -- for the planner ----------------------------------------------------------------------------


def hourly_rates(spec: DailyWorkload | Mapping[str, Any]) -> np.ndarray:
    """The expected requests per second at each hour of day (24 values): ``qps`` x the hour's
    normalised multiplier, so their mean is ``qps``.

    These are the real day's rates, the load a fleet is sized for. ``time_compression`` X does
    not change them: the process runs at these rates per simulated second and only moves the
    day's clock X times faster, so a simulated hour of day lasts 3600 / X s and holds 1/X of
    the requests a real one does.
    """
    spec = _checked(spec)
    return spec.qps * arrivals.daily_process(spec, day_profile(spec).values).multipliers


def split_day(rates: np.ndarray, num_periods: int) -> list[tuple[int, int]]:
    """The ``num_periods`` contiguous periods of whole hours that cover the day at the least
    total of hours x the period's peak rate (the GPU-hours of sizing each period for its own
    peak). ``rates``: one value >= 0 per hour (24 for a day; ``hourly_rates``).

    Periods come as ``(start, end)`` hours sorted by start; one may wrap past midnight
    (``(22, 6)``: 22:00-06:00), and a period that ends at midnight ends at 24. Exact: a dynamic
    programme over the periods for each hour the earliest period may start at. Among equal
    totals, the earliest starts win (the sorted start hours, compared in order), so a split
    that does not wrap beats one that does. ``num_periods`` 1 is the whole day ``[(0, 24)]``.
    """
    rates = np.asarray(rates, dtype=np.float64)
    hours = rates.size
    if rates.ndim != 1 or hours < 1 or not np.all(np.isfinite(rates)) or rates.min() < 0:
        raise ValueError(f"rates(={rates!r}) must be one finite value >= 0 per hour")
    if not 1 <= num_periods <= hours:
        raise ValueError(f"num_periods(={num_periods}) must be from 1 to {hours}")
    # costs within this of each other count as equal (sums in a different order)
    tolerance = 1e-9 * max(1.0, float(rates.max()) * hours)
    best: tuple[float, list[int]] | None = None
    for first in range(hours):  # the earliest start; the last period then wraps
        found = _split_from(np.roll(rates, -first), num_periods, hours - first, tolerance)
        if found is not None and (best is None or found[0] < best[0] - tolerance):
            best = (found[0], [first + cut for cut in found[1]])
        if num_periods == 1:
            break  # one period: the whole day from 0
    assert best is not None, "a split from hour 0 always exists"
    starts = best[1]
    ends = [*starts[1:], starts[0] if starts[0] > 0 else hours]
    return list(zip(starts, ends, strict=True))


def _split_from(
    rates: np.ndarray, num_periods: int, limit: int, tolerance: float
) -> tuple[float, list[int]] | None:
    """The least cost of ``num_periods`` contiguous periods over ``rates`` (the first starting
    at 0, every start below ``limit``) and the earliest such starts; None if none fit."""
    n = rates.size
    # cost[j, e]: hours j..e-1 as one period
    cost = np.full((n + 1, n + 1), np.inf)
    for j in range(n):
        cost[j, j + 1 :] = np.arange(1, n - j + 1) * np.maximum.accumulate(rates[j:])
    # least[c, j]: hours j.. as c periods, each starting below limit
    least = np.full((num_periods + 1, n + 1), np.inf)
    least[0, n] = 0.0
    for c in range(1, num_periods + 1):
        for j in range(min(n, limit)):
            least[c, j] = np.min(cost[j, j + 1 :] + least[c - 1, j + 1 :])
    if not np.isfinite(least[num_periods, 0]):
        return None
    starts, j = [0], 0
    for c in range(num_periods, 1, -1):
        totals = cost[j, j + 1 :] + least[c - 1, j + 1 :]
        j = j + 1 + int(np.flatnonzero(totals <= least[c, j] + tolerance)[0])
        starts.append(j)
    return float(least[num_periods, 0]), starts


def period_workload(
    spec: DailyWorkload | Mapping[str, Any], start_hour: int, end_hour: int, duration_s: float
) -> dict[str, Any] | None:
    """The config of the stationary workload that stands for the period ``[start_hour,
    end_hour)`` of ``spec``'s day (``split_day``'s periods; ``(22, 6)`` wraps) at its peak
    hour: a ``daily`` workload with a flat profile at the period's peak hourly rate, starting
    at that hour (the earliest of equal peaks) on a real-time clock, for ``duration_s``, with
    ``spec``'s lengths (``lengths_trace``, ``periods`` or its own) carried over. Its lengths are
    the peak hour's when ``duration_s`` <= 3600; a longer run's clock moves on into the next
    hours' lengths (its rate stays flat). None when the period has no traffic at all."""
    spec = _checked(spec)
    if not (0 <= start_hour < HOURS_PER_DAY and 0 < end_hour <= HOURS_PER_DAY):
        raise ValueError(
            f"(start_hour, end_hour)(=({start_hour}, {end_hour})) must be hours 0-23 and 1-24"
        )
    if end_hour == start_hour:
        raise ValueError(f"start_hour and end_hour(={start_hour}) must differ")
    length = (end_hour - start_hour) % HOURS_PER_DAY or HOURS_PER_DAY
    period = [(start_hour + k) % HOURS_PER_DAY for k in range(length)]
    rates = hourly_rates(spec)
    peak = period[int(np.argmax(rates[period]))]
    if rates[peak] <= 0:
        return None
    config = spec.model_dump()
    config.update(
        qps=float(rates[peak]),
        duration_s=float(duration_s),
        profile=[1.0] * HOURS_PER_DAY,
        profile_trace=None,
        time_compression=1.0,
        start_hour=float(peak),
        num_requests=None,
    )
    validate(DailyWorkload, config, "workload")
    return config
