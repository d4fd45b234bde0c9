"""NVIDIA AIPerf's profile export: ``profile_export_aiperf.json`` (the run's statistics) and,
beside it, ``profile_export.jsonl`` (one line per request).

Two layouts of the statistics file exist. AIPerf 0.1.x (the shipped sample, Oct 2025) keeps
them under ``records.<tag>`` = {unit, avg, min, max, p1 ... p99, std, count}; newer releases
(``schema_version`` 1.x) put the same objects at the top level and add ``aiperf_version``. Both
are read; tags are AIPerf's (``ttft``, ``inter_token_latency``, ``inter_chunk_latency``,
``request_latency``, ``request_throughput``, ``output_token_throughput``,
``input_sequence_length``, ``output_sequence_length``, ``benchmark_duration``,
``request_count``, ``error_request_count``), with ``time_to_first_token`` accepted for
``ttft``. Units are read from each object (``ms``, ``ns``, ``sec``). ``input_config`` holds the
model names and the load (``loadgen.concurrency``, ``request_count``, ``request_rate``).

Definitions (checked on the shipped sample's requests): TTFT per request;
**inter_token_latency = (request_latency - ttft)/(output_sequence_length - 1)**, a per-request
mean gap (vLLM's TPOT, under another name); inter_chunk_latency = every gap between streamed
chunks, pooled (vLLM's ITL); request_latency = E2E. ``output_sequence_length`` counts reasoning
tokens too (``output_token_count`` leaves them out); it is the engine's output length.

The per-request file is found beside the statistics by name (``..profile_export_aiperf.json``
-> ``..profile_export.jsonl``, any prefix kept); requests with an ``error`` (cancelled on
purpose, or failed) are left out, as AIPerf's statistics leave them out.

Left out on purpose: ``ttst`` (time to second token), ``output_token_throughput_per_user``,
the CSV export (the same numbers, rounded), GenAI-Perf's exports (no real sample to test on).
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.harness.parsing import Keys, bad_file, request_times
from sim.harness.results import Definition, MeasuredRequests, MeasuredRun, Statistic

TOOL = "aiperf"
SUMMARY_SUFFIX = "profile_export_aiperf.json"
REQUESTS_SUFFIX = "profile_export.jsonl"
UNIT_S = {"ms": 1e-3, "ns": 1e-9, "sec": 1.0, "s": 1.0}
ALIASES = {"ttft": ("ttft", "time_to_first_token")}
# role -> (AIPerf's tag, definition)
METRICS = {
    "ttft": ("ttft", Definition.TTFT),
    "itl": ("inter_token_latency", Definition.GAP_AFTER_FIRST),
    "chunk_gap": ("inter_chunk_latency", Definition.POOLED_GAPS),
    "e2e": ("request_latency", Definition.E2E),
}


def _records(doc: dict) -> dict:
    """The tag -> statistics objects of either layout."""
    if isinstance(doc.get("records"), dict):
        return doc["records"]
    return {k: v for k, v in doc.items() if isinstance(v, dict) and "unit" in v}


def is_aiperf_summary(doc: object) -> bool:
    if not isinstance(doc, dict):
        return False
    records = _records(doc)
    return any(tag in records for tag in ("ttft", "time_to_first_token")) and (
        "request_latency" in records
    )


def is_aiperf_requests(rows: object) -> bool:
    """The per-request JSON lines (a user may name them instead of the statistics file)."""
    return (
        isinstance(rows, list)
        and bool(rows)
        and all(isinstance(r, dict) and "metadata" in r and "metrics" in r for r in rows)
    )


class _Tags:
    def __init__(self, path: Path, doc: dict) -> None:
        self.path = path
        self.records = _records(doc)

    def get(self, tag: str) -> Keys | None:
        for name in ALIASES.get(tag, (tag,)):
            if name in self.records:
                return Keys(self.path, self.records[name], name)
        return None

    def unit_s(self, stats: Keys) -> float:
        unit = stats.text("unit")
        if unit not in UNIT_S:
            raise bad_file(self.path, f"{stats.where}.unit={unit!r} is not a time unit")
        return UNIT_S[unit]

    def value(self, tag: str) -> float | None:
        """A run total (its ``avg``; AIPerf writes one-value metrics so): a rate or a mean
        length, finite and >= 0."""
        stats = self.get(tag)
        return None if stats is None else stats.measured_rate("avg")

    def count(self, tag: str) -> int | None:
        """A run total that counts requests: a whole number >= 0."""
        stats = self.get(tag)
        return None if stats is None else stats.optional_count("avg")

    def seconds(self, tag: str) -> float | None:
        """A run total that is a duration, in seconds whatever its ``unit``."""
        stats = self.get(tag)
        value = None if stats is None else stats.optional_duration("avg")
        return None if value is None or stats is None else value * self.unit_s(stats)

    def statistic(self, tag: str, definition: Definition) -> Statistic | None:
        stats = self.get(tag)
        if stats is None:
            return None
        unit_s = self.unit_s(stats)
        percentiles = {}
        for key in stats.obj:
            if key.startswith("p") and key[1:].replace(".", "", 1).isdigit():
                value = stats.measured_seconds(key, unit_s)
                if value is not None:
                    percentiles[float(key[1:])] = value
        return Statistic(
            name=tag,
            definition=definition,
            mean_s=stats.measured_seconds("avg", unit_s),
            percentiles_s=dict(sorted(percentiles.items())),
            std_s=stats.measured_seconds("std", unit_s, spread=True),
        )


def requests_file(summary: Path) -> Path | None:
    """The per-request export beside a statistics file, if it is there."""
    if not summary.name.endswith(SUMMARY_SUFFIX):
        return None
    found = summary.with_name(summary.name.removesuffix(SUMMARY_SUFFIX) + REQUESTS_SUFFIX)
    return found if found.is_file() else None


def _seconds(path: Path, metrics: Keys, tag: str) -> float:
    """One request's metric in seconds."""
    value = metrics.child(tag)
    unit = value.text("unit")
    if unit not in UNIT_S:
        raise bad_file(path, f"{value.where}.unit={unit!r} is not a time unit")
    return value.number("value") * UNIT_S[unit]


