"""Resuming a sweep: a job whose folder holds a finished run of the same config is skipped, a
killed one is redone, and runs written by an older Fleetcast are still recognised."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import yaml

from sim.sweeps.resume import job_status
from tests.sweeps.conftest import run_sweep


def _skipped(stdout: str) -> set[str]:
    return {
        line.split("/")[-1].split(":")[0]
        for line in stdout.splitlines()
        if line.endswith("complete, skipped")
    }


def test_rerunning_a_sweep_completes_only_the_missing_job(finished_sweep, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(finished_sweep[0], out)
    # A job killed while writing leaves no summary.json (written last) and maybe a temp file.
    killed = out / "5"
    (killed / "summary.json").unlink()
    (killed / ".steps.parquet.x1y2.partial").write_bytes(b"half a file")
    before = {
        p.name: (p / "summary.json").stat().st_mtime_ns
        for p in out.iterdir()
        if (p / "summary.json").exists()
    }
    proc = run_sweep(out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _skipped(proc.stdout) == {"0", "1", "2", "3", "4", "6", "7"}
    assert (killed / "summary.json").exists()
    assert not list(killed.glob(".*.partial"))
    after = {name: (out / name / "summary.json").stat().st_mtime_ns for name in before}
    assert after == before  # the complete jobs were not rewritten


def test_runs_written_by_an_older_fleetcast_are_recognised(finished_sweep, tmp_path):
    """Before sim/ was split into packages, config.yaml named sim.scheduler.*, sim.router.* and
    sim.step_time.* classes; sim.config.legacy maps them, so the finished jobs still count."""
    out = tmp_path / "s"
    shutil.copytree(finished_sweep[0], out)
    for config in out.glob("*/config.yaml"):
        text = config.read_text()
        for new, old in (
            ("sim.engine.scheduler.", "sim.scheduler."),
            ("sim.engine.step_time.", "sim.step_time."),
            ("sim.fleet.router.", "sim.router."),
        ):
            assert new in text
            text = text.replace(new, old)
        config.write_text(text)
    proc = run_sweep(out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _skipped(proc.stdout) == {str(i) for i in range(8)}, proc.stdout + proc.stderr[-3000:]


def test_job_status_needs_the_same_config_and_a_summary(tmp_path):
    cfg = {"fleet": {"replicas": 2}, "seed": 0}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert job_status(tmp_path, cfg) == "todo"  # no summary yet: not finished
    (tmp_path / "summary.json").write_text("{}")
    assert job_status(tmp_path, cfg) == "complete"
    assert job_status(tmp_path, {**cfg, "seed": 1}) == "todo"  # another run's folder


def test_job_status_ignores_where_and_how_a_run_reports(tmp_path):
    cfg = {
        "fleet": {"replicas": 2},
        "sim": {"progress": False, "horizon_s": None},
        "output_dir": "sweeps/x",
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "summary.json").write_text("{}")
    respelled = {
        **cfg,
        "output_dir": "/abs/sweeps/x/",
        "sim": {"progress": "auto", "horizon_s": None},
    }
    assert job_status(tmp_path, respelled) == "complete"
    changed = {**respelled, "sim": {"progress": "auto", "horizon_s": 5.0}}
    assert job_status(tmp_path, changed) == "todo"


def test_job_status_reads_older_spellings_of_targets_and_shipped_paths(tmp_path):
    old = {
        "router": {"_target_": "sim.router.RoundRobinRouter"},
        "workload": {"path": "data/traces/azure_llm_2023_conv.parquet"},
    }
    new = {
        "router": {"_target_": "sim.fleet.router.RoundRobinRouter"},
        "workload": {"path": "shipped:traces/azure_llm_2023_conv.parquet"},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "summary.json").write_text("{}")
    assert job_status(tmp_path, new) == "complete"
    other = {**new, "router": {"_target_": "sim.fleet.router.RandomRouter"}}
    assert job_status(tmp_path, other) == "todo"


def test_a_sweep_killed_midway_resumes_with_only_the_missing_jobs(tmp_path):
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "sim",
        "-m",
        "fleet.replicas=1,2,3,4",
        "sim.progress=false",
        "hydra.launcher.n_jobs=2",
        f"output_dir={out}",
    ]  # 10 min of Azure traffic each
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    done: set[str] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        done = (
            {p.name for p in out.glob("*") if (p / "summary.json").exists()}
            if out.exists()
            else set()
        )
        if done:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers, mid-sweep
    proc.wait()
    done = {p.name for p in out.glob("*") if (p / "summary.json").exists()}
    assert 1 <= len(done) < 4, f"the kill came too late to test anything: {done}"
    rerun = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _skipped(rerun.stdout) == done
    assert all((out / str(i) / "summary.json").exists() for i in range(4))
    assert not list(out.glob("*/.*.partial"))


def test_job_status_counts_the_model_fields_a_config_json_gave_as_asked(tmp_path):
    # model=hf leaves the shape to the file; the run's config.yaml records what it read
    asked = {"model": {"config_path": "shipped:models/llama31_8b/config.json", "num_layers": None}}
    done = {"model": {"config_path": "shipped:models/llama31_8b/config.json", "num_layers": 32}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(done))
    (tmp_path / "summary.json").write_text("{}")
    assert job_status(tmp_path, asked) == "complete"
    other_file = {"model": {**asked["model"], "config_path": "other/config.json"}}
    assert job_status(tmp_path, other_file) == "todo"
    set_apart = {"model": {**asked["model"], "num_layers": 16}}  # given on the command line
    assert job_status(tmp_path, set_apart) == "todo"


def test_job_status_reads_runs_from_before_the_host_tier(tmp_path):
    """kv.cpu_offload_gib and hardware.host_link_gbps came later: a run without them ran with
    no host tier, and the link is compared only while a host tier reads it."""
    old = {"kv": {"block_size": 16, "prefix_caching": False}, "hardware": {"name": "H100-SXM"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "summary.json").write_text("{}")
    now = {
        "kv": {"block_size": 16, "prefix_caching": False, "cpu_offload_gib": 0.0},
        "hardware": {"name": "H100-SXM", "host_link_gbps": 64},
    }
    assert job_status(tmp_path, now) == "complete"
    offloading = {**now, "kv": {**now["kv"], "prefix_caching": True, "cpu_offload_gib": 8.0}}
    assert job_status(tmp_path, offloading) == "todo"
    # with a host tier on both sides, the link counts
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(offloading))
    assert job_status(tmp_path, offloading) == "complete"
    slower = {**offloading, "hardware": {"name": "H100-SXM", "host_link_gbps": 32}}
    assert job_status(tmp_path, slower) == "todo"
