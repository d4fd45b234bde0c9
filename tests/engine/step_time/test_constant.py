"""The constant step time: every step, and every step of a stretch, takes the same time."""

import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.constant import ConstantStepTime
from sim.engine.step_time.roofline import RooflineStepTime
from sim.errors import ConfigError
from tests.support import deployment


def roofline(tp=1, **kwargs):
    return RooflineStepTime(deployment(tp=tp), **kwargs)


def test_constant():
    m = ConstantStepTime(seconds=0.25)
    assert (
        m.step_time_s(StepShape(0, 1, 0, 1))
        == m.step_time_s(StepShape(8192, 256, 10**9, 10**7))
        == 0.25
    )
    assert list(m.decode_stretch_s(StepShape(0, 3, 0, 100), 3, 4)) == [0.25] * 4
    with pytest.raises(ConfigError, match=r"^step_time\.seconds=0"):
        ConstantStepTime(seconds=0)
