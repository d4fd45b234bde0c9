"""Sweeps on a Ray cluster: ``fleetcast -m hydra/launcher=ray ...`` (docs/how-to/sweeps-on-ray.md).

The test starts its own single-node Ray instance (``ray start --head --block`` in a process
group of its own, token authentication with a throwaway token, no dashboard, no usage stats),
points the launcher at its address, runs a 2-job sweep through the command line and checks both
jobs' files. The Ray instance is stopped by signalling that one process group, never with
``ray stop`` (which would stop every Ray instance of the user on the machine).

Skipped unless the Ray extra is installed (its own environment: docs/how-to/sweeps-on-ray.md):

    python3 -m venv .venv-ray && .venv-ray/bin/pip install -e '.[test,ray]'
    .venv-ray/bin/python -m pytest -q tests/sweeps/test_ray_launcher.py
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("hydra_plugins.hydra_ray_launcher")

import yaml  # noqa: E402  (after the skips: only the Ray environment needs to get this far)

from tests.support import REPO_ROOT as REPO  # noqa: E402

START_TIMEOUT_S = 90
SWEEP_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.skip("the `ray` command is not installed beside this Python")
    return found


def _env() -> dict[str, str]:
    """The environment of the Ray instance and of the sweep: no usage stats, token
    authentication with a token of this test only (nothing read from or written to ~/.ray),
    and Fleetcast importable from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(16),
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PYTHONUNBUFFERED="1",
    )
    return env


def _stop(proc: subprocess.Popen, log_file) -> None:
    """Stop the Ray instance this test started (its own process group), gently first."""
    for sig, wait_s in ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            if sig == signal.SIGINT:
                proc.send_signal(sig)  # `ray start --block` then kills its processes itself
            else:
                os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # whatever the head left behind in its group (raylet workers)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    log_file.close()


@pytest.fixture(scope="module")
def ray_cluster():
    """A single-node Ray instance on this machine: yields (address, env, its cwd)."""
    ray = _ray_executable()
    env = _env()
    # Short paths: Ray puts Unix sockets under --temp-dir (about 100 characters at most).
    base = Path(tempfile.mkdtemp(prefix="fcray-", dir="/tmp" if Path("/tmp").is_dir() else None))
    head_cwd = base / "head_cwd"  # where Ray's workers start: not the repo, not the driver's cwd
    head_cwd.mkdir()
    port = _free_port()
    log_path = base / "ray_start.log"
    log_file = open(log_path, "w")
    proc = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--object-store-memory=100000000",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={base / 'ray'}",
        ],
        cwd=head_cwd,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "block forever" not in log_path.read_text():
            if proc.poll() is not None:
                pytest.fail(f"ray start exited ({proc.returncode}):\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"ray start not ready after {START_TIMEOUT_S} s:\n{log_path.read_text()}"
                )
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", env, head_cwd
    finally:
        _stop(proc, log_file)
        shutil.rmtree(base, ignore_errors=True)


def _sweep(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sim", "-m", "workload.duration_s=10", "fleet.replicas=1,2", *args]
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(
            f"sweep did not finish in {SWEEP_TIMEOUT_S} s: {' '.join(cmd)}\n"
            f"{err.stdout}\n{err.stderr}"
        )
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    return done


def _check_jobs(sweep_dir: Path) -> None:
    """Two jobs ran with the Ray launcher, each with its own folder and the swept value."""
    launcher = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())["hydra"]["launcher"]
    assert launcher["_target_"].endswith("RayLauncher")
    gpus = {}
    for job in ("0", "1"):
        job_dir = sweep_dir / job
        summary = json.loads((job_dir / "summary.json").read_text())
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
        replicas = int(next(o for o in overrides if o.startswith("fleet.replicas=")).split("=")[1])
        # The Ray launcher names its jobs job_id_for_N (the joblib launcher does not).
        hydra_cfg = yaml.safe_load((job_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]
        assert hydra_cfg["job"]["id"] == f"job_id_for_{job}"
        assert summary["completed"] > 0
        gpus[replicas] = summary["num_gpus"]
    assert gpus == {1: 1, 2: 2}


def test_sweep_on_an_existing_cluster(ray_cluster, tmp_path):
    """The preset for clusters, from the repo root, into an absolute folder."""
    address, env, _ = ray_cluster
    sweep_dir = tmp_path / "sweep"
    _sweep(
        [
            "hydra/launcher=fleetcast_ray",
            f"hydra.launcher.ray.init.address={address}",
            f"output_dir={sweep_dir}",
        ],
        env,
        REPO,
    )
    _check_jobs(sweep_dir)


def test_plain_ray_launcher_from_another_directory(ray_cluster, tmp_path):
    """The plugin's own `ray` config, launched outside the repo with a relative output_dir:
    the shipped trace is still found, and the files land under the caller's directory, not
    under the directory the Ray workers run in."""
    address, env, head_cwd = ray_cluster
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    _sweep(
        [
            "hydra/launcher=ray",
            f"hydra.launcher.ray.init.address={address}",
            # the plugin asks for a 75 MiB object store, which an existing cluster refuses
            "++hydra.launcher.ray.init.object_store_memory=null",
            "output_dir=out/sweep",
        ],
        env,
        cwd,
    )
    assert not (head_cwd / "out").exists(), "jobs wrote into the Ray workers' directory"
    _check_jobs(cwd / "out" / "sweep")


def test_a_plan_runs_its_simulations_on_the_cluster(ray_cluster, tmp_path):
    """`fleetcast plan` with the cluster preset: every simulation a Ray job whose summary
    comes back by value, and the same answer as the local launcher's."""
    address, env, _ = ray_cluster
    argv = [
        "workload=poisson",
        "workload.num_requests=60",
        "workload.qps=20",
        "plan.slo=[ttft_s.p99 <= 0.5]",
        "plan.max_replicas=4",
        "plan.step_time_scales=[]",
        "plan.rate_scales=[]",
        "plan.max_headroom=null",
    ]
    answers = []
    for name, launcher in (
        ("ray", ["hydra/launcher=fleetcast_ray", f"hydra.launcher.ray.init.address={address}"]),
        ("basic", ["hydra/launcher=basic"]),
    ):
        folder = tmp_path / name
        cmd = [sys.executable, "-m", "sim", "plan", *argv, f"plan.output_dir={folder}", *launcher]
        done = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S
        )
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
        assert "1 of 1 candidate(s) meet every SLO" in done.stdout
        plan = json.loads((folder / "plan.json").read_text())
        (answer,) = plan["candidates"]
        answers.append((answer["replicas"], answer["evaluated"], answer["slo"]))
        runs = list((folder / "runs").iterdir())
        assert len(runs) == sum(e["replications"] for e in answer["evaluated"])
    assert answers[0] == answers[1]
