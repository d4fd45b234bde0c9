"""Fidelity: MLPerf Inference Server results, each predicted by the capacity search.

    python benchmarks/fidelity_mlperf.py                      # every v4.1 row that maps
    python benchmarks/fidelity_mlperf.py --rows 5 --jobs 2    # a quick look
    python benchmarks/fidelity_mlperf.py --round v4.0 --csv mlperf_v40.csv

A Server result (``data/mlperf/server_results.csv``) is the highest Poisson arrival rate a system
sustained while its p99 time to first token and p99 time per output token stayed within the
benchmark's bounds. Each row that ``sim.harness.mlperf_configs.map_result`` maps to configs is
simulated here as the benchmark ran it, and its rate at the SLO is found by the capacity search
of ``fleetcast plan plan.solve=max_rate`` (``sim.plan.capacity.fleet_capacity``, through its
Python API), with the roofline step time and nothing fitted to any row. The prediction is
compared with the measured completed samples per second (one sample per query; tokens/s is
that times the mean output, so its error is the same).

How each row is simulated (``setup``):

- SLO: ``ttft_s.p99 <= TTFT bound`` and ``tpot_s.p99 <= TPOT bound``. LoadGen's TPOT is
  ``(latency - first token latency) / (tokens - 1)`` per sample (``loadgen/logging.cc``,
  mlcommons/inference @ b66003e10e2db4b8c36a448b0545ec90fcc6e9e9): the first token excluded,
  which is Fleetcast's ``tpot_s`` (vLLM's definition).
- Arrivals: Poisson (LoadGen's Server scenario).
- Lengths: the datasets' own prompt lengths, resampled (``workload.prompt_tokens: {dist:
  empirical}``): ``data/mlperf/lengths_llama2_70b.parquet`` (the 24,576 prompts of
  open_orca_gpt4_tokenized_llama.sampled_24576, mean 222.3 tokens, 48 to 1,021) and
  ``lengths_mixtral_8x7b.parquet`` (the 15,000 of 09292024_mixtral_15k_mintoken2_v1, mean
  427.4); ``data/mlperf/README.md`` says where they come from. Mixtral's outputs are its
  reference run's lengths from the same file (mean 144.8; the reference's 145.9). Llama 2's
  outputs are not in its dataset (its lengths there are GPT-4's answers): a lognormal of sigma
  ``OUTPUT_SIGMA`` clipped at the generation limit (1,024 tokens), its median solved so the
  clipped mean is the reference run's mean output (294.45, ``data/mlperf/benchmarks.csv``): a
  skewed, long-tailed form, as chat answers are. (The first version of this benchmark assumed
  a lognormal prompt of mean ~570 tokens before these files were found: 23.5% MAPE on v4.1.)
- The engine as the submitter's code sets it (``ENGINES``, each with its source path in
  mlcommons/inference_results_v4.1 @ 198fc46799b3328b36ee4bcbdebfa2db5a8e6183): tensor
  parallelism, the batch limit (``gpu_batch_size`` -> ``scheduler.max_num_seqs``), the token
  budget (``max_num_tokens``), the KV cache's share of free memory, FP8 weights and FP8 KV
  cache. TensorRT-LLM rows run ``scheduler=trtllm`` with the harness's ``max_util`` capacity
  policy (``code/harness/harness_llm/main_llm.cc``: the default of
  ``--trtllm_batch_sched_policy``, which the Llama 2 and Mixtral harnesses never set) and no
  context chunking (the v4.1 harness builds ``SchedulerConfig`` from the policy alone); AMD's
  vLLM 0.4.3 rows run ``scheduler=vllm`` without chunked prefill. Partner submissions run
  NVIDIA's code with configs copied from NVIDIA's per-GPU classes: their GPU's class is used.
- The fleet: ``accelerators_total / tp`` replicas. One replica is simulated at the fleet's rate
  divided by their number, and the prediction is that replica's capacity times the count
  (``--whole-fleet`` simulates every replica behind a least-outstanding router, NVIDIA's
  harness's load balancing: ``traffic_distribution_policy``; slower, and a check of the
  split: on NVIDIA's 8 x H200 Llama 2 row the whole fleet gave 103.5 samples/s against the
  split's 105.3, 2% apart, run 2026-12-05).
- Requests: ``--requests`` per simulated replica (3,000: p99 rests on its 30 slowest, and at a
  Llama 2 70B replica's 10-20 requests/s the run spans several minutes, as LoadGen's 600 s
  minimum does); at least 2 and at most 3 replications per rate (seeds 0, 1, 2). The interval
  ``[predicted_lo, predicted_hi]`` is the capacity search's 95% interval over replications.

Rows with the same setup share one search. Printed: every row's measured and predicted
samples/s and error, MAPE by benchmark, GPU, engine, round, benchmark x GPU and overall, and
the rows that cannot be expressed with their reasons. ``--csv PATH`` writes the rows
(``write_csv``); over every round it is ``data/mlperf/server_predictions.csv``, whose held-out
rows are part of the step-time model's error bands (``benchmarks/model_error_bands.py
--mlperf`` writes it).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sim.config.validation import validate
from sim.harness.mlperf import (
    HELD_OUT_ROUNDS,
    BenchmarkSpec,
    ServerResult,
    load_benchmarks,
    load_results,
)
from sim.harness.mlperf_configs import ConfigMapping, map_result
from sim.plan.capacity import Capacity, capacity_json, fleet_capacity
from sim.plan.rate_search import FOUND
from sim.plan.rounds import Rounds
from sim.plan.runs import LocalLauncher, Simulations
from sim.plan.settings import PlanConfig
from sim.plan.slo import parse

RESULTS_REPO = "mlcommons/inference_results_v4.1@198fc46799b3328b36ee4bcbdebfa2db5a8e6183"
OUTPUT_SIGMA = 0.8  # Llama 2's outputs' spread; their clipped mean is the reference's
# each benchmark family's dataset lengths (module docstring): the prompts' file, and whether
# its output column is the benchmark model's own reference run (Mixtral) or not (Llama 2)
LENGTHS = {
    "llama2_70b": ("shipped:mlperf/lengths_llama2_70b.parquet", False),
    "mixtral_8x7b": ("shipped:mlperf/lengths_mixtral_8x7b.parquet", True),
}
# the search's starting rate per replica (requests/s) and its range of multiples: a start, not
# an estimate of anything measured
BASE_QPS = 4.0
MAX_RATE_FACTOR = 64.0
MIN_RATE_FACTOR = 1 / 64


@dataclass(frozen=True)
class Engine:
    """How a submitter's code ran one model on one GPU (its source names where it says so)."""

    tp: int
    max_num_seqs: int
    max_num_tokens: int
    source: str
    # the Fleetcast scheduler where it is not the one map_result names (an older engine's)
    scheduler: str | None = None


