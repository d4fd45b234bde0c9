"""``fleetcast bench``: a serving benchmark simulated as its harness runs it, reported in the
harness's own names and definitions.

The client is ``workload=bench`` (``sim.workload.source``, ``vllm bench serve``'s client): the
flags map onto it as the harness's do (``--num-prompts``, ``--request-rate`` with ``inf`` for
all at once, ``--burstiness``, ``--max-concurrency``, ``--num-warmups``, ``--ramp-up-strategy``
with ``--ramp-up-start-rps`` and ``--ramp-up-end-rps``, ``--random-input-len``
and ``--random-output-len`` for fixed lengths, as vLLM's random dataset gives them with its
default range ratio of 0); every other argument is a config override (``model=...``,
``hardware=...``, ``output_dir=...``). The run is a normal run (its four files, where
``output_dir`` says, or in a temporary folder; ``sim.cli`` runs it); the report leaves the
warm-ups out and computes each figure in the chosen harness's definition
(``sim.harness.simulated``):

- ``vllm`` (vllm bench serve) and ``sglang`` (bench_serving): TPOT = (e2e - ttft) /
  (output_tokens - 1) per request, ITL = every gap between tokens, pooled;
- ``guidellm``: time per output token = (last - first) / output_tokens and inter-token latency
  = (last - first) / (output_tokens - 1), each request weighted by its tokens;
- ``aiperf``: inter-token latency = vLLM's TPOT.

Throughput is completed requests (and their output tokens) over the span from the first
measured request sent to the last completion, as the harnesses divide.
"""

from __future__ import annotations

import argparse
import math

from sim.errors import ConfigError
from sim.harness.results import Definition
from sim.harness.simulated import (
    SimulatedRequests,
    mean,
    output_tokens_per_s,
    per_request,
    percentile,
    requests_per_s,
)

# harness -> (metric name as the tool prints it, definition, unit factor from seconds)
METRICS: dict[str, list[tuple[str, Definition, float]]] = {
    "vllm": [
        ("TTFT (ms)", Definition.TTFT, 1e3),
        ("TPOT (ms)", Definition.GAP_AFTER_FIRST, 1e3),
        ("ITL (ms)", Definition.POOLED_GAPS, 1e3),
        ("E2EL (ms)", Definition.E2E, 1e3),
    ],
    "sglang": [
        ("TTFT (ms)", Definition.TTFT, 1e3),
        ("TPOT (ms)", Definition.GAP_AFTER_FIRST, 1e3),
        ("ITL (ms)", Definition.POOLED_GAPS, 1e3),
        ("E2E Latency (ms)", Definition.E2E, 1e3),
    ],
    "guidellm": [
        ("time_to_first_token_ms", Definition.TTFT, 1e3),
        ("time_per_output_token_ms", Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN, 1e3),
        ("inter_token_latency_ms", Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST, 1e3),
        ("request_latency (s)", Definition.E2E, 1.0),
    ],
    "aiperf": [
        ("time_to_first_token (ms)", Definition.TTFT, 1e3),
        ("inter_token_latency (ms)", Definition.GAP_AFTER_FIRST, 1e3),
        ("request_latency (ms)", Definition.E2E, 1e3),
    ],
}
FLAGS = {  # flag -> the bench workload's key
    "num_prompts": "num_requests",  # vLLM calls the measured requests prompts
    "request_rate": "request_rate",
    "burstiness": "burstiness",
    "max_concurrency": "max_concurrency",
    "num_warmups": "num_warmups",
    "ramp_up_strategy": "ramp_up_strategy",
    "ramp_up_start_rps": "ramp_up_start_rps",
    "ramp_up_end_rps": "ramp_up_end_rps",
    "random_input_len": "prompt_tokens",
    "random_output_len": "output_tokens",
}


# the flags that take a whole number (the others take a number, but ramp-up's strategy)
WHOLE_FLAGS = (
    "num_prompts",
    "max_concurrency",
    "num_warmups",
    "random_input_len",
    "random_output_len",
)
RAMP_UP_STRATEGIES = ("linear", "exponential")


