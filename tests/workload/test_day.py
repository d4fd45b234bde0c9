"""A day's traffic (``sim.workload.day``): profiles and lengths from traces counted by hand,
lengths by period, seeding, and the planner's API against brute force."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.config.validation import validate
from sim.config.workload_schema import DailyWorkload, WorkloadConfig
from sim.errors import ConfigError
from sim.workload import build_workload
from sim.workload.arrivals import DailyArrivals
from sim.workload.day import (
    _nearest_filled,
    day_profile,
    hourly_rates,
    period_workload,
    split_day,
    trace_day,
)

AZURE_CONV = "shipped:traces/azure_llm_2023_conv.parquet"
# A flat day played 60 times faster: 24 h in 1,440 s, each hour 60 s.
DAY = {
    "kind": "daily",
    "qps": 5.0,
    "duration_s": 1440.0,
    "time_compression": 60.0,
    "profile": [1.0] * 24,
    "prompt_tokens": 5,
    "output_tokens": 6,
}


def _trace(path: Path, arrival: list[float], prompt: list[int] | None = None, **extra) -> str:
    n = len(arrival)
    prompt = prompt if prompt is not None else list(range(1, n + 1))
    columns = {
        "arrival_time_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": [p + 1000 for p in prompt],
        **extra,
    }
    pq.write_table(pa.table(columns), path)
    return str(path)


# -- the profile from a trace ------------------------------------------------------------------


def test_a_two_hour_trace_is_stretched_over_the_day_in_bins_counted_by_hand(tmp_path):
    # span 7,200 s: 24 bins of 300 s. Bin 0 holds 0 and 100; bin 1 350; bin 12 3,600 and
    # 3,650; bin 23 7,199 and the last arrival, 7,200 (the span's end is in the last bin).
    path = _trace(tmp_path / "t.parquet", [0.0, 100.0, 350.0, 3600.0, 3650.0, 7199.0, 7200.0])
    day = trace_day(path, "workload.profile_trace")
    expected = np.zeros(24)
    expected[[0, 1, 12, 23]] = [2, 1, 2, 2]
    assert day.arrivals_per_hour.tolist() == expected.tolist()
    assert day.hour.tolist() == [0, 0, 1, 12, 12, 23, 23]
    assert "stretched over a day" in day.note and "24 bins of 300.0 s" in day.note
    spec = {**DAY, "profile": None, "profile_trace": path, "qps": 7.0}
    # qps is the day's mean: 7 req/s x count / mean count (7 / 24)
    assert hourly_rates(spec).tolist() == pytest.approx((24.0 * expected).tolist())
    assert build_workload(spec, 0).notes == (day.note,)


def test_a_shipped_one_hour_trace_gives_24_bins():
    day = trace_day(AZURE_CONV, "workload.profile_trace")
    assert day.arrivals_per_hour.shape == (24,) and day.arrivals_per_hour.min() > 0
    assert day.arrivals_per_hour.sum() == 19_366  # every row in some bin
    assert "58.4 min, under 23 h: its shape stretched over a day" in day.note
    rates = hourly_rates({**DAY, "profile": None, "profile_trace": AZURE_CONV, "qps": 2.0})
    assert rates.mean() == pytest.approx(2.0)
    # the trace's hump around minutes 26-36 (bins of ~146 s) is the day's peak
    assert 10 <= int(np.argmax(rates)) <= 14


def test_a_day_long_trace_is_counted_per_hour_of_day_averaged_over_the_days_it_covers(tmp_path):
    # 25 h from hour 0: hours 0 and 1 are reached on two days, the others on one.
    arrival = [0.0, 1800.0, 3700.0, 86_500.0, 90_000.0]
    day = trace_day(_trace(tmp_path / "t.parquet", arrival), "workload.profile_trace")
    expected = np.zeros(24)
    expected[[0, 1]] = [3 / 2, 2 / 2]
    assert day.arrivals_per_hour.tolist() == expected.tolist()
    assert day.hour.tolist() == [0, 0, 1, 0, 1]
    assert "1.04 days of arrivals binned by hour of day (arrival_time_s from hour 0)" in day.note


def test_a_day_long_trace_uses_its_timestamps_hour(tmp_path):
    # the same arrivals, stamped from 18:30: hours 18 and 19, each reached on two days
    start = np.datetime64("2023-11-16T18:30:00", "us")
    arrival = [0.0, 1800.0, 3700.0, 86_500.0, 90_000.0]
    stamps = pa.array(start + (np.array(arrival) * 1e6).astype("timedelta64[us]"))
    path = _trace(tmp_path / "t.parquet", arrival, timestamp=stamps)
    day = trace_day(path, "workload.profile_trace")
    assert day.hour.tolist() == [18, 19, 19, 18, 19]
    expected = np.zeros(24)
    expected[[18, 19]] = [2 / 2, 3 / 2]
    assert day.arrivals_per_hour.tolist() == expected.tolist()
    assert "(its timestamp column)" in day.note
    # a zoned timestamp counts on its zone's wall clock (UTC+2 here)
    zoned = pa.array(stamps.to_numpy(), type=pa.timestamp("us", tz="+02:00"))
    day = trace_day(_trace(tmp_path / "z.parquet", arrival, timestamp=zoned), "f")
    assert day.hour.tolist() == [20, 21, 21, 20, 21]
    # CSV: Arrow reads ISO dates and times as timestamps
    csv = tmp_path / "t.csv"
    rows = [
        f"{t},{p},{p}," + str(s).replace("T", " ")
        for t, p, s in zip(arrival, range(1, 6), stamps.to_numpy(), strict=True)
    ]
    csv.write_text(
        "arrival_time_s,prompt_tokens,output_tokens,timestamp\n" + "\n".join(rows) + "\n"
    )
    assert trace_day(str(csv), "f").hour.tolist() == [18, 19, 19, 18, 19]


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: _trace(d / "t.parquet", [5.0, 5.0]), "every arrival is at the same time"),
        (
            lambda d: _trace(d / "t.parquet", [0.0, 90_000.0], timestamp=["a", "b"]),
            "column timestamp: not dates and times",
        ),
        (lambda d: str(d / "none.parquet"), "file not found"),
    ],
    ids=["one instant", "timestamp text", "missing"],
)
def test_a_trace_that_cannot_shape_a_day_is_refused_in_one_line(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises(ConfigError) as err:
        build_workload({**DAY, "profile": None, "profile_trace": path}, 0)
    message = str(err.value)
    assert message.startswith(f"workload.profile_trace='{path}': ") and "\n" not in message
    assert says in message


def test_an_empty_bin_is_an_hour_without_traffic(tmp_path):
    path = _trace(tmp_path / "t.parquet", [0.0, 10.0, 2400.0])  # bins of 100 s: 0 and 23
    w = build_workload({**DAY, "profile": None, "profile_trace": path}, 3)
    hours = DailyArrivals(5.0, 1440.0, time_compression=60.0).hour_of_day(w.arrival_time_s)
    assert set(hours.tolist()) == {0, 23}


# -- lengths by hour ---------------------------------------------------------------------------


def test_lengths_come_only_from_the_rows_of_the_request_hour(tmp_path):
    # 24 bins of 100 s; hour h's rows have prompts 100h+1 .. 100h+3, except hours 5-7 and 20,
    # which have none and borrow: 5 from 4, 6 from 4 (tie: the earlier), 7 from 8, 20 from 19
    arrival, prompt = [], []
    for h in range(24):
        if h in (5, 6, 7, 20):
            continue
        for k in range(3):
            arrival.append(100.0 * h + 10 * k)
            prompt.append(100 * h + 1 + k)
    arrival[-1] = 2400.0  # the span: 2,400 s
    path = _trace(tmp_path / "t.parquet", arrival, prompt)
    w = build_workload({**DAY, "lengths_trace": path}, 1)
    hours = DailyArrivals(5.0, 1440.0, time_compression=60.0).hour_of_day(w.arrival_time_s)
    borrowed = {5: 4, 6: 4, 7: 8, 20: 19}
    source = np.array([borrowed.get(h, h) for h in hours.tolist()])
    assert np.all((w.prompt_tokens - 1) // 100 == source)
    assert np.array_equal(w.output_tokens, w.prompt_tokens + 1000)  # pairs kept together
    for h in (0, 12, 23):  # each hour's three rows are all drawn (~300 draws each)
        assert set(w.prompt_tokens[hours == h].tolist()) == {100 * h + 1, 100 * h + 2, 100 * h + 3}
    assert len(w.notes) == 1 and "workload.lengths_trace" in w.notes[0]


def test_nearest_filled_hour_wraps_around_midnight_and_prefers_the_earlier():
    counts = np.zeros(24, dtype=np.int64)
    counts[[2, 22]] = 1
    nearest = _nearest_filled(counts)
    assert nearest[0] == 22 and nearest[1] == 2 and nearest[23] == 22 and nearest[12] == 2
    assert nearest[2] == 2 and nearest[22] == 22


def test_periods_give_their_lengths_to_the_arrivals_in_their_hours():
    periods = [
        {"start_hour": 0, "end_hour": 7, "prompt_tokens": 11},
        {"start_hour": 7.5, "end_hour": 12, "output_tokens": {"dist": "fixed", "value": 22}},
    ]
    w = build_workload({**DAY, "periods": periods}, 2)
    clock = DailyArrivals(5.0, 1440.0, time_compression=60.0).day_hour(w.arrival_time_s)
    night, morning = clock < 7, (clock >= 7.5) & (clock < 12)
    rest = ~(night | morning)
    assert night.sum() > 100 and morning.sum() > 100 and rest.sum() > 100
    assert set(w.prompt_tokens[night].tolist()) == {11} and set(w.output_tokens[night]) == {6}
    assert set(w.prompt_tokens[morning].tolist()) == {5}
    assert set(w.output_tokens[morning].tolist()) == {22}
    assert set(w.prompt_tokens[rest].tolist()) == {5} and set(w.output_tokens[rest]) == {6}


def test_periods_no_arrival_reaches_leave_every_draw_as_it_was():
    lognormal = {"dist": "lognormal", "median": 300, "sigma": 1.0}
    base = {**DAY, "duration_s": 600.0, "prompt_tokens": lognormal}  # 00:00-10:00
    later = [{"start_hour": 20, "end_hour": 24, "prompt_tokens": 1}]
    a, b = build_workload(base, 5), build_workload({**base, "periods": later}, 5)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert np.array_equal(a.output_tokens, b.output_tokens)


def test_same_seed_same_day_other_seed_another_and_lengths_never_move_arrivals(tmp_path):
    cfgs = [
        {**DAY, "profile": None, "profile_trace": AZURE_CONV, "lengths_trace": AZURE_CONV},
        {
            **DAY,
            "periods": [
                {
                    "start_hour": 3,
                    "end_hour": 9,
                    "prompt_tokens": {"dist": "uniform", "low": 1, "high": 999},
                }
            ],
        },
    ]
    for cfg in cfgs:
        a, b, c = build_workload(cfg, 7), build_workload(cfg, 7), build_workload(cfg, 8)
        for field in ("arrival_time_s", "prompt_tokens", "output_tokens"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
            assert not np.array_equal(getattr(a, field), getattr(c, field)), field
    plain = build_workload({**DAY, "profile": None, "profile_trace": AZURE_CONV}, 7)
    assert np.array_equal(plain.arrival_time_s, build_workload(cfgs[0], 7).arrival_time_s)
    assert np.array_equal(
        build_workload(DAY, 7).arrival_time_s, build_workload(cfgs[1], 7).arrival_time_s
    )


def test_the_default_day_draws_exactly_as_before():
    # no trace, no periods: the draws of the streams workload.prompt_tokens / output_tokens
    from sim.rng import stream

    lognormal = {"dist": "lognormal", "median": 300, "sigma": 1.0}
    w = build_workload({**DAY, "prompt_tokens": lognormal}, 4)
    expected = np.rint(
        stream(4, "workload.prompt_tokens").lognormal(np.log(300), 1.0, w.num_requests)
    )
    assert np.array_equal(w.prompt_tokens, np.clip(expected, 1, None).astype(np.int64))
    assert w.notes == ()


BAD = [
    ({"profile_trace": AZURE_CONV}, "workload.profile_trace", "together with workload.profile"),
    (
        {"lengths_trace": AZURE_CONV, "pattern": "long_in_long_out"},
        "workload.lengths_trace",
        "together with workload.pattern",
    ),
    (
        {
            "lengths_trace": AZURE_CONV,
            "periods": [{"start_hour": 0, "end_hour": 1, "prompt_tokens": 2}],
        },
        "workload.lengths_trace",
        "together with workload.periods",
    ),
    (
        {"periods": [{"start_hour": 5, "end_hour": 5, "prompt_tokens": 2}]},
        "workload.periods.0.end_hour",
        "must be above start_hour (5)",
    ),
    (
        {"periods": [{"start_hour": -1, "end_hour": 5, "prompt_tokens": 2}]},
        "workload.periods.0.start_hour",
        ">= 0",
    ),
    (
        {"periods": [{"start_hour": 0, "end_hour": 25, "prompt_tokens": 2}]},
        "workload.periods.0.end_hour",
        "<= 24",
    ),
    (
        {"periods": [{"start_hour": 0, "end_hour": 5}]},
        "workload.periods.0",
        "give prompt_tokens or output_tokens",
    ),
    (
        {"periods": [{"start_hour": 0, "end_hour": 5, "prompt_tokens": 0}]},
        "workload.periods.0.prompt_tokens",
        ">= 1",
    ),
    (
        {
            "periods": [
                {"start_hour": 6, "end_hour": 9, "prompt_tokens": 2},
                {"start_hour": 0, "end_hour": 7, "prompt_tokens": 3},
            ]
        },
        "workload.periods",
        "periods.0 (6-9 h) overlaps periods.1 (0-7 h)",
    ),
]


@pytest.mark.parametrize("extra, field, says", BAD, ids=[f"{b[1]} {b[2]}" for b in BAD])
def test_bad_day_config_is_one_line_naming_the_field(extra, field, says):
    with pytest.raises(ConfigError) as err:
        build_workload({**DAY, **extra}, 0)
    message = str(err.value)
    assert message.startswith(field + "=") and "\n" not in message
    assert says in message


# -- the planner's API -------------------------------------------------------------------------


def _cost(rates: np.ndarray, periods: list[tuple[int, int]]) -> float:
    m = rates.size
    total = 0.0
    for start, end in periods:
        hours = [(start + k) % m for k in range((end - start) % m or m)]
        total += len(hours) * rates[hours].max()
    return total


def _brute_force(rates: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Every set of k start hours, in lexicographic order; the first of least cost."""
    m = rates.size
    best, best_cost = None, np.inf
    for starts in itertools.combinations(range(m), k):
        periods = list(zip(starts, [*starts[1:], starts[0] if starts[0] else m], strict=True))
        cost = _cost(rates, periods)
        if cost < best_cost - 1e-9:
            best, best_cost = periods, cost
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(40))
def test_split_day_matches_brute_force_on_small_profiles(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 10))
    # small integers: many equal costs, so the tie rule is tested too
    rates = rng.integers(0, 4, size=m).astype(np.float64)
    for k in range(1, m + 1):
        assert split_day(rates, k) == _brute_force(rates, k), (rates.tolist(), k)


