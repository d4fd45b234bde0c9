"""The output contract (docs/reference/outputs.md) and the invariants every correct run keeps.

``run_problems(run_dir)`` checks a run folder as users' scripts read it: the four files, their
columns, and what must hold between them. ``table_problems(requests, steps, summary, ...)``
checks the same invariants on a run still in memory (``simulate``'s result). Both return the
problems found, one line each; an empty list is a good run. Only pyarrow, numpy and PyYAML.

Invariants: every request appears exactly once with a known status; the summary's counts and
percentiles agree with the table; a completed request's times are ordered and its TTFT, E2E,
TPOT and ITL follow their definitions; a rejected request has no token and says why (a known
``reject_reason``, counted in ``rejected_by_reason``), no other request has a reason; steps of a
replica never overlap and last > 0 s; KV blocks in use never exceed the pool; every output token
after the first came from a decode step and every prompt token of a completed request was
prefilled; a fleet bought at price tiers has tiers that add up to its replicas, GPUs and
bill. A run whose steps are bucketed (``output.steps=bucketed``) keeps the step invariants
that survive summing: token counts, the step count, KV peaks within the pool; with
``output.steps=none`` there are no step rows to check.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REQUEST_COLUMNS = (
    "request_id",
    "replica_id",
    "arrival_time_s",
    "prompt_tokens",
    "output_tokens",
    "status",
    "first_token_time_s",
    "completion_time_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "num_preemptions",
)
STEP_COLUMNS = (
    "replica_id",
    "start_time_s",
    "duration_s",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_seqs",
    "kv_blocks_used",
)
DISTRIBUTIONS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
STATS = ("mean", "p50", "p90", "p95", "p99")
SUMMARY_KEYS = (
    "throughput",
    "goodput_requests_per_s",
    "completed",
    "rejected",
    "unfinished",
    "num_gpus",
    "kv_capacity_tokens",
    "cost",
)
STATUSES = {"completed", "rejected", "unfinished"}
REJECT_REASONS = {"context_length", "kv_capacity", "prefill_budget"}
EPS = 1e-9


def _numpy(table: pa.Table) -> dict[str, np.ndarray]:
    """Columns as numpy; nulls of numeric columns become NaN."""
    out = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_string(column.type):
            out[name] = np.asarray(column.to_pylist(), dtype=object)
        else:
            out[name] = (
                column.to_numpy()
                if column.null_count == 0
                else np.asarray(column.to_pylist(), dtype=float)
            )
    return out


def table_problems(
    requests: pa.Table,
    steps: pa.Table,
    summary: dict,
    *,
    kv_blocks_per_model: list[int] | None = None,
    prefix_caching: bool = False,
    steps_mode: str = "full",
) -> list[str]:
    """The invariants on a run's two tables and its summary (see the module docstring).

    ``kv_blocks_per_model`` is each model's KV pool in blocks (None: not checked);
    ``steps_mode`` is the run's ``output.steps``."""
    bad = [f"requests lack column {c}" for c in REQUEST_COLUMNS if c not in requests.column_names]
    bad += [f"steps lack column {c}" for c in STEP_COLUMNS if c not in steps.column_names]
    bad += [f"summary lacks {k}" for k in SUMMARY_KEYS if k not in summary]
    bad += [
        f"summary {m} lacks {STATS}"
        for m in DISTRIBUTIONS
        if not isinstance(summary.get(m), dict) or any(s not in summary[m] for s in STATS)
    ]
    if bad:
        return bad
    req, st = _numpy(requests), _numpy(steps)
    n = len(req["request_id"])
    if sorted(req["request_id"].tolist()) != list(range(n)):
        bad.append("request ids are not 0..n-1, each once")
    status = req["status"]
    # with faults (``faults.*``), a fifth way to end: failed, with its cause
    statuses = STATUSES | {"failed"} if "failed" in summary else STATUSES
    if not set(status.tolist()) <= statuses:
        bad.append(f"unknown status {set(status.tolist()) - statuses}")
    if "failed" in summary:
        bad += _failure_problems(req, summary)
    for name in statuses:
        if summary[name] != int((status == name).sum()):
            bad.append(f"summary {name}={summary[name]} but the table has {(status == name).sum()}")
    if summary.get("num_requests", n) != n:
        bad.append(f"summary num_requests={summary['num_requests']} but the table has {n} rows")
    done = status == "completed"
    arrival, first, end = (
        req[k] for k in ("arrival_time_s", "first_token_time_s", "completion_time_s")
    )
    out_tokens = req["output_tokens"]
    if np.any(first[done] < arrival[done] - EPS) or np.any(end[done] < first[done] - EPS):
        bad.append("a completed request's times are out of order")
    if np.any(np.abs(req["ttft_s"][done] - (first[done] - arrival[done])) > 1e-9):
        bad.append("ttft_s != first_token_time_s - arrival_time_s")
    e2e = end[done] - arrival[done]
    if np.any(np.abs(req["e2e_s"][done] - e2e) > 1e-9):
        bad.append("e2e_s != completion_time_s - arrival_time_s")
    multi = done & (out_tokens > 1)
    want_tpot = (req["e2e_s"][multi] - req["ttft_s"][multi]) / (out_tokens[multi] - 1)
    if np.any(np.abs(req["tpot_s"][multi] - want_tpot) > 1e-9 * (1 + np.abs(want_tpot))):
        bad.append("tpot_s is not (e2e - ttft) / (output_tokens - 1)")
    if not np.all(np.isnan(req["tpot_s"][done & (out_tokens == 1)])):
        bad.append("a one-token output has a TPOT")
    if "itl_s" in req and np.any(np.abs(req["itl_s"][done] - e2e / out_tokens[done]) > 1e-9):
        bad.append("itl_s != e2e_s / output_tokens")
    rejected = status == "rejected"
    if not (np.all(np.isnan(first[rejected])) and np.all(np.isnan(end[rejected]))):
        bad.append("a rejected request has a token")
    if not np.all(np.isnan(end[~done])):
        bad.append("a request that did not complete has a completion time")
    if "reject_reason" in req:
        reasons = req["reject_reason"]
        given = np.array([r is not None for r in reasons], dtype=bool)
        if np.any(given != rejected):
            bad.append("reject_reason is not set exactly for the rejected requests")
        named = {r for r in reasons[given]}
        if not named <= REJECT_REASONS:
            bad.append(f"unknown reject_reason {named - REJECT_REASONS}")
        counted = {r: int((reasons[given] == r).sum()) for r in named}
        if summary.get("rejected_by_reason", counted) != counted:
            bad.append(f"summary rejected_by_reason={summary['rejected_by_reason']} but {counted}")
    for stat, value in zip(
        STATS[1:],
        np.percentile(req["ttft_s"][done], [50, 90, 95, 99]) if done.any() else [None] * 4,
        strict=True,
    ):
        got = summary["ttft_s"][stat]
        if (value is None) != (got is None) or (value is not None and abs(got - value) > 1e-9):
            bad.append(f"summary ttft_s.{stat}={got} but the table gives {value}")
    # steps
    if steps_mode == "none":
        if len(st["duration_s"]):
            bad.append("output.steps=none but steps.parquet has rows")
        return bad
    if steps_mode == "bucketed":
        if int(st["num_steps"].sum()) != summary["num_steps"]:
            bad.append("the buckets' num_steps do not add up to the summary's")
    elif len(st["duration_s"]) and np.any(st["duration_s"] <= 0):
        bad.append("a step lasts <= 0 s")
    if np.any(st["num_seqs"] < 1):
        bad.append("a step holds no sequence")
    model_ids = st.get("model_id", np.zeros(len(st["duration_s"]), dtype=np.int64))
    for rid in np.unique(st["replica_id"]) if steps_mode == "full" else ():
        mine = st["replica_id"] == rid
        order = np.argsort(st["start_time_s"][mine], kind="stable")
        start = st["start_time_s"][mine][order]
        stop = start + st["duration_s"][mine][order]
        if np.any(start[1:] < stop[:-1] - EPS):
            bad.append(f"replica {rid}: steps overlap")
    if np.any(st["kv_blocks_used"] < 0):
        bad.append("negative kv_blocks_used")
    if kv_blocks_per_model is not None and len(model_ids):
        pool = np.asarray(kv_blocks_per_model)[model_ids]
        if np.any(st["kv_blocks_used"] > pool):
            bad.append("KV blocks in use above the pool")
    if st["num_decode_tokens"].sum() < (out_tokens[done] - 1).sum():
        bad.append("fewer decode tokens than the completed requests' outputs after the first")
    if not prefix_caching and st["num_prefill_tokens"].sum() < req["prompt_tokens"][done].sum():
        bad.append("fewer prefill tokens than the completed requests' prompts")
    if summary["num_preemptions"] != int(req["num_preemptions"].sum()):
        bad.append("summary num_preemptions disagrees with the table")
    cost = summary["cost"]
    scaled = summary.get("autoscale")
    if scaled is not None:  # billed for what it held: the span's bill over its hours
        hours = summary["duration_s"] / 3600
        if abs(cost["usd_per_hour"] * hours - scaled["usd_total"]) > 1e-9 * (
            1 + scaled["usd_total"]
        ):
            bad.append("cost.usd_per_hour x span != autoscale.usd_total")
        if scaled["gpu_hours"] > summary["num_gpus"] * hours * (1 + 1e-12):
            bad.append("autoscale.gpu_hours above the peak GPUs over the span")
    elif abs(cost["usd_per_hour"] - summary["num_gpus"] * cost["usd_per_gpu_hour"]) > 1e-9:
        bad.append("cost.usd_per_hour != num_gpus x usd_per_gpu_hour")
    tiers = cost.get("per_tier")
    if tiers is not None:  # a fleet bought at price tiers: the tiers make up the fleet and bill
        if sum(t["replicas"] for t in tiers.values()) != summary["num_replicas"]:
            bad.append("cost.per_tier replicas do not add up to num_replicas")
        if sum(t["gpus"] for t in tiers.values()) != summary["num_gpus"]:
            bad.append("cost.per_tier gpus do not add up to num_gpus")
        if abs(sum(t["usd_per_hour"] for t in tiers.values()) - cost["usd_per_hour"]) > 1e-9 * (
            1 + cost["usd_per_hour"]
        ):
            bad.append("cost.per_tier usd_per_hour do not add up to cost.usd_per_hour")
    return bad


