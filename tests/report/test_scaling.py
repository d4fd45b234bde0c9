"""The fleet over time: the integrals of scaling.parquet and the day plan's tables."""

from __future__ import annotations

import numpy as np
import pytest

from sim.report import scaling
from sim.report.day_plan import parse_day_plan
from sim.report.scaling import (
    billed,
    day_answers_table,
    day_axis,
    day_fleet_figure,
    fixed_fleet,
    hourly_attainment_figure,
    hourly_frame,
    integrate,
    periods_table,
    rates_since_start,
    run_end_s,
    within,
)
from tests.report.conftest import DAY_PLAN, scaling_table


def test_money_and_gpu_hours_integrate_each_state_until_the_next():
    rows = scaling_table().to_pandas()
    # $2.99/h for 2 s, $5.98/h for 5 s, $2.99/h for the 3 s left of a 10-s run
    assert integrate(rows, "usd_per_hour", 10.0) == pytest.approx(
        (2.99 * 2 + 5.98 * 5 + 2.99 * 3) / 3600
    )
    assert integrate(rows, "gpus_billed", 10.0) == pytest.approx((1 * 2 + 2 * 5 + 1 * 3) / 3600)
    # rows out of order are sorted; an end before the last change holds nothing after it
    assert integrate(rows.iloc[::-1], "gpus_billed", 7.0) == pytest.approx(12 / 3600)
    assert billed(rows).tolist() == [1, 2, 2, 2, 1]
    # nothing is billed past the end: 1 GPU for 2 s, 2 for 3 s
    assert integrate(rows, "gpus_billed", 5.0) == pytest.approx(8 / 3600)
    assert run_end_s(rows, {"duration_s": 9.5}) == 9.5
    assert run_end_s(rows, {}) == 7.0  # no span: the last change
    assert within(rows, 5.0)["time_s"].tolist() == [0.0, 2.0, 4.0]


def test_a_fleet_that_never_changed_is_one_row():
    fixed = fixed_fleet({"num_replicas": 3, "num_gpus": 6, "cost": {"usd_per_hour": 17.94}})
    assert fixed.to_dict("records") == [
        {
            "time_s": 0.0,
            "replicas_ready": 3,
            "replicas_provisioning": 0,
            "replicas_draining": 0,
            "gpus_billed": 6,
            "usd_per_hour": 17.94,
            "event": "start",
            "replica_id": None,
        }
    ]
    assert fixed_fleet({"num_replicas": 3}) is None


def test_the_answers_and_periods_tables():
    day = parse_day_plan(DAY_PLAN)
    answers = day_answers_table(day)
    assert answers.rows[2] == [
        "autoscaled",
        "$98.67",
        "33.0",
        "31.2%",
        "99.20%",
        "22 of 24",
        "answers/autoscaled",
    ]
    assert answers.rows[0][3] == "-"  # the peak saves nothing against itself
    assert answers.rows[0][5] == "-"  # the peak's hours are not recorded in the fixture
    assert (
        "those whose requests' statistics met the plan's SLO (ttft_s.p99 <= 1)" in answers.caption
    )
    periods = periods_table(day)
    assert periods.rows == [
        ["22:00-07:00", "1.5", "hardware=h100_sxm", "1", "$2.99"],
        ["07:00-22:00", "6", "hardware=h100_sxm", "2", "$5.98"],
    ]


def test_a_day_that_starts_at_0930_rolls_its_rates_to_start_there():
    day = parse_day_plan({**DAY_PLAN, "start_hour": 9.5})
    times, rates = rates_since_start(day)
    # 09:30-10:00 at the rate of hour 9, then an hour each, the day ending at 09:00-09:30
    assert times.tolist() == [0.0, *np.arange(0.5, 24.0, 1.0).tolist()]
    expected = [day.hourly_rates_rps[(9 + k) % 24] for k in range(25)]
    assert rates.tolist() == expected and rates[0] == rates[-1]
    whole = parse_day_plan({**DAY_PLAN, "start_hour": 7})
    times, rates = rates_since_start(whole)
    assert times.tolist() == list(range(24)) and rates[0] == whole.hourly_rates_rps[7]
    # a period starting at 22:00 is 12.5 hours in; one at the start, at 0
    assert (day.since_start(22), day.since_start(9.5), whole.since_start(7)) == (12.5, 0.0, 0.0)


def test_the_day_axis_is_hours_since_the_start_labelled_with_the_hour_of_day():
    from sim.report.plotting import drawing

    day = parse_day_plan({**DAY_PLAN, "start_hour": 9.5})
    with drawing() as d:
        day_axis(d.axes[0][0], day)
        ticks = d.axes[0][0].get_xticks().tolist()
        labels = [t.get_text() for t in d.axes[0][0].get_xticklabels()]
        limits = d.axes[0][0].get_xlim()
    assert limits == (0.0, 24.0)
    # the start and the end, and every third hour of day but 09:00, half an hour off the end
    assert ticks[:3] == [0.0, 2.5, 5.5] and ticks[-2:] == [20.5, 24.0]
    assert labels[:3] == ["09:30", "12:00", "15:00"] and labels[-2:] == ["06:00", "09:30"]


def test_the_day_fleet_lines_up_with_the_rates_when_the_day_starts_late(monkeypatch):
    """Before, the rates were drawn over hours 0-24 and the fleets over 9.5-33.5."""
    day = parse_day_plan({**DAY_PLAN, "start_hour": 9.5})
    drawn: list[tuple[np.ndarray, np.ndarray, float]] = []
    real = scaling._step

    def step(ax, times, values, end, **style):
        drawn.append((np.asarray(times, float), np.asarray(values, float), end))
        real(ax, times, values, end, **style)

    monkeypatch.setattr(scaling, "_step", step)
    rows = scaling_table().to_pandas()
    assert day_fleet_figure(day, {"autoscaled": (rows, 8.0)}) is not None
    (rate_times, rates, rate_end), fleet, money = drawn
    assert rate_times[0] == 0.0 and rate_end == 24.0 and rates[0] == day.hourly_rates_rps[9]
    for times, _, end in (fleet, money):
        # the 8-s run stands for the day: its changes at 2, 4, 6 and 7 s are hours 6 to 21
        assert times.tolist() == [0.0, 6.0, 12.0, 18.0, 21.0] and end == 24.0


def test_the_hourly_attainment_is_placed_since_the_start_and_keeps_plan_slo():
    day = parse_day_plan({**DAY_PLAN, "start_hour": 9.5})
    hourly = hourly_frame(day)
    mine = hourly[hourly["answer"] == "autoscaled"].set_index("hour")
    assert mine.loc[10.0, "at"] == 1.0 and mine.loc[9.0, "at"] == 0.0
    assert mine.loc[8.0, "at"] == 23.0
    assert mine["plan_slo_met"].eq(False).sum() == 2  # hours 8 and 9
    figure = hourly_attainment_figure(day)
    assert "every per-request bound of the runs' config (slo.*)" in figure.caption
    assert "It is not the plan's SLO (plan.slo: ttft_s.p99 <= 1)" in figure.caption
    assert "x: an hour where plan.slo did not hold" in figure.caption
