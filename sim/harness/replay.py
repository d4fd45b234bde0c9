"""A measured benchmark run as the simulated benchmark that reproduces it: the harness's client
(``workload=bench``) with the load and lengths the file records, and the engine it ran.

``harness_load(run)`` reads what ran from a ``MeasuredRun``; ``HarnessLoad.workload(folder)``
is the ``workload`` config node that replays it (writing the per-request lengths to ``folder``
when the file keeps them). Each tool's client, from its source and defaults:

- vLLM ``bench serve`` / ``benchmark_serving.py`` (vllm/benchmarks/serve.py, ``benchmark``):
  one test prompt is sent and waited for before the benchmark (``wait_for_endpoint``'s
  "initial single prompt test run"), then ``--num-warmups`` (default 0); sends at
  ``request_rate`` with Gamma(``burstiness``) gaps (``inf``: all at once) under
  ``max_concurrency``. Since about v0.10 (mid-2025) the sends are rescaled to end at
  ``num_prompts / rate``; a file dated before July 2025 gets the older client (the first
  request at once, then the gaps as drawn). A ramp-up run is refused (``fleetcast bench``
  simulates one).
- SGLang ``bench_serving`` (python/sglang/bench_serving.py): ``--warmup-requests`` (default 1,
  "initial single prompt test run" in the 2024 versions) before the benchmark, then Poisson
  sends at ``request_rate`` under ``max_concurrency``, the first at once (``get_request``
  yields, then sleeps a gap; no rescaling). Its ``random`` dataset draws each length
  uniformly from ``[max(1, int(len x random_range_ratio)), len]``.
- GuideLLM (v0.2 ``benchmark``): ``synchronous`` is one request at a time, ``concurrent`` keeps
  ``streams`` in flight, ``throughput`` sends everything at once, ``constant`` sends evenly
  spaced (Gamma shape 1,000: gaps within ~3% of even), ``poisson`` with exponential gaps. A
  benchmark bounded by ``max_duration`` (and no ``max_number``) is measured over that window:
  the simulated client keeps sending, the run stops at the window's end (``window_s``, the
  run's ``sim.horizon_s``) and only the requests completed by then count, as in GuideLLM,
  where the ones still in flight are "incomplete". (With per-request lengths kept, their count
  is replayed instead.)
- AIPerf (``profile``): ``--concurrency`` requests in flight (a new one sent as one ends),
  ``--request-count`` in all, no warm-up by default (``--warmup-request-count`` 0); at a
  ``--request-rate``, evenly spaced in its ``constant`` mode, Poisson otherwise.

Lengths: the file's per-request lengths in its order when it keeps them all (vLLM's
``--save-detailed`` arrays, GuideLLM's and AIPerf's request records); else SGLang's random
dataset settings; else GuideLLM's ``prompt_tokens=..,output_tokens=..`` data spec; else every
request at the file's mean lengths, which loses the spread of a dataset such as ShareGPT
(``lengths`` says which was used).

The engine: ``scheduler=vllm`` for vLLM's files and ``scheduler=sglang`` for SGLang's;
GuideLLM and AIPerf do not record the server, so none is implied (the run's own config says).

Left out: the warm-up/cool-down share GuideLLM can cut from a window, requests a harness
cancels on purpose (AIPerf's ``request_cancellation_rate``), and per-client request counts
(``workload.requests_per_client``; none of these files records them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from sim.errors import ConfigError
from sim.harness.results import MeasuredRun

# vllm bench serve rescales its sends to end at num_prompts / rate since about v0.10 (mid-2025):
# a file dated before then is taken to come from a client that did not (an approximation: the
# files do not record the client's version)
VLLM_NORMALISED_SINCE = "20250701"
# GuideLLM's constant rate: evenly spaced sends; a Gamma shape this large keeps every gap
# within a few percent of 1/rate while staying the bench client's one spacing rule
EVEN_BURSTINESS = 1000.0
# the warm-ups each tool sends before its measured requests (module docstring)
WARMUPS = {"vllm bench serve": 1, "sglang bench_serving": 1, "guidellm": 0, "aiperf": 0}
ENGINE = {"vllm bench serve": "vllm", "sglang bench_serving": "sglang"}
_DATA_SPEC = re.compile(r"prompt_tokens=(\d+),\s*output_tokens=(\d+)")


@dataclass(frozen=True)
class HarnessLoad:
    """What a benchmark's client sent: the ``workload=bench`` settings of one measured run."""

    num_requests: int
    request_rate: float | None  # None: every request at once (the harness's inf)
    burstiness: float
    normalise_sends: bool  # the bench workload's key: vLLM's rescaled sends, or raw gaps
    max_concurrency: int | None
    num_warmups: int
    lengths: str  # how the lengths were got (for reports)
    prompt_tokens: Any  # an int, or a length mapping (``sim.workload.lengths``)
    output_tokens: Any
    per_request: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # replayed in order
    scheduler: str | None = None  # the engine that served it, as a Fleetcast scheduler
    # a run measured over a fixed duration (GuideLLM's max_duration): the client keeps sending
    # until then, and only what completed by then counts (the run's sim.horizon_s)
    window_s: float | None = None

    def workload(self, folder: Path, name: str = "lengths") -> dict[str, Any]:
        """The ``workload`` config node of this load; per-request lengths go to
        ``folder/<name>.csv`` (the warm-ups take the first rows, as the harness sends its
        first prompts as its test)."""
        prompt, output = self.prompt_tokens, self.output_tokens
        if self.per_request is not None:
            ins, outs = self.per_request
            warm = self.num_warmups
            path = folder / f"{name}.csv"
            table = pa.table(
                {
                    "prompt_tokens": list(ins[:warm]) + list(ins),
                    "output_tokens": list(outs[:warm]) + list(outs),
                }
            )
            pacsv.write_csv(table, path)
            prompt = {"dist": "empirical", "path": str(path), "in_order": True}
            output = {**prompt, "column": "output_tokens"}
            prompt = {**prompt, "column": "prompt_tokens"}
        return {
            "kind": "bench",
            "num_requests": self.num_requests,
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
            "normalise_sends": self.normalise_sends,
            "max_concurrency": self.max_concurrency,
            "num_warmups": self.num_warmups,
            "ramp_up_strategy": None,
            "ramp_up_start_rps": None,
            "ramp_up_end_rps": None,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "pattern": None,
        }