_NV = "closed/NVIDIA/configs/{bench}/Server/__init__.py"
# (scheduler, model, hardware, system pattern) -> Engine; the first match wins
ENGINES: tuple[tuple[str, str, str, re.Pattern[str], Engine], ...] = (
    # TensorRT-LLM, Llama 2 70B: max_num_tokens 4096 (configs/llama2-70b/__init__.py)
    (
        "trtllm",
        "llama2_70b",
        "h100_sxm",
        re.compile(""),
        Engine(2, 1024, 4096, _NV.format(bench="llama2-70b") + " H100_SXM_80GB_TP2x4"),
    ),
    (
        "trtllm",
        "llama2_70b",
        "h200",
        re.compile(r"CTS.*x1_|CTSx1"),
        Engine(1, 850, 4096, _NV.format(bench="llama2-70b") + " H200_SXM_141GB_CTSx1"),
    ),
    (
        "trtllm",
        "llama2_70b",
        "h200",
        re.compile(r"CTS"),
        Engine(1, 1024, 4096, _NV.format(bench="llama2-70b") + " H200_SXM_141GB_CTSx8"),
    ),
    (
        "trtllm",
        "llama2_70b",
        "h200",
        re.compile(""),
        Engine(1, 896, 4096, _NV.format(bench="llama2-70b") + " H200_SXM_141GBx8"),
    ),
    (
        "trtllm",
        "llama2_70b",
        "h100_pcie",
        re.compile(""),
        Engine(
            2,
            896,
            4096,
            "closed/ASUSTeK/configs/llama2-70b/Server/custom.py ESC8000A_E12_H100X8"
            " (tp 2 from ServerGPUBaseConfig)",
        ),
    ),
    (
        "trtllm",
        "llama2_70b",
        "l40s",
        re.compile(""),
        Engine(4, 1024, 4096, "closed/Fujitsu/configs/llama2-70b/Server/custom.py CDI_L40SX8"),
    ),
    # TensorRT-LLM, Mixtral 8x7B: max_num_tokens 16384 (configs/mixtral-8x7b/__init__.py)
    (
        "trtllm",
        "mixtral_8x7b",
        "h100_sxm",
        re.compile(""),
        Engine(1, 896, 16384, _NV.format(bench="mixtral-8x7b") + " H100_SXM_80GBx8"),
    ),
    (
        "trtllm",
        "mixtral_8x7b",
        "h200",
        re.compile(r"CTS"),
        Engine(1, 3072, 16384, _NV.format(bench="mixtral-8x7b") + " H200_SXM_141GB_CTSx8"),
    ),
    (
        "trtllm",
        "mixtral_8x7b",
        "h200",
        re.compile(""),
        Engine(1, 1200, 8192, _NV.format(bench="mixtral-8x7b") + " H200_SXM_141GBx8"),
    ),
    # vLLM 0.4.3 (ROCm), Llama 2 70B: TP 1 x DP 8, 768 sequences, 65,536 tokens per step
    (
        "vllm",
        "llama2_70b",
        "mi300x",
        re.compile(""),
        Engine(
            1,
            768,
            65536,
            "closed/AMD/code/llama2-70b-99.9/test_VllmFp8/"
            "test_VllmFp8_SyncServer_perf.sh (TP=1, DP=8) and VllmFp8/mainVllmFp8_SyncServer.py",
            # vLLM 0.4.3 has only the v0 engine; without chunked prefill (commented out in
            # mainVllmFp8_SyncServer.py) its scheduler runs a step of prefills whenever one is
            # waiting and all decodes otherwise (vllm-project/vllm vllm/core/scheduler.py,
            # Scheduler._schedule_default): Fleetcast's prefill_first
            scheduler="prefill_first",
        ),
    ),
)
# the engines' memory rules, as their submissions set them
TRTLLM_KV_FRACTION = 0.9  # kvcache_free_gpu_mem_frac of NVIDIA's ServerGPUBaseConfig
VLLM_MEMORY_UTILIZATION = 0.99  # AMD's mainVllmFp8_SyncServer.py default


