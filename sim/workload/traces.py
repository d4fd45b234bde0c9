"""Replaying recorded request traces: real arrival times and real (prompt, output) lengths.

A trace is a table with one row per request and the columns ``arrival_time_s``,
``prompt_tokens`` and ``output_tokens`` (the schema of ``data/traces/``), stored as Parquet or
CSV. Only those three columns are read; anything else (timestamps, prefix hashes) is ignored.

Rows are checked, not repaired: a non-positive token count, a negative or non-finite arrival
time, or an arrival earlier than the row before it is a ``ConfigError`` naming the row. We do
not sort silently, because an unsorted trace usually means the wrong column or a broken export,
and a silent sort would replay a different workload than the one the user thinks they have.

Filters apply in this fixed order, on the trace's own clock counted from its first arrival
(so a trace whose timestamps start at 100 s starts at 0) until the last step:

1. ``spread_ticks_s``: each arrival ``t`` becomes ``t + U[0, spread_ticks_s)`` (stream
   ``workload.spread``), then rows are stably re-sorted. Mooncake arrivals are quantized to
   3-s ticks (90% of gaps are exactly 0); spreading restores sub-tick arrivals.
2. window: keep ``start_s <= t < start_s + duration_s`` (``duration_s`` null = to the end).
3. re-base: ``t - start_s``, so the kept window starts at time 0 when ``start_s`` is set
   (with the default ``start_s = 0`` the first arrival stays at 0).
4. ``num_requests``: keep the first N of the window.
5. ``rate_scale``: ``t / rate_scale``; X > 1 replays X times faster. Scaling last means
   ``duration_s`` always counts seconds of the original trace.

Left out: prefix hashes (prefix caching), per-request deadlines or priorities, multi-turn
session structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sim.arrow_numpy import column_to_numpy
from sim.config.schema import TraceWorkload
from sim.errors import ConfigError
from sim.resources import resolve_path
from sim.rng import stream

TRACE_COLUMNS = ("arrival_time_s", "prompt_tokens", "output_tokens")


def read_columns(
    path: Path, columns: tuple[str, ...], field: str, shown: str | None = None
) -> dict[str, np.ndarray]:
    """Read only ``columns`` from a Parquet or CSV file (chosen by suffix; ``.csv`` = CSV).

    ``shown`` is the path as the user wrote it, for error messages (default: ``path``).
    """
    shown = str(path) if shown is None else shown
    try:
        if path.suffix.lower() == ".csv":
            # The streaming reader parses only the first block: enough for the header.
            with pacsv.open_csv(path) as reader:
                names = reader.schema.names
        else:
            names = pq.read_schema(path).names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ConfigError(
                field,
                shown,
                f"missing column(s) {', '.join(missing)}; need {', '.join(columns)}",
            )
        if path.suffix.lower() == ".csv":
            include = pacsv.ConvertOptions(include_columns=list(columns))
            table = pacsv.read_csv(path, convert_options=include)
        else:
            # ParquetFile, not read_table: read_table pulls in pyarrow.dataset and pandas (~0.3 s)
            table = pq.ParquetFile(path).read(columns=list(columns))
    except ConfigError:
        raise
    except (pa.ArrowException, OSError) as err:
        # Arrow messages can span lines; keep the user-facing error to one line.
        reason = " ".join(str(err).split())
        raise ConfigError(field, shown, f"cannot read as Parquet/CSV: {reason}") from err
    return {c: column_to_numpy(table.column(c)) for c in columns}


def _token_column(values: np.ndarray, column: str, field: str, shown: str) -> np.ndarray:
    if not np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.bool_):
        raise ConfigError(field, shown, f"column {column} must be numeric")
    if np.issubdtype(values.dtype, np.floating):
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise ConfigError(field, shown, f"column {column} must hold whole token counts")
    bad = np.flatnonzero(values < 1)
    if bad.size:
        row = int(bad[0])
        raise ConfigError(
            field, shown, f"column {column} must be >= 1 (row {row} holds {values[row]})"
        )
    return values.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Trace:
    """A checked trace: equal-length columns, arrivals finite, >= 0 and non-decreasing."""

    arrival_time_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64, >= 1
    output_tokens: np.ndarray  # int64, >= 1

    @property
    def num_requests(self) -> int:
        return int(self.arrival_time_s.size)


def load_trace(path: object, field: str = "workload.path") -> Trace:
    """Read and check a trace file (see the module docstring for what is rejected)."""
    resolved = resolve_path(path, field)
    shown = str(path)
    cols = read_columns(resolved, TRACE_COLUMNS, field, shown)
    arrival = cols["arrival_time_s"]
    if arrival.size == 0:
        raise ConfigError(field, shown, "trace has no rows")
    if not np.issubdtype(arrival.dtype, np.number):
        raise ConfigError(field, shown, "column arrival_time_s must be numeric")
    arrival = arrival.astype(np.float64)
    if not np.all(np.isfinite(arrival)) or np.any(arrival < 0):
        raise ConfigError(field, shown, "column arrival_time_s must be finite and >= 0")
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:
        row = int(back[0]) + 1
        raise ConfigError(
            field,
            shown,
            f"arrival_time_s decreases at row {row} ({arrival[row]} < {arrival[row - 1]});"
            " sort the trace by arrival time",
        )
    return Trace(
        arrival_time_s=arrival,
        prompt_tokens=_token_column(cols["prompt_tokens"], "prompt_tokens", field, shown),
        output_tokens=_token_column(cols["output_tokens"], "output_tokens", field, shown),
    )


@dataclass(frozen=True)
class TraceFilter:
    """What part of a trace to replay, and how fast (fields as in configs/workload/trace.yaml)."""

    start_s: float = 0.0
    duration_s: float | None = None
    num_requests: int | None = None
    rate_scale: float = 1.0
    spread_ticks_s: float | None = None

    @classmethod
    def from_spec(cls, spec: TraceWorkload) -> TraceFilter:
        return cls(
            start_s=spec.start_s,
            duration_s=spec.duration_s,
            num_requests=spec.num_requests,
            rate_scale=spec.rate_scale,
            spread_ticks_s=spec.spread_ticks_s,
        )

    def apply(self, trace: Trace, seed: int) -> Trace:
        """The filtered trace, in the order of the module docstring; never empty."""
        # Time counts from the trace's first arrival: "the first S seconds" of a trace whose
        # clock starts at 100 s are 100-100+S.
        t = trace.arrival_time_s - trace.arrival_time_s[0]
        prompt, output = trace.prompt_tokens, trace.output_tokens
        if self.spread_ticks_s is not None:
            t = t + stream(seed, "workload.spread").uniform(0.0, self.spread_ticks_s, t.size)
            order = np.argsort(t, kind="stable")
            t, prompt, output = t[order], prompt[order], output[order]
        keep = t >= self.start_s
        _require_rows(keep, "workload.start_s", self.start_s, trace)
        if self.duration_s is not None:
            keep &= t < self.start_s + self.duration_s
            _require_rows(keep, "workload.duration_s", self.duration_s, trace)
        t, prompt, output = t[keep] - self.start_s, prompt[keep], output[keep]
        if self.num_requests is not None:
            n = self.num_requests
            t, prompt, output = t[:n], prompt[:n], output[:n]
        return Trace(t / self.rate_scale, prompt, output)


def _require_rows(keep: np.ndarray, field: str, value: float, trace: Trace) -> None:
    if not keep.any():
        span = float(trace.arrival_time_s[-1] - trace.arrival_time_s[0])
        raise ConfigError(
            field, value, f"keeps 0 requests (the trace spans {span:.1f} s from its first arrival)"
        )
