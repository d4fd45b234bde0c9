"""The workload a run served, as a report shows it: how long prompts and outputs were, which of
the four traffic patterns the requests fall in, and how arrivals moved over time.

The patterns use the fixed split of ``data/traces/README.md``: a prompt is long above 1,024
tokens, an output above 256 (the ``workload.pattern`` presets sit on either side). Every
request counts, rejected ones included: this is the traffic offered, not the traffic served.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.report.document import Figure
from sim.report.plotting import drawing, hours_or_seconds, plain_log_labels

LONG_PROMPT_TOKENS = 1024  # a prompt is long above this (data/traces/README.md)
LONG_OUTPUT_TOKENS = 256  # an output is long above this
# the four patterns, as workload.pattern names them, in the README's order
PATTERNS = ("long_in_short_out", "long_in_long_out", "short_in_long_out", "short_in_short_out")
COLUMNS = ["arrival_time_s", "prompt_tokens", "output_tokens"]
MINUTE_S = 60.0
# arrivals are counted per minute when the run is long enough for that to show a shape; a
# shorter run gets this many bins instead
MIN_BINS = 30


def pattern_label(pattern: str) -> str:
    """``long_in_short_out`` -> ``long-in/short-out``."""
    prompt, output = pattern.split("_in_")
    return f"{prompt}-in/{output.replace('_', '-')}"


def pattern_shares(prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> dict[str, float]:
    """The share of requests in each pattern (``PATTERNS`` order; they sum to 1)."""
    n = len(prompt_tokens)
    if n == 0:
        return dict.fromkeys(PATTERNS, 0.0)
    long_in = np.asarray(prompt_tokens) > LONG_PROMPT_TOKENS
    long_out = np.asarray(output_tokens) > LONG_OUTPUT_TOKENS
    counts = {
        "long_in_short_out": long_in & ~long_out,
        "long_in_long_out": long_in & long_out,
        "short_in_long_out": ~long_in & long_out,
        "short_in_short_out": ~long_in & ~long_out,
    }
    return {name: int(counts[name].sum()) / n for name in PATTERNS}


def arrival_bin_s(span_s: float) -> float:
    """A minute, unless that leaves fewer than ``MIN_BINS`` bins: then span / MIN_BINS."""
    if span_s >= MIN_BINS * MINUTE_S or span_s <= 0:
        return MINUTE_S
    return span_s / MIN_BINS


def arrivals_per_minute(arrival_time_s: np.ndarray) -> pd.DataFrame:
    """Arrivals counted in bins from the first arrival (``arrival_bin_s`` wide), as a rate per
    minute: columns ``time_s`` (the bin's start) and ``per_minute``."""
    times = np.asarray(arrival_time_s, dtype=float)
    if len(times) == 0:
        return pd.DataFrame({"time_s": [], "per_minute": []})
    start = float(times.min())
    span = float(times.max()) - start
    width = arrival_bin_s(span)
    bins = max(int(np.ceil(span / width)), 1)
    # the last arrival closes the last bin rather than opening one of its own
    index = np.minimum(np.floor((times - start) / width).astype(np.int64), bins - 1)
    counts = np.bincount(index, minlength=bins)
    return pd.DataFrame(
        {
            "time_s": start + width * np.arange(len(counts)),
            "per_minute": counts * (MINUTE_S / width),
        }
    )


def describe(requests: pd.DataFrame) -> str:
    """One sentence: how many requests, their median lengths and the dominant pattern."""
    shares = pattern_shares(requests["prompt_tokens"], requests["output_tokens"])
    top = max(PATTERNS, key=lambda p: shares[p])
    return (
        f"{len(requests):,} requests, median prompt {requests['prompt_tokens'].median():,.0f} "
        f"and output {requests['output_tokens'].median():,.0f} tokens; "
        f"{shares[top]:.0%} {pattern_label(top)}."
    )


def workload_figure(requests: pd.DataFrame, name: str = "workload") -> Figure | None:
    """Prompt and output length histograms (log x), the pattern shares, arrivals per minute;
    None without requests."""
    if requests is None or len(requests) == 0:
        return None
    shares = pattern_shares(requests["prompt_tokens"], requests["output_tokens"])
    arrivals = arrivals_per_minute(requests["arrival_time_s"])
    with drawing(2, 2, size=(10, 7)) as d:
        for ax, column, long_above in (
            (d.axes[0][0], "prompt_tokens", LONG_PROMPT_TOKENS),
            (d.axes[0][1], "output_tokens", LONG_OUTPUT_TOKENS),
        ):
            lengths = requests[column].clip(lower=1)  # log scale: a 0-token output sits at 1
            d.sns.histplot(x=lengths, log_scale=True, bins=40, ax=ax, color="C0")
            ax.axvline(long_above, color="C3", linestyle="--", label=f"long above {long_above:,}")
            plain_log_labels(ax.xaxis)  # 2 x 10^1, 3 x 10^1, ... overlapped
            ax.set_xlabel(f"{column.replace('_', ' ')} (log scale)")
            ax.set_ylabel("requests")
            ax.legend(loc="upper right")
        labels = [pattern_label(p) for p in PATTERNS]
        bars = d.axes[1][0]
        bars.barh(labels, [shares[p] for p in PATTERNS], color="C1")
        for i, p in enumerate(PATTERNS):
            bars.text(shares[p], i, f" {shares[p]:.1%}", va="center")
        bars.invert_yaxis()  # the README's order, top to bottom
        bars.set_xlim(0, 1.15)
        bars.set_xlabel("share of requests (long: prompt > 1,024, output > 256 tokens)")
        scale, unit = hours_or_seconds(float(arrivals["time_s"].max()))
        over_time = d.axes[1][1]
        over_time.step(arrivals["time_s"] / scale, arrivals["per_minute"], where="post")
        over_time.set_xlabel(f"simulated time ({unit})")
        over_time.set_ylabel("arrivals per minute")
        over_time.set_ylim(bottom=0)
    return Figure(
        name,
        "The workload: prompt and output lengths (log scale; dashed: where a length counts as "
        "long), the share of each traffic pattern, and arrivals per minute over the run. "
        + describe(requests),
        d.png,
    )
