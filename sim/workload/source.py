"""The workload: every request's arrival time and length, decided before the simulation runs.

``build_workload(cfg, seed)`` turns the ``workload`` config node (a plain dict) into a
``Workload``: parallel arrays of prompt and output token counts plus either open-loop arrival
times or closed-loop settings (``concurrency`` requests kept in flight, each completion followed
by ``think_time_s`` before the next request is sent; the simulator core does the pacing).

``kind`` picks the generator: ``trace`` (replay a file, see ``traces.py``), ``poisson``,
``gamma``, ``constant`` and ``daily`` (see ``arrivals.py``), and ``closed_loop``. Synthetic
lengths come from ``lengths.py``. Randomness uses the named streams ``workload.arrivals``,
``workload.prompt_tokens``, ``workload.output_tokens`` (and ``workload.spread`` for trace tick
spreading), so changing a length distribution never moves an arrival and vice versa.

Left out: request content (prefix sharing, KV reuse), priorities, deadlines, and feedback from
the system to the open-loop arrivals (retries, client back-off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from sim.config import params
from sim.errors import ConfigError
from sim.rng import stream
from sim.workload import arrivals, lengths, traces


@dataclass(frozen=True, eq=False)
class Workload:
    """Per-request arrays (read-only), index i = request i in arrival order."""

    prompt_tokens: np.ndarray  # int64, one per request, >= 1
    output_tokens: np.ndarray  # int64, >= 1
    arrival_time_s: np.ndarray | None  # float64, non-decreasing, >= 0; None for closed loop
    concurrency: int | None = None  # closed loop: requests kept in flight
    think_time_s: float = 0.0  # closed loop: delay between a completion and the next request

    def __post_init__(self) -> None:
        n = self.prompt_tokens.size
        assert n >= 1, "a workload has at least one request"
        assert self.prompt_tokens.dtype == np.int64 and self.output_tokens.dtype == np.int64, (
            f"token arrays must be int64, got {self.prompt_tokens.dtype}/{self.output_tokens.dtype}"
        )
        assert self.output_tokens.size == n, "prompt_tokens and output_tokens differ in length"
        assert self.prompt_tokens.min() >= 1 and self.output_tokens.min() >= 1, "lengths >= 1"
        if self.arrival_time_s is None:
            assert self.concurrency is not None and self.concurrency >= 1, (
                "a closed-loop workload needs concurrency >= 1"
            )
        else:
            a = self.arrival_time_s
            assert a.dtype == np.float64 and a.size == n, "arrival_time_s: float64, one per request"
            assert a[0] >= 0 and np.all(np.diff(a) >= 0), "arrivals start >= 0, non-decreasing"
            assert self.concurrency is None, "open-loop workloads have no concurrency"
        for arr in (self.prompt_tokens, self.output_tokens, self.arrival_time_s):
            if arr is not None:
                arr.setflags(write=False)  # shared by reference; nobody may edit it in place

    @property
    def num_requests(self) -> int:
        return int(self.prompt_tokens.size)


def _sample_lengths(cfg: Mapping, seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    prompt, output = lengths.build_lengths(cfg)
    return (
        prompt.sample(stream(seed, "workload.prompt_tokens"), n),
        output.sample(stream(seed, "workload.output_tokens"), n),
    )


def _renewal(cfg: Mapping, seed: int) -> Workload:
    process = arrivals.build_renewal(cfg)
    n = params.integer(cfg, "num_requests", required=True, ge=1, prefix="workload")
    prompt, output = _sample_lengths(cfg, seed, n)
    times = process.times_s(stream(seed, "workload.arrivals"), n)
    return Workload(prompt, output, times)


def _daily(cfg: Mapping, seed: int) -> Workload:
    process = arrivals.build_daily(cfg)
    cap = params.integer(cfg, "num_requests", ge=1, prefix="workload")
    times = process.times_s(stream(seed, "workload.arrivals"), cap)
    if times.size == 0:
        raise ConfigError(
            "workload.duration_s",
            process.duration_s,
            f"no request arrived (expected ~{process.qps * process.duration_s:.2f}); "
            "raise qps or duration_s",
        )
    prompt, output = _sample_lengths(cfg, seed, times.size)
    return Workload(prompt, output, times)


def _closed_loop(cfg: Mapping, seed: int) -> Workload:
    concurrency = params.integer(cfg, "concurrency", required=True, ge=1, prefix="workload")
    n = params.integer(cfg, "num_requests", required=True, ge=1, prefix="workload")
    think_time_s = params.number(cfg, "think_time_s", default=0.0, ge=0, prefix="workload")
    prompt, output = _sample_lengths(cfg, seed, n)
    return Workload(prompt, output, None, concurrency=concurrency, think_time_s=think_time_s)


def _trace(cfg: Mapping, seed: int) -> Workload:
    window = traces.TraceFilter.from_config(cfg)  # check the knobs before reading the file
    trace = window.apply(traces.load_trace(cfg.get("path")), seed)
    return Workload(trace.prompt_tokens, trace.output_tokens, trace.arrival_time_s)


BUILDERS: dict[str, Callable[[Mapping, int], Workload]] = {
    "trace": _trace,
    "poisson": _renewal,
    "gamma": _renewal,
    "constant": _renewal,
    "daily": _daily,
    "closed_loop": _closed_loop,
}


def build_workload(cfg: Mapping, seed: int) -> Workload:
    """The workload described by ``cfg`` (the ``workload`` node as a dict) under ``seed``."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("workload", cfg, "must be a mapping with a kind field")
    kind = params.choice(cfg, "kind", list(BUILDERS), prefix="workload")
    return BUILDERS[kind](cfg, seed)