def read_requests(path: Path, completed: int) -> MeasuredRequests:
    """The requests without error from ``profile_export.jsonl``."""
    inputs, outputs, ttfts, e2es = [], [], [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = Keys(path, json.loads(line), f"line {number}")
        except json.JSONDecodeError as err:
            raise bad_file(path, f"line {number}: not JSON ({err.msg})") from None
        if row.has("error"):
            continue
        metrics = row.child("metrics")
        inputs.append(metrics.child("input_sequence_length").count("value"))
        outputs.append(metrics.child("output_sequence_length").count("value"))
        ttft, e2e = request_times(
            path,
            f"line {number}",
            _seconds(path, metrics, "ttft"),
            _seconds(path, metrics, "request_latency"),
        )
        ttfts.append(ttft)
        e2es.append(e2e)
    if len(inputs) != completed:
        raise bad_file(
            path, f"holds {len(inputs)} requests without error; the statistics say {completed}"
        )
    return MeasuredRequests(tuple(inputs), tuple(outputs), tuple(ttfts), tuple(e2es))


def read_aiperf(path: Path, doc: object, requests: Path | None = None) -> list[MeasuredRun]:
    """The run of a statistics file, with its requests from ``requests`` (default: the
    per-request export beside it, when there is one)."""
    top = Keys(path, doc)
    tags = _Tags(path, top.obj)
    completed_count = tags.count("request_count")
    if completed_count is None:
        raise bad_file(path, "'request_count' is missing")
    completed = completed_count
    failed = tags.count("error_request_count")
    config = top.optional_child("input_config")
    loadgen = config.optional_child("loadgen") if config else None
    endpoint = config.optional_child("endpoint") if config else None
    models = endpoint.obj.get("model_names") if endpoint else None
    model = models[0] if isinstance(models, list) and models else None
    concurrency = loadgen.optional_count("concurrency") if loadgen else None
    rate = loadgen.optional_request_rate("request_rate") if loadgen else None
    requests = requests or requests_file(path)
    load = f"concurrency {concurrency}" if concurrency else f"{rate:g} req/s" if rate else ""
    return [
        MeasuredRun(
            source=str(path),
            tool=TOOL,
            tool_version=top.optional_text("aiperf_version"),
            label=f"{model or 'model not recorded'}, {completed} requests"
            + (f", {load}" if load else ""),
            latency={
                role: stat for role, (tag, d) in METRICS.items() if (stat := tags.statistic(tag, d))
            },
            model=model,
            request_rate_per_s=rate,
            max_concurrency=concurrency,
            num_prompts=loadgen.optional_count("request_count") if loadgen else None,
            mean_input_tokens=tags.value("input_sequence_length"),
            mean_output_tokens=tags.value("output_sequence_length"),
            requests=None if requests is None else read_requests(requests, completed),
            request_throughput_per_s=tags.value("request_throughput"),
            output_throughput_tokens_per_s=tags.value("output_token_throughput"),
            completed=completed,
            failed=failed,
            duration_s=tags.seconds("benchmark_duration"),
            settings={
                k: loadgen.obj[k]
                for k in ("request_rate_mode", "request_cancellation_rate")
                if loadgen and k in loadgen.obj
            },
        )
    ]
