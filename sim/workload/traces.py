"""Replaying recorded request traces: real arrival times and real (prompt, output) lengths.

A trace is a table with one row per request and the columns ``arrival_time_s``,
``prompt_tokens`` and ``output_tokens`` (the schema of ``data/traces/``), stored as Parquet or
CSV (``.csv``, or compressed: ``.csv.gz``, ``.csv.bz2``, ``.csv.zst``, ``.csv.lz4``; a UTF-8
byte-order mark is skipped). Only those three columns are read here; a Parquet trace's
``hash_ids`` (prefix hashes) are read by ``prefixes`` when the prefix cache is on; anything else
(timestamps) is ignored.

Rows are checked when the file is read, not repaired: a value that is not a number, an empty
cell, a token count that is not a whole number from 1 to 2**31-1 (what the int32 columns of
``requests.parquet`` hold), a negative or non-finite arrival time, or an arrival earlier than
the row before it is a ``ConfigError`` naming the file, the row (from 1, the header not
counted) and the column. We do not sort silently, because an unsorted trace usually means the
wrong column or a broken export, and a silent sort would replay a different workload than the
one the user thinks they have. A row the fleet can never serve (longer than the model's
context, or than a replica's KV cache holds) is refused the same way, before the run
(``sim.fleet.admission``).

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

Left out: per-request deadlines or priorities, multi-turn session structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sim.arrow_numpy import column_to_numpy
from sim.config.workload_schema import TraceWorkload
from sim.errors import ConfigError
from sim.resources import resolve_path
from sim.rng import stream

TRACE_COLUMNS = ("arrival_time_s", "prompt_tokens", "output_tokens")
# CSV, plain or compressed (Arrow decompresses by suffix); any other file is read as Parquet.
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".csv.lz4")
# The most tokens a column of requests.parquet holds (int32), and so the most a request may have.
MAX_TOKENS = 2**31 - 1


def is_csv(path: Path) -> bool:
    return path.name.lower().endswith(CSV_SUFFIXES)


def read_columns(
    path: Path, columns: tuple[str, ...], field: str, shown: str | None = None
) -> dict[str, np.ndarray]:
    """Read only ``columns`` from a Parquet or CSV file (CSV by suffix, see ``CSV_SUFFIXES``).

    ``shown`` is the path as the user wrote it, for error messages (default: ``path``). Numeric
    columns come back as numbers (nulls as NaN), others as object arrays.
    """
    shown = str(path) if shown is None else shown
    csv = is_csv(path)
    try:
        if csv:
            # The streaming reader parses only the first block: enough for the header.
            with pacsv.open_csv(path) as reader:
                names = reader.schema.names
        else:
            # ParquetFile, not read_table: read_table pulls in pyarrow.dataset and pandas (~0.3 s)
            parquet = pq.ParquetFile(path)  # opened once: the footer gives names and columns
            names = parquet.schema_arrow.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ConfigError(
                field,
                shown,
                f"missing column(s) {', '.join(missing)}; need {', '.join(columns)}"
                f" (the file has {', '.join(names[:8]) or 'no columns'})",
            )
        if csv:
            include = pacsv.ConvertOptions(include_columns=list(columns))
            table = pacsv.read_csv(path, convert_options=include)
        else:
            table = parquet.read(columns=list(columns))
    except ConfigError:
        raise
    except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
        # Arrow messages can span lines; keep the user-facing error to one line.
        reason = " ".join(str(err).split())
        kind = "CSV" if csv else f"Parquet (a CSV file is named {', '.join(CSV_SUFFIXES)})"
        raise ConfigError(field, shown, f"cannot read as {kind}: {reason}") from err
    return {c: column_to_numpy(table.column(c)) for c in columns}


def _first(mask: np.ndarray) -> int | None:
    found = np.flatnonzero(mask)
    return int(found[0]) if found.size else None


def _show(value: object) -> str:
    """A cell as an error message shows it."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if np.isnan(value):
            return "empty or NaN"
        return f"{value:g}" if not value.is_integer() or abs(value) >= 1e16 else f"{value:.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return repr(value)


def _bad_row(
    field: str,
    shown: str,
    column: str,
    rows: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray,
    reason: str,
) -> None:
    """Raise a ConfigError naming the first row where ``mask`` holds, if any. Rows count from
    1, the header (of a CSV) not counted, as in the file; ``rows`` maps positions to them."""
    at = _first(mask)
    if at is not None:
        count = int(mask.sum())
        more = f" ({count:,} rows like it)" if count > 1 else ""
        raise ConfigError(
            field,
            shown,
            f"row {int(rows[at]) + 1}, column {column}: {_show(values[at])} {reason}{more}",
        )