@dataclass(frozen=True)
class Setup:
    """A row as one simulated replica: its overrides, and how many replicas the fleet has."""

    overrides: tuple[str, ...]
    replicas: int  # the fleet's
    simulated: int  # the replicas simulated: 1, or the fleet's (--whole-fleet)
    tp: int
    engine: Engine


def _clipped_lognormal_mean(median: float, sigma: float, upper: float) -> float:
    """E[min(X, upper)] for X lognormal(ln median, sigma) (the clip at the generation limit)."""
    mu = math.log(median)

    def phi(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    z = (math.log(upper) - mu) / sigma
    return math.exp(mu + sigma**2 / 2) * phi(z - sigma) + upper * (1 - phi(z))


def output_median(mean: float, sigma: float, upper: float) -> float:
    """The median whose lognormal, clipped at ``upper``, has this mean (bisection)."""
    low, high = 1.0, upper
    for _ in range(60):
        mid = math.sqrt(low * high)
        if _clipped_lognormal_mean(mid, sigma, upper) < mean:
            low = mid
        else:
            high = mid
    return round(math.sqrt(low * high), 2)


def lengths(spec: BenchmarkSpec, model: str) -> tuple[str, str]:
    """``workload.prompt_tokens`` and ``workload.output_tokens`` overrides (module docstring)."""
    path, has_outputs = LENGTHS[model]
    prompt = f"workload.prompt_tokens={{dist: empirical, path: '{path}', column: prompt_tokens}}"
    if has_outputs:
        output = (
            f"workload.output_tokens={{dist: empirical, path: '{path}', column: output_tokens}}"
        )
        return prompt, output
    assert spec.output_tokens_max is not None and spec.output_tokens_mean is not None, spec
    out_median = output_median(spec.output_tokens_mean, OUTPUT_SIGMA, spec.output_tokens_max)
    output = (
        f"workload.output_tokens={{dist: lognormal, median: {out_median:g}, "
        f"sigma: {OUTPUT_SIGMA}, min: 2, max: {spec.output_tokens_max}}}"
    )
    return prompt, output


def engine_for(row: ServerResult, mapping: ConfigMapping) -> Engine | None:
    for scheduler, model, hardware, system, engine in ENGINES:
        if (mapping.scheduler, mapping.model, mapping.hardware) == (scheduler, model, hardware):
            if system.search(row.system):
                return engine
    return None


def setup(
    row: ServerResult,
    mapping: ConfigMapping,
    spec: BenchmarkSpec,
    requests: int,
    whole_fleet: bool = False,
) -> Setup | str:
    """The simulated replica of ``row`` (or the fleet, ``whole_fleet``), or why there is none."""
    engine = engine_for(row, mapping)
    if engine is None:
        return f"no engine settings for {mapping.scheduler} {mapping.model} on {mapping.hardware}"
    if row.accelerators_total % engine.tp:
        return f"{row.accelerators_total} GPUs do not split into TP {engine.tp} replicas"
    replicas = row.accelerators_total // engine.tp
    simulated = replicas if whole_fleet else 1
    assert mapping.model is not None, mapping
    prompt, output = lengths(spec, mapping.model)
    scheduler = engine.scheduler or mapping.scheduler
    common = [
        f"model={mapping.model}",
        f"hardware={mapping.hardware}",
        f"precision.weights={mapping.weights}",
        "precision.kv=fp8",  # NVIDIA's --kv_cache_dtype fp8, AMD's --kv-cache-dtype fp8
        f"fleet.tp={engine.tp}",
        "router=least_outstanding",
        "step_time=roofline",
        f"scheduler={scheduler}",
        f"scheduler.max_num_seqs={engine.max_num_seqs}",
        f"scheduler.max_num_batched_tokens={engine.max_num_tokens}",
        "workload=poisson",
        f"workload.qps={BASE_QPS * simulated:g}",
        f"workload.num_requests={requests * simulated}",
        prompt,
        output,
        f"slo.ttft_s={row.ttft_bound_s:g}",
        f"slo.tpot_s={row.tpot_bound_s:g}",
    ]
    if mapping.scheduler == "trtllm":
        common += [
            "scheduler.capacity_policy=max_utilization",
            "scheduler.enable_chunked_context=false",
            "kv.block_size=32",
            "kv.watermark=0",
            f"memory.kv_cache_free_gpu_mem_fraction={TRTLLM_KV_FRACTION}",
        ]
    else:
        common.append(f"memory.gpu_memory_utilization={VLLM_MEMORY_UTILIZATION}")
        if scheduler == "vllm":
            common.append("scheduler.enable_chunked_prefill=false")
    return Setup(tuple(common), replicas, simulated, engine.tp, engine)


@dataclass
class Row:
    result: ServerResult
    mapping: ConfigMapping
    setup: Setup
    predicted: float | None = None
    lo: float | None = None
    hi: float | None = None
    outcome: str = ""

    @property
    def error(self) -> float | None:
        measured = self.result.completed_samples_per_s
        return None if self.predicted is None else (self.predicted - measured) / measured


def plan_config(jobs: int) -> PlanConfig:
    """The capacity search's settings (``plan.*``), checked as ``fleetcast plan`` checks them."""
    settings = {
        "slo": ["ttft_s.p99 <= 1"],  # (each search gets its row's own constraints)
        "solve": "max_rate",
        "max_rate_factor": MAX_RATE_FACTOR,
        "min_rate_factor": MIN_RATE_FACTOR,
        "rate_tolerance": 0.02,
        "min_replications": 2,
        "max_replications": 3,
        "jobs": jobs,
    }
    plan: PlanConfig = validate(PlanConfig, settings, "plan")
    return plan


def search_all(
    setups: dict[tuple[tuple[str, ...], str], Setup],
    folder: Path,
    jobs: int,
    say: Callable[[str], None],
) -> dict[tuple[tuple[str, ...], str], dict[str, Any]]:
    """Each distinct setup's capacity (``plan.json``'s ``capacity`` object), searched side by
    side in one set of rounds."""
    plan = plan_config(jobs)
    keys = list(setups)
    with LocalLauncher(folder, jobs) as launch:
        rounds: Rounds[Any] = Rounds(launch)

        def one(key: tuple[tuple[str, ...], str]) -> Capacity:
            overrides, slo = key
            constraints = [parse(text) for text in slo.split(";")]
            sims = Simulations(list(overrides), 0, rounds)
            capacity = fleet_capacity(sims, constraints, plan, setups[key].simulated)
            say(f"  searched: {describe(setups[key])}: x{capacity.bracket.meets}")
            return capacity

        found = rounds.run([partial(one, key) for key in keys])
    return {key: capacity_json(c, plan) for key, c in zip(keys, found, strict=True)}


def describe(s: Setup) -> str:
    picked = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in s.overrides if "{" not in o}
    return f"{picked['model']} {picked['hardware']} tp{s.tp} {picked['scheduler']}"


