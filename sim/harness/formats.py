"""Which harness wrote a result file, told from its content, and the file read as runs.

``read_benchmark(path)`` decodes the file (JSON, JSON lines or YAML, whatever its name) and
hands it to the reader whose keys it carries:

- vLLM ``bench serve``: one object with ``mean_ttft_ms`` and ``request_throughput``;
- SGLang ``bench_serving``: objects with ``mean_e2e_latency_ms`` and ``median_itl_ms``, one
  per line (a single line reads as one object);
- GuideLLM: an object whose ``benchmarks`` list holds benchmarks with ``metrics``;
- AIPerf: ``profile_export_aiperf.json`` (``ttft`` and ``request_latency`` statistics, under
  ``records`` or at the top level); its per-request ``profile_export.jsonl`` is read beside it.

A file of none of these, or one that breaks its format, is a one-line ``ConfigError`` on
``bench_file`` naming the file as the user gave it (``shipped:...`` stays so) and what is wrong:
a file that carries some of a format's telling keys but not all is named by the key it lacks.
Every run read is checked for figures no benchmark measures (``parsing.check_latencies``).
``pick`` chooses one run of a file that holds several (SGLang's lines, GuideLLM's benchmarks).

Left out on purpose: GenAI-Perf's exports and LLMPerf's results (no real sample to test a
reader on), and guessing a format from a file name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.harness.aiperf_export import is_aiperf_requests, is_aiperf_summary, read_aiperf
from sim.harness.guidellm_report import is_guidellm_report, read_guidellm
from sim.harness.parsing import FIELD, bad_file, check_latencies, decode, read_text
from sim.harness.results import MeasuredRun
from sim.harness.sglang_bench import is_sglang_line, read_sglang
from sim.harness.vllm_bench import is_vllm_result, read_vllm
from sim.resources import is_shipped, shipped_path

KNOWN = (
    "a vLLM bench serve JSON, an SGLang bench_serving JSONL, a GuideLLM report (JSON/YAML) "
    "or an AIPerf profile_export_aiperf.json"
)


# each format's telling keys (top-level, or the place they sit), for a file that has some of
# them but not all: it is named by the first it lacks
TELLING_KEYS = {
    "a vLLM bench serve JSON": ("mean_ttft_ms", "request_throughput"),
    "an SGLang bench_serving line": ("mean_e2e_latency_ms", "median_itl_ms"),
    "an AIPerf profile_export_aiperf.json": ("records.ttft", "records.request_latency"),
}


def read_benchmark(path: str | Path) -> list[MeasuredRun]:
    """Every run the result file at ``path`` holds, in the file's order (at least one);
    ``shipped:harness_samples/NAME`` names a sample Fleetcast ships. A run's ``source`` and
    every error name the file as given."""
    given = str(path)
    found = shipped_path(given) if is_shipped(path) else Path(path).expanduser()
    try:
        runs = _read(found)
        for run in runs:
            check_latencies(found, run)
    except ConfigError as err:  # the file as the user named it, not where it was found
        if err.field == FIELD and err.value == str(found):
            raise ConfigError(FIELD, given, err.reason) from None
        raise
    return [dataclasses.replace(run, source=given) for run in runs]


def _read(path: Path) -> list[MeasuredRun]:
    doc = decode(path, read_text(path))
    if isinstance(doc, dict):
        if is_vllm_result(doc):
            return read_vllm(path, doc)
        if is_sglang_line(doc):
            return read_sglang(path, [doc])
        if is_guidellm_report(doc):
            return read_guidellm(path, doc)
        if is_aiperf_summary(doc):
            return read_aiperf(path, doc)
    if isinstance(doc, list) and doc and all(is_sglang_line(row) for row in doc):
        return read_sglang(path, doc)
    if isinstance(doc, list) and any(is_sglang_line(row) for row in doc):
        bad = next(i for i, row in enumerate(doc) if not is_sglang_line(row))
        raise bad_file(path, f"run {bad + 1} of the SGLang JSONL lacks bench_serving's keys")
    if is_aiperf_requests(doc):
        raise bad_file(
            path,
            "AIPerf's per-request export: give profile_export_aiperf.json (this file is read "
            "beside it)",
        )
    raise bad_file(path, f"not a known benchmark result: {_unknown(doc)}expected {KNOWN}")


def _has(doc: dict[str, Any], key: str) -> bool:
    """``key`` (``a.b``: ``b`` inside the object ``a``) is in ``doc``."""
    head, _, rest = key.partition(".")
    if not rest:
        return head in doc
    inner = doc.get(head)
    return isinstance(inner, dict) and _has(inner, rest)


def _unknown(doc: object) -> str:
    """What the file lacks of the format it comes nearest, or what it holds instead of an
    object; ``""`` when it has nothing of any format."""
    if not isinstance(doc, dict):
        if isinstance(doc, list):
            what = f"a list of {len(doc)} items"
        elif isinstance(doc, str):
            what = "text"
        elif doc is None or isinstance(doc, bool):
            what = "null" if doc is None else "true or false"
        else:
            what = "a number"
        return f"the file holds {what}, not a result object; "
    if {"ttft_s", "throughput", "completed"} <= set(doc):  # summary.json's keys
        return "it is a Fleetcast run's summary.json, not a benchmark's result; "
    if "benchmarks" in doc:  # GuideLLM's report
        benchmarks = doc["benchmarks"]
        if not isinstance(benchmarks, list) or not benchmarks:
            return "'benchmarks' is not a list of benchmarks (GuideLLM); "
        return "no item of 'benchmarks' has 'metrics' (GuideLLM); "
    for name, keys in TELLING_KEYS.items():
        present = [key for key in keys if _has(doc, key)]
        missing = [key for key in keys if key not in present]
        if present and missing:
            return f"has {present[0]!r} but {missing[0]!r} is missing ({name}); "
    return ""


def pick(runs: list[MeasuredRun], index: int | None, path: str | Path) -> MeasuredRun:
    """The run ``index`` chooses; the only run when ``index`` is None; ConfigError otherwise,
    listing the runs the file holds."""
    if index is None:
        if len(runs) == 1:
            return runs[0]
        listed = "; ".join(f"{i}: {run.label}" for i, run in enumerate(runs))
        raise bad_file(path, f"holds {len(runs)} runs, choose one with --index N ({listed})")
    if not 0 <= index < len(runs):
        raise bad_file(path, f"--index {index}: the file holds runs 0..{len(runs) - 1}")
    return runs[index]
