"""day_plan.json is read tolerantly: the shape the day planner writes, and less."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.report.day_plan import parse_day_plan
from tests.report.conftest import DAY_PLAN


def test_the_written_shape_is_read_whole():
    day = parse_day_plan(DAY_PLAN)
    assert list(day.answers) == ["peak", "seasonal", "autoscaled"]
    autoscaled = day.answers["autoscaled"]
    assert (autoscaled.run, autoscaled.usd_per_day, autoscaled.gpu_hours) == (
        "answers/autoscaled",
        98.67,
        33.0,
    )
    assert autoscaled.slo_attainment == 0.992 and len(autoscaled.hourly) == 24
    first = autoscaled.hourly[0]
    assert (first.hour, first.requests, first.attainment, first.low, first.high) == (
        0.0,
        100,
        0.95,
        pytest.approx(0.93),
        0.96,
    )
    night, daytime = day.periods
    assert (night.label, night.hours, night.replicas, night.candidate) == (
        "22:00-07:00",
        9.0,
        1,
        ["hardware=h100_sxm"],
    )
    assert (daytime.hours, daytime.usd_per_hour) == (15.0, 5.98)
    assert day.saving_vs_peak == {"seasonal": 0.1875, "autoscaled": 0.3125}
    assert day.command == "fleetcast plan-day workload=azure_day"
    # what the day planner writes besides: the day's interval, its rates and its clock
    assert (autoscaled.slo_attainment_low, autoscaled.slo_attainment_high) == (0.99, 0.994)
    assert autoscaled.replicas_max == 2 and day.answers["peak"].replicas_max is None
    assert len(day.hourly_rates_rps) == 24 and day.note == "made by hand"
    assert day.hour_of_day(4.0) == 12.0  # 8 simulated seconds stand for the day
    # the plan's SLO, per hour and the hours it held
    assert day.plan_slo == ["ttft_s.p99 <= 1"]
    assert (autoscaled.hours_plan_slo_met, autoscaled.hours_with_requests) == (22, 24)
    assert first.plan_slo == {"ttft_s.p99 <= 1": 0.6} and first.plan_slo_met is True
    assert autoscaled.hourly[8].plan_slo_met is False
    assert day.answers["peak"].hours_plan_slo_met is None


def test_missing_or_mistyped_fields_are_none_not_errors():
    day = parse_day_plan(
        {
            "periods": [
                {"start_hour": "seven", "replicas": 2.5, "candidate": "hardware=h200 fleet.tp=2"},
                7,
            ],
            "answers": {
                "autoscaled": {
                    "usd_per_day": True,
                    "hours_plan_slo_met": "all",
                    "hourly": [{"hour": 3, "plan_slo": {"a": "b"}, "plan_slo_met": None}, "x"],
                },
                "peak": 3,
            },
            "saving_vs_peak": {"seasonal": "a lot", "autoscaled": 0.25},
        }
    )
    (period,) = day.periods
    assert period.start_hour is None and period.replicas is None and period.hours is None
    assert period.candidate == ["hardware=h200", "fleet.tp=2"] and period.label == "?-?"
    assert list(day.answers) == ["peak", "autoscaled"]  # the known answers in their order
    assert day.answers["peak"].usd_per_day is None and day.answers["peak"].run is None
    assert day.answers["autoscaled"].usd_per_day is None
    assert day.answers["autoscaled"].hourly[0].attainment is None
    assert day.answers["autoscaled"].hourly[0].plan_slo == {"a": None}
    assert day.answers["autoscaled"].hourly[0].plan_slo_met is None  # an hour without requests
    assert day.answers["autoscaled"].hours_plan_slo_met is None and day.plan_slo == []
    assert day.saving_vs_peak == {"autoscaled": 0.25}
    empty = parse_day_plan({})
    assert (empty.periods, empty.answers, empty.saving_vs_peak, empty.command) == ([], {}, {}, None)
    assert (empty.start_hour, empty.time_compression, empty.hourly_rates_rps) == (0.0, 1.0, [])


def test_only_a_file_that_is_not_an_object_is_refused():
    with pytest.raises(ConfigError, match=r"^PATH='x/day_plan.json': day_plan.json must hold"):
        parse_day_plan([1, 2], "x/day_plan.json")
