"""One simulation, from a config to its results: the composition root.

``simulate(cfg)`` builds everything the run needs from the config alone (no global state, so
many runs can share a process) and returns the tables, the summary and the resolved config
(``sim.output.run_files.write_run`` writes them). The same config and seed give byte-identical
files.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from sim import rng
from sim.catalog.placement import Placement, build_placement
from sim.config.autoscale import BASE_ENGINE, check_autoscale
from sim.config.build import build, target_class
from sim.config.compose import to_dict, with_settings
from sim.config.schema import RunConfig, validate_run
from sim.config.workload_schema import SessionsWorkload, TraceWorkload
from sim.engine.kv_cache import KVCache
from sim.engine.prefix_cache import PrefixCachingKVCache
from sim.engine.request import Request
from sim.engine.scheduler.base import Scheduler
from sim.engine.step_time.base import HostLoadStepTime, ScaledStepTime, StepTimeModel
from sim.errors import ConfigError, require
from sim.fleet.admission import check_servable
from sim.fleet.autoscaler import Autoscaler, Variant
from sim.fleet.cluster import Cluster
from sim.fleet.replica import Engine
from sim.output.cost import gpu_price
from sim.output.request_log import RequestLog
from sim.output.results import (
    prefix_cache_summary,
    requests_schema,
    summarize,
)
from sim.output.run_files import (
    CONFIG_FILE,
    REQUESTS_FILE,
    SCALING_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    RunFolder,
    RunResult,
    config_text,
    to_json,
)
from sim.output.scaling import ScalingLog
from sim.output.step_log import StepLog
from sim.output.tables import MemorySink, ParquetSink, TableSink
from sim.workload.prefixes import with_hash_ids
from sim.workload.source import build_workload

STEPS_SPILL = "steps.spill"  # the step rows waiting to be written replica by replica

if TYPE_CHECKING:  # tqdm is imported only when a progress bar is shown
    from tqdm import tqdm


def _host_tiers(run: RunConfig, placement: Placement) -> list[tuple[int, float]] | None:
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
        self.host_tiers = _host_tiers(run, placement)
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
        return build(
            self.cfg["scheduler"],
            "scheduler",
            kv=kv,
            max_model_len=deployment.model.max_context_tokens,
            gpu=deployment.gpu,  # for engines whose defaults depend on it
        )

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


@dataclasses.dataclass(frozen=True)
class Autoscaling:
    """An autoscaled run's engine configurations, and the fleet at time 0."""

    variants: dict[str, Variant]
    initial: str
    initial_replicas: int


def _autoscaling(cfg: dict[str, Any], run: RunConfig, setup: EngineSetup) -> Autoscaling | None:
    """The engine configurations of ``autoscale`` (None when the fleet is fixed)."""
    auto = run.autoscale
    if not auto.enabled:
        return None
    require(
        setup.placement.mode == "single",
        "autoscale.policy",
        auto.policy,
        "scales a fleet of one model: use placement=single",
    )
    variants = {BASE_ENGINE: setup.variant(BASE_ENGINE)}
    for name, settings in auto.engines.items():
        variant_cfg = with_settings(cfg, settings, f"autoscale.engines.{name}")
        variant_run = validate_run(variant_cfg)
        placement = build_placement(variant_run, variant_run.placement, 1)
        variants[name] = EngineSetup(variant_cfg, variant_run, placement).variant(name)
    if auto.schedule is not None:
        return Autoscaling(variants, auto.schedule[0].engine, auto.schedule[0].replicas)
    require(
        auto.min_replicas <= run.fleet.replicas <= auto.max_replicas,
        "fleet.replicas",
        run.fleet.replicas,
        f"is the autoscaled fleet at time 0: keep it within autoscale.min_replicas "
        f"({auto.min_replicas}) and autoscale.max_replicas ({auto.max_replicas})",
    )
    return Autoscaling(variants, BASE_ENGINE, run.fleet.replicas)