def slo_key(row: ServerResult) -> str:
    return f"ttft_s.p99 <= {row.ttft_bound_s:g};tpot_s.p99 <= {row.tpot_bound_s:g}"


def mape(errors: Iterable[float | None]) -> tuple[float, int]:
    known = [abs(e) for e in errors if e is not None]
    return (100 * sum(known) / len(known) if known else math.nan), len(known)


GROUPS: dict[str, Callable[[Row], str]] = {
    "benchmark": lambda r: r.result.benchmark,
    "GPU": lambda r: r.mapping.hardware or "",
    "engine": lambda r: r.mapping.scheduler or "",
    "round": lambda r: r.result.round,
    "benchmark x GPU": lambda r: f"{r.result.benchmark} x {r.mapping.hardware}",
}


def summary_tables(rows: list[Row]) -> dict[str, dict[str, tuple[float, int]]]:
    tables: dict[str, dict[str, tuple[float, int]]] = {}
    for name, key in GROUPS.items():
        names = sorted({key(r) for r in rows})
        tables[name] = {n: mape(r.error for r in rows if key(r) == n) for n in names}
    tables["overall"] = {"all": mape(r.error for r in rows)}
    return tables


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_rows(rows: list[Row]) -> None:
    head = (
        f"{'round':5} {'submitter':24} {'system':42} {'benchmark':16} {'hardware':9} "
        f"{'sched':6} {'tp':>2} {'repl':>4} {'measured':>9} {'predicted':>9} "
        f"{'[lo, hi]':>17} {'error':>7}"
    )
    print(head)
    for r in sorted(
        rows, key=lambda r: (r.result.benchmark, r.mapping.hardware or "", r.result.system)
    ):
        res = r.result
        err = "-" if r.error is None else f"{100 * r.error:+.1f}%"
        print(
            f"{res.round:5} {res.submitter[:24]:24} {res.system[:42]:42} {res.benchmark:16} "
            f"{r.mapping.hardware or '':9} {r.mapping.scheduler or '':6} {r.setup.tp:>2} "
            f"{r.setup.replicas:>4} {res.completed_samples_per_s:>9.2f} {_f(r.predicted):>9} "
            f"{'[' + _f(r.lo) + ', ' + _f(r.hi) + ']':>17} {err:>7}"
            + ("" if r.outcome in ("", FOUND) else f"  ({r.outcome})")
        )


