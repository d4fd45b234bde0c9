"""One simulation, from a config to its results: the composition root.

``simulate(cfg)`` builds everything the run needs from the config alone (no global state, so
many runs can share a process) and returns the tables, the summary and the resolved config
(``sim.output.run_files.write_run`` writes them). The same config and seed give byte-identical
files.

``simulate`` is a straight pipeline: the config checked; the fleet's shape built from it
(``sim.deploy.shapes``: fixed, autoscaled, disaggregated; every difference between them is the
shape's, ``sim.deploy.shape``); the router and the workload; the requests the fleet can never
serve refused; the cluster run with what the shape connects to it; the summary (the shape's
price and blocks, then what any run may add) and the files written.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sim import rng
from sim.catalog.model import ModelSpec
from sim.catalog.placement import Placement
from sim.config.autoscale import check_autoscale
from sim.config.build import build
from sim.config.compose import to_dict
from sim.config.schema import RunConfig, validate_run
from sim.config.workload_schema import SessionsWorkload, TraceWorkload, WorkloadConfig
from sim.deploy.shape import FleetShape
from sim.deploy.shapes import SHAPES, fleet_shape
from sim.deploy.speculation import spec_decode_summary
from sim.engine.request import Request
from sim.engine.scheduler.base import Scheduler
from sim.errors import ConfigError, require
from sim.fleet.cluster import Cluster
from sim.fleet.router import Router
from sim.output.model_error import model_error_block
from sim.output.request_log import RequestLog
from sim.output.results import prefix_cache_summary, summarize
from sim.output.run_files import (
    CONFIG_FILE,
    REQUESTS_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    RunFolder,
    RunResult,
    config_text,
    to_json,
)
from sim.output.step_log import StepLog, StepTotals
from sim.output.tables import MemorySink, ParquetSink, TableSink
from sim.workload.prefixes import with_hash_ids
from sim.workload.source import Workload, build_workload

STEPS_SPILL = "steps.spill"  # the step rows waiting to be written replica by replica

if TYPE_CHECKING:  # tqdm is imported only when a progress bar is shown
    from omegaconf import DictConfig
    from tqdm import tqdm


def _progress_callback(
    setting: bool | str, total: int
) -> tuple[Callable[[Request], None] | None, tqdm[Any] | None]:
    """A progress bar on stderr: requests ended of ``total``, the simulated time reached, and
    tqdm's rate and ETA (requests end at a steady pace once a run is under way)."""
    if setting is False or (setting == "auto" and not sys.stderr.isatty()):
        return None, None
    from tqdm import tqdm  # (only with a bar shown: a run in a log or a sweep never imports it)

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
    cfg: DictConfig | Mapping[str, Any],
    output_dir: str | Path | None = None,
    shapes: Sequence[type[FleetShape]] = SHAPES,
) -> RunResult:
    """Simulate the run ``cfg`` describes (a composed config: checked here first, so a bad
    value stops the run before anything is built).

    With ``output_dir``, the tables stream into that folder as the run goes and the run's
    files are there when this returns (the result then holds no tables): what a long run
    needs. Without, the tables come back in memory. ``shapes``: the fleet shapes the config
    may ask for (``sim.deploy.shapes``).
    """
    cfg = to_dict(cfg)
    run = validate_run(cfg)
    check_autoscale(run.autoscale)  # (its rules across keys hold whether it is on or not)
    fleet = fleet_shape(cfg, run, shapes)
    _resolve_model(cfg, fleet.placement.deployments[0].model)
    router = _router(cfg, run)
    workload = _workload(run, fleet.placement)
    model_ids = _model_ids(workload, fleet.placement, run.seed)
    # which requests the fleet can never serve, found before anything runs
    schedulers = fleet.check_servable(workload, model_ids, _length_field(run.workload))
    replica_engines = fleet.replica_engines()
    folder = RunFolder(output_dir) if output_dir is not None else None
    step_log = StepLog(
        run.output.steps,
        fleet.step_log_blocks(),
        None if folder is None else folder.temporary(STEPS_SPILL),
        run.output.step_bucket_s,
        replica_pools=fleet.replica_pools(),
    )
    sinks = _Sinks(fleet.requests_columns(workload.sessions is not None), step_log.schema, folder)
    try:
        on_done, bar = _progress_callback(run.sim.progress, workload.num_requests)
        cluster = Cluster(
            workload,
            replica_engines,
            router,
            RequestLog(sinks.requests),
            step_log,
            model_ids=model_ids,
            horizon_s=run.sim.horizon_s,
            on_request_done=on_done,
            frontend_token_s=run.frontend.token_s,
            **fleet.cluster_options(),
        )
        fleet.connect(cluster, run.seed)
        try:
            cluster.run()
        finally:
            if bar is not None:
                bar.close()
        totals = step_log.finish(len(cluster.replicas), sinks.steps)
        summary = _summary(run, fleet, workload, cluster, step_log, totals, sinks.requests)
        if run.output.model_error:  # the step-time model's measured error for this class
            summary["model_error"] = model_error_block(cfg)
        texts = _refusal_texts(summary, [*schedulers, *_engines_schedulers(cluster)])
        return sinks.result(summary, cfg, texts, fleet.tables())
    finally:
        sinks.abandon()


