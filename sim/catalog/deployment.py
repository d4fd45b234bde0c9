"""What one replica is: a model on ``tp × pp`` GPUs of one type (tensor-parallel groups of
``tp`` in ``pp`` pipeline stages, experts spread over ``ep`` of them), at given precisions, with
its memory plan. Built once per run from the config and handed to the step-time model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.catalog.hardware import GPU
from sim.catalog.memory import MemoryPlan, plan_memory
from sim.catalog.model import ModelSpec
from sim.config.schema import DeploymentConfig
from sim.errors import require


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_precision: str
    tp: int
    memory: MemoryPlan
    pp: int = 1
    ep: int = 1
    pp_microbatches: int = 1

    @property
    def attention_precision(self) -> str:
        """The precision attention kernels compute at: FP8 with an FP8 KV cache on a GPU that
        has FP8 tensor cores (FP8 FMHA in TensorRT-LLM, FlashAttention-3 in vLLM), BF16
        otherwise, whatever the weights' precision: FP8 or FP4 weights do not make
        softmax(QK^T)V low-precision."""
        if self.kv_precision == "fp8" and self.gpu.supports("fp8"):
            return "fp8"
        return "bf16"

    @property
    def num_gpus(self) -> int:
        """GPUs of one replica: ``tp`` per pipeline stage, ``pp`` stages."""
        return self.tp * self.pp


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
        kv_cache_free_gpu_mem_fraction=cfg.memory.kv_cache_free_gpu_mem_fraction,
        mem_fraction_static=cfg.memory.mem_fraction_static,
        pp=cfg.fleet.pp,
    )
    fleet = cfg.fleet
    require(
        fleet.ep in (1, fleet.tp),
        "fleet.ep",
        fleet.ep,
        f"expert parallelism spans the tensor-parallel group: 1 or fleet.tp={fleet.tp}",
    )
    require(
        fleet.ep == 1 or model.is_moe,
        "fleet.ep",
        fleet.ep,
        f"{model.short_name} is dense: it has no experts to spread",
    )
    microbatches = fleet.pp_microbatches if fleet.pp_microbatches is not None else fleet.pp
    return Deployment(
        model,
        gpu,
        cfg.precision.weights,
        cfg.precision.kv,
        fleet.tp,
        plan,
        pp=fleet.pp,
        ep=fleet.ep,
        pp_microbatches=microbatches,
    )