def _progress_callback(
    setting: bool | str, total: int
) -> tuple[Callable[[Request], None] | None, tqdm[Any] | None]:
    """A progress bar on stderr: requests ended of ``total``, the simulated time reached, and
    tqdm's rate and ETA (requests end at a steady pace once a run is under way)."""
    if setting is False or (setting == "auto" and not sys.stderr.isatty()):
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="req", desc="simulating", mininterval=0.5, leave=False)
    every = max(1, total // 200)  # ~200 updates: cheap, yet smooth
    count = 0

    def on_done(request: Request) -> None:
        nonlocal count
        count += 1
        if count % every == 0:
            now = request.completion_time_s or request.arrival_time_s
            bar.set_postfix_str(f"simulated {_clock(now)}", refresh=False)
            bar.update(every)

    return on_done, bar


def _clock(seconds: float) -> str:
    """Simulated time as a reader wants it: ``42 s``, ``17.5 min``, ``3.2 h``, ``12.4 days``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def simulate(
    cfg: DictConfig | Mapping[str, Any], output_dir: str | Path | None = None
) -> RunResult:
    """Simulate the run ``cfg`` describes (a composed config: checked here first, so a bad
    value stops the run before anything is built).

    With ``output_dir``, the tables stream into that folder as the run goes and the run's four
    files are there when this returns (the result then holds no tables): what a long run
    needs. Without, the tables come back in memory.
    """
    cfg = to_dict(cfg)
    run = validate_run(cfg)
    check_autoscale(run.autoscale)
    num_replicas = run.fleet.replicas
    placement = build_placement(run, run.placement, num_replicas)
    deployment = placement.deployments[0]
    if cfg["model"].get("config_path") is not None:
        # what the config.json gave goes into the run's config.yaml and its summary table
        model = deployment.model
        cfg["model"] = {
            key: getattr(model, key) if value is None and hasattr(model, key) else value
            for key, value in cfg["model"].items()
        }
    router = build(cfg["router"], "router", rng=rng.stream(run.seed, "router"))
    require(
        run.kv.prefix_caching or not getattr(router, "needs_prefix_cache", False),
        "router",
        cfg["router"]["_target_"].rsplit(".", 1)[-1],
        "routes on the prefix cache: set kv.prefix_caching=true",
    )
    spec = run.workload
    if isinstance(spec, SessionsWorkload):
        # a conversation never grows past what the models can hold (sim.workload.sessions)
        longest = min(d.model.max_context_tokens for d in placement.deployments)
        if spec.max_context_tokens > longest:
            spec = spec.model_copy(update={"max_context_tokens": longest})
    workload = build_workload(spec, run.seed)
    if run.sim.arrival_rate_scale != 1.0 and workload.sessions is not None:
        # a what-if rate: the same conversations, each starting that much sooner
        workload = dataclasses.replace(
            workload,
            sessions=dataclasses.replace(
                workload.sessions,
                start_s=workload.sessions.start_s / run.sim.arrival_rate_scale,
            ),
        )
    elif run.sim.arrival_rate_scale != 1.0:
        if workload.arrival_time_s is None:
            raise ConfigError(
                "sim.arrival_rate_scale",
                run.sim.arrival_rate_scale,
                "a closed loop has no arrival rate to scale (its clients send as requests "
                "end): change workload.concurrency instead",
            )
        # a what-if rate: the same requests, each arriving that much sooner
        workload = dataclasses.replace(
            workload, arrival_time_s=workload.arrival_time_s / run.sim.arrival_rate_scale
        )

    setup = EngineSetup(cfg, run, placement)
    if run.kv.prefix_caching:
        if isinstance(run.workload, TraceWorkload):
            workload = with_hash_ids(workload, run.workload.hash_block_tokens)
        require(
            workload.hash_ids is not None,
            "kv.prefix_caching",
            True,
            "this workload says nothing of what its prompts share: replay a Parquet trace "
            "with a hash_ids column (workload=mooncake_conv), or conversations "
            "(workload=sessions)",
        )
    # one scheduler per model, built first: it checks the options, and finds the requests
    # the fleet can never serve before anything runs
    if workload.sessions is None:
        model_ids = placement.model_ids(workload.num_requests, run.seed)
    else:  # a conversation stays with one model
        model_ids = workload.sessions.per_row(
            placement.model_ids(workload.sessions.num_sessions, run.seed)
        )
    schedulers = [setup.scheduler(m) for m in range(len(placement.deployments))]
    pattern = getattr(spec, "pattern", None)
    length_field = (
        ("workload.pattern", pattern)
        if pattern is not None
        else ("workload.system_prompt_tokens", spec.system_prompt_tokens)
        if isinstance(spec, SessionsWorkload)  # (a first turn is always kept, whatever its length)
        else ("workload.prompt_tokens", getattr(spec, "prompt_tokens", None))
    )
    check_servable(workload, model_ids, schedulers, length_field)
    autoscaling = _autoscaling(cfg, run, setup)
    if autoscaling is not None:
        # every engine configuration must serve every request, as the run's own must
        for name, variant in autoscaling.variants.items():
            assert variant.scheduler is not None  # (EngineSetup.variant gives it)
            try:
                check_servable(workload, model_ids, [variant.scheduler()], length_field)
            except ConfigError as err:
                raise ConfigError(
                    f"autoscale.engines.{name}", "{...}", f"cannot serve the workload: {err}"
                ) from None
    if autoscaling is None:
        replica_engines = [[setup.engine(m) for m in models] for models in placement.replica_models]
    else:
        initial = autoscaling.variants[autoscaling.initial]
        replica_engines = [initial.make_engines() for _ in range(autoscaling.initial_replicas)]
    folder = RunFolder(output_dir) if output_dir is not None else None
    step_log = StepLog(
        run.output.steps,
        [d.memory.num_blocks for d in placement.deployments],
        None if folder is None else folder.temporary(STEPS_SPILL),
        run.output.step_bucket_s,
    )
    requests_sink: TableSink
    steps_sink: TableSink
    requests_columns = requests_schema(
        run.kv.prefix_caching, workload.sessions is not None, setup.host_tiers is not None
    )
    if folder is None:
        requests_sink, steps_sink = MemorySink(requests_columns), MemorySink(step_log.schema)
    else:
        requests_sink = ParquetSink(requests_columns, folder.temporary(REQUESTS_FILE))
        steps_sink = ParquetSink(step_log.schema, folder.temporary(STEPS_FILE))
    try:
        on_done, bar = _progress_callback(run.sim.progress, workload.num_requests)
        cluster = Cluster(
            workload,
            replica_engines,
            router,
            RequestLog(requests_sink),
            step_log,
            model_ids=model_ids,
            # KV use read mid-stretch would be the stretch's start: step one by one for it
            fast_forward_decode=run.sim.fast_forward_decode and run.autoscale.policy != "kv",
            horizon_s=run.sim.horizon_s,
            on_request_done=on_done,
            frontend_token_s=run.frontend.token_s,
        )
        scaling_log = None
        if autoscaling is not None:
            scaling_log = ScalingLog()
            Autoscaler(
                cluster,
                run.autoscale,
                autoscaling.variants,
                autoscaling.variants[autoscaling.initial],
                scaling_log,
            )
        try:
            cluster.run()
        finally:
            if bar is not None:
                bar.close()
        totals = step_log.finish(len(cluster.replicas), steps_sink)
        summary = summarize(
            requests_sink.column,
            totals,
            slo=run.slo,
            num_gpus=num_replicas * deployment.num_gpus,  # (an autoscaled fleet: its peak)
            num_replicas=num_replicas,
            kv_capacity_tokens=[d.memory.kv_capacity_tokens for d in placement.deployments],
            gpu=deployment.gpu,
            cost=run.cost,
            warmup_requests=workload.warmup_requests,
            # a closed loop or a capped client sends only as the fleet lets it
            paced_by_client=workload.concurrency is not None,
            scaling=None if scaling_log is None else (scaling_log, run.autoscale),
        )
        if autoscaling is not None:  # what each engine configuration was
            summary["autoscale"]["engines"] = {
                name: variant.description for name, variant in autoscaling.variants.items()
            }
        if workload.notes:  # how the workload was built, where a reader must know (a day
            # stretched from an hour-long trace)
            summary["workload_notes"] = list(workload.notes)
        if run.kv.prefix_caching:
            summary["prefix_cache"] = prefix_cache_summary(
                [e.scheduler.kv for replica in cluster.replicas for e in replica.engines]
            )
            # flat, for checkers that read only top-level keys (the prompt tokens no step
            # computed: steps.parquet counts computed tokens only)
            summary["prefix_cache_hit_tokens"] = summary["prefix_cache"]["hit_tokens"]
        # (an autoscaled fleet's other engines after the run's own: a reason both have is
        # said in the run's own terms)
        every = [*schedulers, *(e.scheduler for r in cluster.replicas for e in r.engines)]
        texts = {
            reason: next(s.refusal_text(reason) for s in every if s.refusal_text(reason))
            for reason in summary["rejected_by_reason"]
        }
        scaling = None if scaling_log is None else scaling_log.table()
        if folder is None:
            assert isinstance(requests_sink, MemorySink) and isinstance(steps_sink, MemorySink)
            return RunResult(
                requests_sink.table, steps_sink.table, summary, cfg, texts, scaling=scaling
            )
        # summary.json last: its presence marks a finished run
        folder.write(CONFIG_FILE, config_text(cfg))
        folder.commit(REQUESTS_FILE)
        folder.commit(STEPS_FILE)
        if scaling is not None:
            import pyarrow.parquet as pq

            pq.write_table(scaling, folder.temporary(SCALING_FILE))
            folder.commit(SCALING_FILE)
        # the spill goes before summary.json marks the run finished: a kill between the two
        # would otherwise leave it in a folder that a resumed sweep skips as done
        folder.discard()
        folder.write(SUMMARY_FILE, to_json(summary))
        return RunResult(None, None, summary, cfg, texts)
    finally:
        for sink in (requests_sink, steps_sink):
            if isinstance(sink, ParquetSink):
                sink.abandon()
        if folder is not None:
            folder.discard()
