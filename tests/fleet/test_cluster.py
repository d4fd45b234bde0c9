"""The fleet end to end (``simulate``): every run keeps the contract's invariants, whatever the
scheduler and however small the KV pool; the horizon, rejections and the closed loop."""

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.run import simulate
from sim.workload.source import build_workload
from tests.scenarios import RANDOM, SCHEDULERS, TINY_KV
from tests.support import assert_good_run, columns, compose


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tiny_kv", [False, True], ids=["kv_plan", "kv_tiny"])
@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_invariants_over_random_workloads(scheduler, tiny_kv, seed):
    overrides = [*RANDOM, *SCHEDULERS[scheduler], f"seed={seed}", "step_time=linear"]
    if tiny_kv:
        overrides += TINY_KV
    result = simulate(compose(*overrides))
    num_blocks = 40 if tiny_kv else result.summary["kv_capacity_tokens"] // 16
    assert_good_run(result, num_blocks)
    req = columns(result.requests)
    # Every request fits (<= 500 tokens = 32 blocks < 40 - 1 watermark): all complete.
    assert result.summary["completed"] == 120
    # static and TensorRT-LLM's default (guaranteed_no_evict) reserve KV for the whole output
    never_preempts = scheduler in ("static", "trtllm")
    if tiny_kv and not never_preempts:
        assert req["num_preemptions"].sum() >= 1
    if never_preempts or not tiny_kv:
        assert req["num_preemptions"].sum() == 0


@pytest.mark.parametrize(
    "scheduler",
    [["scheduler=vllm", "scheduler.enable_chunked_prefill=false"], ["scheduler=prefill_first"]],
    ids=["vllm_whole", "prefill_first"],
)
def test_preempted_recompute_larger_than_token_budget(scheduler):
    # Without chunking, a request preempted late recomputes prompt + output - 2 tokens in one
    # step. 40 + 26 - 2 = 64 fits the 64-token budget: admitted, preempted (a 9-block pool),
    # recomputed, completed.
    fits = simulate(
        compose(
            *scheduler,
            "fleet.replicas=1",
            "workload=poisson",
            "workload.num_requests=20",
            "workload.qps=100",
            "workload.prompt_tokens=40",
            "workload.output_tokens=26",
            "kv.num_blocks=9",
            "kv.block_size=16",
            "kv.watermark=0",
            "step_time=linear",
            "scheduler.max_num_batched_tokens=64",
            "sim.progress=false",
        )
    )
    assert fits.summary["num_preemptions"] >= 1
    assert fits.summary["completed"] == 20
    assert_good_run(fits, 9)
    # One more output token and that recompute could never be scheduled: every request would
    # be rejected, so the run is refused before it starts.
    with pytest.raises(
        ConfigError,
        match=r"^workload.prompt_tokens=40: every request is refused.*"
        r"max_num_batched_tokens \(64\)",
    ):
        simulate(
            compose(
                *scheduler,
                "fleet.replicas=1",
                "workload=poisson",
                "workload.num_requests=20",
                "workload.qps=100",
                "workload.prompt_tokens=40",
                "workload.output_tokens=27",
                "kv.num_blocks=9",
                "kv.block_size=16",
                "scheduler.max_num_batched_tokens=64",
                "sim.progress=false",
            )
        )


