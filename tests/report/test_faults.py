"""The fleet under faults in a report (``sim.report.faults``): the up/draining/down step series
and the replica-hours lost per kind from a hand-made ``faults.parquet``, counted by hand; the
section in the report of a run with faults (its figures' totals the simulator's own), none in
one without; a plan's chosen run's faults block; the page in a browser."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sim.output.faults import FAULTS_SCHEMA
from sim.report import command
from sim.report.faults import block_table, kinds_table, lost_hours, run_span, states
from sim.run import simulate
from tests.fleet.test_faults import FLEET as FAULT_FLEET
from tests.report.conftest import PLAN, planned
from tests.report.test_command import browse, check, report
from tests.support import compose

# Three replicas over [0, 100] s. Replica 0 drains from 10 s and a failure takes it at 15 s
# (both rows hold the failure's down and up: back at 40 s); replica 1 gets a reclaim notice
# at 30 s, is lost at 32 s and never replaced; replica 2 fails at 50 s, back at 70 s, and
# starts a drain at 90 s that has not ended when the run does.
HAND = [
    (0, "maintenance", 10.0, 15.0, 40.0, 0, 0),
    (0, "failure", 15.0, 15.0, 40.0, 2, 0),
    (1, "spot", 30.0, 32.0, None, 0, 1),
    (2, "failure", 50.0, 50.0, 70.0, 1, 0),
    (2, "maintenance", 90.0, None, None, 0, 0),
]


def hand_made() -> pd.DataFrame:
    """``HAND`` written and read back as ``faults.parquet`` is."""
    names = FAULTS_SCHEMA.names
    table = pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in HAND])
    return table.cast(FAULTS_SCHEMA).to_pandas()


def test_the_fleet_step_series_is_the_hand_count():
    fleet = states(hand_made(), 3, 0.0, 100.0)
    assert fleet.to_dict("list") == {
        "time_s": [0.0, 10.0, 15.0, 30.0, 32.0, 40.0, 50.0, 70.0, 90.0],
        "up": [3, 2, 2, 1, 1, 2, 1, 2, 1],
        "draining": [0, 1, 0, 1, 0, 0, 0, 0, 1],
        "down": [0, 0, 1, 1, 2, 1, 2, 1, 1],
    }
    # every replica is in one state at a time
    assert (fleet[["up", "draining", "down"]].sum(axis=1) == 3).all()
    # a window within the run: its first row is the state at its start
    window = states(hand_made(), 3, 20.0, 60.0)
    assert window["time_s"].tolist() == [20.0, 30.0, 32.0, 40.0, 50.0]
    assert window["down"].tolist() == [1, 1, 2, 1, 2]


def test_the_time_down_is_the_later_events_and_sums_to_the_fleets():
    """Replica 0's 25 s down is the failure's (the drain it ended loses none), replica 1's 68 s
    to the run's end the reclaim's, replica 2's 20 s its failure's: 113 s in all, the time the
    step series has replicas down."""
    frame = hand_made()
    lost = lost_hours(frame, 0.0, 100.0) * 3600
    assert lost.tolist() == pytest.approx([0.0, 25.0, 68.0, 20.0, 0.0])
    fleet = states(frame, 3, 0.0, 100.0)
    held = np.diff(np.append(fleet["time_s"].to_numpy(), 100.0))
    assert float(held @ fleet["down"].to_numpy()) == pytest.approx(lost.sum())
    # within [20, 60]: 20 s of replica 0, 28 of replica 1, 10 of replica 2
    assert lost_hours(frame, 20.0, 60.0).sum() * 3600 == pytest.approx(58.0)
    table = kinds_table(frame, 0.0, 100.0)
    assert table.rows == [
        ["failure", "2", f"{45 / 3600:.3g}", "3", "0"],
        ["maintenance", "2", "0", "0", "0"],
        ["spot", "1", f"{68 / 3600:.3g}", "0", "1"],
        ["all", "5", f"{113 / 3600:.3g}", "3", "1"],
    ]


def test_the_span_is_the_summarys():
    arrivals = np.array([0.5, 2.0, 7.0])
    assert run_span(arrivals, {"duration_s": 10.0}) == (0.5, 10.5)
    assert run_span(arrivals, {"duration_s": 3.0}) == (0.5, 7.0)  # the last arrival at least
    assert run_span(None, {"duration_s": 3.0}) == (0.0, 3.0)


# tests/fleet/test_faults.py's hand-worked fleet: 4 replicas, a request every 0.25 s
FLEET = [*FAULT_FLEET, "sim.progress=false"]
# as tests/fleet/test_faults.py's hand-worked fleet: a drain of replica 0 from 1 s, a failure
# of replica 1 at 1.305 s (back at 3.305 s), a reclaim notice of replica 3 at 1.5 s
FAULTS = [
    "faults.maintenance=[{replica: 0, at_s: 1.0, duration_s: 2}]",
    "faults.schedule=[{replica: 1, at_s: 1.305, repair_s: 2}]",
    "faults.spot=[{replica: 3, at_s: 1.5, notice_s: 0.305, replace_s: 1}]",
    "faults.on_failure=fail",
]


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("faulty") / "run"
    simulate(compose(*FLEET, *FAULTS), folder)
    return folder


def test_the_report_of_a_run_with_faults_has_their_section(faulty_run):
    _, markdown = report(faulty_run)
    assert "### Faults" in markdown and "(report_files/faults.png)" in markdown
    section = markdown[markdown.index("### Faults") : markdown.index("## Latency")]
    assert "3 event(s), at least 1 replica(s) up throughout" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| failure", "1"],
        ["| maintenance", "1"],
        ["| spot", "1"],
        ["| all", "3"],
    ]
    summary = json.loads((faulty_run / "summary.json").read_text())
    # on_failure=fail: what the replicas held when they went ended failed, none retried, as
    # the summary counts them (the drain finished what it held)
    failed = summary["failed_by_reason"]
    assert failed.get("replica_failure", 0) + failed.get("spot_reclaim", 0) > 0
    assert rows[0].endswith(f"| 0 | {failed.get('replica_failure', 0)} |")
    assert rows[1].endswith("| 0 | 0 |")
    assert rows[2].endswith(f"| 0 | {failed.get('spot_reclaim', 0)} |")
    block = summary["faults"]
    assert (block["failures"], block["maintenance"], block["spot_reclaims"]) == (1, 1, 1)
    # the time lost, as the table counts it, is the summary's replica-hours down
    frame = pd.read_parquet(faulty_run / "faults.parquet")
    arrivals = pd.read_parquet(faulty_run / "requests.parquet")["arrival_time_s"].to_numpy()
    start, end = run_span(arrivals, summary)
    assert lost_hours(frame, start, end).sum() == pytest.approx(
        summary["faults"]["replica_hours_down"]
    )


def test_a_run_without_faults_has_no_section(run_folder, tmp_path):
    _, markdown = report(run_folder, "--out", str(tmp_path / "r"))
    assert "Faults" not in markdown and "faults.png" not in markdown


def test_a_run_whose_faults_never_came_says_so(tmp_path):
    """Faults on, a failure scheduled long after the last request: its row is outside the
    run's span, which the summary counts no failure in either."""
    folder = tmp_path / "run"
    simulate(compose(*FLEET, "faults.schedule=[{replica: 0, at_s: 1000}]"), folder)
    _, markdown = report(folder)
    assert "### Faults\n\nFaults were on, and none came within the run." in markdown
    assert "faults.png" not in markdown


