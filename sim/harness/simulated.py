"""A simulated run's figures in a harness's definitions, computed from its ``requests.parquet``.

Each completed request of a run has an arrival (the harness's send time), a first-token time, a
completion (its last token) and an output length, columns of requests.parquet
(docs/reference/outputs.md). From them every per-request ``Definition`` is exact: TTFT, E2E, vLLM's
TPOT ``(e2e - ttft)/(out - 1)`` (requests with one output token have none, as in vLLM), GuideLLM's
``(last - first)/out``.

A run folder keeps no time of the tokens between the first and the last, so ``POOLED_GAPS``
(vLLM's and SGLang's ITL, AIPerf's chunk gaps) is built from each request's ``out - 1`` gaps
taken as equal to its mean gap. Its mean is exact (the pooled mean is the total time after
first tokens over the total gaps); its percentiles are those of the per-request means weighted
by their gap counts, which understate the spread of the real gaps (a step with a prefill in it
is a long gap for every request decoding beside it).

Throughputs follow the harnesses' own: completed requests (and their output tokens) over the
span from the first request sent to the last completion. A benchmark client's warm-ups
(``summary.json``'s ``warmup_requests``: the first request ids) are left out of every figure.

Percentiles are numpy's linear interpolation, as vLLM, SGLang and AIPerf compute theirs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.arrow_numpy import column_to_numpy
from sim.errors import ConfigError
from sim.harness.results import Definition
from sim.output.run_files import REQUESTS_FILE, SUMMARY_FILE

COLUMNS = (
    "request_id",
    "arrival_time_s",
    "first_token_time_s",
    "completion_time_s",
    "output_tokens",
    "status",
)


@dataclass(frozen=True)
class SimulatedRequests:
    """The completed requests of a run folder (arrays in the file's order), and the span the
    harnesses divide by."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    completion_s: np.ndarray
    output_tokens: np.ndarray
    duration_s: float
    summary: dict

    @property
    def completed(self) -> int:
        return len(self.arrival_s)


def read_run(run_dir: str | Path) -> SimulatedRequests:
    """The completed requests of a finished run folder; ConfigError on ``run_dir`` if it is not
    one (no ``summary.json``: not a run, or one that did not finish)."""
    folder = Path(run_dir).expanduser()
    if not (folder / SUMMARY_FILE).is_file():
        raise ConfigError("run_dir", str(run_dir), f"no {SUMMARY_FILE}: not a finished run folder")
    if not (folder / REQUESTS_FILE).is_file():
        raise ConfigError("run_dir", str(run_dir), f"no {REQUESTS_FILE} in the run folder")
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text())
    except (OSError, ValueError) as err:  # ValueError: not JSON, not text
        reason = " ".join(str(err).split())
        raise ConfigError(
            "run_dir", str(run_dir), f"{SUMMARY_FILE} cannot be read: {reason}"
        ) from None
    warmups = summary.get("warmup_requests", 0) if isinstance(summary, dict) else None
    if isinstance(warmups, bool) or not isinstance(warmups, int) or warmups < 0:
        raise ConfigError(
            "run_dir",
            str(run_dir),
            f"{SUMMARY_FILE} is not a run's summary (an object whose warmup_requests, where "
            "present, is a count)",
        )
    try:
        table = pq.read_table(folder / REQUESTS_FILE, columns=list(COLUMNS))
    except (OSError, ValueError, KeyError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError(
            "run_dir", str(run_dir), f"{REQUESTS_FILE} cannot be read: {reason}"
        ) from None
    return from_table(table, summary, str(run_dir))


def from_table(table: pa.Table, summary: dict, shown: str = "run") -> SimulatedRequests:
    """The completed, measured requests of a run's requests table (at least ``COLUMNS``) and
    its summary; ConfigError on ``run_dir`` (``shown``) when it completed none."""
    status = np.asarray(table.column("status").to_pylist(), dtype=object)
    # a benchmark client's warm-ups (the first request ids) are not the harness's to measure
    measured = column_to_numpy(table.column("request_id")) >= summary.get("warmup_requests", 0)
    done = (status == "completed") & measured
    arrival = column_to_numpy(table.column("arrival_time_s"))
    if not done.any():
        raise ConfigError("run_dir", shown, "the run completed no request")
    completion = column_to_numpy(table.column("completion_time_s"))[done]
    return SimulatedRequests(
        arrival_s=arrival[done],
        first_token_s=column_to_numpy(table.column("first_token_time_s"))[done],
        completion_s=completion,
        output_tokens=column_to_numpy(table.column("output_tokens"))[done].astype(np.int64),
        duration_s=float(completion.max() - arrival[measured].min()),
        summary=summary,
    )


def per_request(run: SimulatedRequests, definition: Definition) -> tuple[np.ndarray, np.ndarray]:
    """(values in seconds, weights): one value per request the definition counts, weighted by
    how many samples it stands for (1; its gap count for ``POOLED_GAPS``; its token count for
    GuideLLM's token-weighted figures)."""
    ttft = run.first_token_s - run.arrival_s
    after_first = run.completion_s - run.first_token_s
    out = run.output_tokens
    if definition is Definition.TTFT:
        return ttft, np.ones(len(ttft))
    if definition is Definition.E2E:
        return run.completion_s - run.arrival_s, np.ones(len(ttft))
    if definition is Definition.TOKEN_WEIGHTED_GAP_PER_OUTPUT_TOKEN:
        return after_first / out, out.astype(float)
    many = out > 1  # a single token has no gap
    mean_gap = after_first[many] / (out[many] - 1)
    if definition is Definition.GAP_AFTER_FIRST:
        return mean_gap, np.ones(len(mean_gap))
    # POOLED_GAPS: a run folder keeps first and last token times only, so each request's gaps
    # are taken as its mean gap (the mean is exact, the percentiles understate the spread)
    assert definition in (Definition.POOLED_GAPS, Definition.TOKEN_WEIGHTED_GAP_AFTER_FIRST)
    return mean_gap, (out[many] - 1).astype(float)


def mean(values: np.ndarray, weights: np.ndarray) -> float | None:
    return float(np.average(values, weights=weights)) if weights.sum() > 0 else None


def percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile of the samples ``values`` stands for (each value repeated as
    many times as its weight), by numpy's linear interpolation, without building those
    samples (a long run stands for ~1e8 of them)."""
    counts = weights.astype(np.int64)
    assert np.array_equal(counts, weights), "weights are sample counts"
    total = int(counts.sum())
    if total == 0:
        return None
    order = np.argsort(values, kind="stable")
    ordered, cumulative = values[order], np.cumsum(counts[order])
    position = q / 100 * (total - 1)  # numpy's 'linear' method on the repeated samples
    below = int(np.floor(position))
    # the value at sample index i is the first whose cumulative count exceeds i
    low = ordered[np.searchsorted(cumulative, below, side="right")]
    high = ordered[np.searchsorted(cumulative, min(below + 1, total - 1), side="right")]
    return float(low + (high - low) * (position - below))


def output_tokens_per_s(run: SimulatedRequests) -> float:
    return float(run.output_tokens.sum()) / run.duration_s


def requests_per_s(run: SimulatedRequests) -> float:
    return run.completed / run.duration_s
