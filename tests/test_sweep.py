"""Sweeps end to end: a real multirun through the CLI, resume after a killed job, the collected
dataset, and the monitor's job count and ranking."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from sim.collect import collect
from sim.config import REPO_ROOT
from sim.sweep import count_jobs, job_status, rank_table, slo_attainment, swept_keys

TINY = ["workload=poisson", "workload.num_requests=30", "workload.qps=20",
        "workload.prompt_tokens=64", "workload.output_tokens=16", "sim.progress=false"]
GRID = ["fleet.replicas=1,2", "precision.weights=bf16,fp8", "scheduler.max_num_seqs=8,64"]


def sweep(out, *args):
    return subprocess.run([sys.executable, "-m", "sim", "-m", *GRID, *TINY, *args,
                           f"output_dir={out}"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "s"
    proc = sweep(out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc


def test_a_2x2x2_sweep_gives_8_runs_and_an_8_row_dataset(finished_sweep, tmp_path):
    out, proc = finished_sweep
    jobs = sorted(p for p in out.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == [str(i) for i in range(8)]
    assert all((p / "summary.json").exists() for p in jobs)
    # each job ran its own combination
    combos = {tuple(yaml.safe_load((p / ".hydra" / "overrides.yaml").read_text())[:3])
              for p in jobs}
    assert len(combos) == 8
    result = collect(out, tmp_path / "collected")
    runs = pq.read_table(result.runs_path).to_pandas()
    assert len(runs) == 8
    for column in ("run_id", "fleet.replicas", "precision.weights", "scheduler.max_num_seqs",
                   "ttft_s.p99", "throughput.requests_per_s", "cost.usd_per_hour", "num_gpus"):
        assert column in runs.columns, column
    assert sorted(runs["num_gpus"]) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert (runs["fleet.replicas"] == runs["num_gpus"]).all()
    # the progress line and the final ranking were printed
    assert "sweep: 8/8 done, 0 failed" in proc.stderr
    assert "configuration(s) meet the SLO" in proc.stdout


def test_rerunning_a_sweep_completes_only_the_missing_job(finished_sweep):
    out, _ = finished_sweep
    # A job killed while writing leaves no summary.json (written last) and maybe a temp file.
    killed = out / "5"
    (killed / "summary.json").unlink()
    (killed / ".steps.parquet.x1y2.partial").write_bytes(b"half a file")
    before = {p.name: (p / "summary.json").stat().st_mtime_ns
              for p in out.iterdir() if (p / "summary.json").exists()}
    proc = sweep(out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    skipped = {line.split("/")[-1].split(":")[0] for line in proc.stdout.splitlines()
               if line.endswith("complete, skipped")}
    assert skipped == {"0", "1", "2", "3", "4", "6", "7"}
    assert (killed / "summary.json").exists()
    assert not list(killed.glob(".*.partial"))
    after = {name: (out / name / "summary.json").stat().st_mtime_ns for name in before}
    assert after == before  # the complete jobs were not rewritten


def test_a_failed_job_is_recorded_and_the_others_still_run(tmp_path):
    out = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-m", "sim", "-m", "fleet.replicas=1,0", *TINY,
                           f"output_dir={out}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert (out / "0" / "summary.json").exists()
    assert (out / "1" / "error.txt").read_text() == "error: fleet.replicas=0: must be >= 1\n"
    assert "1 failed" in proc.stdout


def test_job_count_and_swept_keys_follow_hydra_sweep_syntax():
    overrides = ["a=1,2,3", "b=x,y", "c=range(0,4)", "d=5", "hydra/launcher=joblib"]
    assert count_jobs(overrides) == 24
    assert swept_keys(overrides) == {"a", "b", "c"}
    assert count_jobs(["d=5"]) == 1


def test_job_status_needs_the_same_config_and_a_summary(tmp_path):
    cfg = {"fleet": {"replicas": 2}, "seed": 0}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert job_status(tmp_path, cfg) == "todo"  # no summary yet: not finished
    (tmp_path / "summary.json").write_text("{}")
    assert job_status(tmp_path, cfg) == "complete"
    assert job_status(tmp_path, {**cfg, "seed": 1}) == "todo"  # another run's folder


def _fake_job(root, name, overrides, usd_per_hour, good, num_requests=100, duration_s=10.0):
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    summary = {"goodput_requests_per_s": good * num_requests / duration_s,
               "duration_s": duration_s, "num_requests": num_requests,
               "ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.02},
               "cost": {"usd_per_hour": usd_per_hour, "usd_per_million_output_tokens": 1.0}}
    (job / "summary.json").write_text(json.dumps(summary))


def test_rank_table_lists_only_slo_meeting_configs_cheapest_first(tmp_path):
    _fake_job(tmp_path, "0", ["fleet.replicas=4", "seed=1"], 12.0, good=1.0)
    _fake_job(tmp_path, "1", ["fleet.replicas=1", "seed=1"], 3.0, good=0.5)   # misses the SLO
    _fake_job(tmp_path, "2", ["fleet.replicas=2", "seed=1"], 6.0, good=0.995)
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "error.txt").write_text("error: x\n")
    table = rank_table(tmp_path, 0.99, keys={"fleet.replicas"}).splitlines()
    assert table[0].startswith("2 configuration(s) meet the SLO for >= 99% of requests; "
                               "1 miss it; 1 failed")
    rows = table[2:]
    assert [row.split()[0] for row in rows] == ["2", "0"]  # $6/h before $12/h
    assert rows[0].endswith("fleet.replicas=2")  # labelled by the swept key only
    assert slo_attainment({"goodput_requests_per_s": 9.9, "duration_s": 10.0,
                           "num_requests": 100}) == pytest.approx(0.99)


def test_job_status_ignores_where_and_how_a_run_reports(tmp_path):
    cfg = {"fleet": {"replicas": 2}, "sim": {"progress": False, "horizon_s": None},
           "output_dir": "sweeps/x"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "summary.json").write_text("{}")
    respelled = {**cfg, "output_dir": "/abs/sweeps/x/", "sim": {"progress": "auto",
                                                                  "horizon_s": None}}
    assert job_status(tmp_path, respelled) == "complete"
    changed = {**respelled, "sim": {"progress": "auto", "horizon_s": 5.0}}
    assert job_status(tmp_path, changed) == "todo"


def test_a_sweep_killed_midway_resumes_with_only_the_missing_jobs(tmp_path):
    import os
    import signal
    import time

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "sim", "-m", "fleet.replicas=1,2,3,4", "sim.progress=false",
           "hydra.launcher.n_jobs=2", f"output_dir={out}"]  # 10 min of Azure traffic each
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    done: set[str] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        done = {p.name for p in out.glob("*") if (p / "summary.json").exists()} \
            if out.exists() else set()
        if done:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers, mid-sweep
    proc.wait()
    done = {p.name for p in out.glob("*") if (p / "summary.json").exists()}
    assert 1 <= len(done) < 4, f"the kill came too late to test anything: {done}"
    rerun = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    skipped = {line.split("/")[-1].split(":")[0] for line in rerun.stdout.splitlines()
               if line.endswith("complete, skipped")}
    assert skipped == done
    assert all((out / str(i) / "summary.json").exists() for i in range(4))
    assert not list(out.glob("*/.*.partial"))
