"""What PATH is, and the one-line refusals of what it is not."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from sim.report import command
from sim.report.inputs import (
    DayPlanInput,
    PlanInput,
    RunInput,
    SweepInput,
    plan_command,
    read_input,
)
from sim.run import simulate
from tests.support import compose, fleetcast


def test_each_kind_of_folder_is_told_apart(run_folder, day_folder, plan_folder, sweep_folder):
    assert isinstance(read_input(run_folder), RunInput)
    assert isinstance(read_input(day_folder), DayPlanInput)
    assert isinstance(read_input(plan_folder), PlanInput)
    swept = read_input(sweep_folder)
    assert isinstance(swept, SweepInput) and swept.sweep_dir == sweep_folder
    assert isinstance(read_input(sweep_folder / "collected"), SweepInput)
    assert set(swept.swept_keys) >= {"fleet.replicas", "workload.qps"}
    assert swept.run(0).summary == json.loads((sweep_folder / "0" / "summary.json").read_text())


def test_a_run_knows_its_command_and_a_plan_its_own(run_folder, plan_folder):
    assert read_input(run_folder).command.startswith(
        "fleetcast fleet.replicas=2 workload=poisson workload.num_requests=160"
    )
    plan = read_input(plan_folder)
    assert plan.command.startswith("fleetcast plan step_time=constant")
    assert "'plan.slo=[ttft_s.mean <= 0.05]'" in plan.command
    # the chosen count's first replication, found by the planner's own folder names
    (answer,) = plan.candidates
    chosen = plan.run(answer["overrides"], answer["replicas"])
    assert chosen is not None and chosen.config["fleet"]["replicas"] == answer["replicas"]


def refused(capsys, path: Path | str) -> str:
    assert command.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_bad_paths_are_one_line_with_exit_status_2(tmp_path, capsys, run_folder):
    assert refused(capsys, tmp_path / "nope") == f"error: PATH='{tmp_path / 'nope'}': not found\n"
    (tmp_path / "file.txt").write_text("x")
    assert "is a file; give a run, sweep, plan or day-plan folder" in refused(
        capsys, tmp_path / "file.txt"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a run, sweep, plan or day-plan folder" in refused(capsys, empty)
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run_folder, unfinished)
    (unfinished / "summary.json").unlink()
    assert "no summary.json: not a finished run" in refused(capsys, unfinished)
    sweep = tmp_path / "sweep"
    shutil.copytree(run_folder, sweep / "0")
    assert "a sweep not collected yet: run fleetcast collect" in refused(capsys, sweep)
    broken = tmp_path / "broken"
    shutil.copytree(run_folder, broken)
    (broken / "summary.json").write_text("{")
    assert "cannot read summary.json" in refused(capsys, broken)
    assert not list(tmp_path.rglob("report*"))  # nothing written


def test_the_command_line_refuses_in_one_line(tmp_path):
    done = fleetcast("report", str(tmp_path / "missing"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"error: PATH='{tmp_path / 'missing'}': not found\n"


def test_a_missing_extra_is_named_in_one_line(monkeypatch, capsys, run_folder):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "seaborn" else real(name, *a)
    )
    assert command.main([str(run_folder)]) == 2
    assert capsys.readouterr().err == (
        "error: fleetcast report needs seaborn: pip install 'fleetcast[report]'\n"
    )


def test_a_plan_request_gives_the_command_with_the_settings_that_differ_from_the_defaults():
    request = {
        "base": ["workload=daily", "workload.qps=2"],
        "plan": {
            "slo": ["ttft_s.p99 <= 1"],
            "grid": {"hardware": ["h100_sxm", "h200"]},
            "candidates": [],
            "max_replicas": 64,  # the default: left out
            "max_headroom": None,
            "day": {"periods": 2, "period_s": 900, "autoscale": {}},
        },
    }
    assert plan_command(request) == (
        "fleetcast plan workload=daily workload.qps=2 'plan.slo=[ttft_s.p99 <= 1]' "
        "'plan.grid={hardware: [h100_sxm, h200]}' plan.max_headroom=null plan.day.periods=2"
    )


def test_a_plan_requests_spare_settings_are_said_one_by_one():
    request = {
        "base": ["faults.gpu_mtbf_h=50000"],
        "plan": {
            "slo": ["ttft_s.p99 <= 1"],
            "faults": {"availability": 0.999, "tiers": ["spot", "on_demand"], "max_spares": 16},
        },
    }
    assert plan_command(request) == (
        "fleetcast plan faults.gpu_mtbf_h=50000 'plan.slo=[ttft_s.p99 <= 1]' "
        "plan.faults.availability=0.999 'plan.faults.tiers=[spot, on_demand]'"
    )


def test_a_period_of_a_day_plan_finds_its_runs_and_command_in_the_day_plan(
    real_day_folder, tmp_path
):
    """``DAYPLAN/periods/08-20`` is a plan whose simulations are in ``DAYPLAN/runs/``."""
    period = real_day_folder / "periods" / "08-20"
    assert not (period / "runs").exists() and not (period / "plan_request.json").exists()
    plan = read_input(period)
    assert isinstance(plan, PlanInput) and plan.day_plan == real_day_folder.resolve()
    (answer,) = [c for c in plan.candidates if c["feasible"]][:1]
    chosen = plan.run(answer["overrides"], answer["replicas"])
    assert chosen is not None and chosen.path.parent == real_day_folder.resolve() / "runs"
    day = json.loads((real_day_folder / "day_plan.json").read_text())
    assert plan.command == day["command"]  # no plan_request.json: the day plan's record
    # with the day plan's plan_request.json, the command and version are read from it
    copy = tmp_path / "day"
    shutil.copytree(period, copy / "periods" / "08-20")
    (copy / "runs").symlink_to(real_day_folder / "runs")
    request = {
        "base": ["workload=daily"],
        "plan": {"slo": ["ttft_s.mean <= 0.05"], "day": {"periods": 2}},
        "version": "9.9",
    }
    (copy / "plan_request.json").write_text(json.dumps(request))
    plan = read_input(copy / "periods" / "08-20")
    assert plan.version == "9.9" and plan.command == plan_command(request)
    assert plan.run(answer["overrides"], answer["replicas"]) is not None
    # a plan folder of its own, or one named periods/ elsewhere, is not a period
    lone = tmp_path / "x" / "periods" / "08-20"
    shutil.copytree(period, lone)
    alone = read_input(lone)
    assert alone.day_plan is None and alone.run(answer["overrides"], answer["replicas"]) is None


def edit_json(path: Path, change) -> None:
    """``path``'s JSON, changed in place by ``change`` (a function of the loaded object)."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


