"""Every step takes the same time, whatever it holds: for tests and queueing theory."""

from __future__ import annotations

from typing import ClassVar

from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import StepTimeModel
from sim.errors import require


class ConstantStepTime(StepTimeModel):
    prices_the_deployment: ClassVar[bool] = False  # (its figures are given, whatever the model)

    def __init__(self, seconds: float = 0.01) -> None:
        require(seconds > 0, "step_time.seconds", seconds, "must be > 0")
        self.seconds = float(seconds)

    def step_time_s(self, shape: StepShape) -> float:
        return self.seconds

    def decode_stretch_s(
        self, first: StepShape, context_growth: int, num_steps: int
    ) -> list[float]:
        return [self.seconds] * num_steps
