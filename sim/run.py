"""One simulation, from a config to its results: the composition root.

``simulate(cfg)`` builds everything the run needs from the config alone (no global state, so
many runs can share a process) and returns the tables, the summary and the resolved config
(``sim.output.run_files.write_run`` writes them). The same config and seed give byte-identical
files.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from sim import rng
from sim.catalog.placement import build_placement
from sim.config import params
from sim.config.build import build
from sim.config.compose import to_dict
from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.engine.scheduler.base import Scheduler
from sim.errors import require
from sim.fleet.cluster import Cluster
from sim.fleet.replica import Engine
from sim.output.cost import CostConfig
from sim.output.results import Slo, requests_table, steps_table, summarize
from sim.output.run_files import RunResult
from sim.workload.source import build_workload

if TYPE_CHECKING:  # tqdm is imported only when a progress bar is shown
    from tqdm import tqdm


def _progress_callback(
    cfg: Mapping[str, Any], total: int
) -> tuple[Callable[[Request], None] | None, tqdm[Any] | None]:
    setting = cfg["sim"].get("progress", "auto")
    require(
        setting in ("auto", True, False), "sim.progress", setting, "must be auto, true or false"
    )
    if setting is False or (setting == "auto" and not sys.stderr.isatty()):
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="req", desc="simulating", mininterval=0.5, leave=False)
    every = max(1, total // 200)  # ~200 updates: cheap, yet smooth
    count = 0

    def on_done(_request: Request) -> None:
        nonlocal count
        count += 1
        if count % every == 0:
            bar.update(every)

    return on_done, bar


def simulate(cfg: DictConfig | Mapping[str, Any]) -> RunResult:
    cfg = to_dict(cfg)
    seed = params.integer(cfg, "seed", default=0, ge=0, prefix="")
    num_replicas = params.integer(cfg["fleet"], "replicas", required=True, ge=1, prefix="fleet")
    placement = build_placement(cfg, num_replicas)
    deployment = placement.deployments[0]
    kv_cfg = cfg["kv"]
    step_times = [build(cfg["step_time"], "step_time", deployment=d) for d in placement.deployments]
    router = build(cfg["router"], "router", rng=rng.stream(seed, "router"))
    workload = build_workload(cfg["workload"], seed)
    sim_cfg = cfg["sim"]
    horizon_s = params.number(sim_cfg, "horizon_s", gt=0, prefix="sim")
    slo_cfg = cfg.get("slo") or {}
    slo = Slo(
        *(params.number(slo_cfg, k, gt=0, prefix="slo") for k in ("ttft_s", "tpot_s", "e2e_s"))
    )
    cost = CostConfig.from_config(cfg.get("cost"))  # validated before the run; absent: defaults
    frontend_token_s = params.number(
        cfg.get("frontend") or {}, "token_s", default=0.0, ge=0, prefix="frontend"
    )

    def make_scheduler(model_id: int) -> Scheduler:
        plan = placement.deployments[model_id].memory
        kv = KVCache(plan.num_blocks, plan.block_size, kv_cfg["watermark"])
        return build(
            cfg["scheduler"],
            "scheduler",
            kv=kv,
            max_model_len=placement.deployments[model_id].model.max_context_tokens,
        )

    make_scheduler(0)  # validate the scheduler options before anything runs
    replica_engines = [
        [Engine(m, make_scheduler(m), step_times[m]) for m in models]
        for models in placement.replica_models
    ]
    on_done, bar = _progress_callback(cfg, workload.num_requests)
    cluster = Cluster(
        workload,
        replica_engines,
        router,
        model_ids=placement.model_ids(workload.num_requests, seed),
        fast_forward_decode=bool(sim_cfg.get("fast_forward_decode", True)),
        horizon_s=horizon_s,
        on_request_done=on_done,
        frontend_token_s=frontend_token_s,
    )
    try:
        cluster.run()
    finally:
        if bar is not None:
            bar.close()
    requests = requests_table(cluster.requests)
    steps = steps_table(
        [
            [(engine.model_id, engine.steps) for engine in replica.engines]
            for replica in cluster.replicas
        ]
    )
    summary = summarize(
        requests,
        steps,
        slo=slo,
        num_gpus=num_replicas * deployment.tp,
        num_replicas=num_replicas,
        kv_capacity_tokens=[d.memory.kv_capacity_tokens for d in placement.deployments],
        kv_num_blocks=[d.memory.num_blocks for d in placement.deployments],
        gpu=deployment.gpu,
        cost=cost,
    )
    return RunResult(requests, steps, summary, cfg)