def test_a_plan_shows_its_chosen_runs_faults_block(tmp_path_factory):
    folder = planned(
        tmp_path_factory, "faulty_plan", [*PLAN, "faults.schedule=[{replica: 0, at_s: 0.2}]"]
    )
    _, markdown = report(folder)
    section = markdown[markdown.index("## Faults") : markdown.index("## Assumptions")]
    assert "The faults of the run of " in section
    assert "| failures | 1 |" in section and "| on failure | retry |" in section


def test_a_faults_block_as_a_table():
    block = {
        "availability": 0.975,
        "replica_hours_planned": 2.0,
        "replica_hours_down": 0.05,
        "failures": 1,
        "maintenance": 0,
        "spot_reclaims": 2,
        "failed_by_reason": {"spot_reclaim": 3},
        "on_failure": "fail",
        "degraded": {"requests": 12, "ttft_s": {"p99": 0.25}},
    }
    table = block_table({"faults": block}, " here")
    found = dict(table.rows)
    assert found["availability (replica-hours up / planned)"] == "97.500%"
    assert found["spot reclaims"] == "2" and found["replica-hours down"] == "0.05"
    assert found["failed, by cause"] == "spot_reclaim: 3"
    assert found["requests arrived while degraded"] == "12"
    assert found["TTFT p99 of those (s)"] == "0.25"
    assert found["GPU MTBF (hours)"] == "-"  # not in the block
    assert block_table({}, "") is None


def test_the_faults_figure_renders_in_a_browser(faulty_run, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(faulty_run, folder)
    assert command.main([str(folder)]) == 0
    check(folder)
    found = browse(folder / "report.html", tmp_path / "report.png")
    shown = {alt: natural for alt, natural, _, _ in found["images"]}
    assert shown.get("faults", 0) > 0, shown
    assert "replica-hours lost" in found["headings"]