def _as_number(value: object) -> float | None:
    """A cell Arrow read as text (or as something else) as a number, or None if it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _numbers(
    values: np.ndarray, column: str, field: str, shown: str, rows: np.ndarray
) -> np.ndarray:
    """``values`` as a numeric array, or a ConfigError naming the first row that is not a
    number. Arrow reads a column as text when one cell is not a number; the others still are."""
    if values.dtype != object and not np.issubdtype(values.dtype, np.bool_):
        return values
    parsed = [_as_number(v) for v in values]
    not_number = np.array([p is None for p in parsed], dtype=bool)
    _bad_row(field, shown, column, rows, values, not_number, "is not a number")
    return np.array(parsed, dtype=np.float64)


def token_counts(
    values: np.ndarray, column: str, field: str, shown: str, rows: np.ndarray | None = None
) -> np.ndarray:
    """A column of token counts as int64: whole numbers from 1 to ``MAX_TOKENS``, or a
    ConfigError naming the file, the first bad row and the column."""
    rows = np.arange(values.size) if rows is None else rows
    values = _numbers(values, column, field, shown, rows)
    if np.issubdtype(values.dtype, np.floating):
        _bad_row(field, shown, column, rows, values, np.isnan(values), "is not a token count")
        _bad_row(
            field,
            shown,
            column,
            rows,
            values,
            values != np.round(values),
            "is not a whole number of tokens",
        )
    _bad_row(field, shown, column, rows, values, values < 1, "must be >= 1")
    _bad_row(
        field,
        shown,
        column,
        rows,
        values,
        values > MAX_TOKENS,
        f"is above {MAX_TOKENS:,}, the most tokens a request can hold (int32)",
    )
    return values.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Trace:
    """A checked trace: equal-length columns, arrivals finite, >= 0 and non-decreasing."""

    arrival_time_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64, 1 .. MAX_TOKENS
    output_tokens: np.ndarray  # int64, 1 .. MAX_TOKENS
    row: np.ndarray  # int64: each request's row in the file (from 0), for error messages
    shown: str = ""  # the file as the user named it

    @property
    def num_requests(self) -> int:
        return int(self.arrival_time_s.size)

    def select(self, keep: np.ndarray | slice, arrival_time_s: np.ndarray | None = None) -> Trace:
        """The rows ``keep`` picks (a mask, an order or a slice), with new arrival times when
        given (already picked)."""
        return Trace(
            self.arrival_time_s[keep] if arrival_time_s is None else arrival_time_s,
            self.prompt_tokens[keep],
            self.output_tokens[keep],
            self.row[keep],
            self.shown,
        )


def load_trace(path: object, field: str = "workload.path") -> Trace:
    """Read and check a trace file (see the module docstring for what is rejected)."""
    resolved = resolve_path(path, field)
    shown = str(path)
    cols = read_columns(resolved, TRACE_COLUMNS, field, shown)
    arrival = cols["arrival_time_s"]
    if arrival.size == 0:
        raise ConfigError(field, shown, "trace has no rows")
    rows = np.arange(arrival.size, dtype=np.int64)
    arrival = _numbers(arrival, "arrival_time_s", field, shown, rows).astype(np.float64)
    _bad_row(field, shown, "arrival_time_s", rows, arrival, np.isnan(arrival), "is not a time")
    _bad_row(
        field, shown, "arrival_time_s", rows, arrival, ~np.isfinite(arrival), "is not a finite time"
    )
    _bad_row(field, shown, "arrival_time_s", rows, arrival, arrival < 0, "must be >= 0")
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:
        row = int(back[0]) + 1
        raise ConfigError(
            field,
            shown,
            f"row {row + 1}, column arrival_time_s: {_show(arrival[row])} is earlier than the"
            f" row before ({_show(arrival[row - 1])}); sort the trace by arrival time",
        )
    return Trace(
        arrival_time_s=arrival,
        prompt_tokens=token_counts(cols["prompt_tokens"], "prompt_tokens", field, shown, rows),
        output_tokens=token_counts(cols["output_tokens"], "output_tokens", field, shown, rows),
        row=rows,
        shown=shown,
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
        if self.spread_ticks_s is not None:
            t = t + stream(seed, "workload.spread").uniform(0.0, self.spread_ticks_s, t.size)
            order = np.argsort(t, kind="stable")
            trace = trace.select(order, t[order])
            t = trace.arrival_time_s
        keep = t >= self.start_s
        _require_rows(keep, "workload.start_s", self.start_s, t)
        if self.duration_s is not None:
            keep &= t < self.start_s + self.duration_s
            _require_rows(keep, "workload.duration_s", self.duration_s, t)
        trace = trace.select(keep, t[keep] - self.start_s)
        if self.num_requests is not None:
            trace = trace.select(slice(0, self.num_requests))
        return trace.select(slice(None), trace.arrival_time_s / self.rate_scale)


def _require_rows(keep: np.ndarray, field: str, value: float, t: np.ndarray) -> None:
    if not keep.any():
        span = float(t.max() - t[0])
        raise ConfigError(
            field, value, f"keeps 0 requests (the trace spans {span:.1f} s from its first arrival)"
        )