def _flag_value(flag: str, value: str) -> str:
    """The override value a flag's text stands for, written back from the parsed number so that
    nothing in it is read as Hydra's syntax (``1,2`` a sweep, ``${x}``, ``[1]``); ConfigError
    naming the flag otherwise (the workload's schema then checks the ranges)."""
    name = "--" + flag.replace("_", "-")
    text = value.strip()
    if flag == "ramp_up_strategy":
        if text not in RAMP_UP_STRATEGIES:
            raise ConfigError(name, value, f"must be one of {', '.join(RAMP_UP_STRATEGIES)}")
        return text
    if flag == "request_rate" and text.lower() == "inf":
        return "null"  # every request at once
    try:
        number = float(text)
    except ValueError:
        kind = "a whole number" if flag in WHOLE_FLAGS else "a number"
        extra = " (or inf: all at once)" if flag == "request_rate" else ""
        raise ConfigError(name, value, f"must be {kind}{extra}, one value") from None
    if not math.isfinite(number):
        raise ConfigError(name, value, "must be a finite number")
    if flag in WHOLE_FLAGS and not number.is_integer():
        raise ConfigError(name, value, "must be a whole number")
    return str(int(number)) if number.is_integer() else repr(number)


def overrides_from(args: argparse.Namespace) -> list[str]:
    """The config overrides the harness flags stand for (``workload=bench`` and its keys);
    ConfigError naming a flag whose value is not one of its type (``_flag_value``)."""
    out = ["workload=bench"]
    for flag, key in FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            out.append(f"workload.{key}={_flag_value(flag, value)}")
    return out


def named_by_flag(err: ConfigError, args: argparse.Namespace) -> ConfigError:
    """``err`` named by the flag that set its key (``--num-prompts=-3: must be >= 1`` for the
    schema's ``workload.num_requests=-3``), where a flag given set it; else ``err``. The flag's
    value is set after the overrides', so a key a flag sets is the flag's."""
    for flag, key in FLAGS.items():
        if err.field == f"workload.{key}" and getattr(args, flag) is not None:
            return ConfigError("--" + flag.replace("_", "-"), err.value, err.reason)
    return err


def report(run: SimulatedRequests, harness: str) -> str:
    """The harness's result block for ``run``'s measured requests, with each definition."""
    width = 40
    lines = [
        f"{' Serving Benchmark Result (' + harness + ', simulated) ':=^50}",
        f"{'Successful requests:':<{width}}{run.completed:>10}",
        f"{'Warm-up requests (not measured):':<{width}}{run.summary.get('warmup_requests', 0):>10}",
        f"{'Benchmark duration (s):':<{width}}{run.duration_s:>10.2f}",
        f"{'Total generated tokens:':<{width}}{int(run.output_tokens.sum()):>10}",
        f"{'Request throughput (req/s):':<{width}}{requests_per_s(run):>10.2f}",
        f"{'Output token throughput (tok/s):':<{width}}{output_tokens_per_s(run):>10.2f}",
    ]
    for name, definition, factor in METRICS[harness]:
        values, weights = per_request(run, definition)
        lines.append(f"{' ' + name + ' ':-^50}")
        for label, figure in (
            ("Mean", mean(values, weights)),
            ("Median", percentile(values, weights, 50)),
            ("P99", percentile(values, weights, 99)),
        ):
            shown = "n/a" if figure is None else f"{figure * factor:.2f}"
            lines.append(f"{label + ' ' + name + ':':<{width}}{shown:>10}")
    lines.append("=" * 50)
    lines.append("definitions:")
    lines += [f"  {name}: {definition.value}" for name, definition, _ in METRICS[harness]]
    if any(d is Definition.POOLED_GAPS for _, d, _ in METRICS[harness]):
        lines.append(
            "  (pooled gaps: each request's gaps taken as its mean gap, as a run folder keeps"
            " only its first and last token times: the mean is exact, the percentiles narrower)"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The harness flags; what they leave is config overrides."""
    parse = argparse.ArgumentParser(
        prog="fleetcast bench",
        description="A serving benchmark simulated as its harness runs it, in its own metrics;"
        " other arguments are config overrides (model=..., output_dir=...).",
    )
    parse.add_argument("--harness", choices=sorted(METRICS), default="vllm")
    parse.add_argument("--num-prompts", dest="num_prompts")
    parse.add_argument("--request-rate", dest="request_rate", help="requests/s, or inf")
    parse.add_argument("--burstiness", help="gamma shape of the gaps: 1 is Poisson")
    parse.add_argument("--max-concurrency", dest="max_concurrency")
    parse.add_argument("--num-warmups", dest="num_warmups")
    parse.add_argument(
        "--ramp-up-strategy", dest="ramp_up_strategy", help=" or ".join(RAMP_UP_STRATEGIES)
    )
    parse.add_argument("--ramp-up-start-rps", dest="ramp_up_start_rps")
    parse.add_argument("--ramp-up-end-rps", dest="ramp_up_end_rps")
    parse.add_argument("--random-input-len", dest="random_input_len")
    parse.add_argument("--random-output-len", dest="random_output_len")
    return parse