def print_summary(rows: list[Row]) -> None:
    for name, table in summary_tables(rows).items():
        by = "" if name == "overall" else "by "
        print(f"\nMAPE {by}{name} (throughput at the SLO, samples/s):")
        for group, (value, n) in table.items():
            print(f"  {group:40} {value:6.1f}%  ({n} rows)")


def print_worst(rows: list[Row], count: int = 10) -> None:
    """The rows furthest off, one per distinct system and benchmark family (-99 and -99.9 of
    one system are the same run's figures in most submissions)."""
    seen: set[tuple[str, str, str]] = set()
    worst: list[Row] = []
    for r in sorted(rows, key=lambda r: -abs(r.error or 0)):
        key = (r.result.submitter, r.result.system, r.result.benchmark.split("-99")[0])
        if key not in seen:
            seen.add(key)
            worst.append(r)
    print(f"\nThe {count} rows furthest off (one per system and model):")
    for r in worst[:count]:
        res = r.result
        print(
            f"  {100 * (r.error or 0):+6.1f}%  {res.submitter} {res.system} {res.benchmark} "
            f"({r.mapping.hardware}, {r.mapping.scheduler}, tp {r.setup.tp})"
        )


def row_id(result: ServerResult) -> str:
    """A row's name, unique in ``server_results.csv``: ``v4.0/Dell/<system>/llama2-70b-99.9``."""
    return f"{result.round}/{result.submitter}/{result.system}/{result.benchmark}"


CSV_COLUMNS = (
    "row_id", "round", "held_out", "submitter", "system", "benchmark", "accelerator",
    "hardware", "scheduler", "precision", "tp", "replicas", "max_num_seqs", "max_num_tokens",
    "measured_samples_per_s", "predicted_samples_per_s", "predicted_lo", "predicted_hi",
    "error", "ratio", "outcome", "engine_source",
)  # fmt: skip


