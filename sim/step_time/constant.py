"""Every step takes the same time, whatever it holds: for tests and queueing theory."""

from __future__ import annotations

from sim.errors import require
from sim.step_time.base import StepTimeModel


class ConstantStepTime(StepTimeModel):
    def __init__(self, seconds: float = 0.01, **_deployment):
        require(seconds > 0, "step_time.seconds", seconds, "must be > 0")
        self.seconds = float(seconds)

    def step_time_s(self, num_prefill_tokens, num_decode_seqs, prefill_attn, decode_context):
        return self.seconds

    def decode_stretch_s(self, num_decode_seqs, decode_context, context_growth, num_steps):
        return [self.seconds] * num_steps