def _lengths(run: MeasuredRun) -> tuple[str, Any, Any, tuple | None]:
    requests = run.requests
    if requests is not None and requests.input_tokens:
        per_request = (requests.input_tokens, requests.output_tokens)
        return "the file's per-request lengths, in order", None, None, per_request
    settings = run.settings
    if settings.get("dataset_name") == "random" and "random_input_len" in settings:
        ratio = float(settings.get("random_range_ratio") or 0.0)  # type: ignore[arg-type]

        def uniform(length: object) -> dict[str, Any]:
            high = int(length)  # type: ignore[call-overload]
            return {"dist": "uniform", "low": max(1, int(high * ratio)), "high": high}

        return (
            f"SGLang's random dataset (uniform, range ratio {ratio:g})",
            uniform(settings["random_input_len"]),
            uniform(settings["random_output_len"]),
            None,
        )
    data = settings.get("data")
    if isinstance(data, str) and (found := _DATA_SPEC.search(data)):
        return f"the data spec {data!r}", int(found[1]), int(found[2]), None
    if run.mean_input_tokens is None or run.mean_output_tokens is None:
        raise ConfigError(
            "bench_file",
            run.source,
            f"{run.label}: records neither per-request lengths nor token totals, so the "
            "requests cannot be rebuilt",
        )
    return (
        "the file's mean lengths for every request (its spread is not kept)",
        max(1, round(run.mean_input_tokens)),
        max(1, round(run.mean_output_tokens)),
        None,
    )


def harness_load(run: MeasuredRun) -> HarnessLoad:
    """The client settings that reproduce ``run`` (module docstring); ConfigError on
    ``bench_file`` when the file does not say enough."""
    if not run.completed:
        raise ConfigError("bench_file", run.source, f"{run.label}: completed no request")
    lengths, prompt, output, per_request = _lengths(run)
    count = len(per_request[0]) if per_request is not None else run.completed
    recorded = run.request_rate_per_s
    if recorded is None and run.max_concurrency is None:
        raise ConfigError(
            "bench_file",
            run.source,
            f"{run.label}: records neither a request rate nor a concurrency",
        )
    rate = None if recorded is None or recorded == float("inf") else recorded
    settings = run.settings
    if settings.get("ramp_up_strategy"):
        raise ConfigError(
            "bench_file",
            run.source,
            f"{run.label}: a ramp-up run ({settings['ramp_up_strategy']}) is not replayed; "
            "simulate it with fleetcast bench --ramp-up-strategy ...",
        )
    burstiness = float(settings.get("burstiness") or 1.0)  # type: ignore[arg-type]
    if settings.get("strategy") == "constant" or settings.get("request_rate_mode") == "constant":
        burstiness = EVEN_BURSTINESS
    normalise = run.tool == "vllm bench serve" and str(settings.get("date", "99999999")) >= (
        VLLM_NORMALISED_SINCE
    )
    window = run.settings.get("max_duration_s") if run.settings.get("max_number") is None else None
    if window is not None and per_request is None:
        # sends go on until the window closes: more requests than completed, so the client
        # never runs dry before it (the window cuts the rest, as GuideLLM's end does)
        count = 2 * (run.completed + int(run.settings.get("incomplete") or 0))  # type: ignore[call-overload]
        count += run.max_concurrency or 0
    return HarnessLoad(
        num_requests=count,
        request_rate=rate,
        burstiness=burstiness,
        normalise_sends=normalise,
        max_concurrency=run.max_concurrency,
        num_warmups=WARMUPS.get(run.tool, 0),
        lengths=lengths,
        prompt_tokens=prompt,
        output_tokens=output,
        per_request=per_request,
        scheduler=ENGINE.get(run.tool),
        window_s=None if window is None else float(window),  # type: ignore[arg-type]
    )
