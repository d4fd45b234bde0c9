"""reference/outputs.md's tables, generated from the code's Arrow schemas at build.

The columns of ``requests.parquet``, ``steps.parquet`` (whole and bucketed) and
``scaling.parquet`` are read from their schemas in ``sim.output`` (names, Arrow types, and which
setting adds the optional ones); the meanings are written here, once per column. A column the
code has and this file does not explain stops the build (``UndocumentedColumn``), so a new
column cannot ship without its line. The summary's keys are explained in ``SUMMARY``, one line
per key (``<stat>``, ``<pool>``, ``<engine>`` and ``<reason>`` stand for a family);
tests/test_docs.py runs small simulations of each kind and checks that every key they write is
here and that every key here is written by one of them.

An MkDocs hook: ``on_page_markdown`` replaces ``MARKER`` in a page with ``render()``.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- generated: output reference -->"

COLUMNS = {
    # requests.parquet
    "request_id": "the request's number, 0 to n - 1 in arrival order (each exactly once)",
    "replica_id": "the replica that served it (the decode replica, disaggregated); null: none",
    "arrival_time_s": "when it arrived, seconds from the start of the run",
    "prompt_tokens": "its prompt's length",
    "output_tokens": "the tokens it asks to generate",
    "status": "`completed`, `rejected` (the engine can never run it), `unfinished` (still "
    "queued or running when the run ended) or, with faults, `failed` (lost with its replica)",
    "first_token_time_s": "when its first output token came out; null: none did",
    "completion_time_s": "when its last output token came out; null: not completed",
    "ttft_s": "time to first token: `first_token_time_s - arrival_time_s`",
    "tpot_s": "time per output token (vLLM's): `(e2e_s - ttft_s) / (output_tokens - 1)`; null "
    "for a one-token output",
    "e2e_s": "end to end: `completion_time_s - arrival_time_s`",
    "num_preemptions": "how often the scheduler took its KV blocks back and requeued it",
    "itl_s": "mean inter-token latency (LLMPerf's): `e2e_s / output_tokens`",
    "queueing_delay_s": "arrival to first scheduled",
    "model_id": "which model it asked for (0; 1: `placement.second_model`)",
    "reject_reason": "why it was rejected: `context_length`, `kv_capacity` or `prefill_budget`; "
    "null otherwise",
    "cached_prompt_tokens": "prompt tokens found in the prefix cache at its first admission",
    "host_cached_prompt_tokens": "of those, the tokens copied back from host memory",
    "session_id": "the conversation it is a turn of",
    "turn": "which turn of the conversation it is",
    "prefill_replica_id": "the prefill replica that computed its prompt; null: not that far",
    "decode_replica_id": "the decode replica that generated the rest; null: not that far",
    "transfer_start_s": "when its KV transfer to the decode replica began",
    "transfer_end_s": "when that transfer ended",
    "retries": "times it was sent again after the replica it was on went (a failure, a "
    "maintenance hand-over, a spot reclaim)",
    "retry_lost_s": "seconds from its arrival to its last loss: the time thrown away with those "
    "replicas (0: never retried)",
    "fail_reason": "why it failed: `replica_failure`, `spot_reclaim`, or `no_replica` (no "
    "replica of its model was up); null otherwise",
    # steps.parquet
    "start_time_s": "when the step began (bucketed: the bucket's start)",
    "duration_s": "how long it took (bucketed: the busy seconds of the steps started in the "
    "bucket)",
    "num_prefill_tokens": "prompt tokens computed in it (bucketed: summed)",
    "num_decode_tokens": "decoding sequences' tokens in it (bucketed: summed)",
    "num_seqs": "sequences in the batch (bucketed: the peak)",
    "kv_blocks_used": "KV blocks in use after it (bucketed: the peak)",
    "num_steps": "steps in the bucket",
    "pool": "`prefill` or `decode`: the replica's pool",
    # a column of another file that means something else there: "FILE:column"
    "steps:replica_id": "the replica that ran the step",
    "steps:model_id": "the model the step ran (0; 1: `placement.second_model`)",
    "scaling:replica_id": "the replica that became ready, began to drain, was released or was "
    "lost (`failed`); null otherwise",
    # scaling.parquet
    "time_s": "when the fleet changed",
    "replicas_ready": "replicas serving from then on",
    "replicas_provisioning": "replicas asked for and loading (billed, not serving)",
    "replicas_draining": "replicas taking no new requests, finishing their own (billed)",
    "gpus_billed": "GPUs paid for from then on",
    "usd_per_hour": "what they cost per hour",
    "event": "`start`, `scale_up`, `ready`, `drain`, `released`, `cancelled` or, with faults, "
    "`failed` (a replica lost to a failure or a spot reclaim left the fleet; its replacement is "
    "the `scale_up` that follows)",
    # faults.parquet
    "faults:replica_id": "the replica that failed, drained or was reclaimed",
    "kind": "`failure`, `maintenance` or `spot`",
    "start_s": "when it began: the failure, the drain's start, the reclaim notice",
    "down_s": "when the replica went down (a drain: once empty or at its deadline; a reclaim: "
    "at the notice's end); null: not within the run",
    "up_s": "when it was back (repaired, maintained, replaced; on an autoscaled fleet, when the "
    "autoscaler's replacement was ready); null: not within the run",
    "requests_retried": "requests it held when it went that were sent to another replica",
    "requests_failed": "requests it held when it went that failed",
}

# summary.json: every key, flattened with dots as `fleetcast collect` names them
DISTRIBUTION = ("mean", "p50", "p90", "p95", "p99")
SUMMARY = {
    "ttft_s.<stat>": "time to first token over completed requests, s",
    "tpot_s.<stat>": "time per output token (vLLM's), s",
    "itl_s.<stat>": "mean inter-token latency (LLMPerf's), s",
    "e2e_s.<stat>": "arrival to last token, s",
    "queueing_delay_s.<stat>": "arrival to first scheduled, s",
    "throughput.requests_per_s": "completed requests per second of `duration_s`",
    "throughput.output_tokens_per_s": "output tokens per second",
    "throughput.total_tokens_per_s": "prompt and output tokens per second",
    "goodput_requests_per_s": "completed requests per second that met every SLO in `slo`",
    "slo.ttft_s": "the run's TTFT bound (`slo.ttft_s`; null: none)",
    "slo.tpot_s": "the run's TPOT bound",
    "slo.e2e_s": "the run's E2E bound",
    "num_requests": "requests in the run (rows of requests.parquet)",
    "warmup_requests": "of them, warm-up requests a benchmark leaves out of its figures",
    "completed": "requests completed",
    "rejected": "requests rejected",
    "rejected_by_reason": "rejections by reason (`{}`: none)",
    "rejected_by_reason.<reason>": "rejections for `context_length`, `kv_capacity` or "
    "`prefill_budget`",
    "unfinished": "requests still queued or running at the end",
    "num_preemptions": "preemptions over all requests",
    "duration_s": "first arrival to the end of the last step (or last completion a client sees)",
    "num_steps": "engine steps over all replicas",
    "num_replicas": "replicas at the start",
    "num_gpus": "GPUs of the fleet (`replicas x tp x pp`, both pools when disaggregated)",
    "kv_capacity_tokens": "KV tokens one replica can hold",
    "kv_capacity_tokens_per_model": "with two models per GPU: each model's KV tokens",
    "kv_utilization.mean": "time-weighted KV use, a fraction of the pool",
    "kv_utilization.max": "peak KV use, a fraction of the pool",
    "gpu_busy_fraction": "the share of the run the GPUs spent in steps",
    "cost.usd_per_gpu_hour": "the $/GPU-hour used",
    "cost.tier": "`on_demand`, `reserved` (1 year), `reserved_3y`, `spot`, or null (the "
    "catalog's price); with price tiers, the fleet's one tier or `mixed`",
    "cost.price_source": "which setting gave the price (`hardware.usd_per_gpu_hour`, "
    "`cost.usd_per_gpu_hour`, `cost.prices...`; with price tiers, the mix's key: "
    "`fleet.tiers`, or the pools' `placement.prefill.tiers, placement.decode.tiers`)",
    "cost.usd_per_hour": "what the fleet costs per hour",
    "cost.usd_per_hour_with_energy": "the same with electricity (equal without `cost.energy`)",
    "cost.usd_per_million_output_tokens": "$ per million output tokens at the run's throughput",
    "cost.usd_per_million_input_tokens": "$ per million prompt tokens at the run's throughput",
    "cost.usd_per_thousand_good_requests": "$ per thousand requests that met the SLO",
    "cost.gpu_hours_per_day": "GPU-hours a day at `cost.requests_per_day` (null: not set)",
    "cost.energy": "null unless `cost.energy.enabled`",
    "cost.per_tier.<tier>.replicas": "*with price tiers* (`fleet.tiers`, "
    "`placement.*.tiers`): the replicas bought at that tier",
    "cost.per_tier.<tier>.gpus": "their GPUs",
    "cost.per_tier.<tier>.usd_per_gpu_hour": "the tier's $/GPU-hour (a mean over GPUs when "
    "the pools' GPUs differ)",
    "cost.per_tier.<tier>.usd_per_hour": "what that tier's replicas cost per hour; the tiers "
    "add up to `cost.usd_per_hour`",
    "cost.energy.kw_per_gpu": "average power per GPU, kW (PUE included)",
    "cost.energy.kwh_per_hour": "the fleet's energy per hour, kWh",
    "cost.energy.usd_per_hour": "its price per hour",
    "stability.verdict": "`stable`, `near_saturation`, `unstable` or `undetermined`: whether "
    "the fleet kept up (see the stability page)",
    "stability.reason": "the verdict in words",
    "stability.offered_requests_per_s": "the arrival rate over the judged half of the run",
    "stability.service_capacity_requests_per_s": "the most the fleet completed in a stretch as "
    "long as the judged half, over its length (reported when the fleet falls short; else null)",
    "stability.deficit": "the judged half's arrivals minus that best stretch's completions",
    "stability.served_share": "served / arrived over the judged half",
    "stability.queueing_delay_slope": "least squares of queueing delay on arrival time over the "
    "judged half (s per s)",
    "stability.median_stay_s": "the median request's E2E, s",
    "stability.judged_from_s": "the judged half's start, s",
    "stability.judged_to_s": "its end, s",
    "stability.unfinished_share": "unfinished requests' share",
    "stability.paced_by_client": "true when a closed loop paces the arrivals",
    "stability.backlog_trend": "the backlog's growth over the judged half (requests)",
    "stability.backlog_scatter": "its scatter about that trend (requests)",
    "stability.backlog_at_mid": "requests in the system at the judged half's start",
    "prefix_cache_hit_tokens": "prompt tokens served from the prefix cache",
    "prefix_cache.looked_up_blocks": "blocks looked up in the prefix cache",
    "prefix_cache.looked_up_tokens": "tokens looked up",
    "prefix_cache.hit_blocks": "blocks found",
    "prefix_cache.hit_tokens": "tokens found",
    "prefix_cache.hit_rate_blocks": "hit_blocks / looked_up_blocks",
    "prefix_cache.hit_rate_tokens": "hit_tokens / looked_up_tokens",
    "prefix_cache.registered_blocks": "blocks entered in the cache",
    "prefix_cache.evicted_blocks": "blocks evicted from GPU memory",
    "prefix_cache.host_stored_blocks": "evicted blocks kept in host memory (`kv.cpu_offload_gib`)",
    "prefix_cache.host_loaded_blocks": "blocks copied back from host memory",
    "prefix_cache.host_hit_tokens": "tokens found in host memory",
    "prefix_cache.host_evicted_blocks": "blocks evicted from host memory",
    "model_error.class.step_time_model": (
        "*with `+output.model_error=true`*: the step-time model: `roofline`, `calibrated`, "
        "`bench_profile` (a roofline with a `calibrate --bench` profile), `linear`, `constant`"
    ),
    "model_error.class.engine": (
        "the engine, as the scheduler's name (`vllm`, `sglang`, `trtllm`, ...)"
    ),
    "model_error.class.gpu_family": "the GPU's family (`H100` for H100-SXM and H100-PCIe)",
    "model_error.class.tp": "the TP degree",
    "model_error.class.precision": "the weight precision",
    "model_error.band.quantity": "what the band is of: the multiple of every step time that "
    "brings a simulated run to the measured one, `measured / predicted mean TPOT` or, for an "
    "MLPerf row, `predicted / measured throughput` at the SLO (see the fidelity page); null "
    "band: no validation rows for the model",
    "model_error.band.n": "validation rows (or a bench profile's held-out runs) in the band",
    "model_error.band.p10": "the 10th percentile of the ratio",
    "model_error.band.p50": "its median",
    "model_error.band.p90": "its 90th percentile: step times as slow as the worst 10% of rows",
    "model_error.band.source": "where the rows came from",
    "model_error.band.rows": "`validation rows`, or `the profile's held-out runs`",
    "model_error.band.level": "how far the lookup fell back: `exact class`, `any tp`, ...",
    "model_error.band.answered_by.step_time_model": (
        "the class of the table row that answered (`*`: any)"
    ),
    "model_error.band.answered_by.engine": "the same",
    "model_error.band.answered_by.gpu_family": "the same",
    "model_error.band.answered_by.tp": "the same",
    "model_error.band.answered_by.precision": "the same",
    "model_error.note": "why there is no band (null when there is one)",
    "spec_decode.num_draft_tokens": "K, drafts per decode step",
    "spec_decode.acceptance_rate": "the acceptance rate(s) set",
    "spec_decode.method": "`draft_model`, `mtp` or `ngram`",
    "spec_decode.draft_model": "the drafter (method draft_model)",
    "spec_decode.draft_cost": "a draft token's cost as a fraction of a decode step",
    "spec_decode.draft_model_priced_like_target": "true when the drafter is priced as the target",
    "spec_decode.decode_sequence_steps": "decode steps of sequences over the run",
    "spec_decode.tokens_per_decode_step": "tokens each kept per decode step, measured",
    "spec_decode.drawn_tokens_per_decode_step": "the same from the acceptance draws",
    "spec_decode.expected_tokens_per_decode_step": "the same in theory, (1 - a^(K+1)) / (1 - a)",
    "spec_decode.drafter_time_share": "the drafter's share of step time",
    "autoscale.policy": "the autoscaling policy",
    "autoscale.provision_s": "seconds from asking for a replica to its first request",
    "autoscale.replicas_min": "fewest replicas over the run",
    "autoscale.replicas_max": "most replicas over the run",
    "autoscale.replicas_mean": "billed replicas (provisioning included), time-weighted",
    "autoscale.scale_ups": "replicas added",
    "autoscale.scale_downs": "replicas released",
    "autoscale.gpu_hours": "GPU-hours billed over the run",
    "autoscale.usd_total": "what they cost",
    "autoscale.engines.<engine>.gpu": "an engine configuration's GPU",
    "autoscale.engines.<engine>.gpus_per_replica": "its GPUs per replica",
    "autoscale.engines.<engine>.tp": "its tensor-parallel degree",
    "autoscale.engines.<engine>.weights": "its weight precision",
    "autoscale.engines.<engine>.kv": "its KV precision",
    "autoscale.engines.<engine>.kv_capacity_tokens": "its KV tokens per replica",
    "autoscale.engines.<engine>.usd_per_gpu_hour": "its $/GPU-hour",
    "disaggregation.transfers": "KV transfers from prefill to decode",
    "disaggregation.kv_bytes_per_token": "bytes of KV each token moves",
    "disaggregation.kv_link.name": "the link (`nvlink`, `infiniband`, `roce`, `ethernet`)",
    "disaggregation.kv_link.gb_per_s": "its bandwidth each way per GPU, GB/s",
    "disaggregation.kv_link.latency_us": "its latency, µs",
    "disaggregation.kv_link.overlap": "whether the KV streams while the prompt's last step runs",
    "disaggregation.kv_link.parallel_links": "links a transfer uses at once (the fewer GPUs of "
    "the two replicas)",
    "disaggregation.kv_link.source": "where the link's figures come from",
    "disaggregation.transfer_s.<stat>": "a KV transfer's duration, s",
    "disaggregation.transfer_wait_s.<stat>": "the part of it a request waited for, s",
    "disaggregation.handoff_s.<stat>": "prefill's end to decode's start, s",
    "disaggregation.<pool>.replicas": "the pool's replicas (`prefill`, `decode`)",
    "disaggregation.<pool>.gpu": "its GPU",
    "disaggregation.<pool>.gpus_per_replica": "its GPUs per replica",
    "disaggregation.<pool>.tp": "its tensor-parallel degree",
    "disaggregation.<pool>.weights": "its weight precision",
    "disaggregation.<pool>.kv": "its KV precision",
    "disaggregation.<pool>.scheduler": "its scheduler",
    "disaggregation.<pool>.kv_capacity_tokens": "its KV tokens per replica",
    "disaggregation.<pool>.kv_utilization.mean": "its time-weighted KV use",
    "disaggregation.<pool>.kv_utilization.max": "its peak KV use",
    "disaggregation.<pool>.gpu_busy_fraction": "its GPUs' busy share",
    "disaggregation.<pool>.num_steps": "its engine steps",
    "disaggregation.<pool>.usd_per_gpu_hour": "its $/GPU-hour",
    "disaggregation.<pool>.usd_per_hour": "its cost per hour",
    "failed": "*with faults*: requests that failed (lost with their replica, or with none up)",
    "failed_by_reason": "failures by cause (`{}`: none)",
    "failed_by_reason.<reason>": "failures for `replica_failure`, `spot_reclaim` or `no_replica`",
    "faults.on_failure": "`retry` or `fail` (`faults.on_failure`)",
    "faults.gpu_mtbf_h": "mean hours between failures of one GPU (null: no random failures)",
    "faults.repair": "`exponential` or `fixed` repair times",
    "faults.repair_h": "mean hours to repair",
    "faults.spot_reclaims_per_h": "random reclaims per hour of each spot replica (null: none)",
    "faults.availability": "replica-hours up over replica-hours planned, over the run's span "
    "(to its last arrival at least); a draining replica is up",
    "faults.replica_hours_planned": "replicas x the span, hours (an autoscaled fleet: each "
    "replica from its start to its release, or a lost one to its replacement)",
    "faults.replica_hours_down": "replica-hours down within the span",
    "faults.failures": "failures (random and scheduled) that began within the span",
    "faults.maintenance": "maintenance drains that began within it",
    "faults.spot_reclaims": "spot reclaim notices within it",
    "faults.requests_retried": "requests sent again at least once",
    "faults.retries": "times requests were sent again",
    "faults.retry_lost_s": "seconds thrown away with lost replicas, over all requests",
    "faults.failed": "requests that failed (as `failed`)",
    "faults.failed_by_reason": "failures by cause (as `failed_by_reason`)",
    "faults.failed_by_reason.<reason>": "failures for that cause",
    "faults.degraded_s": "seconds of the span with at least one replica out of the router's "
    "reach (draining or down)",
    "faults.degraded.requests": "requests that arrived then",
    "faults.degraded.completed": "of them, those completed",
    "faults.degraded.ttft_s.<stat>": "their TTFT, s (the whole run's is `ttft_s`)",
    "faults.degraded.tpot_s.<stat>": "their TPOT, s",
    "faults.degraded.e2e_s.<stat>": "their E2E, s",
    "faults.by_pool.<pool>.replicas": "*a disaggregated fleet*: the pool's replicas",
    "faults.by_pool.<pool>.availability": "its replicas' availability, as `faults.availability`",
    "faults.by_pool.<pool>.replica_hours_down": "its replica-hours down within the span",
    "faults.by_pool.<pool>.failures": "failures of its replicas within the span",
    "faults.by_pool.<pool>.maintenance": "maintenance drains of its replicas within it",
    "faults.by_pool.<pool>.spot_reclaims": "spot reclaim notices of its replicas within it",
    "faults.by_pool.<pool>.requests_retried": "requests its replicas' losses sent again (as "
    "`faults.parquet` counts them: a request twice if lost twice)",
    "faults.by_pool.<pool>.requests_failed": "requests its replicas' losses failed",
}


class UndocumentedColumn(Exception):
    """A column of an output file that ``COLUMNS`` does not explain."""


def tables() -> dict[str, list[tuple[str, str, str]]]:
    """Each output table's columns: (name, Arrow type, when it is there)."""
    from sim.output.faults import FAULTS_SCHEMA
    from sim.output.results import REQUESTS_SCHEMA, requests_schema
    from sim.output.scaling import SCALING_SCHEMA
    from sim.output.step_log import BUCKETED_STEPS_SCHEMA, STEPS_SCHEMA

    always = {f.name for f in REQUESTS_SCHEMA}
    conditions = {
        "prefix_caching": "with `kv.prefix_caching=true`",
        "host_tier": "with `kv.cpu_offload_gib` > 0",
        "sessions": "with `workload=sessions`",
        "disaggregated": "with `placement=disaggregated`",
        "faults": "with faults (`faults.*`)",
    }
    requests = [(f.name, str(f.type), "always") for f in REQUESTS_SCHEMA]
    for flag, when in conditions.items():
        added = requests_schema(**{flag: True})
        requests += [(f.name, str(f.type), when) for f in added if f.name not in always]
    pool = ("pool", "string", "with `placement=disaggregated`")
    return {
        "requests.parquet": requests,
        "steps.parquet": [(f.name, str(f.type), "always") for f in STEPS_SCHEMA] + [pool],
        "steps.parquet (output.steps=bucketed)": [
            (f.name, str(f.type), "always") for f in BUCKETED_STEPS_SCHEMA
        ]
        + [pool],
        "scaling.parquet": [(f.name, str(f.type), "always") for f in SCALING_SCHEMA],
        "faults.parquet": [(f.name, str(f.type), "always") for f in FAULTS_SCHEMA],
    }


