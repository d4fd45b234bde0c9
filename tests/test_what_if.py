"""The what-if scales of a run (sim.step_time_scale, sim.arrival_rate_scale): exact effects."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import VECTOR_MIN_STEPS, ScaledStepTime
from sim.engine.step_time.linear import LinearStepTime
from sim.errors import ConfigError
from sim.run import simulate
from tests.scenarios import RANDOM
from tests.support import columns, compose


@pytest.mark.parametrize("num_steps", [5, VECTOR_MIN_STEPS + 7])
def test_a_scaled_model_scales_each_step_and_its_stretches_alike(num_steps):
    inner = LinearStepTime(c0=0.004, c_decode_seq=1e-5, c_decode_attn=3e-8)
    scaled = ScaledStepTime(inner, 1.1)
    shape = StepShape(0, 8, 0, 4000)
    assert scaled.step_time_s(shape) == inner.step_time_s(shape) * 1.1
    stretch = list(scaled.decode_stretch_s(shape, 8, num_steps))
    singles = [scaled.step_time_s(StepShape(0, 8, 0, 4000 + 8 * i)) for i in range(num_steps)]
    assert stretch == singles  # bit for bit


def test_slower_steps_stretch_every_time_of_a_lone_request_by_the_scale():
    base = [
        "step_time=constant",
        "step_time.seconds=0.01",
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=1",
        "workload.prompt_tokens=16",
        "workload.output_tokens=5",
        "sim.progress=false",
    ]
    one = columns(simulate(compose(*base)).requests)
    slow = columns(simulate(compose(*base, "sim.step_time_scale=1.5")).requests)
    assert slow["ttft_s"][0] == pytest.approx(1.5 * one["ttft_s"][0])
    assert slow["e2e_s"][0] == pytest.approx(1.5 * one["e2e_s"][0])


def test_a_higher_rate_brings_the_same_requests_sooner():
    one = columns(simulate(compose(*RANDOM)).requests)
    fast = columns(simulate(compose(*RANDOM, "sim.arrival_rate_scale=1.25")).requests)
    order, fast_order = np.argsort(one["request_id"]), np.argsort(fast["request_id"])
    np.testing.assert_allclose(
        fast["arrival_time_s"][fast_order], one["arrival_time_s"][order] / 1.25
    )
    assert (fast["prompt_tokens"][fast_order] == one["prompt_tokens"][order]).all()


def test_a_closed_loop_has_no_rate_to_scale_and_says_so():
    loop = [
        "workload=closed_loop",
        "workload.num_requests=20",
        "workload.concurrency=2",
        "fleet.replicas=1",
        "sim.progress=false",
    ]
    with pytest.raises(ConfigError, match="^sim.arrival_rate_scale=3.0: a closed loop"):
        simulate(compose(*loop, "sim.arrival_rate_scale=3"))
