"""The step rows of a run: taken from the replicas' recorders as they grow, summed up for the
summary, and written to ``steps.parquet`` whole, per time bucket, or not at all.

A replica's ``StepRecorder`` (one per model it serves) holds the rows of its recent steps. The
cluster hands them to ``StepLog.flush`` whenever a replica holds ``FLUSH_ROWS`` of them, and at
the end; a flush takes every row the replica has recorded, so its pieces come out in time
order (the rows of models sharing a GPU interleaved by start time, as their turns went).

What the summary needs of the steps (``StepTotals``: how many, busy time, time-weighted and
peak KV use, the last step's end) is added up at each flush, so it is the same whatever
``output.steps`` says:

- ``full``: one row per step (``STEPS_SCHEMA``), ordered by replica, then time;
- ``bucketed``: one row per replica, model and ``output.step_bucket_s`` of simulated time
  (``BUCKETED_STEPS_SCHEMA``): ``start_time_s`` the bucket's start, ``duration_s`` the busy
  seconds of the steps that started in it, token counts summed, ``num_seqs`` and
  ``kv_blocks_used`` their peak, ``num_steps`` how many steps it holds. A month of a busy fleet
  is billions of steps; buckets of a minute are a few hundred thousand rows;
- ``none``: no ``steps.parquet`` rows at all (the file is written, empty, so the run folder
  keeps its four files).

Pieces wait in a ``Spill`` (memory, then an Arrow IPC file beside the run's files) until the
end, when they are written replica by replica.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from sim.arrow_numpy import numpy_to_arrow
from sim.output.metrics import COLUMNS, StepRecorder
from sim.output.tables import Spill, TableSink

STEPS_SCHEMA = pa.schema(
    [
        ("replica_id", pa.int32()),
        ("start_time_s", pa.float64()),
        ("duration_s", pa.float64()),
        ("num_prefill_tokens", pa.int32()),
        ("num_decode_tokens", pa.int32()),
        ("num_seqs", pa.int32()),
        ("kv_blocks_used", pa.int32()),
        ("model_id", pa.int32()),
    ]
)
BUCKETED_STEPS_SCHEMA = pa.schema(
    [
        ("replica_id", pa.int32()),
        ("start_time_s", pa.float64()),
        ("duration_s", pa.float64()),
        ("num_prefill_tokens", pa.int64()),
        ("num_decode_tokens", pa.int64()),
        ("num_seqs", pa.int32()),
        ("kv_blocks_used", pa.int32()),
        ("model_id", pa.int32()),
        ("num_steps", pa.int64()),
    ]
)
STEP_MODES = ("full", "bucketed", "none")
FLUSH_ROWS = 65536  # rows a replica holds before they are taken (~3 MB)
SPILL_BYTES = 64 * 1024 * 1024  # pieces kept in memory before they go to the spill file
SUM_BLOCK_ROWS = 65536  # a replica's rows summed at a time for the totals (see StepTotals)


class StepTotals:
    """What the summary reads of the steps, whatever ``output.steps`` keeps.

    The sums must not depend on when rows were handed over (that moves with
    ``sim.fast_forward_decode``, which must not change a file): each replica's rows are summed
    in fixed blocks of ``SUM_BLOCK_ROWS`` consecutive rows, counted from its first step, and the
    blocks' sums are added exactly (``math.fsum``). Counts and extremes need no such care.
    """

    def __init__(self) -> None:
        self.num_steps = 0
        self.kv_peak: float | None = None  # the largest share of a model's KV pool in use
        self.end_s: float | None = None  # when the last step ended
        self._block_sums: list[tuple[float, float]] = []  # (busy, kv busy) per block
        self._open: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # replica -> rows of its block

    def add(self, replica_id: int, columns: dict[str, np.ndarray], kv_share: np.ndarray) -> None:
        n = len(kv_share)
        if n == 0:
            return
        self.num_steps += n
        duration = columns["duration_s"]
        peak = float(kv_share.max())
        self.kv_peak = peak if self.kv_peak is None else max(self.kv_peak, peak)
        end = float((columns["start_time_s"] + duration).max())
        self.end_s = end if self.end_s is None else max(self.end_s, end)
        held_busy, held_kv = self._open.pop(replica_id, (np.empty(0), np.empty(0)))
        busy = np.concatenate([held_busy, duration])
        kv_busy = np.concatenate([held_kv, kv_share * duration])
        whole = len(busy) // SUM_BLOCK_ROWS * SUM_BLOCK_ROWS
        if whole:
            blocks = (-1, SUM_BLOCK_ROWS)
            self._block_sums += zip(
                busy[:whole].reshape(blocks).sum(axis=1).tolist(),
                kv_busy[:whole].reshape(blocks).sum(axis=1).tolist(),
                strict=True,
            )
        self._open[replica_id] = (busy[whole:], kv_busy[whole:])

    def _sums(self) -> list[tuple[float, float]]:
        """Every block's sums, the replicas' last, partial blocks included."""
        last = [(float(b.sum()), float(k.sum())) for b, k in self._open.values() if len(b)]
        return self._block_sums + last

    @property
    def busy_s(self) -> float:
        """The steps' durations, summed."""
        return math.fsum(busy for busy, _ in self._sums())

    @property
    def kv_busy_s(self) -> float:
        """Each step's share of its model's KV pool times its duration, summed."""
        return math.fsum(kv for _, kv in self._sums())


