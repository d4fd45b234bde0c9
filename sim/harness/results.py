"""One measured benchmark run, whichever harness wrote it: what ran and what was measured.

A harness result file (vLLM ``bench serve``, SGLang ``bench_serving``, GuideLLM, AIPerf) is read
into a ``MeasuredRun``: the settings the harness ran with (model, request rate or concurrency,
number of prompts, lengths), and its latency statistics, throughputs and counts. Latencies are
in seconds whatever unit the file used; a statistic the file does not hold is ``None`` (or
absent from ``percentiles_s``), never a guess.

The harnesses give the same names different meanings, so every latency statistic carries its
``Definition``: how the tool computes the number from each request's times. Two share the name
"TPOT" and differ by the first token (vLLM divides the time after the first token by
``output_tokens - 1``, GuideLLM by ``output_tokens``); vLLM's and SGLang's "ITL" pools every
gap between streamed chunks, while AIPerf's and GuideLLM's "ITL" is a per-request mean gap
(GuideLLM's TPOT and ITL distributions weigh each request by its token count).
``fleetcast compare`` computes the simulated figure in the measured statistic's definition.

Left out on purpose: goodput (it depends on SLOs the file may not record), token-level
timestamps (only vLLM's ``itls`` and AIPerf's ``inter_chunk_latency`` keep gaps, and only for
``ITL``'s pooled statistics), and the generated texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Definition(Enum):
    """How a harness computes one latency figure from a request's times (``start`` = when the
    request was sent, ``first``/``last`` = when its first/last output token arrived)."""

    TTFT = "first - start, per request"
    E2E = "last - start, per request"
    # vLLM's TPOT (benchmarks/benchmark_serving.py calculate_metrics), AIPerf's
    # inter_token_latency
    GAP_AFTER_FIRST = "(last - first) / (output_tokens - 1), per request with output_tokens > 1"
    # GuideLLM v0.2 (benchmark.py, GenerativeMetrics): each request's figure weighted by its
    # token count in the distribution, so a long request weighs more than a short one.
    # time_per_output_token_ms counts the first token in the denominator
    TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN = (
        "(last - first) / output_tokens per request, weighted by output_tokens"
    )
    # inter_token_latency_ms
    TOKEN_WEIGHTED_GAP_AFTER_FIRST = (
        "(last - first) / (output_tokens - 1) per request, weighted by output_tokens - 1"
    )
    # vLLM's and SGLang's ITL, AIPerf's inter_chunk_latency: each gap between streamed chunks is
    # one sample, so a long request weighs more than a short one
    POOLED_GAPS = "every gap between streamed chunks, pooled over all requests"


@dataclass(frozen=True)
class Statistic:
    """One latency metric of a run as the harness reported it, in seconds.

    ``name`` is the tool's own name (``mean_tpot_ms``'s stem ``tpot``, GuideLLM's
    ``time_per_output_token_ms``); ``percentiles_s`` maps a percentile (``50.0`` is the median,
    ``99.9``) to its value.
    """

    name: str
    definition: Definition
    mean_s: float | None = None
    percentiles_s: dict[float, float] = field(default_factory=dict)
    std_s: float | None = None

    @property
    def median_s(self) -> float | None:
        return self.percentiles_s.get(50.0)


@dataclass(frozen=True)
class MeasuredRequests:
    """Per-request figures of the completed requests, in the file's order, when the file keeps
    them for every completed request (a sample of the requests is not kept: its lengths would
    pass for the run's)."""

    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    ttft_s: tuple[float, ...] | None = None
    e2e_s: tuple[float, ...] | None = None


# the latency roles a run can hold: each harness maps its own names onto these
ROLES = ("ttft", "tpot", "itl", "e2e", "chunk_gap")


@dataclass(frozen=True)
class MeasuredRun:
    """One benchmark run read from a harness result file.

    What ran: ``tool`` (and ``tool_version`` when the file says), ``model``, the load
    (``request_rate_per_s``: ``inf`` means every request sent at once, ``None`` not recorded;
    ``max_concurrency``: ``None`` = no cap or not recorded), ``num_prompts``, the lengths
    (``mean_*_tokens`` over completed requests, ``requests`` per request when kept).
    What was measured: ``latency`` by role (``ttft``, ``tpot``, ``itl``, ``e2e``,
    ``chunk_gap``; each ``Statistic`` says its tool's definition), the throughputs as the tool
    computes them, ``completed`` and ``failed`` requests, ``duration_s``.
    ``settings`` keeps what else the file records about the load (dataset, burstiness, ...).
    """

    source: str
    tool: str
    label: str
    latency: dict[str, Statistic]
    tool_version: str | None = None
    model: str | None = None
    request_rate_per_s: float | None = None
    max_concurrency: int | None = None
    num_prompts: int | None = None
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    requests: MeasuredRequests | None = None
    request_throughput_per_s: float | None = None
    output_throughput_tokens_per_s: float | None = None
    completed: int | None = None
    failed: int | None = None
    duration_s: float | None = None
    settings: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.latency) - set(ROLES)
        assert not unknown, f"latency roles {sorted(unknown)} are not among {ROLES}"
