"""What one replica is: a model on ``tp`` GPUs of one type, at given precisions, with its
memory plan. Built once per run from the config and handed to the step-time model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sim.catalog.hardware import GPU
from sim.catalog.memory import MemoryPlan, plan_memory
from sim.catalog.model import ModelSpec
from sim.config import params


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_precision: str
    tp: int
    memory: MemoryPlan


def build_deployment(cfg: Mapping) -> Deployment:
    """Model, GPU, precisions, TP and the memory plan of one replica."""
    model = ModelSpec.from_config(cfg["model"])
    gpu = GPU.from_config(cfg["hardware"])
    tp = params.integer(cfg["fleet"], "tp", required=True, ge=1, prefix="fleet")
    precision, memory, kv = cfg["precision"], cfg["memory"], cfg["kv"]
    plan = plan_memory(
        model,
        gpu,
        weights_precision=precision["weights"],
        kv_precision=precision["kv"],
        tp=tp,
        gpu_memory_utilization=memory["gpu_memory_utilization"],
        activation_reserve_gib=memory["activation_reserve_gib"],
        block_size=kv["block_size"],
        num_blocks=kv.get("num_blocks"),
    )
    return Deployment(model, gpu, precision["weights"], precision["kv"], tp, plan)
