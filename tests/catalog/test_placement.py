"""Two models in one fleet: the co-located memory plan, turn-taking on a shared GPU, routing by
model, and the dedicated baseline."""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.deployment import build_deployment
from sim.catalog.placement import build_placement
from sim.errors import ConfigError
from sim.run import simulate
from tests.support import columns, compose

TINY = [
    "workload=poisson",
    "workload.num_requests=200",
    "workload.qps=40",
    "workload.prompt_tokens={dist:uniform,low:16,high:600}",
    "workload.output_tokens={dist:uniform,low:1,high:200}",
    "sim.progress=false",
]


def test_colocated_memory_plan_holds_both_weights_and_splits_the_kv():
    cfg = compose(
        "placement=colocated", "placement.second_model=llama31_8b", "placement.kv_share=0.25"
    )
    alone = build_deployment(cfg).memory
    placement = build_placement(cfg, 2)
    first, second = (d.memory for d in placement.deployments)
    # the second model's 16.06 GB of weights, and its engine's 2 GiB runtime reserve, are gone
    # from what the KV cache can use
    kv_left = alone.kv_free_bytes_per_gpu - 16.06e9 - 2 * 2**30
    per_block = alone.block_size * alone.kv_bytes_per_token_per_gpu
    assert first.num_blocks == int(kv_left * 0.75 // per_block)
    assert second.num_blocks == int(kv_left * 0.25 // per_block)
    assert placement.replica_models == ((0, 1), (0, 1))
    assert placement.traffic_shares == (0.5, 0.5)


def test_two_big_models_that_do_not_fit_one_gpu_are_refused():
    cfg = compose("placement=colocated", "placement.second_model=qwen25_32b", "fleet.tp=1")
    with pytest.raises(
        ConfigError, match="^placement.second_model='Qwen/Qwen2.5-32B.*both models do not fit"
    ):
        build_placement(cfg, 1)


def test_colocated_models_take_turns_on_each_gpu():
    result = simulate(compose("placement=colocated", "fleet.replicas=2", *TINY))
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
    base = simulate(compose("placement=colocated", "fleet.replicas=1", *TINY))
    slow = simulate(
        compose("placement=colocated", "fleet.replicas=1", "frontend.token_s=0.001", *TINY)
    )
    b, s = columns(base.requests), columns(slow.requests)
    assert slow.summary["completed"] == base.summary["completed"] == 200
    assert np.all(s["first_token_time_s"] >= s["arrival_time_s"])
    assert np.all(s["completion_time_s"] >= s["first_token_time_s"])
    assert set(s["model_id"]) == {0, 1}
    # every token takes 1 ms of the single queue: the run lasts at least that long
    assert s["completion_time_s"].max() >= 0.001 * s["output_tokens"].sum()
    assert s["e2e_s"].mean() > 2 * b["e2e_s"].mean()


def test_dedicated_replicas_only_serve_their_model():
    result = simulate(
        compose(
            "placement=dedicated",
            "fleet.replicas=3",
            "placement.second_model_replicas=1",
            "router=round_robin",
            *TINY,
        )
    )
    req = columns(result.requests)
    assert result.summary["completed"] == 200
    assert set(req["replica_id"][req["model_id"] == 1]) == {2}
    assert set(req["replica_id"][req["model_id"] == 0]) == {0, 1}
    # round robin takes turns among each model's own replicas
    first = req["replica_id"][req["model_id"] == 0]
    assert abs(int((first == 0).sum()) - int((first == 1).sum())) <= 1


def test_placement_inputs_are_checked():
    with pytest.raises(ConfigError, match="^placement.second_model='nope'"):
        build_placement(compose("placement=colocated", "placement.second_model=nope"), 1)
    with pytest.raises(ConfigError, match="^placement.second_model_replicas=2"):
        build_placement(compose("placement=dedicated", "placement.second_model_replicas=2"), 2)
    with pytest.raises(ConfigError, match="^placement.traffic_share=1.5"):
        build_placement(compose("placement=colocated", "placement.traffic_share=1.5"), 1)


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
            "sim.progress=false",
        )
    )
    req, steps = columns(result.requests), columns(result.steps)
    assert set(req["model_id"]) == {0, 1}
    model = steps["model_id"]
    both_busy = min(int((model == 0).sum()), int((model == 1).sum()))
    assert list(model[: 2 * both_busy]) == [0, 1] * both_busy
    assert np.allclose(steps["start_time_s"], 0.01 * np.arange(len(model)))
