"""A replica's step loop: decode stretches run as one event give exactly the files stepping one by
one gives, the fast path is really taken, and one replica with one-request steps is an M/D/1
queue."""

import numpy as np
import pytest
import simpy

from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.engine.scheduler.vllm import VLLMScheduler
from sim.engine.step_time.constant import ConstantStepTime
from sim.fleet.replica import Engine, Replica
from sim.run import simulate
from tests.scenarios import RANDOM, SCHEDULERS, TINY_KV
from tests.support import columns, compose

FAST_FORWARD_CASES = {
    **{f"{name}_tiny_kv": [*RANDOM, *opts, *TINY_KV] for name, opts in SCHEDULERS.items()},
    "vllm_roofline": [*RANDOM, "step_time=roofline"],
    "sarathi_roofline_tiny": [*RANDOM, *SCHEDULERS["sarathi"], *TINY_KV, "step_time=roofline"],
    "closed_loop": [
        "fleet.replicas=1",
        "workload=closed_loop",
        "workload.concurrency=6",
        "workload.num_requests=60",
        "workload.prompt_tokens=100",
        "workload.output_tokens={dist:uniform,low:1,high:150}",
        "sim.progress=false",
    ],
    "closed_loop_think_tiny": [
        "fleet.replicas=1",
        "workload=closed_loop",
        "workload.concurrency=10",
        "workload.num_requests=60",
        "workload.think_time_s=0.05",
        "workload.prompt_tokens=100",
        "workload.output_tokens=120",
        *TINY_KV,
        "sim.progress=false",
    ],
    "poisson_fixed": [
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=150",
        "workload.qps=30",
        "workload.prompt_tokens=64",
        "workload.output_tokens=64",
        "sim.progress=false",
    ],
    "three_replicas_least_tokens": [
        *RANDOM,
        "fleet.replicas=3",
        "router=least_tokens",
        "workload.qps=50",
    ],
    "two_replicas_rr_prefill_first_tiny": [
        *RANDOM,
        "fleet.replicas=2",
        "router=round_robin",
        *SCHEDULERS["prefill_first"],
        *TINY_KV,
    ],
    # A horizon that falls inside decode stretches: steps ending after it never end.
    "horizon_inside_stretches": [*RANDOM, "workload.qps=20", "sim.horizon_s=3"],
    # Exact ties: arrivals and step ends at the same instants (constant step time, evenly
    # spaced arrivals), across replicas, and closed-loop arrivals issued inside a step end.
    "ties_constant_round_robin": [
        "fleet.replicas=2",
        "step_time=constant",
        "step_time.seconds=0.25",
        "workload=constant",
        "workload.qps=2",
        "workload.num_requests=60",
        "workload.prompt_tokens=16",
        "workload.output_tokens=9",
        "router=round_robin",
        "sim.progress=false",
    ],
    "ties_constant_least_outstanding_horizon": [
        "fleet.replicas=2",
        "step_time=constant",
        "step_time.seconds=0.25",
        "workload=constant",
        "workload.qps=2",
        "workload.num_requests=60",
        "workload.prompt_tokens=16",
        "workload.output_tokens=9",
        "router=least_outstanding",
        "sim.horizon_s=12",
        "sim.progress=false",
    ],
    "ties_closed_loop_three_replicas_tiny": [
        "fleet.replicas=3",
        "step_time=constant",
        "step_time.seconds=0.01",
        "workload=closed_loop",
        "workload.concurrency=7",
        "workload.num_requests=120",
        "workload.prompt_tokens=100",
        "workload.output_tokens={dist:uniform,low:1,high:150}",
        "router=least_tokens",
        *TINY_KV,
        "sim.progress=false",
    ],
    # A frontend that falls behind: tokens streamed late, requests reaching the engine late,
    # closed-loop clients released when their last token is streamed; with preemption.
    "frontend_closed_loop_tiny": [
        "fleet.replicas=2",
        "workload=closed_loop",
        "workload.concurrency=24",
        "workload.num_requests=150",
        "workload.prompt_tokens={dist:uniform,low:10,high:300}",
        "workload.output_tokens={dist:uniform,low:1,high:150}",
        "frontend.token_s=0.0004",
        *TINY_KV,
        "sim.progress=false",
    ],
    "frontend_poisson_horizon": [
        *RANDOM,
        "workload.qps=20",
        "frontend.token_s=0.0002",
        "sim.horizon_s=3",
    ],
    # A backlog longer than a step while decode stretches run: arrivals mid-stretch must see
    # the tokens of the stretch's steps that have already ended.
    "frontend_backlog_during_stretches": [
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=200",
        "workload.qps=30",
        "workload.prompt_tokens=64",
        "workload.output_tokens=64",
        "frontend.token_s=0.001",
        "sim.progress=false",
    ],
    "frontend_backlog_two_replicas_tiny": [
        *RANDOM,
        "fleet.replicas=2",
        "workload.qps=40",
        "frontend.token_s=0.0007",
        *TINY_KV,
    ],
    "frontend_ties_constant": [
        "fleet.replicas=2",
        "step_time=constant",
        "step_time.seconds=0.01",
        "workload=closed_loop",
        "workload.concurrency=9",
        "workload.num_requests=90",
        "workload.prompt_tokens=16",
        "workload.output_tokens=40",
        "frontend.token_s=0.00125",
        "router=round_robin",
        "sim.progress=false",
    ],
}


