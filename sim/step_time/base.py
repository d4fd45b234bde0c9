"""The step-time interface, and the one way a decode stretch is priced.

``decode_stretch_s`` prices ``k`` consecutive pure-decode steps whose context grows by
``context_growth`` tokens per step. It calls ``step_time_s`` once per step, in order, so the
durations are bit-for-bit those the replica would get stepping one by one.

Long stretches (``VECTOR_MIN_STEPS`` steps or more) may be priced with numpy instead, by models
whose array expression performs the same IEEE operations in the same order as their scalar one,
so the results stay bit-for-bit equal (numpy never fuses a multiply and an add). Those return a
float64 numpy array; short stretches return a list.
"""

from __future__ import annotations


class StepTimeModel:
    """Base class: subclasses implement ``step_time_s``."""

    def step_time_s(self, num_prefill_tokens: int, num_decode_seqs: int, prefill_attn: int,
                    decode_context: int) -> float:
        raise NotImplementedError

    def decode_stretch_s(self, num_decode_seqs: int, decode_context: int, context_growth: int,
                         num_steps: int) -> list[float]:
        step = self.step_time_s
        return [step(0, num_decode_seqs, 0, decode_context + i * context_growth)
                for i in range(num_steps)]
