"""Two models in one fleet: the co-located memory plan, models that do not fit together, routing
by model on dedicated replicas, and checked inputs (turn-taking on a shared GPU is the replica's:
tests/fleet/test_replica.py)."""

from __future__ import annotations

import pytest

from sim.catalog.deployment import build_deployment
from sim.catalog.placement import build_placement
from sim.config.schema import validate_run
from sim.errors import ConfigError
from sim.run import simulate
from tests.support import columns, compose


def placed(cfg, num_replicas):
    """The placement of a composed config, checked as a run checks it."""
    run = validate_run(cfg)
    return build_placement(run, run.placement, num_replicas)


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
    placement = placed(cfg, 2)
    first, second = (d.memory for d in placement.deployments)
    # the second model's 16.06 GB of weights, and its engine's 2 GiB runtime reserve, are gone
    # from what the KV cache can use
    kv_left = alone.kv_free_bytes_per_gpu - 16.06e9 - 2 * 2**30
    per_block = alone.block_size * alone.kv_bytes_per_token_per_gpu
    assert first.num_blocks == int(kv_left * 0.75 // per_block)
    assert second.num_blocks == int(kv_left * 0.25 // per_block)
    assert placement.replica_models == ((0, 1), (0, 1))
    assert placement.traffic_shares == (0.5, 0.5)


def colocated_with_blocks(num_blocks: int) -> dict:
    return compose(
        "placement=colocated",
        "placement.second_model=llama31_8b",
        "placement.kv_share=0.25",
        f"kv.num_blocks={num_blocks}",
    )


def test_colocated_kv_num_blocks_override_is_the_gpus_pool_split_by_kv_share():
    # the override is honoured, not replaced by the memory plan's count (found by the whole-run
    # property test: a 10-token request ran in an 8-block pool that was silently much larger)
    first, second = (d.memory for d in placed(colocated_with_blocks(10), 1).deployments)
    assert (first.num_blocks, second.num_blocks) == (7, 2)
    with pytest.raises(ConfigError, match="^placement.kv_share=0.25: leaves no KV block"):
        placed(colocated_with_blocks(3), 1)


def test_two_big_models_that_do_not_fit_one_gpu_are_refused():
    cfg = compose("placement=colocated", "placement.second_model=qwen25_32b", "fleet.tp=1")
    with pytest.raises(
        ConfigError, match="^placement.second_model='Qwen/Qwen2.5-32B.*both models do not fit"
    ):
        placed(cfg, 1)


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
        placed(compose("placement=colocated", "placement.second_model=nope"), 1)
    with pytest.raises(ConfigError, match="^placement.second_model_replicas=2"):
        placed(compose("placement=dedicated", "placement.second_model_replicas=2"), 2)
    with pytest.raises(ConfigError, match="^placement.traffic_share=1.5"):
        placed(compose("placement=colocated", "placement.traffic_share=1.5"), 1)


def test_colocation_under_sglangs_memory_rule_is_refused():
    cfg = compose(
        "placement=colocated",
        "placement.second_model=llama31_8b",
        "memory.mem_fraction_static=0.85",
    )
    with pytest.raises(ConfigError, match=r"^memory\.mem_fraction_static=0\.85: placement="):
        placed(cfg, 2)
