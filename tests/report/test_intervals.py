"""Wilson and Student-t intervals, exactly."""

from __future__ import annotations

import pytest

from sim.plan.replications import t_quantile
from sim.report.intervals import good_requests, mean_interval, wilson


def test_wilson_matches_the_published_intervals():
    # Brown, Cai & DasGupta (2001) / Newcombe (1998): 95/100 -> [0.8883, 0.9785]
    found = wilson(95, 100)
    assert found.value == 0.95
    assert found.low == pytest.approx(0.88825, abs=1e-5)
    assert found.high == pytest.approx(0.97846, abs=1e-5)
    # 8/10 -> [0.4902, 0.9433]
    eight = wilson(8, 10)
    assert (round(eight.low, 4), round(eight.high, 4)) == (0.4902, 0.9433)


def test_wilson_stays_in_zero_one_and_is_exact_at_the_ends():
    none, every = wilson(0, 20), wilson(20, 20)
    assert none.low == 0.0 and 0 < none.high < 0.2
    assert every.high == 1.0 and 0.8 < every.low < 1.0
    assert wilson(20, 20).low == pytest.approx(1 - wilson(0, 20).high)  # symmetric
    assert wilson(0, 0) is None


def test_the_mean_interval_is_the_planners_t_interval():
    values = [1.0, 2.0, 3.0]
    found = mean_interval(values)
    half = t_quantile(0.975, 2) * 1.0 / 3**0.5  # s = 1
    assert (found.value, found.low, found.high) == pytest.approx((2.0, 2 - half, 2 + half))
    one = mean_interval([4.0])
    assert (one.value, one.low, one.high) == (4.0, 4.0, 4.0)
    assert mean_interval([]) is None


def test_good_requests_counts_every_request_as_the_sweep_ranks_them():
    # goodput 9.5 req/s over 10 s of 100 requests (rejected ones included): 95 good
    summary = {"goodput_requests_per_s": 9.5, "duration_s": 10.0, "num_requests": 100}
    assert good_requests(summary) == (95, 100)
    assert good_requests({**summary, "goodput_requests_per_s": None}) is None
