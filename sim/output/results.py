"""From a finished run to its files: requests.parquet, steps.parquet, summary.json.

Tables have explicit pyarrow schemas (GUIDE section 3 names the columns). Latency metrics are
defined once, here:

- ``ttft_s``: arrival to first output token;
- ``tpot_s``: vLLM's time per output token, ``(e2e − ttft) / (output_tokens − 1)``; null for
  one-token outputs;
- ``itl_s``: LLMPerf's mean inter-token latency of a request, ``e2e / output_tokens`` (it counts
  the first token's wait, unlike TPOT);
- ``e2e_s``: arrival to last token; ``queueing_delay_s``: arrival to first scheduled.

The summary's distributions are over completed requests (``unfinished`` counts the rest). The
table also gives ``ttft_s`` and ``queueing_delay_s`` of unfinished requests that got that far,
so an overloaded run's worst waits stay visible.

Throughput and goodput divide by ``duration_s``, from the first arrival to the end of the last
step, or to the last completion a client sees if a frontend streams it later. Goodput counts
completed requests that meet every SLO set in ``slo``. The ``cost`` block comes from
``sim.output.cost`` (what the fleet costs, and the unit costs derived from these rates).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from sim.arrow_numpy import column_to_numpy, numpy_to_arrow, strings_to_arrow
from sim.catalog.hardware import GPU
from sim.config.schema import CostConfig, SloConfig
from sim.engine.request import COMPLETED, REJECTED, UNFINISHED, Request
from sim.output.cost import fleet_cost
from sim.output.metrics import StepRecorder

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
    ]
)

STEPS_SCHEMA = pa.schema(
    [
        ("replica_id", pa.int32()),
        ("start_time_s", pa.float64()),
        ("duration_s", pa.float64()),
        ("num_prefill_tokens", pa.int32()),
        ("num_decode_tokens", pa.int32()),
        ("num_seqs", pa.int32()),
        ("kv_blocks_used", pa.int32()),
        ("model_id", pa.int32()),
    ]
)

PERCENTILES = (50, 90, 95, 99)


def _floats(values: np.ndarray) -> pa.Array:
    return numpy_to_arrow(values, pa.float64())


def _optional(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def requests_table(requests: list[Request]) -> pa.Table:
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
        "replica_id": np.fromiter((r.replica_id for r in requests), np.int32, n),
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
    }
    arrays = [
        c if isinstance(c := columns[f.name], pa.Array) else numpy_to_arrow(c, f.type)
        for f in REQUESTS_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=REQUESTS_SCHEMA)


def steps_table(replica_recorders: list[list[tuple[int, StepRecorder]]]) -> pa.Table:
    """One row per step, ordered by replica, then time. ``replica_recorders[i]`` holds replica
    ``i``'s rows, one recorder per model it serves."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in STEPS_SCHEMA.names}
    for replica_id, recorders in enumerate(replica_recorders):
        columns = [(model_id, steps.columns()) for model_id, steps in recorders]
        order = None
        if len(columns) > 1:  # models sharing a GPU took turns: interleave their rows
            order = np.argsort(
                np.concatenate([c["start_time_s"] for _, c in columns]), kind="stable"
            )
        n = sum(len(c["start_time_s"]) for _, c in columns)
        merged = {
            "replica_id": np.full(n, replica_id, np.int32),
            "model_id": np.concatenate(
                [np.full(len(c["start_time_s"]), m, np.int32) for m, c in columns]
            ),
        }
        for name in STEPS_SCHEMA.names:
            if name not in merged:
                merged[name] = np.concatenate([c[name] for _, c in columns])
        for name, values in merged.items():
            parts[name].append(values if order is None else values[order])
    arrays = [
        numpy_to_arrow(np.concatenate(parts[f.name]) if parts[f.name] else np.empty(0), f.type)
        for f in STEPS_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=STEPS_SCHEMA)


