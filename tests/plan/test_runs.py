"""A plan's simulations as jobs (sim.plan.runs): Ctrl-C on ``fleetcast plan`` stops its
workers and ends in one line, exit status 130, the finished simulations kept to resume from."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sim.plan.runs import INTERRUPTED_STATUS
from tests.support import REPO_ROOT

# a plan that runs for minutes: many candidates, each simulation a few seconds
LONG_PLAN = [
    "workload=poisson",
    "workload.num_requests=400",
    "workload.qps=20",
    "plan.grid={scheduler.max_num_seqs: [8, 16, 32, 64, 128, 256]}",
    "plan.jobs=2",
]


def session_processes(session: int) -> list[str]:
    """The processes still in ``session`` (its leader's id)."""
    listed = subprocess.run(
        ["ps", "-s", str(session), "-o", "pid=,args="], capture_output=True, text=True
    )
    return [line for line in listed.stdout.splitlines() if line.strip()]


def test_ctrl_c_on_a_plan_is_one_line_exit_130_and_no_worker_left(tmp_path):
    folder = tmp_path / "plan"
    plan = subprocess.Popen(
        [sys.executable, "-m", "sim", "plan", *LONG_PLAN, f"plan.output_dir={folder}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C reaches it and its workers
    )
    try:
        deadline = time.monotonic() + 120
        while not list(folder.glob("runs/*/summary.json")):  # simulations are running
            assert plan.poll() is None and time.monotonic() < deadline, plan.communicate()
            time.sleep(0.2)
        os.killpg(plan.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        out, err = plan.communicate(timeout=60)
    finally:
        if plan.poll() is None:
            os.killpg(plan.pid, signal.SIGKILL)
    assert plan.returncode == INTERRUPTED_STATUS == 130
    assert err == (
        f"interrupted: the plan in {folder} stopped; its finished simulations are kept, and "
        f"the same command (plan.output_dir={folder}) resumes from them\n"
    )
    assert out == ""
    deadline = time.monotonic() + 10  # the killed workers are reaped by the system
    while session_processes(plan.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(plan.pid) == []
    assert list(folder.glob("runs/*/summary.json"))  # kept: a rerun resumes from them
    assert not Path(folder / "plan.json").exists()
