"""Metric rows collected during a run: one row per scheduler step.

Each replica has its own recorder, so its rows come out in time order and the fleet's table is
the replicas' tables one after the other. Single steps and short decode stretches go into typed
``array.array`` columns (an append costs what a list append costs). A long decode stretch
arrives as numpy arrays; it is kept whole and only expanded into columns when the table is
built, so it costs one append on the hot path.
"""

from __future__ import annotations

from array import array

import numpy as np

COLUMNS = ("start_time_s", "duration_s", "num_prefill_tokens", "num_decode_tokens", "num_seqs",
           "kv_blocks_used")
_TYPECODES = ("d", "d", "q", "q", "q", "q")


class StepRecorder:
    """The rows of ``steps.parquet`` for one replica (``replica_id`` is implied)."""

    __slots__ = ("_chunks", "_singles", "_num_rows")

    def __init__(self) -> None:
        self._chunks: list[dict[str, np.ndarray]] = []  # finished blocks of rows, in order
        self._singles = tuple(array(code) for code in _TYPECODES)  # rows since the last block
        self._num_rows = 0

    def add(self, start_time_s: float, duration_s: float, num_prefill_tokens: int,
            num_decode_tokens: int, num_seqs: int, kv_blocks_used: int) -> None:
        start, duration, prefill, decode, seqs, blocks = self._singles
        start.append(start_time_s)
        duration.append(duration_s)
        prefill.append(num_prefill_tokens)
        decode.append(num_decode_tokens)
        seqs.append(num_seqs)
        blocks.append(kv_blocks_used)
        self._num_rows += 1

    def add_decode_stretch(self, start_time_s: float, durations_s, end_times_s, num_seqs: int,
                           kv_blocks_used) -> None:
        """Rows for consecutive pure-decode steps of ``num_seqs`` sequences each: lists for a
        short stretch (appended like single steps), numpy arrays for a long one (kept whole)."""
        n = len(durations_s)
        self._num_rows += n
        if not isinstance(durations_s, np.ndarray):
            start, duration, prefill, decode, seqs, blocks = self._singles
            start.append(start_time_s)
            start.extend(end_times_s[:n - 1])
            duration.extend(durations_s)
            prefill.extend([0] * n)
            decode.extend([num_seqs] * n)
            seqs.extend([num_seqs] * n)
            blocks.extend(kv_blocks_used)
            return
        self._flush_singles()
        self._chunks.append({"start_time_s": (start_time_s, end_times_s[:n - 1]),
                             "duration_s": durations_s, "num_seqs": (num_seqs, n),
                             "kv_blocks_used": kv_blocks_used})

    def _flush_singles(self) -> None:
        if len(self._singles[0]):
            self._chunks.append({name: np.frombuffer(col, dtype=col.typecode)
                                 for name, col in zip(COLUMNS, self._singles)})
            self._singles = tuple(array(code) for code in _TYPECODES)

    def columns(self) -> dict[str, np.ndarray]:
        """All rows as numpy columns, in time order."""
        self._flush_singles()
        parts: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
        for chunk in self._chunks:
            if "num_prefill_tokens" in chunk:  # a block of single steps
                for name in COLUMNS:
                    parts[name].append(chunk[name])
                continue
            first_start, later_starts = chunk["start_time_s"]
            num_seqs, n = chunk["num_seqs"]
            parts["start_time_s"] += [np.array([first_start]), np.asarray(later_starts, float)]
            parts["duration_s"].append(np.asarray(chunk["duration_s"], float))
            parts["num_prefill_tokens"].append(np.zeros(n, np.int64))
            parts["num_decode_tokens"].append(np.full(n, num_seqs, np.int64))
            parts["num_seqs"].append(np.full(n, num_seqs, np.int64))
            parts["kv_blocks_used"].append(np.asarray(chunk["kv_blocks_used"], np.int64))
        dtypes = dict(zip(COLUMNS, (float, float, np.int64, np.int64, np.int64, np.int64)))
        return {name: np.concatenate(parts[name]) if parts[name] else np.empty(0, dtypes[name])
                for name in COLUMNS}

    def __len__(self) -> int:
        return self._num_rows