def _engines_schedulers(cluster: Cluster) -> list[Scheduler]:
    return [engine.scheduler for replica in cluster.replicas for engine in replica.engines]


def _refusal_texts(summary: dict[str, Any], schedulers: list[Scheduler]) -> dict[str, str]:
    """What each rejection reason of the summary means for this fleet, from the first of
    ``schedulers`` that says (the fleet's own first: a reason that engines added during the
    run share is said in the run's own terms)."""
    return {
        reason: next(s.refusal_text(reason) for s in schedulers if s.refusal_text(reason))
        for reason in summary["rejected_by_reason"]
    }


def _resolve_model(cfg: dict[str, Any], model: ModelSpec) -> None:
    """What a model's config.json gave, into the run's config.yaml and its summary table."""
    if cfg["model"].get("config_path") is not None:
        cfg["model"] = {
            key: getattr(model, key) if value is None and hasattr(model, key) else value
            for key, value in cfg["model"].items()
        }


def _router(cfg: dict[str, Any], run: RunConfig) -> Router:
    router = build(cfg["router"], "router", rng=rng.stream(run.seed, "router"))
    require(
        run.kv.prefix_caching or not getattr(router, "needs_prefix_cache", False),
        "router",
        cfg["router"]["_target_"].rsplit(".", 1)[-1],
        "routes on the prefix cache: set kv.prefix_caching=true",
    )
    return router


def _workload(run: RunConfig, placement: Placement) -> Workload:
    """The run's workload, at its what-if rate, with the prompts' shared blocks when a prefix
    cache needs them."""
    spec = run.workload
    if isinstance(spec, SessionsWorkload):
        # a conversation never grows past what the models can hold (sim.workload.sessions)
        longest = min(d.model.max_context_tokens for d in placement.deployments)
        if spec.max_context_tokens > longest:
            spec = spec.model_copy(update={"max_context_tokens": longest})
    workload = build_workload(spec, run.seed)
    scale = run.sim.arrival_rate_scale
    if scale != 1.0 and workload.sessions is not None:
        # a what-if rate: the same conversations, each starting that much sooner
        workload = dataclasses.replace(
            workload,
            sessions=dataclasses.replace(
                workload.sessions, start_s=workload.sessions.start_s / scale
            ),
        )
    elif scale != 1.0:
        if workload.arrival_time_s is None:
            raise ConfigError(
                "sim.arrival_rate_scale",
                scale,
                "a closed loop has no arrival rate to scale (its clients send as requests "
                "end): change workload.concurrency instead",
            )
        # a what-if rate: the same requests, each arriving that much sooner
        workload = dataclasses.replace(workload, arrival_time_s=workload.arrival_time_s / scale)
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
    return workload


def _model_ids(workload: Workload, placement: Placement, seed: int) -> np.ndarray:
    """The model each request asks for (a conversation stays with one model)."""
    if workload.sessions is None:
        return placement.model_ids(workload.num_requests, seed)
    return workload.sessions.per_row(placement.model_ids(workload.sessions.num_sessions, seed))


