"""The workload: every request's arrival time and length, decided before the simulation runs.

``build_workload(cfg, seed)`` turns the ``workload`` config node (a plain dict) into a
``Workload``: parallel arrays of prompt and output token counts plus either open-loop arrival
times or closed-loop settings (``concurrency`` requests kept in flight, each completion followed
by ``think_time_s`` before the next request is sent; the simulator core does the pacing).

``kind`` picks the generator: ``trace`` (replay a file, see ``traces.py``), ``poisson``,
``gamma``, ``constant`` and ``daily`` (see ``arrivals.py``; a day's profile and its lengths by
hour, ``day.py``), ``closed_loop``, ``sessions`` (conversations whose turns wait for the reply,
``sessions.py``), and ``bench`` (a serving benchmark's client: warm-ups first, then sends spaced
as ``vllm bench serve`` spaces them, under a cap on requests in flight; the cluster paces the cap
and the warm-up phase). Synthetic lengths come from ``lengths.py``. Randomness uses the named
streams ``workload.arrivals``, ``workload.prompt_tokens``, ``workload.output_tokens`` (and
``workload.spread`` for trace tick spreading, ``workload.lengths`` and
``workload.periods.<i>.*`` for a day's lengths by hour), so changing a length distribution never
moves an arrival and vice versa.

Request content is a trace's block hashes or a conversation's segments (``prefixes.py``, for a
prefix cache), or nothing.
Left out: priorities, deadlines, and feedback from
the system to the open-loop arrivals (retries, client back-off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.config.validation import StrictModel, validate
from sim.config.workload_schema import (
    BenchWorkload,
    ClosedLoopWorkload,
    DailyWorkload,
    GammaWorkload,
    RenewalWorkload,
    SessionsWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadConfig,
)
from sim.errors import ConfigError
from sim.rng import stream
from sim.workload import arrivals, day, lengths, sessions, traces
from sim.workload.sessions import Sessions


@dataclass(frozen=True, eq=False)
class Workload:
    """Per-request arrays (read-only), index i = request i in arrival order."""

    prompt_tokens: np.ndarray  # int64, one per request, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    arrival_time_s: np.ndarray | None  # float64, non-decreasing, >= 0; None for closed loop
    concurrency: int | None = None  # closed loop: requests kept in flight; with arrival times,
    # a client cap (a request due while ``concurrency`` are in flight waits for one to end)
    think_time_s: float = 0.0  # closed loop: delay between a completion and the next request
    # closed loop and benchmark client: the client's time to send one request; requests it
    # releases at one instant go out this far apart, in order (``sim.fleet.cluster``)
    client_send_s: float = 0.0
    # the first ``warmup_requests`` go out at once before the others, whose arrival times then
    # count from the moment the last warm-up ended (a benchmark's warm-up phase)
    warmup_requests: int = 0
    # with a client cap: each of the ``concurrency`` clients sends this many of the measured
    # requests, one after another (None: any free slot takes the next request due)
    requests_per_client: int | None = None
    trace_file: str | None = None  # a replayed trace: the file, as the config names it
    trace_rows: np.ndarray | None = None  # ... and each request's row in it (from 0)
    # a prefix cache's input (``sim.workload.prefixes``): each request's content ids, a trace's
    # one per ``hash_block_tokens`` prompt tokens, or a conversation's one per segment of
    # ``hash_segment_tokens`` prompt and reply tokens (None: no request shares anything)
    hash_ids: list[np.ndarray] | None = None
    hash_block_tokens: int | None = None
    hash_segment_tokens: list[np.ndarray] | None = None
    # conversations (``sim.workload.sessions``): requests are their turns, the first of each
    # session sent at its start, each next one a think time after the last one ended
    sessions: Sessions | None = None
    # what the user should know of how the workload was made (a trace's shape stretched over
    # a day, ``sim.workload.day``), one line each
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = self.prompt_tokens.size
        assert n >= 1, "a workload has at least one request"
        assert self.prompt_tokens.dtype == np.int64 and self.output_tokens.dtype == np.int64, (
            f"token arrays must be int64, got {self.prompt_tokens.dtype}/{self.output_tokens.dtype}"
        )
        assert self.output_tokens.size == n, "prompt_tokens and output_tokens differ in length"
        assert self.prompt_tokens.min() >= 1 and self.output_tokens.min() >= 1, "lengths >= 1"
        if self.sessions is not None:
            assert self.arrival_time_s is None and self.concurrency is None, "sessions pace"
            assert self.sessions.first_row[-1] == n, "one row per turn"
        elif self.arrival_time_s is None:
            assert self.concurrency is not None and self.concurrency >= 1, (
                "a closed-loop workload needs concurrency >= 1"
            )
        else:
            a = self.arrival_time_s
            assert a.dtype == np.float64 and a.size == n, "arrival_time_s: float64, one per request"
            assert a[0] >= 0 and np.all(np.diff(a) >= 0), "arrivals start >= 0, non-decreasing"
            assert self.concurrency is None or self.concurrency >= 1, "a client cap is >= 1"
        assert 0 <= self.warmup_requests < n, "warm-ups leave at least one measured request"
        assert self.warmup_requests == 0 or self.arrival_time_s is not None, (
            "warm-ups need arrival times (a bench workload)"
        )
        if self.requests_per_client is not None:
            assert self.concurrency is not None and self.arrival_time_s is not None, (
                "requests per client need a bench client's cap"
            )
            assert self.concurrency * self.requests_per_client == n - self.warmup_requests, (
                "every measured request belongs to one client"
            )
        if self.hash_ids is not None:
            assert len(self.hash_ids) == n, "one hash list each"
            assert (self.hash_block_tokens is None) != (self.hash_segment_tokens is None), (
                "hash ids cover blocks of hash_block_tokens, or segments"
            )
        for arr in (self.prompt_tokens, self.output_tokens, self.arrival_time_s):
            if arr is not None:
                arr.setflags(write=False)  # shared by reference; nobody may edit it in place

    @property
    def num_requests(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def hashed_tokens(self) -> np.ndarray:
        """The tokens each request's hash ids describe: a trace's, its prompt; a conversation
        turn's, its prompt and its reply (the next turn's prompt holds both)."""
        if self.hash_segment_tokens is None:
            return self.prompt_tokens
        return self.prompt_tokens + self.output_tokens


def _sample_lengths(spec: SyntheticWorkload, seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    prompt, output = lengths.build_lengths(spec)
    return (
        prompt.sample(stream(seed, "workload.prompt_tokens"), n),
        output.sample(stream(seed, "workload.output_tokens"), n),
    )


def _renewal(spec: RenewalWorkload | GammaWorkload, seed: int) -> Workload:
    process = arrivals.renewal_process(spec)
    prompt, output = _sample_lengths(spec, seed, spec.num_requests)
    times = process.times_s(stream(seed, "workload.arrivals"), spec.num_requests)
    return Workload(prompt, output, times)


def _daily(spec: DailyWorkload, seed: int) -> Workload:
    """A day's traffic: the rate by hour from the profile, the lengths by hour from the
    periods or the lengths trace when given (``sim.workload.day``)."""
    profile = day.day_profile(spec)
    notes: tuple[str, ...] = () if profile.note is None else (profile.note,)
    process = arrivals.daily_process(spec, profile.values)
    times = process.times_s(stream(seed, "workload.arrivals"), spec.num_requests)
    if times.size == 0:
        raise ConfigError(
            "workload.duration_s",
            process.duration_s,
            f"no request arrived (expected ~{process.qps * process.duration_s:.2f}); "
            "raise qps or duration_s",
        )
    if spec.lengths_trace is not None:
        prompt, output, note = day.trace_lengths(
            spec.lengths_trace, process.hour_of_day(times), stream(seed, "workload.lengths")
        )
        notes += (note,) if note not in notes else ()
    elif spec.periods:
        prompt, output = day.period_lengths(spec, process.day_hour(times), seed)
    else:
        prompt, output = _sample_lengths(spec, seed, times.size)
    return Workload(prompt, output, times, notes=notes)


def _closed_loop(spec: ClosedLoopWorkload, seed: int) -> Workload:
    prompt, output = _sample_lengths(spec, seed, spec.num_requests)
    return Workload(
        prompt,
        output,
        None,
        concurrency=spec.concurrency,
        think_time_s=spec.think_time_s,
        client_send_s=spec.client_send_s,
    )


def _sessions(spec: SessionsWorkload, seed: int) -> Workload:
    drawn = sessions.sample_sessions(spec, seed)
    return Workload(
        drawn.prompt_tokens,
        drawn.output_tokens,
        None,
        hash_ids=drawn.segment_ids,
        hash_segment_tokens=drawn.segment_tokens,
        sessions=drawn.sessions,
    )


def _bench(spec: BenchWorkload, seed: int) -> Workload:
    """A benchmark client as ``vllm bench serve`` runs it (vllm/benchmarks/serve.py,
    ``get_request``, ``_get_current_request_rate`` and ``benchmark``, read 2026-12-02):
    ``num_warmups`` requests first, then the ``num_requests`` measured ones, request i sent
    ``d_0 + ... + d_i`` after the start, each ``d`` drawn from Gamma(burstiness,
    1 / (rate_i x burstiness)); without a ramp the sends are rescaled so the last is at
    ``num_requests / request_rate`` exactly (vLLM's normalisation, which steadies throughput
    across seeds); with one, ``rate_i`` runs from start to end linearly or exponentially in
    ``i / (num_requests - 1)``. With ``normalise_sends`` false (older vLLM, SGLang's
    bench_serving, GuideLLM's Poisson): the first request at once, then each after its gap, as
    drawn (``sglang/bench_serving.py`` ``get_request``: yield, then sleep a gap). No rate and
    no ramp: every request at once. Each request waits
    for a slot while ``max_concurrency`` are in flight (the cluster paces that); with
    ``requests_per_client``, each of the ``max_concurrency`` clients sends its own that many,
    one after another."""
    n = spec.num_warmups + spec.num_requests
    prompt, output = _sample_lengths(spec, seed, n)
    times = np.zeros(n)
    if spec.request_rate is not None or spec.ramp_up_strategy is not None:
        count = spec.num_requests
        progress = np.arange(count) / max(count - 1, 1)
        if spec.ramp_up_strategy is None:
            assert spec.request_rate is not None  # the schema's rule
            rates = np.full(count, spec.request_rate)
        else:
            assert spec.ramp_up_start_rps is not None and spec.ramp_up_end_rps is not None
            low, high = spec.ramp_up_start_rps, spec.ramp_up_end_rps
            if spec.ramp_up_strategy == "linear":
                rates = low + (high - low) * progress
            else:
                rates = low * (high / low) ** progress
        gaps = stream(seed, "workload.arrivals").gamma(
            spec.burstiness, 1.0 / (rates * spec.burstiness)
        )
        if spec.normalise_sends:
            sends = np.cumsum(gaps)
            if spec.ramp_up_strategy is None and spec.request_rate is not None and sends[-1] > 0:
                sends *= (count / spec.request_rate) / sends[-1]
        else:  # the first request at once, each next one a gap later, as drawn
            sends = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        times[spec.num_warmups :] = sends
    return Workload(
        prompt,
        output,
        times,
        concurrency=spec.max_concurrency,
        warmup_requests=spec.num_warmups,
        requests_per_client=spec.requests_per_client,
        client_send_s=spec.client_send_s,
    )


def _trace(spec: TraceWorkload, seed: int) -> Workload:
    trace = traces.TraceFilter.from_spec(spec).apply(traces.load_trace(spec.path), seed)
    return Workload(
        trace.prompt_tokens,
        trace.output_tokens,
        trace.arrival_time_s,
        trace_file=trace.shown,
        trace_rows=trace.row,
    )


def build_workload(cfg: Any, seed: int) -> Workload:
    """The workload a ``workload`` config describes (checked first when it is plain data),
    under ``seed``."""
    spec = cfg if isinstance(cfg, StrictModel) else validate(WorkloadConfig, cfg, "workload")
    if isinstance(spec, TraceWorkload):
        return _trace(spec, seed)
    if isinstance(spec, DailyWorkload):
        return _daily(spec, seed)
    if isinstance(spec, ClosedLoopWorkload):
        return _closed_loop(spec, seed)
    if isinstance(spec, BenchWorkload):
        return _bench(spec, seed)
    if isinstance(spec, SessionsWorkload):
        return _sessions(spec, seed)
    assert isinstance(spec, (RenewalWorkload, GammaWorkload)), f"no builder for {spec}"
    return _renewal(spec, seed)
