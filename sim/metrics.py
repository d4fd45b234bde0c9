"""Metric rows collected during a run: one row per scheduler step, appended to flat columns.

Each replica has its own recorder, so its rows come out in time order and the fleet's table is
the replicas' tables one after the other. Columns are typed ``array.array`` buffers: appending
costs what a list append costs, and numpy reads them without copying.
"""

from __future__ import annotations

from array import array

import numpy as np


class StepRecorder:
    """The columns of ``steps.parquet`` for one replica (``replica_id`` is implied)."""

    __slots__ = ("start_time_s", "duration_s", "num_prefill_tokens", "num_decode_tokens",
                 "num_seqs", "kv_blocks_used")

    def __init__(self) -> None:
        self.start_time_s = array("d")
        self.duration_s = array("d")
        self.num_prefill_tokens = array("q")
        self.num_decode_tokens = array("q")
        self.num_seqs = array("q")
        self.kv_blocks_used = array("q")

    def add(self, start_time_s: float, duration_s: float, num_prefill_tokens: int,
            num_decode_tokens: int, num_seqs: int, kv_blocks_used: int) -> None:
        self.start_time_s.append(start_time_s)
        self.duration_s.append(duration_s)
        self.num_prefill_tokens.append(num_prefill_tokens)
        self.num_decode_tokens.append(num_decode_tokens)
        self.num_seqs.append(num_seqs)
        self.kv_blocks_used.append(kv_blocks_used)

    def add_decode_stretch(self, start_time_s: float, durations_s, end_times_s, num_seqs: int,
                           kv_blocks_used) -> None:
        """Rows for consecutive pure-decode steps of ``num_seqs`` sequences each. The columns
        come as lists, or as numpy arrays for long stretches (copied in as raw bytes)."""
        n = len(durations_s)
        self.start_time_s.append(start_time_s)
        if isinstance(durations_s, np.ndarray):
            self.start_time_s.frombytes(end_times_s[:n - 1].tobytes())
            self.duration_s.frombytes(durations_s.tobytes())
            self.num_prefill_tokens.frombytes(bytes(8 * n))
            same = np.full(n, num_seqs, dtype=np.int64).tobytes()
            self.num_decode_tokens.frombytes(same)
            self.num_seqs.frombytes(same)
            self.kv_blocks_used.frombytes(np.asarray(kv_blocks_used, np.int64).tobytes())
            return
        self.start_time_s.extend(end_times_s[:n - 1])
        self.duration_s.extend(durations_s)
        self.num_prefill_tokens.extend([0] * n)
        self.num_decode_tokens.extend([num_seqs] * n)
        self.num_seqs.extend([num_seqs] * n)
        self.kv_blocks_used.extend(kv_blocks_used)

    def __len__(self) -> int:
        return len(self.duration_s)
