"""What one engine configuration builds its replicas' engines from: each model's step-time
model (scaled for a what-if, with a prefix cache's host tier priced in), its KV cache and its
scheduler. A fixed fleet has one (``sim.deploy.fixed``); an autoscaled fleet one per engine
configuration (``sim.deploy.autoscaled``); a disaggregated fleet one per pool
(``sim.deploy.disaggregated``)."""

from __future__ import annotations

from typing import Any

from sim.catalog.placement import Placement
from sim.config.build import build, target_class
from sim.config.schema import RunConfig
from sim.deploy.speculation import speculation
from sim.engine.kv_cache import KVCache
from sim.engine.prefix_cache import PrefixCachingKVCache
from sim.engine.scheduler.base import Scheduler
from sim.engine.step_time.base import HostLoadStepTime, ScaledStepTime, StepTimeModel
from sim.errors import ConfigError, require
from sim.fleet.autoscaler import Variant
from sim.fleet.replica import Engine
from sim.output.cost import gpu_price


def host_tiers(run: RunConfig, placement: Placement) -> list[tuple[int, float]] | None:
    """Each model's prefix-cache host tier (``kv.cpu_offload_gib``): its blocks, and the seconds
    a token's KV takes to copy back (each GPU copies its share over its own link); None
    without one."""
    gib = run.kv.cpu_offload_gib
    if not gib:
        return None
    require(
        run.kv.prefix_caching,
        "kv.cpu_offload_gib",
        gib,
        "keeps the blocks a prefix cache evicts: set kv.prefix_caching=true",
    )
    require(
        placement.mode != "colocated",
        "kv.cpu_offload_gib",
        gib,
        "is not modelled for two models sharing a GPU (placement=colocated); use "
        "placement=single or dedicated",
    )
    tiers = []
    for deployment in placement.deployments:
        link = deployment.gpu.host_link_bytes_per_s
        if link is None:
            raise ConfigError(
                "hardware.host_link_gbps",
                None,
                f"{deployment.gpu.name}: kv.cpu_offload_gib needs the GB/s each way between "
                "host memory and the GPU (64 for PCIe Gen5 x16, 32 for Gen4)",
            )
        plan = deployment.memory
        blocks = plan.host_blocks(gib)
        require(
            blocks >= 1,
            "kv.cpu_offload_gib",
            gib,
            f"holds no KV block ({plan.block_size} tokens of "
            f"{plan.kv_bytes_per_token_per_gpu * plan.tp * plan.pp:,.0f} bytes each)",
        )
        tiers.append((blocks, plan.kv_bytes_per_token_per_gpu / link))
    return tiers


class EngineSetup:
    """What one engine configuration builds its engines from: each model's step-time model,
    the prefix cache's host tiers, the kind of KV cache."""

    def __init__(self, cfg: dict[str, Any], run: RunConfig, placement: Placement) -> None:
        self.cfg, self.run, self.placement = cfg, run, placement
        step_times = [
            build(cfg["step_time"], "step_time", deployment=d) for d in placement.deployments
        ]
        if run.sim.step_time_scale != 1.0:
            step_times = [ScaledStepTime(m, run.sim.step_time_scale) for m in step_times]
        self.spec = speculation(cfg, run, placement)  # (sim.deploy.speculation; None: off)
        if self.spec is not None:  # the drafter's memory and time, the verification's width
            self.placement = self.spec.placement
            step_times = [self.spec.step_time(i, m) for i, m in enumerate(step_times)]
        self.host_tiers = host_tiers(run, placement)
        if self.host_tiers is not None:
            # each step pays the copy of the KV its admissions found in host memory
            step_times = [
                HostLoadStepTime(m, seconds)
                for m, (_, seconds) in zip(step_times, self.host_tiers, strict=True)
            ]
        self.step_times: list[StepTimeModel] = step_times
        # SGLang's radix cache evicts only when it needs room; vLLM's BlockPool takes every new
        # block from the head of one free queue, cached or not (sim.engine.prefix_cache)
        self.free_queue = (
            target_class(cfg["scheduler"], "scheduler").prefix_cache_eviction == "free_queue"
        )

    def scheduler(self, model_id: int) -> Scheduler:
        run, deployment = self.run, self.placement.deployments[model_id]
        plan = deployment.memory
        kv: KVCache
        if run.kv.prefix_caching:
            kv = PrefixCachingKVCache(
                plan.num_blocks,
                plan.block_size,
                run.kv.watermark,
                free_queue=self.free_queue,
                host_blocks=0 if self.host_tiers is None else self.host_tiers[model_id][0],
            )
        else:
            kv = KVCache(plan.num_blocks, plan.block_size, run.kv.watermark)
        scheduler = build(
            self.cfg["scheduler"],
            "scheduler",
            kv=kv,
            max_model_len=deployment.model.max_context_tokens,
            gpu=deployment.gpu,  # for engines whose defaults depend on it
        )
        if self.spec is not None:
            self.spec.attach(scheduler)
        return scheduler

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens one replica of the first model holds, as its engines run it (a draft
        model's share taken out)."""
        return self.placement.deployments[0].memory.kv_capacity_tokens

    def engine(self, model_id: int) -> Engine:
        return Engine(model_id, self.scheduler(model_id), self.step_times[model_id])

    def variant(self, name: str) -> Variant:
        """This configuration as replicas an autoscaler adds (a fleet of one model)."""
        deployment = self.placement.deployments[0]
        price = gpu_price(self.run.cost, deployment.gpu)[0]
        return Variant(
            name,
            lambda: [self.engine(0)],
            deployment.num_gpus,
            price,
            scheduler=lambda: self.scheduler(0),
            description={
                "gpu": deployment.gpu.name,
                "gpus_per_replica": deployment.num_gpus,
                "tp": self.run.fleet.tp,
                "weights": self.run.precision.weights,
                "kv": self.run.precision.kv,
                "kv_capacity_tokens": deployment.memory.kv_capacity_tokens,
                "usd_per_gpu_hour": price,
            },
        )
