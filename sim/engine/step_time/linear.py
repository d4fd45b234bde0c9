"""A step time linear in the plan's shape (docs/reference/config.md, the linear step time):

    t = c0 + c_prefill_token·P + c_decode_seq·D + c_prefill_attn·Ap + c_decode_attn·Ad

``c0`` is the fixed per-step cost (kernel launches, scheduling, sampling), ``c_prefill_token``
the GEMM work per prefill token, ``c_decode_seq`` the per-sequence decode cost,
``c_prefill_attn`` and ``c_decode_attn`` the attention work per attended (query, key) pair and
per KV token read. Coefficients are in seconds. Defaults are of the order of Llama-3.1-8B on one
H100 at BF16, so the model is usable as it stands; fit your own with measurements.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import VECTOR_MIN_STEPS, StepTimeModel
from sim.errors import require


class LinearStepTime(StepTimeModel):
    prices_the_deployment: ClassVar[bool] = False  # (its figures are given, whatever the model)

    def __init__(
        self,
        c0: float = 0.006,
        c_prefill_token: float = 6.0e-5,
        c_decode_seq: float = 1.0e-5,
        c_prefill_attn: float = 1.0e-10,
        c_decode_attn: float = 3.0e-8,
    ) -> None:
        for name, value in (
            ("c0", c0),
            ("c_prefill_token", c_prefill_token),
            ("c_decode_seq", c_decode_seq),
            ("c_prefill_attn", c_prefill_attn),
            ("c_decode_attn", c_decode_attn),
        ):
            require(value >= 0, f"step_time.{name}", value, "must be >= 0")
        require(
            c0 + c_prefill_token + c_decode_seq > 0,
            "step_time.c0",
            c0,
            "a step must take some time: c0, c_prefill_token or c_decode_seq must be > 0",
        )
        self.c0 = float(c0)
        self.c_prefill_token = float(c_prefill_token)
        self.c_decode_seq = float(c_decode_seq)
        self.c_prefill_attn = float(c_prefill_attn)
        self.c_decode_attn = float(c_decode_attn)

    def step_time_s(self, shape: StepShape) -> float:
        return (
            self.c0
            + self.c_prefill_token * shape.num_prefill_tokens
            + self.c_decode_seq * shape.num_decode_seqs
            + self.c_prefill_attn * shape.prefill_attn
            + self.c_decode_attn * shape.decode_context
        )

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        if num_steps < VECTOR_MIN_STEPS:
            return super().decode_stretch_s(first, context_growth, num_steps)
        context = first.decode_context + context_growth * np.arange(num_steps, dtype=np.int64)
        # the scalar expression with P = Ap = 0, term by term in the same order
        fixed = (
            self.c0
            + self.c_prefill_token * 0
            + self.c_decode_seq * first.num_decode_seqs
            + self.c_prefill_attn * 0
        )
        return fixed + self.c_decode_attn * context
