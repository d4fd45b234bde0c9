"""The server's fixed time per request (``step_time.request_overhead_s``): a request enters its
engine that long after it reaches the replica, so TTFT and E2E grow by exactly that and TPOT
does not; 0 is the same run as not giving the key."""

from __future__ import annotations

import numpy as np
import pytest

from sim.run import simulate
from tests.support import assert_good_run, columns, compose

ONE = [
    "fleet.replicas=1",
    "step_time=roofline",
    "workload=bench",
    "workload.num_requests=1",
    "workload.prompt_tokens=100",
    "workload.output_tokens=10",
    "sim.progress=false",
]
# requests 0.5 s apart, each done in well under 0.5 s even with the overhead: none overlaps
SPACED = [
    "fleet.replicas=1",
    "step_time=roofline",
    "workload=constant",
    "workload.qps=2",
    "workload.num_requests=6",
    "workload.prompt_tokens={dist:uniform,low:20,high:700}",
    "workload.output_tokens={dist:uniform,low:2,high:30}",
    "sim.progress=false",
]
LOADED = [
    "fleet.replicas=2",
    "step_time=roofline",
    "workload=poisson",
    "workload.qps=40",
    "workload.num_requests=150",
    "workload.prompt_tokens={dist:uniform,low:10,high:900}",
    "workload.output_tokens={dist:uniform,low:1,high:120}",
    "sim.progress=false",
]


def _by_id(result) -> dict[str, np.ndarray]:
    c = columns(result.requests)
    order = np.argsort(c["request_id"])
    return {name: values[order] for name, values in c.items()}


def test_one_request_pays_the_overhead_once_before_its_first_token():
    plain = _by_id(simulate(compose(*ONE)))
    result = simulate(compose(*ONE, "step_time.request_overhead_s=0.05"))
    slow = _by_id(result)
    assert slow["status"].tolist() == ["completed"]
    assert slow["arrival_time_s"][0] == plain["arrival_time_s"][0] == 0.0
    assert slow["ttft_s"][0] == pytest.approx(plain["ttft_s"][0] + 0.05, rel=1e-12)
    assert slow["e2e_s"][0] == pytest.approx(plain["e2e_s"][0] + 0.05, rel=1e-12)
    assert slow["first_token_time_s"][0] == pytest.approx(plain["first_token_time_s"][0] + 0.05)
    assert slow["completion_time_s"][0] == pytest.approx(plain["completion_time_s"][0] + 0.05)
    assert slow["tpot_s"][0] == pytest.approx(plain["tpot_s"][0], rel=1e-12)
    assert result.summary["completed"] == 1 and result.summary["num_steps"] == 10
    assert_good_run(result)


def test_spaced_requests_each_shift_by_exactly_the_overhead():
    plain_result = simulate(compose(*SPACED))
    result = simulate(compose(*SPACED, "step_time.request_overhead_s=0.08"))
    plain, slow = _by_id(plain_result), _by_id(result)
    assert slow["request_id"].tolist() == list(range(6))  # every request, once
    assert (slow["status"] == "completed").all()
    np.testing.assert_array_equal(slow["arrival_time_s"], plain["arrival_time_s"])
    np.testing.assert_allclose(slow["ttft_s"], plain["ttft_s"] + 0.08, rtol=1e-12)
    np.testing.assert_allclose(slow["e2e_s"], plain["e2e_s"] + 0.08, rtol=1e-12)
    np.testing.assert_allclose(slow["tpot_s"], plain["tpot_s"], rtol=1e-12)
    # the engine runs the same steps, each 0.08 s later
    steps, plain_steps = columns(result.steps), columns(plain_result.steps)
    for name in ("num_prefill_tokens", "num_decode_tokens", "num_seqs", "duration_s"):
        np.testing.assert_array_equal(steps[name], plain_steps[name])
    np.testing.assert_allclose(steps["start_time_s"], plain_steps["start_time_s"] + 0.08)
    assert_good_run(result)


def test_under_load_every_request_still_ends_exactly_once():
    result = simulate(compose(*LOADED, "step_time.request_overhead_s=0.03"))
    assert_good_run(result)
    c = _by_id(result)
    assert c["request_id"].tolist() == list(range(150))
    assert (c["status"] == "completed").all()
    assert result.summary["completed"] == 150 and result.summary["unfinished"] == 0
    # nobody's first token comes sooner than the overhead after its arrival
    assert (c["ttft_s"] >= 0.03).all()
    assert (c["queueing_delay_s"] >= 0.03 - 1e-12).all()


def test_a_zero_overhead_is_the_same_run_as_no_key():
    default = simulate(compose(*LOADED))
    zero = simulate(compose(*LOADED, "step_time.request_overhead_s=0"))
    assert zero.requests.equals(default.requests)
    assert zero.steps.equals(default.steps)
    assert zero.summary == default.summary


def test_other_step_time_models_have_no_request_overhead():
    others = [o for o in ONE if o != "step_time=roofline"]
    result = simulate(compose(*others, "step_time=constant", "step_time.seconds=0.1"))
    c = _by_id(result)
    # one step to the first token, nine more to the tenth, nothing before the engine
    assert c["ttft_s"][0] == pytest.approx(0.1)
    assert c["e2e_s"][0] == pytest.approx(1.0)
