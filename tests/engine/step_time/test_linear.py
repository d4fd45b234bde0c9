"""The linear step time is the contract formula of docs/reference/config.md."""

import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.linear import LinearStepTime
from sim.engine.step_time.roofline import RooflineStepTime
from sim.errors import ConfigError
from tests.support import deployment


def roofline(tp=1, **kwargs):
    return RooflineStepTime(deployment(tp=tp), **kwargs)


def test_linear_equals_the_contract_formula():
    m = LinearStepTime(
        c0=0.5,
        c_prefill_token=0.25,
        c_decode_seq=0.125,
        c_prefill_attn=2.0**-10,
        c_decode_attn=2.0**-6,
    )
    # One 6-token chunk after 10 computed (Ap = 6 * 16 = 96) and two decodes of context 20, 44.
    p, d, ap, ad = 6, 2, 96, 64
    # all powers of two: the float result is exact
    assert m.step_time_s(StepShape(p, d, ap, ad)) == 0.5 + 1.5 + 0.25 + 96 / 1024 + 1.0
    assert m.step_time_s(StepShape(0, 0, 0, 0)) == 0.5


def test_linear_defaults_and_validation():
    m = LinearStepTime()
    assert m.step_time_s(StepShape(0, 1, 0, 1000)) == pytest.approx(0.006 + 1e-5 + 3e-5)
    with pytest.raises(ConfigError, match=r"^step_time\.c_decode_attn=-1"):
        LinearStepTime(c_decode_attn=-1)
    with pytest.raises(ConfigError, match=r"^step_time\.c0="):
        LinearStepTime(c0=0, c_prefill_token=0, c_decode_seq=0)
