"""Metric rows collected during a run: one row per scheduler step, appended to flat columns.

Nothing is computed here while the simulation runs beyond appending numbers; tables and the
summary are built once at the end (``sim.results``).
"""

from __future__ import annotations


class StepRecorder:
    """Columns of ``steps.parquet`` as Python lists (cheap appends on the hot path)."""

    __slots__ = ("replica_id", "start_time_s", "duration_s", "num_prefill_tokens",
                 "num_decode_tokens", "num_seqs", "kv_blocks_used")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, [])

    def add(self, replica_id: int, start_time_s: float, duration_s: float, num_prefill_tokens: int,
            num_decode_tokens: int, num_seqs: int, kv_blocks_used: int) -> None:
        self.replica_id.append(replica_id)
        self.start_time_s.append(start_time_s)
        self.duration_s.append(duration_s)
        self.num_prefill_tokens.append(num_prefill_tokens)
        self.num_decode_tokens.append(num_decode_tokens)
        self.num_seqs.append(num_seqs)
        self.kv_blocks_used.append(kv_blocks_used)

    def add_decode_stretch(self, replica_id: int, start_time_s: float, durations_s: list[float],
                           end_times_s: list[float], num_seqs: int, kv_blocks_used: list[int]
                           ) -> None:
        """Rows for consecutive pure-decode steps of ``num_seqs`` sequences each."""
        n = len(durations_s)
        self.replica_id.extend([replica_id] * n)
        self.start_time_s.append(start_time_s)
        self.start_time_s.extend(end_times_s[:n - 1])
        self.duration_s.extend(durations_s)
        self.num_prefill_tokens.extend([0] * n)
        self.num_decode_tokens.extend([num_seqs] * n)
        self.num_seqs.extend([num_seqs] * n)
        self.kv_blocks_used.extend(kv_blocks_used)

    def __len__(self) -> int:
        return len(self.duration_s)