@pytest.mark.parametrize("seed", range(6))
def test_split_day_matches_brute_force_over_a_whole_day(seed):
    rng = np.random.default_rng(100 + seed)
    rates = rng.gamma(2.0, 1.0, size=24) if seed % 2 else rng.integers(0, 3, size=24) * 1.0
    for k in (1, 2, 3):
        got = split_day(rates, k)
        assert got == _brute_force(rates, k), (rates.tolist(), k)
        covered = sorted(
            h for s, e in got for h in [(s + i) % 24 for i in range((e - s) % 24 or 24)]
        )
        assert covered == list(range(24))


def test_split_day_examples():
    night = np.array([1.0] * 6 + [5.0] * 16 + [1.0] * 2)  # quiet 22:00-06:00
    assert split_day(night, 1) == [(0, 24)]
    assert split_day(night, 2) == [(6, 22), (22, 6)]
    assert split_day(np.ones(24), 3) == [(0, 1), (1, 2), (2, 24)]  # a flat day: earliest starts
    for bad in (0, 25):
        with pytest.raises(ValueError, match=r"num_periods\(="):
            split_day(night, bad)
    with pytest.raises(ValueError, match=r"rates\(="):
        split_day(np.array([1.0, -1.0]), 1)


def test_hourly_rates_are_qps_times_the_normalised_profile_whatever_the_compression():
    profile = [float(h % 4) for h in range(24)]  # mean 1.5
    rates = hourly_rates({**DAY, "qps": 3.0, "profile": profile})
    assert rates.tolist() == pytest.approx([2.0 * p for p in profile])
    assert (
        hourly_rates({**DAY, "qps": 3.0, "profile": profile, "time_compression": 1.0}).tolist()
        == rates.tolist()
    )
    assert hourly_rates({**DAY, "profile": None}).mean() == pytest.approx(5.0)  # the default shape


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "periods": [
                {
                    "start_hour": 9,
                    "end_hour": 12,
                    "prompt_tokens": {"dist": "uniform", "low": 10, "high": 20},
                }
            ]
        },
        {"profile": None, "profile_trace": AZURE_CONV, "lengths_trace": AZURE_CONV},
    ],
    ids=["own lengths", "periods", "traces"],
)
def test_period_workload_is_a_flat_day_at_the_period_peak_that_validates_and_builds(extra):
    profile = [1.0] * 24
    profile[10], profile[23], profile[2] = 3.0, 2.0, 2.0
    spec = validate(DailyWorkload, {**DAY, "profile": profile, **extra}, "workload")
    rates = hourly_rates(spec)
    for start, end in [(0, 24), (22, 6), (8, 12), (13, 14)]:
        cfg = period_workload(spec, start, end, 600.0)
        assert cfg is not None
        hours = [(start + k) % 24 for k in range((end - start) % 24 or 24)]
        peak = max(rates[hours])
        checked = validate(WorkloadConfig, cfg, "workload")
        assert isinstance(checked, DailyWorkload)
        assert hourly_rates(checked).tolist() == [peak] * 24  # flat at the period's peak
        assert checked.start_hour == hours[int(np.argmax(rates[hours]))]
        assert checked.time_compression == 1.0 and checked.duration_s == 600.0
        assert (checked.lengths_trace, checked.periods) == (spec.lengths_trace, spec.periods)
        assert checked.profile_trace is None and checked.num_requests is None
        w = build_workload(cfg, 0)
        assert w.num_requests == pytest.approx(peak * 600.0, rel=0.25)
    if not extra:
        # 23:00 and 02:00 tie: 23:00 comes first in the period
        assert period_workload(spec, 22, 6, 60.0)["start_hour"] == 23.0
        assert period_workload(spec, 0, 24, 60.0)["qps"] == rates[10]


def test_period_workload_of_a_quiet_period_is_none_and_bad_hours_are_refused():
    profile = [0.0] * 6 + [1.0] * 18
    assert period_workload({**DAY, "profile": profile}, 0, 6, 60.0) is None
    for start, end in [(3, 3), (-1, 5), (0, 25), (24, 3)]:
        with pytest.raises(ValueError):
            period_workload({**DAY, "profile": profile}, start, end, 60.0)


def test_the_azure_day_config_profile_and_lengths_come_from_the_trace():
    from omegaconf import OmegaConf

    from sim.resources import config_dir, shipped_path

    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "workload" / "azure_day.yaml"))
    spec = validate(DailyWorkload, cfg, "workload")
    assert day_profile(spec).note is not None and "stretched" in day_profile(spec).note
    w = build_workload({**cfg, "duration_s": 600.0, "time_compression": 144.0}, 0)
    trace = pq.read_table(shipped_path(AZURE_CONV), columns=["prompt_tokens"])
    assert set(w.prompt_tokens.tolist()) <= set(trace.column(0).to_pylist())
