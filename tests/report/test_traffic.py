"""The workload's patterns and arrivals, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from sim.report.traffic import (
    PATTERNS,
    arrival_bin_s,
    arrivals_per_minute,
    describe,
    pattern_label,
    pattern_shares,
)


def test_pattern_shares_use_the_1024_256_split_with_long_strictly_above():
    prompts = np.array([1024, 1025, 1025, 10, 2000, 1, 1024, 5000])
    outputs = np.array([256, 256, 257, 257, 10, 1, 300, 999])
    shares = pattern_shares(prompts, outputs)
    assert list(shares) == list(PATTERNS)
    # long-in/short-out: (1025, 256), (2000, 10); long-in/long-out: (1025, 257), (5000, 999)
    # short-in/long-out: (10, 257), (1024, 300); short-in/short-out: (1024, 256), (1, 1)
    assert shares == {
        "long_in_short_out": 0.25,
        "long_in_long_out": 0.25,
        "short_in_long_out": 0.25,
        "short_in_short_out": 0.25,
    }
    assert pattern_shares(np.array([]), np.array([])) == dict.fromkeys(PATTERNS, 0.0)
    assert pattern_label("short_in_long_out") == "short-in/long-out"


def test_arrivals_are_counted_per_minute_from_the_first_one():
    # an hour: one-minute bins; 3 arrivals in the first minute, 1 in the third
    times = np.array([100.0, 130.0, 159.0, 220.0, 100.0 + 3599.0])
    found = arrivals_per_minute(times)
    assert arrival_bin_s(3599.0) == 60.0
    assert found["time_s"].iloc[:3].tolist() == [100.0, 160.0, 220.0]
    assert found["per_minute"].iloc[:3].tolist() == [3.0, 0.0, 1.0]
    assert found["per_minute"].sum() == 5.0


def test_a_short_run_gets_thirty_bins_as_a_rate_per_minute():
    times = np.array([0.0, 0.5, 1.0, 29.9])  # under 30 minutes: 30 bins of 0.9967 s
    width = 29.9 / 30
    found = arrivals_per_minute(times)
    assert arrival_bin_s(29.9) == width
    assert len(found) == 30  # the last arrival closes the last bin
    assert found["per_minute"].tolist() == pytest.approx(
        [2 * 60 / width, 60 / width] + [0.0] * 27 + [60 / width]
    )


def test_describe_says_count_medians_and_the_largest_pattern():
    import pandas as pd

    requests = pd.DataFrame({"prompt_tokens": [100, 2000, 3000], "output_tokens": [10, 20, 30]})
    assert describe(requests) == (
        "3 requests, median prompt 2,000 and output 20 tokens; 67% long-in/short-out."
    )