def test_horizon_leaves_requests_unfinished():
    cfg = compose(
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=200",
        "workload.qps=20",
        "workload.prompt_tokens=200",
        "workload.output_tokens=300",
        "sim.horizon_s=3",
        "sim.progress=false",
    )
    result = simulate(cfg)
    issued = int((build_workload(cfg["workload"], 0).arrival_time_s < 3.0).sum())
    assert_good_run(result, result.summary["kv_capacity_tokens"] // 16)
    req = columns(result.requests)
    assert len(req["request_id"]) == issued
    unfinished = req["status"] == "unfinished"
    assert unfinished.sum() >= 1
    assert result.summary["unfinished"] == int(unfinished.sum())
    assert result.summary["completed"] + result.summary["unfinished"] == issued
    assert np.all(np.isnan(req["completion_time_s"][unfinished]))
    # an unfinished request keeps the TTFT it got, if it got one
    started = unfinished & ~np.isnan(req["first_token_time_s"])
    assert started.sum() >= 1
    assert np.allclose(
        req["ttft_s"][started], req["first_token_time_s"][started] - req["arrival_time_s"][started]
    )
    assert np.all(np.isnan(req["ttft_s"][unfinished & ~started]))
    steps = columns(result.steps)
    assert (steps["start_time_s"] + steps["duration_s"]).max() < 3.0


def test_a_workload_whose_every_request_never_fits_is_refused():
    with pytest.raises(ConfigError) as err:
        simulate(
            compose(
                "fleet.replicas=1",
                "workload=poisson",
                "workload.num_requests=5",
                "workload.prompt_tokens=5000",
                "workload.output_tokens=10",
                "kv.num_blocks=10",
                "sim.progress=false",
            )
        )
    assert str(err.value).startswith("workload.prompt_tokens=5000: every request is refused")
    assert "never fit in a replica's KV cache (144 tokens for one request)" in str(err.value)


def test_exactly_the_requests_that_never_fit_are_rejected():
    # 20 blocks of 16, watermark ceil(0.2) = 1 block: a request fits iff ceil(total/16) <= 19.
    result = simulate(
        compose(*RANDOM, "workload.prompt_tokens={dist:uniform,low:1,high:400}", "kv.num_blocks=20")
    )
    assert_good_run(result, 20)
    req = columns(result.requests)
    total = req["prompt_tokens"] + req["output_tokens"]
    never = -(-total // 16) > 19
    assert never.any() and (~never).any()
    assert np.array_equal(req["status"] == "rejected", never)
    assert np.all(req["status"][~never] == "completed")


@pytest.mark.parametrize("frontend_token_s", [0.0, 0.0005])
def test_closed_loop_keeps_concurrency_in_flight(frontend_token_s):
    concurrency = 5
    result = simulate(
        compose(
            "fleet.replicas=2",
            "workload=closed_loop",
            f"workload.concurrency={concurrency}",
            "workload.num_requests=60",
            "workload.prompt_tokens={dist:uniform,low:10,high:200}",
            "workload.output_tokens={dist:uniform,low:1,high:60}",
            "workload.client_send_s=0",
            "sim.progress=false",
            f"frontend.token_s={frontend_token_s}",
        )
    )
    req = columns(result.requests)
    assert len(req["request_id"]) == 60 and np.all(req["status"] == "completed")
    arrival, done = req["arrival_time_s"], req["completion_time_s"]
    assert np.all(arrival[:concurrency] == 0.0)
    # every later request is sent at the instant an earlier one completed (think time 0)
    assert set(arrival[concurrency:]) <= set(done)
    for t in arrival[concurrency:]:
        in_flight = int((arrival <= t).sum() - (done <= t).sum())
        assert in_flight == concurrency, t
    assert np.all(np.diff(arrival) >= 0)  # issued in order


@pytest.mark.parametrize("workload", ["closed_loop", "bench"])
def test_client_sends_one_request_at_a_time(workload):
    # One sender taking client_send_s per request: request k goes out when the completion that
    # released it is heard, or client_send_s after request k - 1 went out, whichever is later;
    # the first wave (all released at 0) goes out 0, d, 2d, ...
    concurrency, send_s = 6, 0.002
    load = (
        [f"workload.concurrency={concurrency}"]
        if workload == "closed_loop"
        else [f"workload.max_concurrency={concurrency}"]  # every request due at once
    )
    result = simulate(
        compose(
            "fleet.replicas=2",
            f"workload={workload}",
            *load,
            "workload.num_requests=40",
            "workload.prompt_tokens={dist:uniform,low:10,high:200}",
            "workload.output_tokens={dist:uniform,low:1,high:60}",
            f"workload.client_send_s={send_s}",
            "sim.progress=false",
        )
    )
    req = columns(result.requests)
    assert np.all(req["status"] == "completed")
    arrival, done = req["arrival_time_s"], req["completion_time_s"]
    released = np.concatenate((np.zeros(concurrency), np.sort(done)[: 40 - concurrency]))
    expected = [0.0]
    for k in range(1, 40):
        expected.append(max(float(released[k]), expected[-1] + send_s))
    assert arrival.tolist() == expected
    assert arrival[concurrency - 1] == pytest.approx((concurrency - 1) * send_s)


@pytest.mark.parametrize("think_time_s", [0.0, 0.05])
def test_closed_loop_issues_exactly_num_requests_even_when_most_are_rejected(think_time_s):
    # Most requests are rejected (prompt + output never fits the 8-block pool, 7 usable): each
    # rejection releases the next request, and the loop must stop at exactly num_requests.
    result = simulate(
        compose(
            "fleet.replicas=1",
            "workload=closed_loop",
            "workload.concurrency=4",
            "workload.num_requests=10",
            f"workload.think_time_s={think_time_s}",
            "workload.prompt_tokens={dist:uniform,low:1,high:400}",
            "workload.output_tokens=10",
            "kv.num_blocks=8",
            "sim.progress=false",
        )
    )
    req = columns(result.requests)
    fits = req["prompt_tokens"] + 10 <= 7 * 16
    assert result.summary["num_requests"] == 10
    assert result.summary["rejected"] == int((~fits).sum()) >= 5
    assert result.summary["completed"] == int(fits.sum()) >= 1
    assert list(req["reject_reason"][~fits]) == ["kv_capacity"] * int((~fits).sum())
    assert result.summary["rejected_by_reason"] == {"kv_capacity": int((~fits).sum())}