@pytest.mark.parametrize("case", list(FAST_FORWARD_CASES))
def test_decode_stretches_equal_stepping_one_by_one(case):
    overrides = FAST_FORWARD_CASES[case]
    fast = simulate(compose(*overrides, "sim.fast_forward_decode=true"))
    slow = simulate(compose(*overrides, "sim.fast_forward_decode=false"))
    assert slow.summary["completed"] > 0
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)
    assert fast.summary == slow.summary


def test_fast_forward_actually_takes_stretches(monkeypatch):
    """Sanity: the fast path is exercised (otherwise the equality test proves nothing): some run
    of more than 10 consecutive steps ends with no SimPy event at any of their ends but the
    last. Seen from SimPy's side, which a spy can reach in the compiled build too (the engine's
    own methods are native calls there)."""
    event_times = set()
    step = simpy.Environment.step

    def recorded(env):
        step(env)
        event_times.add(env.now)

    monkeypatch.setattr(simpy.Environment, "step", recorded)
    longest = {}
    for fast in (True, False):
        event_times.clear()
        result = simulate(
            compose(*FAST_FORWARD_CASES["poisson_fixed"], f"sim.fast_forward_decode={fast}")
        )
        steps = columns(result.steps)
        run = longest[fast] = 0
        for end in steps["start_time_s"] + steps["duration_s"]:  # one replica, in order
            run = 0 if end in event_times else run + 1
            longest[fast] = max(longest[fast], run)
    assert longest[False] == 0  # one by one, every step ends in an event
    assert longest[True] >= 10, longest


def test_queueing_delay_matches_md1_theory():
    """One replica, one request per step of S seconds: an M/D/1 queue.

    Wq = rho S / (2 (1 - rho)). Over 4 seeds x 20,000 requests at rho = 0.6 the sample mean's
    relative standard error is about 1% (measured across seeds: 2% per seed), so 4% is a
    4-sigma bound.
    """
    S, rho = 0.01, 0.6
    delays = []
    for seed in range(4):
        result = simulate(
            compose(
                "fleet.replicas=1",
                "step_time=constant",
                f"step_time.seconds={S}",
                "scheduler.max_num_seqs=1",
                "workload=poisson",
                "workload.num_requests=20000",
                f"workload.qps={rho / S}",
                "workload.prompt_tokens=16",
                "workload.output_tokens=1",
                f"seed={seed}",
                "sim.progress=false",
            )
        )
        req = columns(result.requests)
        assert np.all(req["status"] == "completed")
        # each request is exactly one step of S seconds: TTFT = queueing delay + S
        np.testing.assert_allclose(req["ttft_s"] - S, req["queueing_delay_s"], atol=1e-9)
        assert np.all(req["queueing_delay_s"] >= 0)
        delays.append(req["queueing_delay_s"])
    wq_theory = rho * S / (2 * (1 - rho))
    assert np.concatenate(delays).mean() == pytest.approx(wq_theory, rel=0.04)


