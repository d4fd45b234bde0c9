"""Decode stretches priced at once equal pricing each step, bit for bit, for every model."""

import numpy as np
import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.constant import ConstantStepTime
from sim.engine.step_time.linear import LinearStepTime
from sim.engine.step_time.roofline import RooflineStepTime
from tests.support import deployment


def roofline(tp=1, **kwargs):
    return RooflineStepTime(deployment(tp=tp), **kwargs)


@pytest.mark.parametrize(
    "model",
    [
        ConstantStepTime(seconds=0.013),
        LinearStepTime(),
        LinearStepTime(c0=0.001, c_decode_attn=7.1e-8, c_decode_seq=3.3e-6),
        roofline(),
        roofline(tp=4),
        RooflineStepTime(deployment(model="mixtral_8x7b", hardware="h200", tp=2)),
    ],
    ids=["constant", "linear", "linear2", "roofline", "roofline_tp4", "mixtral_tp2"],
)
@pytest.mark.parametrize("d, ctx, k", [(1, 17, 1), (3, 1000, 50), (64, 123_457, 300), (7, 5, 4096)])
def test_decode_stretch_equals_stepping_exactly(model, d, ctx, k):
    # long stretches may come back as a numpy array: compare element by element, as floats
    stretch = np.asarray(
        model.decode_stretch_s(StepShape(0, d, 0, ctx), d, k), dtype=np.float64
    ).tolist()
    stepped = [model.step_time_s(StepShape(0, d, 0, ctx + i * d)) for i in range(k)]
    assert stretch == stepped  # bit for bit, not approximately
