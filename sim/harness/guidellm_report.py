"""GuideLLM's benchmark report (``guidellm benchmark --output-path F.json|F.yaml``, v0.2.x):
``benchmarks[]``, one ``generative_benchmark`` per load level of the run (a sweep writes
several); the JSON and YAML forms hold the same content.

Each benchmark holds ``args`` (``profile``, ``strategy`` with its ``type_``: synchronous,
concurrent (``streams``), throughput, constant or poisson (``rate``); ``max_number``,
``max_duration`` s), ``worker.backend_model``, ``request_loader.data`` (e.g.
``prompt_tokens=256,output_tokens=128``), ``request_totals`` {successful, errored, incomplete},
``duration`` s, and ``metrics``: per metric, per status (``successful`` is the one read here), a
distribution {mean, median, std_dev, percentiles {p001 ... p999}, ...}. Latencies are in
milliseconds (``*_ms``) except ``request_latency``, in seconds.

Definitions (checked on the shipped report's sample request, GuideLLM v0.2.1+dev, June 2025):
TTFT = first - start; **time per output token = (last - first)/output_tokens**, the first
token counted in the denominator, unlike vLLM's TPOT; inter-token latency = (last - first) /
(output_tokens - 1), vLLM's TPOT; request latency = end - start. Distributions are over
requests. ``requests_per_second`` and ``output_tokens_per_second`` are GuideLLM's rates over the
benchmark's time; their means are the throughputs it prints.

Left out on purpose: the ``errored`` and ``incomplete`` distributions (a simulation's completed
requests compare with ``successful``), ``request_concurrency``, ``tokens_per_second``, and the
per-request records when they are a sample (``requests`` can be cut down: kept only when they
hold every successful request).
"""

from __future__ import annotations

from pathlib import Path

from sim.harness.parsing import Keys, bad_file, request_times
from sim.harness.results import Definition, MeasuredRequests, MeasuredRun, Statistic

TOOL = "guidellm"
# GuideLLM's percentile keys -> the percentile (p001 is the 0.1th, p999 the 99.9th)
PERCENTILES = {
    "p001": 0.1,
    "p01": 1.0,
    "p05": 5.0,
    "p10": 10.0,
    "p25": 25.0,
    "p50": 50.0,
    "p75": 75.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
    "p999": 99.9,
}
# role -> (GuideLLM's metric, seconds per unit of the file, definition)
METRICS = {
    "ttft": ("time_to_first_token_ms", 1e-3, Definition.TTFT),
    "tpot": ("time_per_output_token_ms", 1e-3, Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN),
    "itl": ("inter_token_latency_ms", 1e-3, Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST),
    "e2e": ("request_latency", 1.0, Definition.E2E),
}


def is_guidellm_report(doc: object) -> bool:
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        return False
    return any(isinstance(b, dict) and "metrics" in b for b in doc["benchmarks"])


def _successful(metrics: Keys, name: str) -> Keys | None:
    metric = metrics.optional_child(name)
    return None if metric is None else metric.child("successful")


def _statistic(metrics: Keys, name: str, unit_s: float, definition: Definition) -> Statistic | None:
    dist = _successful(metrics, name)
    if dist is None:
        return None
    percentiles = {}
    given = dist.optional_child("percentiles")
    if given is not None:
        for key, percentile in PERCENTILES.items():
            value = given.measured_seconds(key, unit_s)
            if value is not None:
                percentiles[percentile] = value
    median = dist.measured_seconds("median", unit_s)
    if median is not None:
        percentiles[50.0] = median
    return Statistic(
        name=name,
        definition=definition,
        mean_s=dist.seconds("mean", unit_s),
        percentiles_s=dict(sorted(percentiles.items())),
        std_s=dist.measured_seconds("std_dev", unit_s, spread=True),
    )


def _load(strategy: Keys) -> tuple[float | None, int | None]:
    """(request rate, concurrency cap) of GuideLLM's strategy."""
    kind = strategy.text("type_")
    if kind == "synchronous":
        return None, 1
    if kind == "concurrent":
        return None, strategy.count("streams")
    if kind in ("constant", "poisson"):
        return strategy.request_rate("rate"), strategy.optional_count("max_concurrency")
    if kind == "throughput":
        return float("inf"), strategy.optional_count("max_concurrency")
    raise bad_file(strategy.path, f"{strategy.where}.type_={kind!r} is not a GuideLLM strategy")


def _requests(bench: Keys, completed: int) -> MeasuredRequests | None:
    records = bench.optional_child("requests")
    if records is None or not records.has("successful"):
        return None
    rows = records.items("successful")
    if len(rows) != completed:  # a sample of the requests, not the run's lengths
        return None
    keys = [Keys(bench.path, row, f"{records.where}.successful[{i}]") for i, row in enumerate(rows)]
    times = [
        request_times(
            bench.path,
            k.where,
            k.number("first_token_time") - k.number("start_time"),
            k.number("end_time") - k.number("start_time"),
        )
        for k in keys
    ]
    return MeasuredRequests(
        input_tokens=tuple(k.count("prompt_tokens") for k in keys),
        output_tokens=tuple(k.count("output_tokens") for k in keys),
        ttft_s=tuple(ttft for ttft, _ in times),
        e2e_s=tuple(e2e for _, e2e in times),
    )


def _benchmark(path: Path, bench: Keys, index: int) -> MeasuredRun:
    metrics = bench.child("metrics")
    totals = bench.child("request_totals")
    completed = totals.count("successful")
    args = bench.child("args")
    strategy = args.child("strategy")
    rate, concurrency = _load(strategy)
    latency = {
        role: stat
        for role, (name, unit_s, d) in METRICS.items()
        if (stat := _statistic(metrics, name, unit_s, d))
    }

    def mean_of(name: str) -> float | None:  # a rate or a token count: finite, >= 0
        dist = _successful(metrics, name)
        return None if dist is None else dist.rate("mean")

    worker = bench.optional_child("worker")
    loader = bench.optional_child("request_loader")
    model = worker.optional_text("backend_model") if worker else None
    data = loader.obj.get("data") if loader else None
    kind = strategy.text("type_")
    return MeasuredRun(
        source=str(path),
        tool=TOOL,
        label=f"benchmarks[{index}]: {kind}, {completed} requests",
        latency=latency,
        model=model,
        request_rate_per_s=rate,
        max_concurrency=concurrency,
        mean_input_tokens=mean_of("prompt_token_count"),
        mean_output_tokens=mean_of("output_token_count"),
        requests=_requests(bench, completed),
        request_throughput_per_s=mean_of("requests_per_second"),
        output_throughput_tokens_per_s=mean_of("output_tokens_per_second"),
        completed=completed,
        failed=totals.optional_count("errored"),
        duration_s=bench.optional_duration("duration"),
        settings={
            "strategy": kind,
            "data": data,
            "max_duration_s": args.obj.get("max_duration"),
            "max_number": args.obj.get("max_number"),
            "incomplete": totals.optional_count("incomplete"),
        },
    )


def read_guidellm(path: Path, doc: object) -> list[MeasuredRun]:
    report = Keys(path, doc)
    benchmarks = report.items("benchmarks")
    if not benchmarks:
        raise bad_file(path, "the report's benchmarks list is empty")
    return [
        _benchmark(path, Keys(path, bench, f"benchmarks[{i}]"), i)
        for i, bench in enumerate(benchmarks)
    ]