def meaning(file: str, column: str) -> str:
    """What ``column`` of ``file`` (``requests.parquet``...) holds."""
    own = f"{file.split('.')[0]}:{column}"
    if own in COLUMNS:
        return COLUMNS[own]
    if column not in COLUMNS:
        raise UndocumentedColumn(f"{file} {column}: add it to docs/hooks/output_reference.py")
    return COLUMNS[column]


def _table(file: str, columns: list[tuple[str, str, str]]) -> list[str]:
    rows = ["| column | type | present | meaning |", "|---|---|---|---|"]
    rows += [f"| `{c}` | {t} | {when} | {meaning(file, c)} |" for c, t, when in columns]
    return rows


def render() -> str:
    """The generated part of reference/outputs.md."""
    out: list[str] = []
    for title, columns in tables().items():
        out += [f"### {title}", "", *_table(title, columns), ""]
    stats = ", ".join(f"`{s}`" for s in DISTRIBUTION)
    out += [
        "### summary.json",
        "",
        f"Keys flattened with dots, as `fleetcast collect` names its columns. `<stat>` is each of "
        f"{stats}; `<pool>` is `prefill` and `decode`; `<engine>` each engine configuration of "
        "an autoscaled fleet (`base` first); `<reason>` a rejection reason; `<tier>` a price "
        "tier of the fleet (`on_demand`, `reserved`, `reserved_3y`, `spot`). The `prefix_cache`, "
        "`spec_decode`, `autoscale`, `disaggregation` and `faults` blocks (and `failed`, "
        "`failed_by_reason`) are there only in runs that use them.",
        "",
        "| key | meaning |",
        "|---|---|",
        *(f"| `{key}` | {meaning} |" for key, meaning in SUMMARY.items()),
        "",
    ]
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The MkDocs hook: the marker replaced by the generated tables."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