def _length_field(spec: WorkloadConfig) -> tuple[str, Any]:
    """The workload key a request too long to serve is blamed on."""
    pattern = getattr(spec, "pattern", None)
    if pattern is not None:
        return ("workload.pattern", pattern)
    if isinstance(spec, SessionsWorkload):  # (a first turn is always kept, whatever its length)
        return ("workload.system_prompt_tokens", spec.system_prompt_tokens)
    return ("workload.prompt_tokens", getattr(spec, "prompt_tokens", None))


def _summary(
    run: RunConfig,
    fleet: FleetShape,
    workload: Workload,
    cluster: Cluster,
    step_log: StepLog,
    totals: StepTotals,
    requests: TableSink,
) -> dict[str, Any]:
    """``summary.json``'s object: the fleet's figures as it is priced, its own blocks, then
    the workload's notes, speculative decoding's and the prefix cache's blocks."""
    priced = fleet.priced()
    summary = summarize(
        requests.column,
        totals,
        slo=run.slo,
        num_gpus=priced.num_gpus,
        num_replicas=priced.num_replicas,
        kv_capacity_tokens=priced.kv_capacity_tokens,
        gpu=priced.gpu,
        cost=run.cost,
        warmup_requests=workload.warmup_requests,
        # a closed loop or a capped client sends only as the fleet lets it
        paced_by_client=workload.concurrency is not None,
        scaling=priced.scaling,
        billed=priced.billed,
        per_tier=priced.per_tier,
        tiers_source=priced.tiers_source,
    )
    fleet.add_to_summary(summary, step_log, requests.column)
    if workload.notes:  # how the workload was built, where a reader must know (a day
        # stretched from an hour-long trace)
        summary["workload_notes"] = list(workload.notes)
    summary.update(spec_decode_summary(run.spec_decode, cluster.replicas))  # (if on)
    if run.kv.prefix_caching:
        summary["prefix_cache"] = prefix_cache_summary(
            [scheduler.kv for scheduler in _engines_schedulers(cluster)]
        )
        # flat, for checkers that read only top-level keys (the prompt tokens no step
        # computed: steps.parquet counts computed tokens only)
        summary["prefix_cache_hit_tokens"] = summary["prefix_cache"]["hit_tokens"]
    return summary


class _Sinks:
    """Where the two tables go as the run goes: memory, or ``folder``'s temporaries, which
    become the run's files once it ends (``result``) and are removed if it does not."""

    def __init__(
        self, requests_columns: pa.Schema, steps_columns: pa.Schema, folder: RunFolder | None
    ) -> None:
        self.folder = folder
        self.requests: TableSink
        self.steps: TableSink
        if folder is None:
            self.requests, self.steps = MemorySink(requests_columns), MemorySink(steps_columns)
        else:
            self.requests = ParquetSink(requests_columns, folder.temporary(REQUESTS_FILE))
            self.steps = ParquetSink(steps_columns, folder.temporary(STEPS_FILE))

    def result(
        self,
        summary: dict[str, Any],
        cfg: dict[str, Any],
        texts: dict[str, str],
        tables: dict[str, pa.Table],
    ) -> RunResult:
        """The run's result; in a folder, its files written (``summary.json`` last: its
        presence marks a finished run)."""
        folder = self.folder
        if folder is None:
            assert isinstance(self.requests, MemorySink) and isinstance(self.steps, MemorySink)
            return RunResult(self.requests.table, self.steps.table, summary, cfg, texts, tables)
        folder.write(CONFIG_FILE, config_text(cfg))
        folder.commit(REQUESTS_FILE)
        folder.commit(STEPS_FILE)
        if tables:  # (Parquet's writer, not imported before a run needs it: start-up time)
            import pyarrow.parquet as pq

        for name, table in tables.items():
            pq.write_table(table, folder.temporary(name))
            folder.commit(name)
        # the spill goes before summary.json marks the run finished: a kill between the two
        # would otherwise leave it in a folder that a resumed sweep skips as done
        folder.discard()
        folder.write(SUMMARY_FILE, to_json(summary))
        return RunResult(None, None, summary, cfg, texts)

    def abandon(self) -> None:
        """Remove what a run that did not finish left (nothing after ``result``)."""
        for sink in (self.requests, self.steps):
            if isinstance(sink, ParquetSink):
                sink.abandon()
        if self.folder is not None:
            self.folder.close()
