"""vLLM's serving benchmark result: ``vllm bench serve --save-result`` (and the older
``benchmarks/benchmark_serving.py``), one JSON object per run.

The object holds the run's settings (``model_id``, ``num_prompts``, ``request_rate`` with
``"inf"`` or ``Infinity`` for all at once, ``burstiness``, ``max_concurrency``), totals
(``duration`` s, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``output_throughput``) and summary statistics in milliseconds named
``{mean,median,std,pN}_{ttft,tpot,itl,e2el}_ms`` (which percentiles depends on
``--metric-percentiles``; E2E only with ``--percentile-metrics``). Goodput is keyed
``request_goodput:``, the colon included, in vLLM 0.8.x. With ``--save-detailed`` (always in
0.8.3) it also holds per-request arrays: ``input_lens``, ``output_lens``, ``ttfts`` in
**seconds**, ``itls`` (a list of chunk gaps in seconds per request), ``errors`` (``""`` = ok).

Definitions (vLLM ``benchmark_serving.py`` ``calculate_metrics``, read at v0.8.3, April 2025):
TTFT = first streamed chunk - send time; TPOT = (latency - ttft)/(output_len - 1), over
requests with more than one output token; ITL = every chunk gap, pooled; E2E = latency. A
request's latency is rebuilt here as ``ttft + sum(itls)``, the same instants (checked on the
shipped 0.8.3 file: the mean TPOT agrees to 2e-7 relative).

SGLang's ``bench_serving`` descends from this script and names its statistics the same way, so
``summary_ms`` serves both readers.

Left out on purpose: goodput (it depends on ``--goodput`` SLOs the file does not record; kept in
``settings``), ``generated_texts``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from sim.harness.parsing import MAX_LATENCY_S, Keys, bad_file
from sim.harness.results import Definition, MeasuredRequests, MeasuredRun, Statistic

TOOL = "vllm bench serve"
MS = 1e-3
# role -> (vLLM's stem in {mean,median,std,pN}_{stem}_ms, its definition)
STEMS = {
    "ttft": ("ttft", Definition.TTFT),
    "tpot": ("tpot", Definition.GAP_AFTER_FIRST),
    "itl": ("itl", Definition.POOLED_GAPS),
    "e2e": ("e2el", Definition.E2E),
}


def summary_ms(keys: Keys, stem: str, definition: Definition) -> Statistic | None:
    """The statistic ``{mean,median,std,pN}_{stem}_ms`` in seconds; None if the file holds
    none of those keys."""
    percentiles: dict[float, float] = {}
    pattern = re.compile(rf"^p(\d+(?:\.\d+)?)_{re.escape(stem)}_ms$")
    for key in keys.obj:
        if match := pattern.match(key):
            value = keys.measured_seconds(key, MS)
            if value is not None:
                percentiles[float(match.group(1))] = value
    median = keys.measured_seconds(f"median_{stem}_ms", MS)
    if median is not None:
        percentiles[50.0] = median
    mean = keys.measured_seconds(f"mean_{stem}_ms", MS)
    std = keys.measured_seconds(f"std_{stem}_ms", MS, spread=True)
    if mean is None and std is None and not percentiles:
        return None
    return Statistic(
        name=stem,
        definition=definition,
        mean_s=mean,
        percentiles_s=dict(sorted(percentiles.items())),
        std_s=std,
    )


def _requests(keys: Keys, completed: int) -> MeasuredRequests | None:
    """The per-request arrays of the completed requests (``--save-detailed``), else None."""
    names = ("input_lens", "output_lens", "ttfts", "itls")
    if not all(keys.has(name) for name in names):
        return None
    inputs, outputs, ttfts = (keys.numbers(n) for n in names[:3])
    itls = keys.items("itls")
    errors = keys.items("errors") if keys.has("errors") else [""] * len(inputs)
    sizes = {len(inputs), len(outputs), len(ttfts), len(itls), len(errors)}
    if len(sizes) != 1:
        raise bad_file(keys.path, f"the per-request arrays differ in length ({sorted(sizes)})")
    ok = [i for i, error in enumerate(errors) if not error]
    if len(ok) != completed:
        raise bad_file(
            keys.path, f"the arrays hold {len(ok)} requests without error; completed={completed}"
        )
    for i in ok:
        gaps = itls[i]
        if not isinstance(gaps, list) or not all(
            isinstance(g, (int, float)) and not isinstance(g, bool) and 0 <= g < math.inf
            for g in gaps
        ):
            raise bad_file(keys.path, f"itls[{i}] is not a list of finite gaps >= 0 (seconds)")
        for name, values in (("input_lens", inputs), ("output_lens", outputs)):
            # a completed request sent a prompt and got a token back: a length of 0, or a
            # fractional one, would be replayed as another request than the one measured
            if not (values[i] >= 1 and values[i].is_integer()):
                raise bad_file(
                    keys.path, f"{name}[{i}]={values[i]!r} is not a length (a whole number >= 1)"
                )
        if not 0 < ttfts[i] <= MAX_LATENCY_S:
            raise bad_file(keys.path, f"ttfts[{i}]={ttfts[i]!r} is not a measured time (seconds)")
    return MeasuredRequests(
        input_tokens=tuple(int(inputs[i]) for i in ok),
        output_tokens=tuple(int(outputs[i]) for i in ok),
        ttft_s=tuple(ttfts[i] for i in ok),
        e2e_s=tuple(ttfts[i] + sum(itls[i]) for i in ok),
    )


def is_vllm_result(doc: object) -> bool:
    """vLLM's summary keys, without SGLang's ``mean_e2e_latency_ms``."""
    return (
        isinstance(doc, dict)
        and "mean_ttft_ms" in doc
        and "request_throughput" in doc
        and "mean_e2e_latency_ms" not in doc
    )


def read_vllm(path: Path, doc: object) -> list[MeasuredRun]:
    keys = Keys(path, doc)
    completed = keys.count("completed")
    latency = {
        role: stat for role, (stem, d) in STEMS.items() if (stat := summary_ms(keys, stem, d))
    }
    num_prompts = keys.optional_count("num_prompts")
    requests = _requests(keys, completed)
    errors = keys.items("errors") if keys.has("errors") else None
    failed = (
        sum(1 for e in errors if e)
        if errors is not None
        else (None if num_prompts is None else num_prompts - completed)
    )
    settings = {
        name: keys.obj[name]
        for name in (
            "date",
            "backend",
            "burstiness",
            "gpu_name",
            "gpu_count",
            "ramp_up_strategy",
        )
        if keys.has(name)
    }
    for goodput in ("request_goodput:", "request_goodput"):  # the colon is in 0.8.x's key
        if keys.has(goodput):
            settings["request_goodput_per_s"] = keys.rate(goodput)
    rate = keys.optional_request_rate("request_rate")
    model = keys.optional_text("model_id")
    total_in = keys.optional_finite("total_input_tokens", 0.0)
    total_out = keys.optional_finite("total_output_tokens", 0.0)
    return [
        MeasuredRun(
            source=str(path),
            tool=TOOL,
            label=f"{model or 'model not recorded'}, {num_prompts} prompts at {rate:g} req/s"
            if rate is not None
            else f"{model or 'model not recorded'}, {num_prompts} prompts",
            latency=latency,
            model=model,
            request_rate_per_s=rate,
            max_concurrency=keys.optional_count("max_concurrency"),
            num_prompts=num_prompts,
            mean_input_tokens=None if total_in is None or not completed else total_in / completed,
            mean_output_tokens=None
            if total_out is None or not completed
            else total_out / completed,
            requests=requests,
            request_throughput_per_s=keys.rate("request_throughput"),
            output_throughput_tokens_per_s=keys.measured_rate("output_throughput"),
            completed=completed,
            failed=failed,
            duration_s=keys.duration("duration"),
            settings=settings,
        )
    ]
