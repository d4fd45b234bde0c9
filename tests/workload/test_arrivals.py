"""Arrival processes against theory: mean gap, burstiness, daily profile, seeding."""

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.rng import stream
from sim.workload import build_workload
from sim.workload.arrivals import (
    DEFAULT_DAILY_PROFILE,
    ConstantArrivals,
    DailyArrivals,
    GammaArrivals,
    PoissonArrivals,
)


def _gaps(times: np.ndarray) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], times]))


def test_poisson_mean_gap_and_cv_match_theory():
    process = PoissonArrivals(qps=4.0)
    gaps = _gaps(process.times_s(stream(7, "workload.arrivals"), 20_000))
    assert gaps.mean() == pytest.approx(process.mean_gap_s, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(process.cv, rel=0.03)


def test_poisson_gaps_are_not_clipped():
    # The largest of 20k exponential gaps is ~ln(20000) ~ 9.9 mean gaps; a clipping generator
    # (Vidur) would cap it.
    gaps = PoissonArrivals(qps=1.0).gaps_s(stream(3, "workload.arrivals"), 20_000)
    assert gaps.max() > 7.0
    assert gaps.min() < 1e-3


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv_matches_the_knob(cv):
    process = GammaArrivals(qps=2.0, cv=cv)
    gaps = process.gaps_s(stream(11, "workload.arrivals"), 200_000)
    assert gaps.mean() == pytest.approx(process.mean_gap_s, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_constant_arrivals_are_exact():
    w = build_workload(
        {"kind": "constant", "qps": 4.0, "num_requests": 5, "prompt_tokens": 1, "output_tokens": 1},
        seed=0,
    )
    assert w.arrival_time_s.tolist() == [0.25, 0.5, 0.75, 1.0, 1.25]
    assert ConstantArrivals(4.0).mean_gap_s == 0.25


def test_daily_arrivals_track_the_profile_over_a_compressed_day():
    # 60x compression: the day lasts 1440 s, each hour 60 s; ~28.8k arrivals at qps 20.
    process = DailyArrivals(qps=20.0, duration_s=1440.0, time_compression=60.0)
    times = process.times_s(stream(5, "workload.arrivals"))
    counts = np.bincount(process.hour_of_day(times), minlength=24)
    expected = 20.0 * 60.0 * np.asarray(DEFAULT_DAILY_PROFILE)
    assert np.corrcoef(counts, expected)[0, 1] > 0.95
    assert times.size == pytest.approx(20.0 * 1440.0, rel=0.03)  # qps is the daily mean
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 1440.0


def test_daily_profile_is_normalised_and_start_hour_shifts_it():
    flat_double = DailyArrivals(qps=3.0, duration_s=10.0, profile=(2.0,) * 24)
    assert flat_double.rate_qps(np.array([0.0, 5.0])).tolist() == [3.0, 3.0]
    noon = DailyArrivals(qps=1.0, duration_s=10.0, start_hour=12.0)
    assert noon.hour_of_day(np.array([0.0, 3599.0, 3600.0])).tolist() == [12, 12, 13]


def test_daily_num_requests_caps_the_count():
    cfg = {
        "kind": "daily",
        "qps": 10.0,
        "duration_s": 100.0,
        "num_requests": 7,
        "prompt_tokens": 1,
        "output_tokens": 1,
    }
    assert build_workload(cfg, 0).num_requests == 7


POISSON = {
    "kind": "poisson",
    "qps": 2.0,
    "num_requests": 500,
    "prompt_tokens": 100,
    "output_tokens": 10,
}


def test_same_seed_same_arrays_different_seed_different():
    lognormal = {"dist": "lognormal", "median": 100, "sigma": 1.0, "min": 1, "max": 10_000}
    cfg = {**POISSON, "prompt_tokens": lognormal}
    a, b, c = build_workload(cfg, 1), build_workload(cfg, 1), build_workload(cfg, 2)
    assert np.array_equal(a.arrival_time_s, b.arrival_time_s)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.arrival_time_s, c.arrival_time_s)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


@pytest.mark.parametrize("kind", ["poisson", "gamma", "daily"])
def test_changing_lengths_leaves_arrivals_identical(kind):
    extra = {"poisson": {}, "gamma": {"cv": 3.0}, "daily": {"duration_s": 200.0}}[kind]
    base = {**POISSON, "kind": kind, **extra}
    other = {
        **base,
        "prompt_tokens": {"dist": "uniform", "low": 1, "high": 9},
        "pattern": None,
        "output_tokens": {"dist": "lognormal", "median": 50, "sigma": 1},
    }
    preset = {**base, "pattern": "long_in_long_out"}
    a = build_workload(base, 4)
    for cfg in (other, preset):
        assert np.array_equal(a.arrival_time_s, build_workload(cfg, 4).arrival_time_s)


def test_closed_loop_has_no_arrivals():
    cfg = {
        "kind": "closed_loop",
        "concurrency": 3,
        "num_requests": 10,
        "prompt_tokens": 5,
        "output_tokens": 6,
        "think_time_s": 0.5,
    }
    w = build_workload(cfg, 0)
    assert w.arrival_time_s is None and w.concurrency == 3 and w.think_time_s == 0.5
    assert w.num_requests == 10 and w.prompt_tokens.tolist() == [5] * 10


def test_workload_arrays_are_read_only():
    w = build_workload(POISSON, 0)
    with pytest.raises(ValueError):
        w.prompt_tokens[0] = 3


BAD = [
    ({**POISSON, "qps": -1.0}, "workload.qps"),
    ({**POISSON, "qps": 0}, "workload.qps"),
    ({**POISSON, "qps": "fast"}, "workload.qps"),
    ({**POISSON, "num_requests": 0}, "workload.num_requests"),
    ({**POISSON, "num_requests": 2.5}, "workload.num_requests"),
    ({**POISSON, "kind": "gamma", "cv": 0}, "workload.cv"),
    ({**POISSON, "kind": "gamma"}, "workload.cv"),
    ({**POISSON, "kind": "bursty"}, "workload.kind"),
    ({"qps": 1.0}, "workload.kind"),
    ({**POISSON, "kind": "daily", "duration_s": 0}, "workload.duration_s"),
    ({**POISSON, "kind": "daily", "duration_s": 10, "profile": [1.0] * 23}, "workload.profile"),
    ({**POISSON, "kind": "daily", "duration_s": 10, "profile": [0.0] * 24}, "workload.profile"),
    (
        {**POISSON, "kind": "daily", "duration_s": 10, "time_compression": -2},
        "workload.time_compression",
    ),
    ({**POISSON, "kind": "daily", "qps": 1e-9, "duration_s": 1}, "workload.duration_s"),
    (
        {
            "kind": "closed_loop",
            "concurrency": 0,
            "num_requests": 1,
            "prompt_tokens": 1,
            "output_tokens": 1,
        },
        "workload.concurrency",
    ),
    (
        {
            "kind": "closed_loop",
            "concurrency": 1,
            "num_requests": 1,
            "prompt_tokens": 1,
            "output_tokens": 1,
            "think_time_s": -1,
        },
        "workload.think_time_s",
    ),
]


@pytest.mark.parametrize("cfg,field", BAD, ids=[f for _, f in BAD])
def test_bad_arrival_config_is_one_line_error_naming_the_field(cfg, field):
    with pytest.raises(ConfigError) as err:
        build_workload(cfg, 0)
    message = str(err.value)
    assert message.startswith(field + "=") and "\n" not in message


def test_negative_qps_message():
    with pytest.raises(ConfigError, match=r"^workload\.qps=-1\.0: must be > 0$"):
        build_workload({**POISSON, "qps": -1.0}, 0)


def test_unknown_kind_lists_choices():
    with pytest.raises(ConfigError) as err:
        build_workload({**POISSON, "kind": "bursty"}, 0)
    message = str(err.value)
    assert message.startswith("workload.kind='bursty': unknown; choose one of ")
    for kind in ("closed_loop", "constant", "daily", "gamma", "poisson", "trace"):
        assert kind in message