def _column(table: pa.Table, name: str) -> np.ndarray:
    return column_to_numpy(table.column(name))


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
    requests: pa.Table,
    steps: pa.Table,
    *,
    slo: SloConfig,
    num_gpus: int,
    num_replicas: int,
    kv_capacity_tokens: list[int],
    kv_num_blocks: list[int],
    gpu: GPU,
    cost: CostConfig | None = None,
) -> dict[str, Any]:
    """The summary.json object (GUIDE section 3), from the two tables.

    ``kv_capacity_tokens`` and ``kv_num_blocks`` are per model (``model_id``): one entry for a
    fleet of one model. ``kv_capacity_tokens`` in the summary is the first model's pool.

    ``cost`` prices the fleet (sim/cost.py); None: the defaults, i.e. the GPU catalog's price.
    """
    col = {
        name: _column(requests, name)
        for name in (
            "arrival_time_s",
            "prompt_tokens",
            "output_tokens",
            "ttft_s",
            "tpot_s",
            "e2e_s",
            "itl_s",
            "queueing_delay_s",
            "num_preemptions",
        )
    }
    status = np.asarray(requests.column("status").to_pylist(), dtype=object)
    completed = status == COMPLETED
    start = _column(steps, "start_time_s")
    duration = _column(steps, "duration_s")
    first_arrival = float(col["arrival_time_s"].min()) if len(status) else 0.0
    end = float((start + duration).max()) if len(start) else first_arrival
    done_s = _column(requests, "completion_time_s")[completed]
    if len(done_s):
        # with a frontend, clients receive the last tokens after the last step ends
        end = max(end, float(done_s.max()))
    span_s = max(end - first_arrival, 0.0)

    def rate(x: float) -> float | None:
        return x / span_s if span_s > 0 else None

    out_tokens = float(col["output_tokens"][completed].sum())
    in_tokens = float(col["prompt_tokens"][completed].sum())
    all_tokens = out_tokens + in_tokens
    good = completed.copy()
    for bound, name in ((slo.ttft_s, "ttft_s"), (slo.tpot_s, "tpot_s"), (slo.e2e_s, "e2e_s")):
        if bound is not None:
            values = np.nan_to_num(col[name], nan=0.0) if name == "tpot_s" else col[name]
            good &= values <= bound  # one-token outputs have no TPOT: they meet a TPOT SLO
    # each row's share of its own model's pool (models sharing a GPU have a pool each)
    kv_used = (
        _column(steps, "kv_blocks_used").astype(float)
        / np.asarray(kv_num_blocks, dtype=float)[_column(steps, "model_id")]
    )
    busy = float(duration.sum())
    busy_fraction = (busy / (span_s * num_replicas)) if span_s > 0 else None
    out: dict[str, Any] = {
        "ttft_s": distribution(col["ttft_s"][completed]),
        "tpot_s": distribution(col["tpot_s"]),
        "itl_s": distribution(col["itl_s"]),
        "e2e_s": distribution(col["e2e_s"]),
        "queueing_delay_s": distribution(col["queueing_delay_s"][completed]),
        "throughput": {
            "requests_per_s": rate(float(completed.sum())),
            "output_tokens_per_s": rate(out_tokens),
            "total_tokens_per_s": rate(all_tokens),
        },
        "goodput_requests_per_s": rate(float(good.sum())),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s},
        "num_requests": int(len(status)),
        "completed": int(completed.sum()),
        "rejected": int((status == REJECTED).sum()),
        "unfinished": int((status == UNFINISHED).sum()),
        "num_preemptions": int(col["num_preemptions"].sum()),
        "duration_s": span_s,
        "num_steps": int(len(start)),
        "num_replicas": num_replicas,
        "num_gpus": num_gpus,
        "kv_capacity_tokens": kv_capacity_tokens[0],
        "kv_utilization": {
            # step-time weighted: the share of blocks in use while replicas were busy
            "mean": float((kv_used * duration).sum() / busy) if busy else None,
            "max": float(kv_used.max()) if len(kv_used) else None,
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
        ),
    }
    if len(kv_capacity_tokens) > 1:
        out["kv_capacity_tokens_per_model"] = list(kv_capacity_tokens)
    return out
