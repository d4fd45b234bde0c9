"""A day planned by period (``plan.day``, ``sim.plan.day``): each period planned at its peak,
then the peak-sized fleet, the seasonal plan and an autoscaled fleet each simulated over the
whole day.

The fleet is an M/D/1 queue per replica (10-ms steps of one 16-token prompt and one output
token, one request at a time, random routing), so each period's answer follows from the
formula: mean TTFT = 10 ms + rho / (2 x 100/s x (1 - rho)). At 30 req/s one replica gives 12 ms,
at 90 req/s one gives 55 ms and two give 14 ms: under a 30-ms bound, the night needs 1 and the
day 2. The day is compressed 240 times (an hour of day is 15 simulated seconds), so the
autoscaler's interval and window are set in those seconds."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from sim.errors import ConfigError
from sim.plan.day import day_table, engine_settings
from sim.plan.hourly import wilson
from sim.plan.planner import run_plan
from tests.scenarios import QUICK_DAY_PLAN
from tests.support import columns

NIGHT_DAY = [1.0] * 8 + [3.0] * 12 + [1.0] * 4  # mean 2: 30 req/s at night, 90 by day
FLAT = [1.0] * 24


def day_plan(folder, profile, *extra):
    return run_plan(
        [
            "step_time=constant",
            "step_time.seconds=0.01",
            "scheduler.max_num_seqs=1",
            "router=random",
            "workload=daily",
            "workload.qps=60",
            f"workload.profile={profile}",
            "workload.time_compression=240",
            "workload.duration_s=360",
            "workload.prompt_tokens=16",
            "workload.output_tokens=1",
            "autoscale.provision_s=5",
            "plan.slo=[ttft_s.mean <= 0.03]",
            *QUICK_DAY_PLAN,
            "plan.day.period_s=60",
            f"plan.output_dir={folder}",
            *extra,
        ],
        progress=False,
    )


@pytest.fixture(scope="module")
def night_and_day(tmp_path_factory):
    # a perfect autoscaler: no provisioning delay, an interval of a fifth of an hour of day
    folder = tmp_path_factory.mktemp("night_and_day")
    return day_plan(
        folder,
        NIGHT_DAY,
        "plan.day.autoscale={provision_s: 0, interval_s: 3, tolerance: 0.15,"
        " scale_down_window_s: 6}",
    )


@pytest.fixture(scope="module")
def flat_day(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flat_day")
    return day_plan(
        folder,
        FLAT,
        "plan.day.autoscale={interval_s: 15, tolerance: 0.15, scale_down_window_s: 30}",
    )


def test_each_period_gets_the_count_the_formula_gives(night_and_day):
    _, out = night_and_day
    periods = {(p["start_hour"], p["end_hour"]): p for p in out["periods"]}
    assert set(periods) == {(8, 20), (20, 8)}
    assert periods[(8, 20)]["replicas"] == 2 and periods[(8, 20)]["rate_rps"] == pytest.approx(90)
    assert periods[(20, 8)]["replicas"] == 1 and periods[(20, 8)]["rate_rps"] == pytest.approx(30)
    assert out["peak_period"] == [8, 20]


def test_the_seasonal_schedule_asks_for_each_fleet_by_the_hour_of_day(night_and_day):
    """An hour of day is 15 simulated seconds: 08:00 is at 120 s, 20:00 at 300 s."""
    _, out = night_and_day
    overrides = out["answers"]["seasonal"]["overrides"]
    assert (
        "autoscale.schedule=[{at_s: 0.0, replicas: 1, engine: base}, "
        "{at_s: 120.0, replicas: 2, engine: base}, {at_s: 300.0, replicas: 1, engine: base}]"
    ) in overrides
    assert "fleet.replicas=2" in out["answers"]["peak"]["overrides"]


def test_the_seasonal_plan_costs_less_than_the_peak_fleet_and_meets_the_slo(night_and_day):
    folder, out = night_and_day
    peak, seasonal = out["answers"]["peak"], out["answers"]["seasonal"]
    assert seasonal["usd_per_day"] < peak["usd_per_day"]
    # 12 h at 2 replicas, 12 at 1, and the second asked for 5 s (20 min of day) early
    assert seasonal["gpu_hours"] == pytest.approx(36 + 20 / 60, abs=0.05)
    assert out["saving_vs_peak"]["seasonal"] == pytest.approx(1 - seasonal["usd_per_day"] / 143.52)
    assert seasonal["slo_attainment"] > 0.99 and peak["slo_attainment"] > 0.99
    assert (folder / "answers" / "seasonal" / "scaling.parquet").is_file()
    # the plan's own SLO, hour by hour: the mean TTFT of each hour's requests under 30 ms
    for answer in (peak, seasonal):
        assert answer["hours_plan_slo_met"] == answer["hours_with_requests"] == 24
        for hour in answer["hourly"]:
            assert hour["plan_slo_met"] is True
            assert 0.01 <= hour["plan_slo"]["ttft_s.mean <= 0.03"] <= 0.03
    # a day hour (90 req/s on two replicas) waits longer than a night hour (30 on one)
    ttft = [h["plan_slo"]["ttft_s.mean <= 0.03"] for h in seasonal["hourly"]]
    assert ttft[12] > ttft[3]


def test_a_perfect_autoscaler_approaches_the_seasonal_cost(night_and_day):
    """No provisioning delay and a request-rate target the plans verified: within 10% of the
    seasonal plan's day, far below the peak fleet's."""
    _, out = night_and_day
    answers = out["answers"]
    auto, seasonal = answers["autoscaled"]["usd_per_day"], answers["seasonal"]["usd_per_day"]
    assert abs(auto - seasonal) / seasonal < 0.10
    assert auto < 0.9 * answers["peak"]["usd_per_day"]


def test_every_answer_serves_every_request_of_the_same_day_exactly_once(night_and_day):
    folder, out = night_and_day
    arrivals = []
    for name in ("peak", "seasonal", "autoscaled"):
        req = columns(pq.read_table(folder / out["answers"][name]["run"] / "requests.parquet"))
        assert len(np.unique(req["request_id"])) == len(req["request_id"])
        assert set(req["status"].tolist()) == {"completed"}
        arrivals.append(req["arrival_time_s"])
        hourly = out["answers"][name]["hourly"]
        assert len(hourly) == 24 and sum(h["requests"] for h in hourly) == len(req["status"])
        for h in hourly:
            assert h["low"] <= h["attainment"] <= h["high"]
    assert np.array_equal(arrivals[0], arrivals[1]) and np.array_equal(arrivals[0], arrivals[2])


def test_with_a_constant_rate_the_three_answers_coincide(flat_day):
    """A flat day: every period has the same answer, so the seasonal plan never switches and
    is the peak fleet; the autoscaler, its target the rate per replica the plan verified, never
    leaves it (the rate over 15 s, ~900 arrivals, stays well within its 15% tolerance)."""
    folder, out = flat_day
    answers = out["answers"]
    assert {p["replicas"] for p in out["periods"]} == {1}
    costs = {name: a["usd_per_day"] for name, a in answers.items()}
    assert costs["peak"] == pytest.approx(costs["seasonal"]) == pytest.approx(costs["autoscaled"])
    for name in ("seasonal", "autoscaled"):
        rows = pq.read_table(folder / answers[name]["run"] / "scaling.parquet").column("event")
        assert rows.to_pylist() == ["start"]
    assert "peak" in day_table(out) and "seasonal" in day_table(out)
    assert json.loads((folder / "day_plan.json").read_text()) == out


def test_wilson_interval_matches_the_textbook_values():
    # 8 of 10: (0.4902, 0.9433) (Wilson 1927; as statsmodels' proportion_confint gives)
    share, low, high = wilson(8, 10)
    assert share == 0.8
    assert low == pytest.approx(0.4901625, abs=1e-6) and high == pytest.approx(0.9433178, abs=1e-6)
    assert wilson(0, 0) == (None, None, None)
    assert wilson(5, 5)[2] == 1.0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["workload.duration_s=180"], "workload.duration_s"),  # half a day
        (["plan.day.periods=[[5, 5]]"], "plan.day.periods[0]"),
        (["plan.day.periods=[[0, 12], [10, 24]]"], "plan.day.periods"),  # 10-12 twice
    ],
)
def test_a_day_plan_refuses_what_is_not_one_day_in_one_line(tmp_path, extra, field):
    with pytest.raises(ConfigError) as err:
        day_plan(tmp_path, NIGHT_DAY, *extra)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_a_day_plan_needs_a_daily_workload_and_engine_candidates(tmp_path):
    with pytest.raises(ConfigError, match="plan.day.periods"):
        run_plan(
            ["workload=poisson", "plan.day.periods=2", f"plan.output_dir={tmp_path}"],
            progress=False,
        )
    with pytest.raises(ConfigError, match="plan.grid"):
        engine_settings(["router=random"])
    assert engine_settings(
        ["hardware=h200", "precision.weights=fp8", "scheduler.max_num_seqs=8"]
    ) == {
        "hardware": "h200",
        "precision.weights": "fp8",
        "scheduler.max_num_seqs": 8,
    }


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory):
    """Seasonal engines: a fast, dear engine (5-ms steps at $2.5/h) and a slow, cheap one
    (20-ms steps at $1/h), TTFT mean <= 50 ms. At night (30 req/s) one cheap replica does
    (35 ms) for $1/h; by day (90 req/s) the cheap one needs three ($3/h: two give 110 ms) and
    one fast one does (7 ms) for $2.5/h. So the plan switches engine twice a day."""
    folder = tmp_path_factory.mktemp("two_engines")
    return day_plan(
        folder,
        NIGHT_DAY,
        "plan.slo=[ttft_s.mean <= 0.05]",
        "plan.candidates=[[step_time.seconds=0.005, hardware.usd_per_gpu_hour=2.5],"
        " [step_time.seconds=0.02, hardware.usd_per_gpu_hour=1.0]]",
    )


def test_a_seasonal_plan_switches_engines_between_periods(two_engines):
    folder, out = two_engines
    by_period = {(p["start_hour"], p["end_hour"]): p for p in out["periods"]}
    assert by_period[(8, 20)]["candidate"][0] == "step_time.seconds=0.005"
    assert by_period[(8, 20)]["replicas"] == 1
    assert by_period[(20, 8)]["candidate"][0] == "step_time.seconds=0.02"
    assert by_period[(20, 8)]["replicas"] == 1
    overrides = out["answers"]["seasonal"]["overrides"]
    assert (
        "autoscale.schedule=[{at_s: 0.0, replicas: 1, engine: e1}, "
        "{at_s: 120.0, replicas: 1, engine: e0}, {at_s: 300.0, replicas: 1, engine: e1}]"
    ) in overrides
    # each switch: the new replica asked for 5 s ahead, the old one drained once it is ready
    events = pq.read_table(folder / "answers" / "seasonal" / "scaling.parquet").to_pylist()
    switches = [(r["time_s"], r["event"], r["gpus_billed"]) for r in events]
    assert switches[:4] == [
        (0.0, "start", 1),
        (115.0, "scale_up", 2),
        (120.0, "ready", 2),
        (120.0, "drain", 2),
    ]
    assert [e for _, e, _ in switches].count("released") == 2
    seasonal, peak = out["answers"]["seasonal"], out["answers"]["peak"]
    assert seasonal["usd_per_day"] < peak["usd_per_day"]
    assert seasonal["slo_attainment"] > 0.99
