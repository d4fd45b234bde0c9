"""A run's folder (sim.output.run_files): one run at a time, and only its files. A second run
into a folder being written is refused in one line; a killed rerun leaves no file of the
earlier run beside its own; a lock left by a killed run does not stop the next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.output.run_files import LOCK_FILE, RunFolder
from sim.run import simulate
from tests.support import REPO_ROOT, compose

QUICK = ["workload=poisson", "workload.num_requests=40", "sim.progress=false"]
# a run that takes minutes: it is killed, or refused into, while it writes
LONG = ["workload=poisson", "workload.num_requests=200000", "workload.qps=50", "sim.progress=false"]


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sim", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(found, proc: subprocess.Popen, seconds: float = 120) -> None:
    """Poll until ``found()`` holds, while ``proc`` runs."""
    deadline = time.monotonic() + seconds
    while not found():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def run_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_a_second_run_folder_on_a_held_folder_is_refused_naming_the_holder(tmp_path):
    first = RunFolder(tmp_path / "run")
    with pytest.raises(ConfigError) as refused:
        RunFolder(tmp_path / "run")
    assert str(refused.value) == (
        f"output_dir='{tmp_path / 'run'}': another run (pid {os.getpid()}) is writing into "
        "this folder; wait for it to end, or give another output_dir"
    )
    first.close()
    assert not (tmp_path / "run" / LOCK_FILE).exists()  # released and removed
    RunFolder(tmp_path / "run").close()  # free again


def test_two_runs_into_one_folder_at_once_the_second_is_refused_and_the_first_kept(tmp_path):
    out = tmp_path / "run"
    first = start(tmp_path, *LONG, "workload.num_requests=60000", "seed=1", f"output_dir={out}")
    try:
        wait_for(lambda: list(out.glob(".*.partial")), first)  # it holds the folder, writing
        second = subprocess.run(
            [sys.executable, "-m", "sim", *QUICK, "seed=2", f"output_dir={out}"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 2
        assert second.stderr == (
            f"error: output_dir='{out}': another run (pid {first.pid}) is writing into this "
            "folder; wait for it to end, or give another output_dir\n"
        )
        assert second.stdout == ""
        done, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and f"files:      {out}" in done
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 60000  # the first run's, whole
    assert "seed: 1" in (out / "config.yaml").read_text().splitlines()
    assert not (out / LOCK_FILE).exists()


def test_a_killed_rerun_leaves_none_of_the_earlier_run_and_the_next_run_goes_ahead(tmp_path):
    out = tmp_path / "run"
    # an autoscaled run first: the fixed fleet's run after it must not keep its scaling.parquet
    simulate(compose(*QUICK, "autoscale.policy=queue"), out)
    assert run_files(out) == [
        "config.yaml",
        "requests.parquet",
        "scaling.parquet",
        "steps.parquet",
        "summary.json",
    ]
    rerun = start(tmp_path, *LONG, f"output_dir={out}")
    try:
        wait_for(lambda: list(out.glob(".*.partial")), rerun)  # it has begun writing
    finally:
        rerun.send_signal(signal.SIGKILL)
        rerun.wait()
    assert run_files(out) == []  # no summary, and nothing of the earlier run
    assert (out / LOCK_FILE).read_text() == f"{rerun.pid}\n"  # the dead run's lock file
    simulate(compose(*QUICK, "seed=5"), out)  # the lock went with its process
    assert run_files(out) == ["config.yaml", "requests.parquet", "steps.parquet", "summary.json"]
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
