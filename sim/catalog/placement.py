"""Which models a fleet serves, and which replicas serve each.

- ``single``: every replica serves the one model (the usual case).
- ``colocated``: two models on every GPU. Both sets of weights stay resident, so the KV memory
  left is smaller, and it is split between the models (``kv_share`` to the second; a
  ``kv.num_blocks`` override is the GPU's whole pool, split the same way). Each model
  has its own KV pool and scheduler, and their engine steps take turns on the GPU.
- ``dedicated``: two models on separate replicas, ``second_model_replicas`` of them for the
  second model: the baseline colocation is compared against.

A request asks for the second model with probability ``traffic_share`` (stream
``placement.model``); both models see the workload's length distribution.

Left out: running the two models' kernels concurrently (MPS/MIG), and sharing KV blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sim import rng
from sim.catalog.deployment import Deployment, build_deployment
from sim.catalog.memory import plan_memory
from sim.config.compose import load_option
from sim.config.schema import (
    DedicatedPlacement,
    DeploymentConfig,
    DisaggregatedPlacement,
    ModelConfig,
    PlacementConfig,
    SinglePlacement,
)
from sim.errors import ConfigError, require

GIB = 2**30


@dataclass(frozen=True)
class Placement:
    mode: str
    deployments: tuple[Deployment, ...]
    """One per model; the index is the request's ``model_id``."""
    replica_models: tuple[tuple[int, ...], ...]
    """For each replica, the models it serves."""
    traffic_shares: tuple[float, ...]

    def model_ids(self, num_requests: int, seed: int) -> np.ndarray:
        """Which model each request asks for."""
        if len(self.deployments) == 1:
            return np.zeros(num_requests, dtype=np.int64)
        draws = rng.stream(seed, "placement.model").random(num_requests)
        return (draws < self.traffic_shares[1]).astype(np.int64)


def build_placement(
    cfg: DeploymentConfig, placement: PlacementConfig, num_replicas: int
) -> Placement:
    """The placement ``placement`` asks for, over ``num_replicas`` replicas of ``cfg``'s
    deployment (the first model; the second model shares everything but the model)."""
    first = build_deployment(cfg)
    if isinstance(placement, SinglePlacement):
        return Placement("single", (first,), ((0,),) * num_replicas, (1.0,))
    # (two pools of one model are built by sim.deploy.disaggregated)
    assert not isinstance(placement, DisaggregatedPlacement), "a disaggregated fleet's pools"
    second_model = load_option("model", placement.second_model, "placement.second_model")
    second_cfg = cfg.model_copy(update={"model": ModelConfig.from_config(second_model)})
    share = placement.traffic_share
    shares = (1.0 - share, share)
    if isinstance(placement, DedicatedPlacement):
        require(
            num_replicas >= 2,
            "fleet.replicas",
            num_replicas,
            "placement=dedicated needs at least one replica per model",
        )
        second_replicas = placement.second_model_replicas
        if second_replicas is None:  # in proportion to the traffic, at least one each
            second_replicas = min(max(1, round(num_replicas * share)), num_replicas - 1)
        require(
            second_replicas < num_replicas,
            "placement.second_model_replicas",
            second_replicas,
            f"must leave replicas for the first model (fleet.replicas={num_replicas})",
        )
        first_replicas = num_replicas - second_replicas
        models = ((0,),) * first_replicas + ((1,),) * second_replicas
        return Placement("dedicated", (first, build_deployment(second_cfg)), models, shares)
    kv_share = placement.kv_share
    second = build_deployment(second_cfg)
    both = (
        _share_gpu(first, second, 1.0 - kv_share, cfg),
        _share_gpu(second, first, kv_share, cfg),
    )
    return Placement("colocated", both, ((0, 1),) * num_replicas, shares)


def _share_gpu(
    own: Deployment, other: Deployment, kv_share: float, cfg: DeploymentConfig
) -> Deployment:
    """``own``'s memory plan when ``other``'s weights are also resident and ``own`` gets
    ``kv_share`` of the KV memory left."""
    plan_args: dict[str, Any] = dict(
        weights_precision=own.weights_precision,
        kv_precision=own.kv_precision,
        tp=own.tp,
        gpu_memory_utilization=cfg.memory.gpu_memory_utilization,
        block_size=cfg.kv.block_size,
        kv_cache_free_gpu_mem_fraction=cfg.memory.kv_cache_free_gpu_mem_fraction,
        pp=own.pp,
    )
    # SGLang's rule takes no reserve from its static pool, so the other model's weights (passed
    # as reserve below) would vanish from the plan: two SGLang engines on one GPU are not modelled
    require(
        cfg.memory.mem_fraction_static is None,
        "memory.mem_fraction_static",
        cfg.memory.mem_fraction_static,
        "placement=colocated is modelled with vLLM's or TensorRT-LLM's memory rule only",
    )
    # The other model's weights, and its engine's own runtime reserve (activations, CUDA
    # graphs), are memory this model cannot use.
    reserve_gib = 2 * cfg.memory.activation_reserve_gib + other.memory.weight_bytes_per_gpu / GIB
    try:
        plan = plan_memory(own.model, own.gpu, activation_reserve_gib=reserve_gib, **plan_args)
    except ConfigError as err:
        raise ConfigError(
            "placement.second_model",
            other.model.name,
            f"both models do not fit on one {own.gpu.name}: {err.reason}",
        ) from None
    if cfg.kv.num_blocks is None:
        num_blocks = math.floor(
            plan.kv_free_bytes_per_gpu
            * kv_share
            / (plan.block_size * plan.kv_bytes_per_token_per_gpu)
        )
    else:  # the override fixes the GPU's whole pool, split the same way
        num_blocks = math.floor(cfg.kv.num_blocks * kv_share)
    require(num_blocks >= 1, "placement.kv_share", kv_share, "leaves no KV block to a model")
    plan = plan_memory(
        own.model, own.gpu, activation_reserve_gib=reserve_gib, num_blocks=num_blocks, **plan_args
    )
    return replace(own, memory=plan)
