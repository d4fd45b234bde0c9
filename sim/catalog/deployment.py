"""What one replica is: a model on ``tp`` GPUs of one type, at given precisions, with its
memory plan. Built once per run from the config and handed to the step-time model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.catalog.hardware import GPU
from sim.catalog.memory import MemoryPlan, plan_memory
from sim.catalog.model import ModelSpec
from sim.config.schema import DeploymentConfig


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_precision: str
    tp: int
    memory: MemoryPlan


def build_deployment(cfg: DeploymentConfig | Mapping[str, Any]) -> Deployment:
    """Model, GPU, precisions, TP and the memory plan of one replica, from a checked config
    (a ``RunConfig`` is one) or from plain data holding at least its groups."""
    if not isinstance(cfg, DeploymentConfig):
        cfg = DeploymentConfig.from_config(
            {k: cfg[k] for k in DeploymentConfig.model_fields if k in cfg}
        )
    model = ModelSpec.from_config(cfg.model)
    gpu = GPU.from_config(cfg.hardware)
    plan = plan_memory(
        model,
        gpu,
        weights_precision=cfg.precision.weights,
        kv_precision=cfg.precision.kv,
        tp=cfg.fleet.tp,
        gpu_memory_utilization=cfg.memory.gpu_memory_utilization,
        activation_reserve_gib=cfg.memory.activation_reserve_gib,
        block_size=cfg.kv.block_size,
        num_blocks=cfg.kv.num_blocks,
    )
    return Deployment(model, gpu, cfg.precision.weights, cfg.precision.kv, cfg.fleet.tp, plan)
