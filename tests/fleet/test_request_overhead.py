"""The server's fixed time per request (``step_time.request_overhead_s``): a request enters its
engine that long after it reaches the replica, so TTFT and E2E grow by exactly that and TPOT
does not; 0 is the same run as not giving the key, and the limit of ever smaller overheads (a
request that a step's end released misses the step that starts at that instant either way)."""

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


# a closed loop whose requests end at different steps: each completion releases a request while
# others are mid-decode, so where that request lands relative to the next step matters
STAGGERED = [
    "fleet.replicas=1",
    "step_time=roofline",
    "workload=closed_loop",
    "workload.concurrency=12",
    "workload.num_requests=120",
    "workload.prompt_tokens={dist:uniform,low:50,high:600}",
    "workload.output_tokens={dist:uniform,low:8,high:120}",
    "sim.progress=false",
]


def _mean_ttft(*overrides: str) -> float:
    return float(simulate(compose(*STAGGERED, *overrides)).summary["ttft_s"]["mean"])


def test_mean_ttft_is_continuous_and_monotone_in_the_overhead():
    grid = [0.0, 1e-9, 1e-6, 1e-4, 1e-3, 1e-2]
    means = [_mean_ttft(f"step_time.request_overhead_s={o!r}") for o in grid]
    # 1 ns more per request moves the mean TTFT by about 1 ns, not by a step
    assert abs(means[1] - means[0]) < 1e-6
    assert means == sorted(means), means


def test_a_request_released_by_a_step_end_misses_the_step_starting_then():
    # Constant 10 ms steps, no overhead, sends at the instant of the completion: a request
    # released while others are in flight waits out the step that starts at its arrival, then
    # prefills in the next (TTFT 2 steps); one sent to an idle replica (the first wave)
    # prefills at once (1 step).
    step = 0.01
    result = simulate(
        compose(
            *[o for o in STAGGERED if not o.startswith("step_time")],
            "step_time=constant",
            f"step_time.seconds={step}",
            "workload.concurrency=3",
            "workload.num_requests=40",
            "workload.client_send_s=0",
        )
    )
    c = _by_id(result)
    arrival, done = c["arrival_time_s"], c["completion_time_s"]
    busy = idle = 0
    for k in range(40):
        t = arrival[k]
        others = int(((arrival < t) & (done > t)).sum())
        expected = 2 * step if others else step
        assert c["ttft_s"][k] == pytest.approx(expected, abs=1e-9), (k, others)
        busy, idle = busy + bool(others), idle + (not others)
    assert busy >= 30 and idle == 3  # both cases occur: only the first wave finds it idle