def _failure_problems(req: dict[str, np.ndarray], summary: dict) -> list[str]:
    """A run with faults: ``fail_reason`` set exactly for the failed requests, counted in
    ``failed_by_reason``; no failed request has a completion time."""
    bad = []
    failed = req["status"] == "failed"
    reasons = req["fail_reason"]
    given = np.array([r is not None for r in reasons], dtype=bool)
    if np.any(given != failed):
        bad.append("fail_reason is not set exactly for the failed requests")
    named = {r for r in reasons[given]}
    counted = {r: int((reasons[given] == r).sum()) for r in named}
    if summary["failed_by_reason"] != counted:
        bad.append(f"summary failed_by_reason={summary['failed_by_reason']} but {counted}")
    if np.any(req["retries"] < 0) or np.any(req["retry_lost_s"][req["retries"] == 0] != 0):
        bad.append("retry_lost_s set for a request never retried")
    return bad


def run_problems(run_dir: str | Path) -> list[str]:
    """The contract and the invariants, on a run folder as written."""
    run = Path(run_dir)
    missing = [
        f"missing {name}"
        for name in ("requests.parquet", "steps.parquet", "summary.json", "config.yaml")
        if not (run / name).is_file()
    ]
    if missing:
        return missing
    leftovers = [p.name for p in run.iterdir() if p.name.endswith(".partial")]
    if leftovers:
        return [f"temporary files left: {leftovers}"]
    summary = json.loads((run / "summary.json").read_text())
    config = yaml.safe_load((run / "config.yaml").read_text())
    block_size = config["kv"]["block_size"]
    capacities = summary.get("kv_capacity_tokens_per_model", [summary["kv_capacity_tokens"]])
    return table_problems(
        pq.read_table(run / "requests.parquet"),
        pq.read_table(run / "steps.parquet"),
        summary,
        kv_blocks_per_model=[c // block_size for c in capacities],
        steps_mode=(config.get("output") or {}).get("steps", "full"),
    )
