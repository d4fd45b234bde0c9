"""SGLang's serving benchmark result: ``python -m sglang.bench_serving --output-file F``, JSON
lines, one object per run (a file collects every run written to it).

A line holds ``backend``, ``dataset_name``, ``request_rate`` (req/s; an offline run writes the
bare token ``Infinity``), ``max_concurrency``, totals (``total_input_tokens``,
``total_output_tokens``, ``completed``, ``duration`` s, ``output_throughput`` tok/s), the
dataset's lengths (``random_input_len``, ``random_output_len``, ``random_range_ratio``,
``sharegpt_output_len``) and statistics in milliseconds. The version of Dec 2024 (the shipped
sample) keeps only ``mean_e2e_latency_ms``, ``median_e2e_latency_ms``, ``median_ttft_ms`` and
``median_itl_ms`` and no request throughput (it is ``completed / duration``); later versions add
vLLM's ``{mean,median,std,pN}_{ttft,tpot,itl}_ms`` and ``request_throughput``, read the same way.

Definitions (SGLang ``python/sglang/bench_serving.py`` ``calculate_metrics``, which keeps
vLLM's): TTFT per request; TPOT = (latency - ttft)/(output_len - 1) per request; ITL = every
chunk gap, pooled; E2E = latency per request.

Left out on purpose: ``total_output_tokens_retokenized`` (the output re-counted by the client's
tokenizer; the engine's count is the one a simulation reproduces).
"""

from __future__ import annotations

from pathlib import Path

from sim.harness.parsing import Keys
from sim.harness.results import Definition, MeasuredRun
from sim.harness.vllm_bench import summary_ms

TOOL = "sglang bench_serving"
STEMS = {
    "ttft": ("ttft", Definition.TTFT),
    "tpot": ("tpot", Definition.GAP_AFTER_FIRST),
    "itl": ("itl", Definition.POOLED_GAPS),
    "e2e": ("e2e_latency", Definition.E2E),
}


def is_sglang_line(doc: object) -> bool:
    return isinstance(doc, dict) and "mean_e2e_latency_ms" in doc and "median_itl_ms" in doc


def _run(path: Path, doc: object, line: int) -> MeasuredRun:
    keys = Keys(path, doc, f"line {line}")
    completed = keys.count("completed")
    duration = keys.duration("duration")
    latency = {
        role: stat for role, (stem, d) in STEMS.items() if (stat := summary_ms(keys, stem, d))
    }
    rate = keys.optional_request_rate("request_rate")
    dataset = keys.optional_text("dataset_name")
    settings = {
        name: keys.obj[name]
        for name in (
            "backend",
            "dataset_name",
            "random_input_len",
            "random_output_len",
            "random_range_ratio",
            "sharegpt_output_len",
        )
        if keys.has(name)
    }
    total_in = keys.optional_finite("total_input_tokens", 0.0)
    total_out = keys.optional_finite("total_output_tokens", 0.0)
    rate_text = "all at once" if rate == float("inf") else f"{rate:g} req/s"
    throughput = keys.measured_rate("request_throughput")
    return MeasuredRun(
        source=str(path),
        tool=TOOL,
        label=f"line {line}: {dataset or 'dataset not recorded'}, {completed} requests, "
        + (rate_text if rate is not None else "rate not recorded"),
        latency=latency,
        model=keys.optional_text("model_id"),
        request_rate_per_s=rate,
        max_concurrency=keys.optional_count("max_concurrency"),
        mean_input_tokens=None if total_in is None or not completed else total_in / completed,
        mean_output_tokens=None if total_out is None or not completed else total_out / completed,
        # this version writes no request throughput: the same figure as later versions'
        request_throughput_per_s=throughput if throughput is not None else completed / duration,
        output_throughput_tokens_per_s=keys.measured_rate("output_throughput"),
        completed=completed,
        duration_s=duration,
        settings=settings,
    )


def read_sglang(path: Path, rows: list[object]) -> list[MeasuredRun]:
    """Every line of the file, in order (blank lines do not count as lines of a run, but the
    line numbers in labels and errors are the file's)."""
    numbered = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]
    if len(rows) != len(numbered):  # one run written over several lines (pretty-printed JSON)
        numbered = [1] * len(rows)
    return [_run(path, doc, line) for doc, line in zip(rows, numbered, strict=True)]
