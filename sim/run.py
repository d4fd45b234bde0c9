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

from sim import rng
from sim.catalog.placement import build_placement
from sim.config.autoscale import BASE_ENGINE, check_autoscale
from sim.config.build import build
from sim.config.compose import to_dict, with_settings
from sim.config.schema import DisaggregatedPlacement, RunConfig, validate_run
from sim.config.workload_schema import SessionsWorkload, TraceWorkload
from sim.deploy.disaggregated import DisaggregatedFleet, disaggregation_summary
from sim.deploy.engines import EngineSetup
from sim.engine.request import Request
from sim.errors import ConfigError, require
from sim.fleet.admission import check_servable
from sim.fleet.autoscaler import Autoscaler, Variant
from sim.fleet.cluster import Cluster
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
from sim.spec_decode import spec_decode_summary
from sim.workload.prefixes import with_hash_ids
from sim.workload.source import build_workload

STEPS_SPILL = "steps.spill"  # the step rows waiting to be written replica by replica

if TYPE_CHECKING:  # tqdm is imported only when a progress bar is shown
    from omegaconf import DictConfig
    from tqdm import tqdm


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
    # a disaggregated fleet: two pools, each its own deployment (sim.fleet.disaggregation)
    pooled = (
        DisaggregatedFleet(cfg, run) if isinstance(run.placement, DisaggregatedPlacement) else None
    )
    if pooled is None:
        placement = build_placement(run, run.placement, num_replicas)
    else:
        placement = pooled.placement
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

    setup = EngineSetup(cfg, run, placement) if pooled is None else pooled.setups[0]
    if pooled is None:  # (a speculative drafter's memory is out of the KV: sim.spec_decode)
        placement = setup.placement
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
    if pooled is None:
        schedulers = [setup.scheduler(m) for m in range(len(placement.deployments))]
    else:  # (it asks the decode pool too)
        schedulers = [pooled.admission]
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
    if pooled is not None:
        replica_engines = pooled.replica_engines()
    elif autoscaling is None:
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
        replica_pools=None if pooled is None else pooled.replica_pools,
    )
    requests_sink: TableSink
    steps_sink: TableSink
    requests_columns = requests_schema(
        run.kv.prefix_caching,
        workload.sessions is not None,
        setup.host_tiers is not None,
        disaggregated=pooled is not None,
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
            routed_replicas=None if pooled is None else pooled.prefill.replicas,
        )
        if pooled is not None:
            pooled.connect(cluster.env, cluster.replicas, run.seed)
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
            # (an autoscaled fleet: its peak)
            num_gpus=num_replicas * deployment.num_gpus if pooled is None else pooled.num_gpus,
            num_replicas=num_replicas,
            kv_capacity_tokens=[d.memory.kv_capacity_tokens for d in placement.deployments]
            if pooled is None
            else [pooled.setups[1].kv_capacity_tokens],
            gpu=deployment.gpu,
            cost=run.cost,
            warmup_requests=workload.warmup_requests,
            # a closed loop or a capped client sends only as the fleet lets it
            paced_by_client=workload.concurrency is not None,
            scaling=None if scaling_log is None else (scaling_log, run.autoscale),
            billed=None if pooled is None else pooled.billed(run.cost),
        )
        if pooled is not None:
            summary["disaggregation"] = pools = disaggregation_summary(
                pooled, step_log.pool_totals, requests_sink.column, summary["duration_s"], run.cost
            )
            if pools["prefill"]["usd_per_gpu_hour"] != pools["decode"]["usd_per_gpu_hour"]:
                # the fleet's $/GPU-hour is then a mean over GPUs of two prices
                summary["cost"]["price_source"] = (
                    "each pool's GPUs at their own price (disaggregation.*.usd_per_gpu_hour)"
                )
        if autoscaling is not None:  # what each engine configuration was
            summary["autoscale"]["engines"] = {
                name: variant.description for name, variant in autoscaling.variants.items()
            }
        if workload.notes:  # how the workload was built, where a reader must know (a day
            # stretched from an hour-long trace)
            summary["workload_notes"] = list(workload.notes)
        summary.update(spec_decode_summary(run.spec_decode, cluster.replicas))  # (if on)
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
            folder.close()
