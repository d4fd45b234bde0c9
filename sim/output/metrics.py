"""Metric rows collected during a run: one row per scheduler step.

Each engine of a replica has its own recorder, so its rows come out in time order;
``sim.output.step_log`` takes them from time to time (``take``), so a recorder holds only the
rows of the last stretch of the run. Columns are typed ``array.array`` buffers: appending
a row costs what a list append costs, a long decode stretch's numpy arrays are copied in as raw
bytes, and numpy reads the columns back without copying.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

COLUMNS = (
    "start_time_s",
    "duration_s",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_seqs",
    "kv_blocks_used",
)


class StepRecorder:
    """The rows of ``steps.parquet`` for one replica (``replica_id`` is implied)."""

    __slots__ = COLUMNS

    def __init__(self) -> None:
        self.start_time_s = array("d")
        self.duration_s = array("d")
        self.num_prefill_tokens = array("q")
        self.num_decode_tokens = array("q")
        self.num_seqs = array("q")
        self.kv_blocks_used = array("q")

    def add(
        self,
        start_time_s: float,
        duration_s: float,
        num_prefill_tokens: int,
        num_decode_tokens: int,
        num_seqs: int,
        kv_blocks_used: int,
    ) -> None:
        self.start_time_s.append(start_time_s)
        self.duration_s.append(duration_s)
        self.num_prefill_tokens.append(num_prefill_tokens)
        self.num_decode_tokens.append(num_decode_tokens)
        self.num_seqs.append(num_seqs)
        self.kv_blocks_used.append(kv_blocks_used)

    def add_decode_stretch(
        self,
        start_time_s: float,
        durations_s: Sequence[float] | np.ndarray,
        end_times_s: Sequence[float] | np.ndarray,
        num_seqs: int,
        kv_blocks_used: Sequence[int] | np.ndarray,
    ) -> None:
        """Rows for consecutive pure-decode steps of ``num_seqs`` sequences each (columns as
        lists, or as float64/int64 numpy arrays)."""
        n = len(durations_s)
        self.start_time_s.append(start_time_s)
        same = array("q", [num_seqs]) * n
        _extend(self.start_time_s, end_times_s[: n - 1])
        _extend(self.duration_s, durations_s)
        _extend(self.kv_blocks_used, kv_blocks_used)
        self.num_prefill_tokens.frombytes(bytes(8 * n))
        self.num_decode_tokens.extend(same)
        self.num_seqs.extend(same)

    def columns(self) -> dict[str, np.ndarray]:
        """All rows as numpy columns (views of the buffers), in time order."""
        return {
            name: np.frombuffer(getattr(self, name), dtype=getattr(self, name).typecode)
            for name in COLUMNS
        }

    def take(self) -> dict[str, np.ndarray]:
        """All rows as numpy columns, leaving the recorder empty (the columns keep the old
        buffers alive; nothing is copied)."""
        rows = self.columns()
        for name in COLUMNS:
            setattr(self, name, array(getattr(self, name).typecode))
        return rows

    def __len__(self) -> int:
        return len(self.duration_s)


def _extend(column: array[Any], values: Sequence[float] | np.ndarray) -> None:
    """Append ``values`` (a list, or a numpy array of the column's type) to ``column``."""
    if isinstance(values, np.ndarray):
        column.frombytes(values.tobytes())
    else:
        column.extend(values)
