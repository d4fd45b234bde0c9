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
``bench_file`` naming the file and what is wrong. ``pick`` chooses one run of a file that holds
several (SGLang's lines, GuideLLM's benchmarks).

Left out on purpose: GenAI-Perf's exports and LLMPerf's results (no real sample to test a
reader on), and guessing a format from a file name.
"""

from __future__ import annotations

from pathlib import Path

from sim.harness.aiperf_export import is_aiperf_requests, is_aiperf_summary, read_aiperf
from sim.harness.guidellm_report import is_guidellm_report, read_guidellm
from sim.harness.parsing import bad_file, decode, read_text
from sim.harness.results import MeasuredRun
from sim.harness.sglang_bench import is_sglang_line, read_sglang
from sim.harness.vllm_bench import is_vllm_result, read_vllm
from sim.resources import is_shipped, shipped_path

KNOWN = (
    "a vLLM bench serve JSON, an SGLang bench_serving JSONL, a GuideLLM report (JSON/YAML) "
    "or an AIPerf profile_export_aiperf.json"
)


def read_benchmark(path: str | Path) -> list[MeasuredRun]:
    """Every run the result file at ``path`` holds, in the file's order (at least one);
    ``shipped:harness_samples/NAME`` names a sample Fleetcast ships."""
    path = shipped_path(str(path)) if is_shipped(path) else Path(path).expanduser()
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
    raise bad_file(path, f"not a known benchmark result: expected {KNOWN}")


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