def test_a_replica_starts_only_when_told_and_stamps_its_requests_times():
    env = simpy.Environment()
    done = []
    engine = Engine(0, VLLMScheduler(KVCache(100, 4)), ConstantStepTime(seconds=0.5))
    replica = Replica(env, 0, [engine], lambda request, _priority: done.append(request))
    request = Request(0, 0.0, prompt_tokens=8, output_tokens=3)
    replica.add(request, 0)
    env.run()
    assert replica.process is None and done == [] and env.now == 0  # not started: nothing ran
    replica.start()
    env.run()
    # a prefill step then two decode steps of 0.5 s each
    assert done == [request] and env.now == 1.5
    assert (request.first_token_time_s, request.completion_time_s) == (0.5, 1.5)
    assert request.replica_id == 0 and replica.num_outstanding == 0
    with pytest.raises(AssertionError, match="started twice"):
        replica.start()


# -- a GPU shared by two models (placement=colocated): one step loop, turns ------------------

COLOCATED_TINY = [
    "workload=poisson",
    "workload.num_requests=200",
    "workload.qps=40",
    "workload.prompt_tokens={dist:uniform,low:16,high:600}",
    "workload.output_tokens={dist:uniform,low:1,high:200}",
    "sim.progress=false",
]


def test_colocated_models_take_turns_on_each_gpu():
    result = simulate(compose("placement=colocated", "fleet.replicas=2", *COLOCATED_TINY))
    req, steps = columns(result.requests), columns(result.steps)
    assert result.summary["completed"] == 200
    # both models got traffic, about half each (stream placement.model)
    share = req["model_id"].mean()
    assert 0.35 < share < 0.65
    for rid in (0, 1):
        mine = steps["replica_id"] == rid
        start, dur, model = (
            steps["start_time_s"][mine],
            steps["duration_s"][mine],
            steps["model_id"][mine],
        )
        assert np.all(np.diff(start) >= 0)
        # one GPU: a step of either model never overlaps the next one, whichever model
        assert np.all(start[1:] >= start[:-1] + dur[:-1] - 1e-12)
        assert set(np.unique(model)) == {0, 1}
        # taking turns: while both have work, a model never steps twice in a row; over the
        # run, most consecutive steps alternate
        assert np.mean(model[1:] != model[:-1]) > 0.3


def test_colocated_models_share_one_frontend_per_gpu():
    # Both models' tokens go through the replica's one host queue: with 1 ms per token the
    # queue is the bottleneck, so clients see tokens late.
    base = simulate(compose("placement=colocated", "fleet.replicas=1", *COLOCATED_TINY))
    slow = simulate(
        compose(
            "placement=colocated", "fleet.replicas=1", "frontend.token_s=0.001", *COLOCATED_TINY
        )
    )
    b, s = columns(base.requests), columns(slow.requests)
    assert slow.summary["completed"] == base.summary["completed"] == 200
    assert np.all(s["first_token_time_s"] >= s["arrival_time_s"])
    assert np.all(s["completion_time_s"] >= s["first_token_time_s"])
    assert set(s["model_id"]) == {0, 1}
    # every token takes 1 ms of the single queue: the run lasts at least that long
    assert s["completion_time_s"].max() >= 0.001 * s["output_tokens"].sum()
    assert s["e2e_s"].mean() > 2 * b["e2e_s"].mean()


def test_two_busy_models_alternate_step_by_step():
    # Constant 10 ms steps, both models always busy: the GPU alternates A, B, A, B exactly.
    result = simulate(
        compose(
            "placement=colocated",
            "fleet.replicas=1",
            "step_time=constant",
            "step_time.seconds=0.01",
            "workload=closed_loop",
            "workload.concurrency=8",
            "workload.num_requests=8",
            "workload.prompt_tokens=32",
            "workload.output_tokens=20",
            "workload.client_send_s=0",  # both models' requests there from the first step
            "sim.progress=false",
        )
    )
    req, steps = columns(result.requests), columns(result.steps)
    assert set(req["model_id"]) == {0, 1}
    model = steps["model_id"]
    both_busy = min(int((model == 0).sum()), int((model == 1).sum()))
    assert list(model[: 2 * both_busy]) == [0, 1] * both_busy
    assert np.allclose(steps["start_time_s"], 0.01 * np.arange(len(model)))