@dataclass
class _OpenBucket:
    """One model's bucket on one replica that more steps may still fall into."""

    bucket: int
    values: dict[str, float | int]


class StepLog:
    """Takes recorders' rows (``flush``), keeps the totals, writes the table (``finish``)."""

    def __init__(
        self,
        mode: str,
        kv_num_blocks: Sequence[int],
        spill_path: Path | None = None,
        bucket_s: float = 60.0,
        replica_pools: Sequence[str] | None = None,
    ) -> None:
        """``kv_num_blocks[m]`` is model ``m``'s KV pool in blocks; pieces beyond
        ``SPILL_BYTES`` go to ``spill_path`` (None: they all stay in memory).
        ``replica_pools[r]``: the pool replica ``r`` belongs to in a disaggregated fleet; the
        rows then gain a ``pool`` column, and each pool has its own totals
        (``pool_totals``)."""
        assert mode in STEP_MODES, f"output.steps: {mode}"
        self.mode = mode
        self.bucket_s = bucket_s
        self.schema = BUCKETED_STEPS_SCHEMA if mode == "bucketed" else STEPS_SCHEMA
        self.totals = StepTotals()
        self._replica_pools = replica_pools
        self.pool_totals: dict[str, StepTotals] = {}
        if replica_pools is not None:
            self.schema = self.schema.append(pa.field("pool", pa.string()))
            self.pool_totals = {pool: StepTotals() for pool in dict.fromkeys(replica_pools)}
        self._kv_blocks = np.asarray(kv_num_blocks, dtype=np.float64)
        self._spill = Spill(self.schema, spill_path, SPILL_BYTES)
        self._open: dict[int, dict[int, _OpenBucket]] = {}  # replica -> model -> bucket

    def flush(
        self,
        replica_id: int,
        recorders: Sequence[tuple[int, StepRecorder]],
        kv_num_blocks: Sequence[int] | None = None,
    ) -> None:
        """Take every row ``recorders`` (one replica's, one per model) hold. ``kv_num_blocks``:
        this replica's pools, in blocks, one per recorder (an autoscaled fleet's
        replicas may run other engine configurations than the run's own)."""
        taken = [(model_id, steps.take()) for model_id, steps in recorders if len(steps)]
        if not taken:
            return
        columns = _merge(taken)
        pools = self._kv_blocks
        if kv_num_blocks is not None:
            pools = pools.copy()
            for (model_id, _), blocks in zip(recorders, kv_num_blocks, strict=True):
                pools[model_id] = blocks
        kv_share = columns["kv_blocks_used"] / pools[columns["model_id"]]
        self.totals.add(replica_id, columns, kv_share)
        if self._replica_pools is not None:
            self.pool_totals[self._replica_pools[replica_id]].add(replica_id, columns, kv_share)
        if self.mode == "full":
            columns["replica_id"] = np.full(len(kv_share), replica_id, np.int32)
            self._spill.add(replica_id, self._table(replica_id, columns))
        elif self.mode == "bucketed":
            self._bucket(replica_id, columns, final=False)

    def finish(self, num_replicas: int, sink: TableSink) -> StepTotals:
        """Write the rows to ``sink`` replica by replica (after the last ``flush``)."""
        if self.mode == "bucketed":
            for replica_id in list(self._open):
                self._bucket(replica_id, None, final=True)
        self._spill.close_writing()
        for replica_id in range(num_replicas):
            for piece in self._spill.pieces(replica_id):
                sink.write(piece)
        sink.close()
        return self.totals

    def _bucket(self, replica_id: int, columns: dict[str, np.ndarray] | None, final: bool) -> None:
        """Fold rows into buckets; write the buckets no later row can fall into."""
        open_buckets = self._open.setdefault(replica_id, {})
        rows: list[tuple[int, int, dict[str, float | int]]] = []  # (bucket, model, values)
        last = math.inf if final else -1
        if columns is not None:
            bucket = np.floor(columns["start_time_s"] / self.bucket_s).astype(np.int64)
            last = int(bucket[-1])  # rows to come start no earlier than the last one here
            models = columns["model_id"]
            for model_id in np.unique(models):
                mine = models == model_id
                for values in _bucket_sums(columns, bucket, mine):
                    b = int(values.pop("bucket"))
                    held = open_buckets.get(int(model_id))
                    if held is not None and held.bucket == b:
                        _fold(held.values, values)
                        continue
                    if held is not None:
                        rows.append((held.bucket, int(model_id), held.values))
                    open_buckets[int(model_id)] = _OpenBucket(b, values)
        for model_id, held in list(open_buckets.items()):
            if held.bucket < last:
                rows.append((held.bucket, model_id, held.values))
                del open_buckets[model_id]
        if not rows:
            return
        rows.sort(key=lambda row: (row[0], row[1]))
        table: dict[str, np.ndarray] = {
            "replica_id": np.full(len(rows), replica_id, np.int32),
            "start_time_s": np.array([b * self.bucket_s for b, _, _ in rows], np.float64),
            "model_id": np.array([m for _, m, _ in rows], np.int32),
        }
        for name in (
            "duration_s",
            "num_prefill_tokens",
            "num_decode_tokens",
            "num_seqs",
            "kv_blocks_used",
            "num_steps",
        ):
            table[name] = np.array([v[name] for _, _, v in rows])
        self._spill.add(replica_id, self._table(replica_id, table))

    def _table(self, replica_id: int, columns: dict[str, np.ndarray]) -> pa.Table:
        """One replica's rows in the log's schema (its pool's name on every row)."""
        schema = self.schema
        if self._replica_pools is None:
            return _table(columns, schema)
        base = pa.schema([f for f in schema if f.name != "pool"])
        rows = _table(columns, base)
        pool = pa.array([self._replica_pools[replica_id]] * rows.num_rows, pa.string())
        return rows.append_column(schema.field("pool"), pool)


