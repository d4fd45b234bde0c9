"""The report of a capacity plan (``plan.solve=max_rate``, sim/report/capacity.py): its answer,
each SLO statistic against load with the bound and the capacity drawn where the plan put them,
the rates tried, and a malformed capacity refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sim.report import capacity, command
from sim.report.capacity import capacity_answer
from tests.report.conftest import keep_drawings, planned
from tests.report.test_command import report
from tests.scenarios import MD1

# an M/D/1 server (one request a 10 ms step) at 50 requests/s and up; a small, coarse search
PLAN = [
    *MD1,
    "fleet.replicas=1",
    "workload.num_requests=300",
    "workload.qps=50",
    "plan.solve=max_rate",
    "plan.slo=[ttft_s.mean <= 0.03, ttft_s.p99 <= 0.2]",
    "plan.rate_tolerance=0.2",
    "plan.max_replications=3",
    "plan.jobs=1",
]


@pytest.fixture(scope="module")
def capacity_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planned(tmp_path_factory, "capacity", PLAN)


def test_a_capacity_plan_reports_its_capacity_against_load(capacity_folder, monkeypatch):
    drawn = keep_drawings(monkeypatch, capacity)
    _, markdown = report(capacity_folder)
    plan = json.loads((capacity_folder / "plan.json").read_text())
    c = plan["capacity"]
    assert c["outcome"] == "found"
    assert "> The fleet as given (1 replica(s)) serves up to " in markdown
    assert "(report_files/capacity.png)" in markdown and "latency_vs_load" not in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| x")]
    assert len(rows) == len(c["evaluated"])
    assert "What the figures assume: the config of the run at x" in markdown
    # a panel per SLO statistic: its bound, the capacity and its interval where the plan says
    (figure,) = drawn
    assert [ax.get_title() for ax in figure.axes[0]] == ["ttft_s.mean", "ttft_s.p99"]
    for ax, bound in zip(figure.axes[0], (0.03, 0.2), strict=True):
        flat = [line.get_ydata()[0] for line in ax.get_lines() if len(set(line.get_ydata())) == 1]
        upright = [
            line.get_xdata()[0] for line in ax.get_lines() if len(set(line.get_xdata())) == 1
        ]
        assert bound in flat
        assert upright == [pytest.approx(c["requests_per_s"])]
        (span,) = ax.patches  # (a Rectangle across the axes' height)
        interval = c["interval"]["requests_per_s"]
        assert span.get_x() == pytest.approx(interval["ci_low"])
        assert span.get_x() + span.get_width() == pytest.approx(interval["ci_high"])


@pytest.mark.parametrize(
    "outcome, says",
    [
        (
            "misses_at_lowest",
            "misses its SLO (ttft_s.p99 <= 1) even at the lowest rate tried, "
            "5 requests/s (x0.5): no capacity found.",
        ),
        (
            "meets_at_highest",
            "meets every SLO (ttft_s.p99 <= 1) at the highest rate allowed, "
            "160 requests/s (x16): its capacity is above it",
        ),
    ],
)
def test_a_bracket_that_did_not_close_is_said_so(outcome, says):
    capacity = {
        "outcome": outcome,
        "rate_x": 16.0 if outcome == "meets_at_highest" else None,
        "misses_at_rate_x": 0.5 if outcome == "misses_at_lowest" else None,
        "base_requests_per_s": 10.0,
    }
    plan = {"solve": "max_rate", "slo": ["ttft_s.p99 <= 1"], "replicas": 2, "capacity": capacity}
    assert capacity_answer(plan) == f"The fleet as given (2 replica(s)) {says}" + (
        " (raise plan.max_rate_factor to find it)." if outcome == "meets_at_highest" else ""
    )


def test_a_malformed_capacity_is_refused_in_one_line(capacity_folder, tmp_path, capsys):
    folder = tmp_path / "plan"
    shutil.copytree(capacity_folder, folder)
    plan = json.loads((folder / "plan.json").read_text())
    plan["capacity"]["rate_x"] = "fast"
    (folder / "plan.json").write_text(json.dumps(plan))
    assert command.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'plan.json: capacity.rate_x is "fast", not a number' in err
