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
from sim.config.build import build
from sim.config.compose import to_dict
from sim.config.schema import validate_run
from sim.engine.kv_cache import KVCache
from sim.engine.request import Request
from sim.engine.scheduler.base import Scheduler
from sim.fleet.cluster import Cluster
from sim.fleet.replica import Engine
from sim.output.results import requests_table, steps_table, summarize
from sim.output.run_files import RunResult
from sim.workload.source import build_workload

if TYPE_CHECKING:  # tqdm is imported only when a progress bar is shown
    from tqdm import tqdm


def _progress_callback(
    setting: bool | str, total: int
) -> tuple[Callable[[Request], None] | None, tqdm[Any] | None]:
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
    """Simulate the run ``cfg`` describes (a composed config: checked here first, so a bad
    value stops the run before anything is built)."""
    cfg = to_dict(cfg)
    run = validate_run(cfg)
    num_replicas = run.fleet.replicas
    placement = build_placement(run, run.placement, num_replicas)
    deployment = placement.deployments[0]
    step_times = [build(cfg["step_time"], "step_time", deployment=d) for d in placement.deployments]
    router = build(cfg["router"], "router", rng=rng.stream(run.seed, "router"))
    workload = build_workload(run.workload, run.seed)

    def make_scheduler(model_id: int) -> Scheduler:
        plan = placement.deployments[model_id].memory
        kv = KVCache(plan.num_blocks, plan.block_size, run.kv.watermark)
        return build(
            cfg["scheduler"],
            "scheduler",
            kv=kv,
            max_model_len=placement.deployments[model_id].model.max_context_tokens,
        )

    make_scheduler(0)  # check the scheduler's options before anything runs
    replica_engines = [
        [Engine(m, make_scheduler(m), step_times[m]) for m in models]
        for models in placement.replica_models
    ]
    on_done, bar = _progress_callback(run.sim.progress, workload.num_requests)
    cluster = Cluster(
        workload,
        replica_engines,
        router,
        model_ids=placement.model_ids(workload.num_requests, run.seed),
        fast_forward_decode=run.sim.fast_forward_decode,
        horizon_s=run.sim.horizon_s,
        on_request_done=on_done,
        frontend_token_s=run.frontend.token_s,
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
        slo=run.slo,
        num_gpus=num_replicas * deployment.tp,
        num_replicas=num_replicas,
        kv_capacity_tokens=[d.memory.kv_capacity_tokens for d in placement.deployments],
        kv_num_blocks=[d.memory.num_blocks for d in placement.deployments],
        gpu=deployment.gpu,
        cost=run.cost,
    )
    return RunResult(requests, steps, summary, cfg)
