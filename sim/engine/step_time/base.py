"""The step-time interface, and the one way a decode stretch is priced.

A model maps a ``StepShape`` (``sim.engine.step_shape``) to seconds: ``step_time_s(shape)``.

``decode_stretch_s(first, context_growth, num_steps)`` prices ``num_steps`` consecutive
pure-decode steps: the first has shape ``first``, and each next one attends ``context_growth``
more tokens (one per growing sequence). The default calls ``step_time_s`` once per step, in
order, so the durations are bit-for-bit those the replica would get stepping one by one.

Long stretches (``VECTOR_MIN_STEPS`` steps or more) may be priced with numpy instead, by models
whose array expression performs the same IEEE operations in the same order as their scalar one,
so the results stay bit-for-bit equal (numpy never fuses a multiply and an add). Those return a
float64 numpy array; short stretches return a list.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from mypy_extensions import mypyc_attr

from sim.engine.step_shape import StepShape
from sim.signature import compiled

# Interpreted, numpy's cost per call pays off from about 32 steps; in the compiled build (the
# module is a C extension there) a step priced in a loop costs tens of nanoseconds, and numpy
# pays off only for longer stretches (docs/benchmarks.md). Either path gives the same floats.
VECTOR_MIN_STEPS = 128 if compiled(__file__) else 32
"""Stretches this long or longer are worked out with numpy, shorter ones with a Python loop.

Per-step work in a stretch (durations, end times, KV blocks in use) is a few float operations: a
loop does a short stretch faster than numpy's fixed per-call overhead allows, numpy a long one.
Both give identical numbers. 32 steps is where they cross on benchmarks/bench_speed.py (2 cores).
"""


# users' own models subclass it, in the compiled build too (setup.py)
@mypyc_attr(allow_interpreted_subclasses=True)
class StepTimeModel:
    """Base class: subclasses implement ``step_time_s``.

    ``request_overhead_s`` is the engine's fixed time between a request reaching the server and
    entering its scheduler's queue (HTTP handling, tokenising, the hand-off to the engine
    process): it is paid once per request, outside any step, so it adds to TTFT and E2E and
    leaves TPOT alone. 0 unless a model says otherwise (the roofline's key, fitted by
    ``fleetcast calibrate --bench``).
    """

    request_overhead_s: float = 0.0
    # whether the price depends on the model and GPU it is built for (not so for coefficients
    # given by hand, which price a draft model like its target)
    prices_the_deployment: ClassVar[bool] = True

    def step_time_s(self, shape: StepShape) -> float:
        raise NotImplementedError

    def host_overhead_s(self, shape: StepShape) -> float:
        """The engine's host-side share of a step of ``shape`` (scheduling, sampling, output
        handling): what a forward pass run inside another step, as a drafter's passes are
        (``sim.engine.speculation``), does not pay again. 0: a model with no such term."""
        return 0.0

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        """Durations of ``num_steps`` pure-decode steps (a list, or a float64 numpy array)."""
        step = self.step_time_s
        seqs, context = first.num_decode_seqs, first.decode_context
        return [step(StepShape(0, seqs, 0, context + i * context_growth)) for i in range(num_steps)]


class ScaledStepTime(StepTimeModel):
    """Another model's step times, each multiplied by ``scale`` (``sim.step_time_scale``: what
    if every step were 10% slower). A decode stretch is scaled the same, so its durations stay
    bit-for-bit the scaled single steps."""

    def __init__(self, inner: StepTimeModel, scale: float) -> None:
        self.inner = inner
        self.scale = scale
        self.request_overhead_s = inner.request_overhead_s

    def step_time_s(self, shape: StepShape) -> float:
        return self.inner.step_time_s(shape) * self.scale

    def host_overhead_s(self, shape: StepShape) -> float:
        return self.inner.host_overhead_s(shape) * self.scale

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        durations = self.inner.decode_stretch_s(first, context_growth, num_steps)
        if isinstance(durations, np.ndarray):
            return durations * self.scale
        return [d * self.scale for d in durations]


class HostLoadStepTime(StepTimeModel):
    """Another model's step times plus the copy of the step's host-loaded KV tokens
    (``StepShape.host_loaded_tokens``, ``kv.cpu_offload_gib``) back to the GPU, before the step
    runs: ``tokens x bytes per token per GPU / host link bandwidth`` (each GPU of a replica
    copies its own share over its own link). The model sees the shape without them; a pure
    decode stretch loads nothing and is the model's own."""

    def __init__(self, inner: StepTimeModel, seconds_per_token: float) -> None:
        self.inner = inner
        self.seconds_per_token = seconds_per_token
        self.request_overhead_s = inner.request_overhead_s

    def step_time_s(self, shape: StepShape) -> float:
        loaded = shape.host_loaded_tokens
        if not loaded:
            return self.inner.step_time_s(shape)
        computed = StepShape(
            shape.num_prefill_tokens,
            shape.num_decode_seqs,
            shape.prefill_attn,
            shape.decode_context,
        )
        return loaded * self.seconds_per_token + self.inner.step_time_s(computed)

    def host_overhead_s(self, shape: StepShape) -> float:
        return self.inner.host_overhead_s(shape)

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        return self.inner.decode_stretch_s(first, context_growth, num_steps)