_SUMMED = ("duration_s", "num_prefill_tokens", "num_decode_tokens", "num_steps")
_PEAKS = ("num_seqs", "kv_blocks_used")


def _bucket_sums(
    columns: dict[str, np.ndarray], bucket: np.ndarray, mine: np.ndarray
) -> list[dict[str, float | int]]:
    """One model's rows summed per bucket, in bucket order."""
    buckets = bucket[mine]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    out: list[dict[str, float | int]] = [
        {"bucket": int(b), "num_steps": int(n)}
        for b, n in zip(buckets[starts], np.diff(np.r_[starts, buckets.size]), strict=True)
    ]
    for name in ("duration_s", "num_prefill_tokens", "num_decode_tokens"):
        sums = np.add.reduceat(columns[name][mine], starts)
        for row, value in zip(out, sums.tolist(), strict=True):
            row[name] = value
    for name in _PEAKS:
        peaks = np.maximum.reduceat(columns[name][mine], starts)
        for row, value in zip(out, peaks.tolist(), strict=True):
            row[name] = value
    return out


def _fold(into: dict[str, float | int], more: dict[str, float | int]) -> None:
    for name in _SUMMED:
        into[name] += more[name]
    for name in _PEAKS:
        into[name] = max(into[name], more[name])


def _merge(taken: list[tuple[int, dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """One replica's rows of all its models as one set of columns, in start-time order (the
    models took turns on the GPU, so the order is the order the steps ran in)."""
    counts = [len(c["start_time_s"]) for _, c in taken]
    merged = {
        "model_id": np.concatenate(
            [np.full(n, m, np.int32) for (m, _), n in zip(taken, counts, strict=True)]
        )
    }
    for name in COLUMNS:
        merged[name] = (
            np.concatenate([c[name] for _, c in taken]) if len(taken) > 1 else (taken[0][1][name])
        )
    if len(taken) > 1:
        order = np.argsort(merged["start_time_s"], kind="stable")
        merged = {name: values[order] for name, values in merged.items()}
    return merged


def _table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(
        [numpy_to_arrow(columns[f.name], f.type) for f in schema], schema=schema
    )
