"""From a finished run to its files: requests.parquet, steps.parquet, summary.json.

Tables have explicit pyarrow schemas (docs/reference/outputs.md lists the columns). Latency metrics
are defined once, here:

- ``ttft_s``: arrival to first output token;
- ``tpot_s``: vLLM's time per output token, ``(e2e − ttft) / (output_tokens − 1)``; null for
  one-token outputs;
- ``itl_s``: LLMPerf's mean inter-token latency of a request, ``e2e / output_tokens`` (it counts
  the first token's wait, unlike TPOT);
- ``e2e_s``: arrival to last token; ``queueing_delay_s``: arrival to first scheduled.

The summary's distributions are over completed requests (``unfinished`` counts the rest). The
table also gives ``ttft_s`` and ``queueing_delay_s`` of unfinished requests that got that far,
so an overloaded run's worst waits stay visible. A rejected request's ``reject_reason`` says
why the engine refused it (``sim.engine.scheduler.base.REFUSALS``); the summary counts them in
``rejected_by_reason``.

Throughput and goodput divide by ``duration_s``, from the first arrival to the end of the last
step, or to the last completion a client sees if a frontend streams it later. Goodput counts
completed requests that meet every SLO set in ``slo``. The ``cost`` block comes from
``sim.output.cost`` (what the fleet costs, and the unit costs derived from these rates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from sim.arrow_numpy import numpy_to_arrow, strings_to_arrow
from sim.catalog.hardware import GPU
from sim.config.autoscale import AutoscaleConfig
from sim.config.schema import CostConfig, SloConfig
from sim.engine.kv_cache import KVCache
from sim.engine.prefix_cache import COUNTERS, PrefixCachingKVCache
from sim.engine.request import COMPLETED, REJECTED, UNFINISHED, Request
from sim.output.cost import fleet_cost
from sim.output.scaling import ScalingLog
from sim.output.stability import stability
from sim.output.step_log import StepTotals

REQUESTS_SCHEMA = pa.schema(
    [
        ("request_id", pa.int64()),
        ("replica_id", pa.int32()),
        ("arrival_time_s", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("status", pa.string()),
        ("first_token_time_s", pa.float64()),
        ("completion_time_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("tpot_s", pa.float64()),
        ("e2e_s", pa.float64()),
        ("num_preemptions", pa.int32()),
        ("itl_s", pa.float64()),
        ("queueing_delay_s", pa.float64()),
        ("model_id", pa.int32()),
        ("reject_reason", pa.string()),
    ]
)

# with a prefix cache (kv.prefix_caching=true), one more column: the prompt tokens found cached
# at the request's first admission, and with its host tier (kv.cpu_offload_gib) those of them
# copied back from host memory; with conversations (workload=sessions), two more: which
# session a request is a turn of, and which turn (without these, the table stays as it was)
CACHED_PROMPT_TOKENS = "cached_prompt_tokens"
HOST_CACHED_PROMPT_TOKENS = "host_cached_prompt_tokens"
SESSION_COLUMNS = (("session_id", pa.int64()), ("turn", pa.int32()))
# with a disaggregated fleet (placement=disaggregated), four more: where the request prefilled
# and decoded (null: not that far), and when its KV transfer began and ended
TRANSFER_COLUMNS = (
    ("prefill_replica_id", pa.int32()),
    ("decode_replica_id", pa.int32()),
    ("transfer_start_s", pa.float64()),
    ("transfer_end_s", pa.float64()),
)
# with faults (faults.*), three more: how many times a request was sent again after its
# replica went, the seconds from its arrival to its last loss, and why it failed (if it did)
FAULT_COLUMNS = (
    ("retries", pa.int32()),
    ("retry_lost_s", pa.float64()),
    ("fail_reason", pa.string()),
)


def requests_schema(
    prefix_caching: bool = False,
    sessions: bool = False,
    host_tier: bool = False,
    disaggregated: bool = False,
    faults: bool = False,
) -> pa.Schema:
    """``requests.parquet``'s columns for a run with or without a prefix cache (and its host
    tier), sessions, disaggregation and faults."""
    schema = REQUESTS_SCHEMA
    if prefix_caching:
        schema = schema.append(pa.field(CACHED_PROMPT_TOKENS, pa.int32()))
    if host_tier:
        schema = schema.append(pa.field(HOST_CACHED_PROMPT_TOKENS, pa.int32()))
    if sessions:
        for name, kind in SESSION_COLUMNS:
            schema = schema.append(pa.field(name, kind))
    if disaggregated:
        for name, kind in TRANSFER_COLUMNS:
            schema = schema.append(pa.field(name, kind))
    if faults:
        for name, kind in FAULT_COLUMNS:
            schema = schema.append(pa.field(name, kind))
    return schema


PERCENTILES = (50, 90, 95, 99)


def _floats(values: np.ndarray) -> pa.Array:
    return numpy_to_arrow(values, pa.float64())


def _optional(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def requests_table(requests: list[Request], schema: pa.Schema = REQUESTS_SCHEMA) -> pa.Table:
    """The rows of ``requests`` in ``schema`` (``REQUESTS_SCHEMA``, or ``requests_schema``'s
    with its optional columns)."""
    n = len(requests)
    arrival = np.fromiter((r.arrival_time_s for r in requests), float, n)
    first = _optional([r.first_token_time_s for r in requests])
    done = _optional([r.completion_time_s for r in requests])
    scheduled = _optional([r.first_scheduled_time_s for r in requests])
    status = [r.status for r in requests]
    completed = np.array([s == COMPLETED for s in status], dtype=bool)
    output = np.fromiter((r.output_tokens for r in requests), np.int64, n)
    # Only completed requests have latencies; the rest keep their partial timestamps.
    done = np.where(completed, done, np.nan)
    ttft = first - arrival  # also for an unfinished request that had its first token
    e2e = done - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(completed & (output > 1), (e2e - ttft) / (output - 1), np.nan)
        itl = np.where(completed, e2e / output, np.nan)
    columns = {
        "request_id": np.fromiter((r.request_id for r in requests), np.int64, n),
        # (null with faults: a request that found no replica up was never routed)
        "replica_id": (
            pa.array([r.replica_id for r in requests], pa.int32())
            if "fail_reason" in schema.names
            else np.fromiter((r.replica_id for r in requests), np.int32, n)
        ),
        "arrival_time_s": _floats(arrival),
        "prompt_tokens": np.fromiter((r.prompt_tokens for r in requests), np.int32, n),
        "output_tokens": output.astype(np.int32),
        "status": strings_to_arrow(status),
        "first_token_time_s": _floats(first),
        "completion_time_s": _floats(done),
        "ttft_s": _floats(ttft),
        "tpot_s": _floats(tpot),
        "e2e_s": _floats(e2e),
        "num_preemptions": np.fromiter((r.num_preemptions for r in requests), np.int32, n),
        "itl_s": _floats(itl),
        "queueing_delay_s": _floats(scheduled - arrival),
        "model_id": np.fromiter((r.model_id for r in requests), np.int32, n),
        "reject_reason": strings_to_arrow([r.reject_reason for r in requests]),
    }
    if CACHED_PROMPT_TOKENS in schema.names:
        columns[CACHED_PROMPT_TOKENS] = np.fromiter(
            (r.cached_prompt_tokens for r in requests), np.int32, n
        )
    if HOST_CACHED_PROMPT_TOKENS in schema.names:
        columns[HOST_CACHED_PROMPT_TOKENS] = np.fromiter(
            (r.host_cached_prompt_tokens for r in requests), np.int32, n
        )
    if "session_id" in schema.names:
        columns["session_id"] = np.fromiter((r.session_id for r in requests), np.int64, n)
        columns["turn"] = np.fromiter((r.turn for r in requests), np.int32, n)
    if "prefill_replica_id" in schema.names:
        columns.update(_transfer_columns(requests))
    if "retries" in schema.names:
        columns["retries"] = np.fromiter((r.retries for r in requests), np.int32, n)
        columns["retry_lost_s"] = np.fromiter((r.retry_lost_s for r in requests), float, n)
        columns["fail_reason"] = strings_to_arrow([r.fail_reason for r in requests])
    arrays = [
        c if isinstance(c := columns[f.name], pa.Array) else numpy_to_arrow(c, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _transfer_columns(requests: list[Request]) -> dict[str, pa.Array]:
    """A disaggregated run's columns (``TRANSFER_COLUMNS``): the decode replica is the one
    the request was handed to (its ``replica_id`` from then on)."""
    handed = [r.prefill_replica_id is not None for r in requests]
    return {
        "prefill_replica_id": pa.array(
            [
                r.prefill_replica_id if h else r.replica_id
                for r, h in zip(requests, handed, strict=True)
            ],
            pa.int32(),
        ),
        "decode_replica_id": pa.array(
            [r.replica_id if h else None for r, h in zip(requests, handed, strict=True)], pa.int32()
        ),
        "transfer_start_s": _floats(_optional([r.transfer_start_s for r in requests])),
        "transfer_end_s": _floats(_optional([r.transfer_end_s for r in requests])),
    }


def prefix_cache_summary(caches: list[KVCache]) -> dict[str, float | int | None]:
    """``summary.json``'s ``prefix_cache``: what the fleet's prefix caches found, over every
    admission (a preempted request looks its prompt up again when it is readmitted)."""
    total: dict[str, int] = dict.fromkeys(COUNTERS, 0)
    for cache in caches:
        for key in total:
            total[key] += getattr(cache, key)

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    summary: dict[str, float | int | None] = {
        "hit_rate_tokens": share(total["hit_tokens"], total["looked_up_tokens"]),
        "hit_rate_blocks": share(total["hit_blocks"], total["looked_up_blocks"]),
        **total,
    }
    hosts = [c for c in caches if isinstance(c, PrefixCachingKVCache) and c.host is not None]
    if hosts:  # a host tier: the hits found there (part of hit_tokens), and its traffic
        summary["host_hit_tokens"] = sum(c.host_hit_tokens for c in hosts)
        for counter in ("stored_blocks", "loaded_blocks", "evicted_blocks"):
            summary[f"host_{counter}"] = sum(getattr(c.host, counter) for c in hosts)
    return summary


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """mean and percentiles (numpy's linear interpolation); None for an empty sample."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    out: dict[str, float | None] = {"mean": float(values.mean())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{p}"] = float(v)
    return out


def summarize(
    column: Callable[[str], np.ndarray],
    steps: StepTotals,
    *,
    slo: SloConfig,
    num_gpus: int,
    num_replicas: int,
    kv_capacity_tokens: list[int],
    gpu: GPU,
    cost: CostConfig | None = None,
    warmup_requests: int = 0,
    paced_by_client: bool = False,
    scaling: tuple[ScalingLog, AutoscaleConfig] | None = None,
    billed: tuple[float, float] | None = None,
    per_tier: dict[str, dict[str, float | int]] | None = None,
    tiers_source: str | None = None,
) -> dict[str, Any]:
    """The summary.json object (docs/reference/outputs.md), from the requests table
    (``column(name)`` gives one of its columns as numpy; each is read once and let go, so a long
    run's table need not fit in memory whole) and the steps' totals.

    ``kv_capacity_tokens`` is per model (``model_id``): one entry for a fleet of one model.
    ``kv_capacity_tokens`` in the summary is the first model's pool.

    ``cost`` prices the fleet (sim/cost.py); None: the defaults, i.e. the GPU catalog's price.
    ``paced_by_client``: the workload's client waits for the fleet (a closed loop or a cap), as
    the stability verdict must know (``sim.output.stability``).
    ``scaling``: an autoscaled fleet's log (``sim.output.scaling``): the fleet is billed for
    the GPUs it held over the span, ``num_gpus`` and ``num_replicas`` are its peak, and the busy
    fraction is of the replica-seconds that could run steps.
    ``billed``: a fixed fleet of mixed GPUs (a disaggregated one's pools), its GPUs and
    $/hour, each GPU at its own price.
    ``per_tier``, ``tiers_source``: a fleet bought at price tiers, each tier's bill and the
    config field of its mix (``sim.output.cost.fleet_cost``).
    """
    status = column("status")
    completed = status == COMPLETED
    num_requests = len(status)
    num_rejected = int((status == REJECTED).sum())
    num_unfinished = int((status == UNFINISHED).sum())
    del status
    rejected_by_reason: dict[str, int] = {}
    if num_rejected:
        reasons, counts = np.unique(
            column("reject_reason")[column("status") == REJECTED].astype(str), return_counts=True
        )
        rejected_by_reason = dict(zip(reasons.tolist(), counts.tolist(), strict=True))

    arrival = column("arrival_time_s")
    first_arrival = float(arrival.min()) if num_requests else 0.0
    del arrival
    end = steps.end_s if steps.end_s is not None else first_arrival
    done_s = column("completion_time_s")[completed]
    if len(done_s):
        # with a frontend, clients receive the last tokens after the last step ends
        end = max(end, float(done_s.max()))
    del done_s
    span_s = max(end - first_arrival, 0.0)

    def rate(x: float) -> float | None:
        return x / span_s if span_s > 0 else None

    out_tokens = float(column("output_tokens")[completed].sum())
    in_tokens = float(column("prompt_tokens")[completed].sum())
    all_tokens = out_tokens + in_tokens
    good = completed.copy()
    latency: dict[str, dict[str, float | None]] = {}
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queueing_delay_s"):
        values = column(name)
        bound = getattr(slo, name, None)
        if bound is not None:
            # one-token outputs have no TPOT: they meet a TPOT SLO
            good &= (np.nan_to_num(values, nan=0.0) if name == "tpot_s" else values) <= bound
        # TTFT and queueing delay also exist for unfinished requests; the others only for
        # completed ones
        latency[name] = distribution(
            values[completed] if name in ("ttft_s", "queueing_delay_s") else values
        )
        del values
    busy = steps.busy_s
    busy_fraction = (busy / (span_s * num_replicas)) if span_s > 0 else None
    autoscale = None
    if scaling is not None:
        log, config = scaling
        scaled = log.totals(first_arrival, first_arrival + span_s)
        num_gpus, num_replicas = scaled.gpus_max, scaled.replicas_max
        if span_s > 0:
            busy_fraction = busy / scaled.replica_seconds if scaled.replica_seconds else None
            hours = span_s / 3600.0
            billed = (scaled.gpu_hours / hours, scaled.usd_total / hours)
        autoscale = scaled.summary(config.policy, config.provision_s)
    out: dict[str, Any] = {
        **{name: latency[name] for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
        "queueing_delay_s": latency["queueing_delay_s"],
        "throughput": {
            "requests_per_s": rate(float(completed.sum())),
            "output_tokens_per_s": rate(out_tokens),
            "total_tokens_per_s": rate(all_tokens),
        },
        "goodput_requests_per_s": rate(float(good.sum())),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s},
        "num_requests": num_requests,
        # a benchmark client's warm-ups: the first rows, counted here like every request
        # (``fleetcast bench`` and ``compare`` leave them out of the harness's figures)
        "warmup_requests": warmup_requests,
        "completed": int(completed.sum()),
        "rejected": num_rejected,
        "unfinished": num_unfinished,
        "num_preemptions": int(column("num_preemptions").sum()),
        "duration_s": span_s,
        "num_steps": steps.num_steps,
        "num_replicas": num_replicas,
        "num_gpus": num_gpus,
        "kv_capacity_tokens": kv_capacity_tokens[0],
        "kv_utilization": {
            # step-time weighted: the share of blocks in use while replicas were busy
            "mean": steps.kv_busy_s / busy if busy else None,
            "max": steps.kv_peak,
        },
        "gpu_busy_fraction": busy_fraction,
        "cost": fleet_cost(
            cost or CostConfig(),
            gpu,
            num_gpus=num_gpus,
            duration_s=span_s,
            completed_requests=int(completed.sum()),
            good_requests=int(good.sum()),
            input_tokens=in_tokens,
            output_tokens=out_tokens,
            gpu_busy_fraction=busy_fraction,
            billed=billed,
            per_tier=per_tier,
            tiers_source=tiers_source,
        ),
        "rejected_by_reason": rejected_by_reason,
        "stability": stability(
            column, warmup_requests=warmup_requests, paced_by_client=paced_by_client
        ),
    }
    if len(kv_capacity_tokens) > 1:
        out["kv_capacity_tokens_per_model"] = list(kv_capacity_tokens)
    if autoscale is not None:
        out["autoscale"] = autoscale
    return out
