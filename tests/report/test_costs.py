"""Cost per candidate: a sweep's points ranked within their traffic, a plan's in its own order,
and the figure's bars each labelled with their value."""

from __future__ import annotations

import pandas as pd

from sim.report import costs
from sim.report.answer import attainment_by_run, sweep_choices, traffic_groups
from sim.report.costs import by_traffic, cost_figure, plan_costs, sweep_costs
from sim.report.intervals import Interval
from tests.report.conftest import keep_drawings

# 1 or 2 replicas at 10 or 40 req/s, all keeping the SLO: per token, one replica at 40 req/s
# is the cheapest of all four, because it is busier
RUNS = pd.DataFrame(
    {
        "run_id": [0, 1, 2, 3],
        "fleet.replicas": [1, 1, 2, 2],
        "workload.qps": [10.0, 40.0, 10.0, 40.0],
        "num_replicas": [1, 1, 2, 2],
        "num_gpus": [1, 1, 2, 2],
        "goodput_requests_per_s": [10.0] * 4,
        "duration_s": [10.0] * 4,
        "num_requests": [100] * 4,
        "cost.usd_per_hour": [2.99, 2.99, 5.98, 5.98],
        "cost.usd_per_million_output_tokens": [2.0, 0.5, 4.0, 1.0],
    }
)
SWEPT = ["fleet.replicas", "workload.qps"]


def test_a_sweep_ranks_its_points_within_each_traffic():
    traffic = traffic_groups(RUNS, SWEPT)
    assert traffic.tolist() == ["workload.qps=10.0", "workload.qps=40.0"] * 2
    attained = attainment_by_run(RUNS)
    ranked = by_traffic(sweep_costs(RUNS, SWEPT, attained, 0.99, traffic))
    assert {t: [c.label for c in mine] for t, mine in ranked.items()} == {
        "workload.qps=10.0": ["fleet.replicas=1", "fleet.replicas=2"],
        "workload.qps=40.0": ["fleet.replicas=1", "fleet.replicas=2"],
    }
    assert [c.note for c in ranked["workload.qps=40.0"]] == ["100.0% (meets)"] * 2
    # each traffic's answer is its own cheapest, not the busiest fleet's
    assert sweep_choices(RUNS, attained, traffic) == {
        "workload.qps=10.0": 0,
        "workload.qps=40.0": 1,
    }
    table = costs.cost_table(ranked["workload.qps=40.0"], costs.SWEEP_NOTE)
    assert table.caption.startswith("Traffic workload.qps=40.0: ")
    assert [row[:2] for row in table.rows] == [["1", "fleet.replicas=1"], ["2", "fleet.replicas=2"]]


def test_a_sweep_at_one_traffic_is_one_ranking_labelled_as_before():
    one = RUNS[RUNS["workload.qps"] == 10.0]
    traffic = traffic_groups(one, SWEPT)
    assert set(traffic) == {""}
    ranked = by_traffic(sweep_costs(one, SWEPT, attainment_by_run(one), 0.99, traffic))
    assert list(ranked) == [""]
    assert [c.label for c in ranked[""]] == ["fleet.replicas=1", "fleet.replicas=2"]
    assert not costs.cost_table(ranked[""], costs.SWEEP_NOTE).caption.startswith("Traffic")


def test_a_plan_keeps_its_own_order_and_heads_its_miss_probability():
    plan = {
        "candidates": [
            {
                "candidate": "b",
                "feasible": True,
                "replicas": 1,
                "usd_per_hour": 3.0,
                "usd_per_million_output_tokens": 0.4,
                "miss_probability": 0.1,
            },
            {
                "candidate": "a",
                "feasible": True,
                "replicas": 1,
                "usd_per_hour": 3.0,
                "usd_per_million_output_tokens": 0.5,
                "miss_probability": 0.0,
            },
        ]
    }
    found = plan_costs(plan, None)
    # as the plan's answer ranks them ($/hour, then name), though b is cheaper per token
    assert [c.label for c in found] == ["a", "b"]
    table = costs.cost_table(found)
    assert table.columns[-1] == "P(miss)" and [row[-1] for row in table.rows] == ["0%", "10%"]
    assert all(table.columns)


def test_every_bar_is_labelled_with_its_value(monkeypatch):
    drawn = keep_drawings(monkeypatch, costs)
    shown = [
        costs.CandidateCost("a", 1, 1, 2.99, Interval(0.449, 0.115, 0.784), 2),
        costs.CandidateCost("b", 3, 3, 5.37, Interval(0.856, 0.856, 0.856), 1),
    ]
    assert cost_figure(shown) is not None
    hourly, tokens = drawn[0].axes[0]
    assert [t.get_text().strip() for t in hourly.texts] == ["$2.99 1 GPU(s)", "$5.37 3 GPU(s)"]
    assert [t.get_text().strip() for t in tokens.texts] == ["$0.449", "$0.856"]
    # each label sits past its interval's whisker, inside the axes
    assert [t.get_position()[0] for t in tokens.texts] == [0.784, 0.856]
    assert tokens.get_xlim()[1] > 0.856