def write_csv(rows: list[Row], path: Path) -> None:
    """The per-row table (``--csv``): each row's measured and predicted samples/s at the SLO,
    ``error`` = (predicted - measured) / measured, ``ratio`` = predicted / measured (> 1: the
    simulated engine is too fast), and ``held_out``: whether its round is one the fidelity
    work was not developed on (``sim.harness.mlperf.HELD_OUT_ROUNDS``; v4.1's rows are
    ``False``). ``data/mlperf/server_predictions.csv`` is this table, for the model-error
    bands (``benchmarks/model_error_bands.py``)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for r in sorted(rows, key=lambda r: row_id(r.result)):
            res, m, s = r.result, r.mapping, r.setup
            measured = res.completed_samples_per_s
            # the ratio of the figures as written, so that a reader recomputes it exactly
            shown = None if r.predicted is None else float(f"{r.predicted:.4g}")
            writer.writerow([
                row_id(res), res.round, res.round in HELD_OUT_ROUNDS, res.submitter, res.system,
                res.benchmark, res.accelerator, m.hardware, m.scheduler, m.weights, s.tp,
                s.replicas, s.engine.max_num_seqs, s.engine.max_num_tokens, measured,
                "" if shown is None else f"{shown:g}",
                "" if r.lo is None else f"{r.lo:.4g}",
                "" if r.hi is None else f"{r.hi:.4g}",
                "" if r.error is None else f"{r.error:.4f}",
                "" if shown is None else f"{shown / measured:.4f}",
                r.outcome, s.engine.source,
            ])  # fmt: skip


def predict(rows: list[Row], capacities: dict[Any, dict[str, Any]]) -> None:
    """Each row's prediction: its simulated replica's capacity times the fleet's replicas."""
    for r in rows:
        c = capacities[(r.setup.overrides, slo_key(r.result))]
        r.outcome = c["outcome"]
        rps = c.get("requests_per_s")
        if rps is None:  # the SLO fails at the lowest rate tried, or holds at the highest
            k = c["rate_x"] if c["rate_x"] is not None else c["misses_at_rate_x"]
            rps = k * (c.get("base_requests_per_s") or 0)
        scale = r.setup.replicas / r.setup.simulated
        r.predicted = rps * scale
        interval = (c.get("interval") or {}).get("requests_per_s")
        if interval:
            r.lo = interval["ci_low"] * scale
            r.hi = interval["ci_high"] * scale


def select(args: argparse.Namespace) -> tuple[list[Row], list[tuple[ServerResult, str]]]:
    specs = load_benchmarks()
    results = [r for r in load_results() if args.round in (None, r.round)]
    if args.benchmark:
        results = [r for r in results if re.search(args.benchmark, r.benchmark)]
    if args.hardware:
        results = [r for r in results if re.search(args.hardware, r.accelerator, re.I)]
    rows: list[Row] = []
    refused: list[tuple[ServerResult, str]] = []
    for result in results:
        mapping = map_result(result)
        if not mapping.expressible:
            refused.append((result, "; ".join(mapping.reasons)))
            continue
        s = setup(
            result, mapping, specs[result.benchmark], args.requests,
            args.whole_fleet,
        )  # fmt: skip
        if isinstance(s, str):
            refused.append((result, s))
            continue
        rows.append(Row(result, mapping, s))
    if args.rows:
        rows = rows[: args.rows]
    return rows, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", help="only this round (e.g. v4.1); default every round")
    parser.add_argument("--benchmark", help="only benchmarks matching this pattern")
    parser.add_argument("--hardware", help="only accelerators matching this pattern")
    parser.add_argument("--rows", type=int, help="only the first N expressible rows")
    parser.add_argument("--requests", type=int, default=3000, help="requests per replica")
    parser.add_argument("--whole-fleet", action="store_true", help="simulate every replica")
    parser.add_argument("--jobs", type=int, default=2, help="simulations at once")
    parser.add_argument("--csv", type=Path, help="write the per-row table here")
    parser.add_argument("--folder", type=Path, help="keep the simulations here (resumable)")
    args = parser.parse_args(argv)

    rows, refused = select(args)
    setups = {(r.setup.overrides, slo_key(r.result)): r.setup for r in rows}
    print(
        f"{len(rows)} rows to simulate ({len(setups)} distinct setups), "
        f"{len(refused)} cannot be expressed",
        file=sys.stderr,
    )
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        capacities = search_all(setups, folder, args.jobs, lambda s: print(s, file=sys.stderr))
    predict(rows, capacities)
    print_rows(rows)
    print_summary(rows)
    print_worst(rows)
    if refused:
        print(f"\nRows that cannot be expressed ({len(refused)}):")
        for result, why in refused:
            print(f"  {result.round} {result.submitter} {result.system} {result.benchmark}: {why}")
    print(f"\n({time.monotonic() - start:.0f} s; {args.requests} requests per replica)")
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