# (id, the folder to copy, what to break in it, what the one line says after PATH='...': )
BROKEN_FILES = [
    (
        "truncated requests",
        "run",
        lambda f: truncated(f / "requests.parquet"),
        "cannot read requests.parquet: Parquet magic bytes",
    ),
    (
        "truncated steps",
        "run",
        lambda f: truncated(f / "steps.parquet"),
        "cannot read steps.parquet: Parquet magic bytes",
    ),
    (
        "truncated plan table",
        "plan",
        lambda f: truncated(f / "plan.parquet"),
        "cannot read plan.parquet: ",
    ),
    (
        "summary statistic as text",
        "run",
        lambda f: edit_json(f / "summary.json", lambda s: s.update(ttft_s="fast")),
        'summary.json: ttft_s is "fast", not a mapping',
    ),
    (
        "summary cost as text",
        "run",
        lambda f: edit_json(f / "summary.json", lambda s: s["cost"].update(usd_per_hour="x")),
        'summary.json: cost.usd_per_hour is "x", not a number',
    ),
    (
        "summary count fractional",
        "run",
        lambda f: edit_json(f / "summary.json", lambda s: s.update(num_gpus=1.5)),
        "summary.json: num_gpus is 1.5, not a whole number >= 0",
    ),
    (
        "summary without contract keys",
        "run",
        lambda f: (f / "summary.json").write_text('{"ttft_s": {}}'),
        "summary.json has no tpot_s, itl_s, e2e_s, throughput, goodput_requests_per_s, completed",
    ),
    (
        "config section as text",
        "run",
        lambda f: (f / "config.yaml").write_text("fleet: big\n"),
        'config.yaml: fleet is "big", not a mapping',
    ),
    (
        "plan SLOs as text",
        "plan",
        lambda f: edit_json(f / "plan.json", lambda p: p.update(slo="fast")),
        'plan.json: slo is "fast", not a list',
    ),
    (
        "plan candidates as text",
        "plan",
        lambda f: edit_json(f / "plan.json", lambda p: p.update(candidates="all")),
        'plan.json: candidates is "all", not a list',
    ),
    (
        "plan candidate replicas as text",
        "plan",
        lambda f: edit_json(f / "plan.json", lambda p: p["candidates"][0].update(replicas="two")),
        'plan.json: candidates\\[0\\].replicas is "two", not a whole number >= 0',
    ),
    (
        "plan request settings as a list",
        "plan",
        lambda f: (f / "plan_request.json").write_text('{"plan": [], "base": []}'),
        "plan_request.json: plan is \\[\\], not a mapping",
    ),
]


@pytest.mark.parametrize(
    "kind, brake, says", [r[1:] for r in BROKEN_FILES], ids=[r[0] for r in BROKEN_FILES]
)
def test_a_broken_or_mistyped_file_is_one_line_naming_it_and_nothing_is_written(
    tmp_path, capsys, run_folder, plan_folder, kind, brake, says
):
    folder = tmp_path / kind
    # (without the report another test may have written into the shared folder)
    shutil.copytree(
        run_folder if kind == "run" else plan_folder,
        folder,
        ignore=shutil.ignore_patterns("report*"),
    )
    brake(folder)
    err = refused(capsys, folder)
    assert re.match(rf"error: PATH='{re.escape(str(folder))}': {says}", err), err
    assert not list(folder.glob("report*"))


def test_a_run_that_completed_nothing_is_refused_saying_so(tmp_path, capsys):
    """Every request still in flight at the horizon: a report of dashes would say nothing."""
    folder = tmp_path / "r"
    simulate(
        compose(
            "workload=poisson",
            "workload.num_requests=5",
            "workload.qps=50",
            "sim.horizon_s=0.05",
            "sim.progress=false",
        ),
        folder,
    )
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["completed"] == 0 and summary["unfinished"] >= 1
    err = refused(capsys, folder)
    assert err == (
        f"error: PATH='{folder}': the run completed no request ({summary['num_requests']} "
        f"measured: 0 rejected, {summary['unfinished']} unfinished), so there is no latency, "
        "throughput or cost per token to report; its printed summary (or summary.json) says "
        "what it did\n"
    )
    assert not list(folder.glob("report*"))
