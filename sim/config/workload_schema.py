"""The ``workload`` group's shape: request lengths (a number or a distribution) and every kind
of traffic a run can replay or generate, one class per ``kind`` (``WorkloadConfig``, a tagged
union). Part of the run's schema (``sim.config.schema``); what a value means is
``sim.workload``'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.config.validation import (
    Count,
    Int,
    NonNegative,
    Positive,
    StrictModel,
    Text,
    Tokens,
)


class FixedLengthSpec(StrictModel):
    dist: Literal["fixed"]
    value: Tokens


class UniformLengthSpec(StrictModel):
    dist: Literal["uniform"]
    low: Tokens
    high: Tokens

    @field_validator("high")
    @classmethod
    def _ordered(cls, high: int, info: ValidationInfo) -> int:
        low = info.data.get("low")
        if low is not None and high < low:
            raise ValueError(f"must be >= low ({low})")
        return high


class LogNormalLengthSpec(StrictModel):
    dist: Literal["lognormal"]
    median: Positive
    sigma: NonNegative
    min: Tokens = 1
    max: Tokens | None = None  # null: no upper clip

    @field_validator("max")
    @classmethod
    def _ordered(cls, high: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("min")
        if high is not None and low is not None and high < low:
            raise ValueError(f"must be >= min ({low})")
        return high


class EmpiricalLengthSpec(StrictModel):
    dist: Literal["empirical"]
    path: Text
    column: Text | None = None  # null: the field's own name (prompt_tokens / output_tokens)
    # true: request i takes row i (cycling past the last row) instead of a resampled row, so a
    # benchmark's own requests are replayed in its order
    in_order: bool = False


LengthDistSpec = Annotated[
    FixedLengthSpec | UniformLengthSpec | LogNormalLengthSpec | EmpiricalLengthSpec,
    Field(discriminator="dist"),
]
LengthSpec = Tokens | LengthDistSpec
"""A token-count field: a fixed length, or a mapping with ``dist:`` (``sim.workload.lengths``)."""


class SyntheticWorkload(StrictModel):
    """What every generated workload has: its lengths (``pattern`` wins when set)."""

    prompt_tokens: LengthSpec
    output_tokens: LengthSpec
    pattern: (
        Literal["long_in_short_out", "long_in_long_out", "short_in_long_out", "short_in_short_out"]
        | None
    ) = None


class RenewalWorkload(SyntheticWorkload):
    kind: Literal["poisson", "constant"]
    qps: Positive
    num_requests: Count


class GammaWorkload(SyntheticWorkload):
    kind: Literal["gamma"]
    qps: Positive
    cv: Positive
    num_requests: Count


class DailyWorkload(SyntheticWorkload):
    """A day's traffic (``sim.workload.day``): the rate follows 24 hourly multipliers
    (``profile``, or the arrivals of ``profile_trace``), the lengths may change with the hour
    (``periods``, or the rows of ``lengths_trace`` at each hour)."""

    class Period(StrictModel):
        """Lengths for the hours ``[start_hour, end_hour)`` of the day; a field left out is
        the workload's own (``prompt_tokens``, ``output_tokens`` or ``pattern``)."""

        start_hour: Annotated[float, Field(ge=0, lt=24)]
        end_hour: Annotated[float, Field(gt=0, le=24)]
        prompt_tokens: LengthSpec | None = None
        output_tokens: LengthSpec | None = None

        @field_validator("end_hour")
        @classmethod
        def _after_start(cls, end: float, info: ValidationInfo) -> float:
            start = info.data.get("start_hour")
            if start is not None and end <= start:
                raise ValueError(
                    f"must be above start_hour ({start:g}); a period past midnight is two "
                    "(22-24 and 0-6)"
                )
            return end

        @model_validator(mode="after")
        def _some_length(self) -> DailyWorkload.Period:
            if self.prompt_tokens is None and self.output_tokens is None:
                raise ValueError("give prompt_tokens or output_tokens (or both)")
            return self

    kind: Literal["daily"]
    qps: Positive
    duration_s: Positive
    profile: Annotated[list[NonNegative], Field(min_length=24, max_length=24)] | None = None
    time_compression: Positive = 1.0
    start_hour: NonNegative = 0.0
    num_requests: Count | None = None
    # the profile from a trace's arrivals (refused with profile: one source of the rate)
    profile_trace: Text | None = None
    # lengths for some hours of the day; the hours no period covers keep the workload's own
    periods: list[Period] | None = None
    # each request's (prompt, output) from a trace's rows of its hour (refused with pattern
    # and with periods: the trace gives every hour's lengths)
    lengths_trace: Text | None = None

    @field_validator("profile")
    @classmethod
    def _some_traffic(cls, profile: list[float] | None) -> list[float] | None:
        if profile is not None and max(profile) <= 0:
            raise ValueError("must be 24 hourly multipliers >= 0, not all 0")
        return profile

    @field_validator("profile_trace")
    @classmethod
    def _one_profile(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is not None and info.data.get("profile") is not None:
            raise ValueError(
                "cannot be set together with workload.profile: the rate follows one of them "
                "(set workload.profile=null)"
            )
        return path

    @field_validator("periods")
    @classmethod
    def _apart(cls, periods: list[Period] | None) -> list[Period] | None:
        ordered = sorted(enumerate(periods or []), key=lambda p: p[1].start_hour)
        for (i, a), (j, b) in zip(ordered, ordered[1:], strict=False):
            if b.start_hour < a.end_hour:
                raise ValueError(
                    f"periods.{j} ({b.start_hour:g}-{b.end_hour:g} h) overlaps periods.{i} "
                    f"({a.start_hour:g}-{a.end_hour:g} h); each hour has one period's lengths"
                )
        return periods

    @field_validator("lengths_trace")
    @classmethod
    def _one_length_source(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is None:
            return path
        for other in ("pattern", "periods"):
            if info.data.get(other) is not None:
                raise ValueError(
                    f"cannot be set together with workload.{other}: the trace's rows give "
                    f"every hour's lengths (set workload.{other}=null)"
                )
        return path


# A harness client's time to send one request (``client_send_s``): requests it releases at one
# instant go out one by one, this far apart (``sim.fleet.cluster``), which is what keeps a closed
# loop's clients from staying in lock-step waves. Measured on AIPerf 0.1.1's sample run
# (github.com/ai-dynamo/aiperf examples/artifacts/run1/profile_export.jsonl @ 7c31f579, read
# 2026-12-05; docs/explanation/how-it-works.md): its 100 requests, released at once at
# concurrency 100, went out over 20.5 ms, the first 95 of them 9.9 ms apart in all, 0.10 ms
# each. ``vllm bench serve`` sends from one asyncio event loop too (vllm/benchmarks/serve.py
# ``benchmark`` @ 009e6d4a: a task per request), so its sends are serial as well.
CLIENT_SEND_S = 1.0e-4


class ClosedLoopWorkload(SyntheticWorkload):
    kind: Literal["closed_loop"]
    concurrency: Count
    num_requests: Count
    think_time_s: NonNegative = 0.0
    client_send_s: NonNegative = CLIENT_SEND_S


class SessionsWorkload(StrictModel):
    """Conversations of turns whose prompts grow (``sim.workload.sessions``)."""

    kind: Literal["sessions"]
    session_rate: Positive  # new sessions per second (Poisson)
    num_sessions: Count
    turns: LengthSpec  # turns per session (a count >= 1, drawn like a length)
    think_time_s: NonNegative = 0.0  # mean seconds from a reply to the next message
    num_apps: Annotated[Int, Field(ge=1, le=10**6)] = 1  # distinct shared system prompts
    system_prompt_tokens: LengthSpec  # per application, drawn once
    user_tokens: LengthSpec  # the new message of each turn
    output_tokens: LengthSpec  # each turn's reply
    max_context_tokens: Tokens = 32768  # a session ends before a turn would pass this


class BenchWorkload(SyntheticWorkload):
    """A serving benchmark's client (``vllm bench serve``; ``sim.workload.source``)."""

    kind: Literal["bench"]
    num_requests: Count  # the harness's --num-prompts
    request_rate: Positive | None = None  # null: every request at once (the harness's inf)
    burstiness: Positive = 1.0
    max_concurrency: Count | None = None
    num_warmups: Annotated[Int, Field(ge=0, le=10**6)] = 0
    # the rate rising from start to end over the requests (request_rate must then be null)
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: Positive | None = None  # vLLM refuses a rate of 0 at any request
    ramp_up_end_rps: Positive | None = None
    # true: request i goes at d_0 + ... + d_i, rescaled so the last is at num_requests /
    # request_rate (vllm bench serve since mid-2025); false: the first at 0, then the raw gaps
    # (vLLM's benchmark_serving.py before that, SGLang's bench_serving, GuideLLM's poisson)
    normalise_sends: bool = True
    # each of max_concurrency clients sends this many requests, one after another (a load
    # generator of virtual users); null: a free slot takes whichever request is due next
    requests_per_client: Count | None = None
    client_send_s: NonNegative = CLIENT_SEND_S  # the client's time to send one request

    @model_validator(mode="after")
    def _per_client(self) -> BenchWorkload:
        k = self.requests_per_client
        if k is None:
            return self
        if self.max_concurrency is None:
            raise ValueError(f"requests_per_client={k} needs max_concurrency (the clients)")
        if self.request_rate is not None or self.ramp_up_strategy is not None:
            raise ValueError(
                f"requests_per_client={k} with a request rate: each client sends its next "
                "request when its last one ends, so leave request_rate and the ramp null"
            )
        if self.num_requests != self.max_concurrency * k:
            raise ValueError(
                f"num_requests={self.num_requests} with requests_per_client={k} and "
                f"max_concurrency={self.max_concurrency}: must be "
                f"{self.max_concurrency * k} (clients x requests each)"
            )
        return self

    @model_validator(mode="after")
    def _ramp_up(self) -> BenchWorkload:
        if self.ramp_up_strategy is None:
            return self
        start, end = self.ramp_up_start_rps, self.ramp_up_end_rps
        if self.request_rate is not None:
            raise ValueError(
                f"request_rate={self.request_rate} with ramp_up_strategy: the ramp sets the rate,"
                " leave request_rate null (as vllm bench serve requires)"
            )
        if start is None or end is None:
            raise ValueError("ramp_up_strategy needs ramp_up_start_rps and ramp_up_end_rps")
        if start > end:
            raise ValueError(f"ramp_up_start_rps={start} above ramp_up_end_rps={end}")
        return self


# The most prompt tokens one hash id may cover (a trace's hash_block_tokens): far above any real
# trace's block (Mooncake's is 512), low enough that a mistyped value is caught.
MAX_HASH_BLOCK_TOKENS = 2**20


class TraceWorkload(StrictModel):
    kind: Literal["trace"]
    path: Text | None = None  # required when the trace is read; null in trace.yaml
    duration_s: Positive | None = None
    num_requests: Count | None = None
    rate_scale: Positive = 1.0
    start_s: NonNegative = 0.0
    spread_ticks_s: Positive | None = None
    # tokens per hash of the trace's hash_ids column (Mooncake's format); null: the file's
    # hash_block_tokens metadata. Read only with kv.prefix_caching=true.
    hash_block_tokens: Annotated[Int, Field(ge=1, le=MAX_HASH_BLOCK_TOKENS)] | None = None


WorkloadConfig = Annotated[
    RenewalWorkload
    | GammaWorkload
    | DailyWorkload
    | ClosedLoopWorkload
    | BenchWorkload
    | SessionsWorkload
    | TraceWorkload,
    Field(discriminator="kind"),
]
