"""The sweep monitor: the job count from Hydra's sweep syntax, progress while jobs run, a failed
job that does not stop the others, and the ranking of SLO-meeting configurations by cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from sim.sweeps.collect import collect
from sim.sweeps.monitor import (
    count_jobs,
    is_traffic_key,
    rank_table,
    slo_attainment,
    swept_keys,
    traffic_labels,
    traffic_of,
)
from tests.sweeps.conftest import TINY


def test_a_2x2x2_sweep_gives_8_runs_and_an_8_row_dataset(finished_sweep, tmp_path):
    out, stdout, stderr = finished_sweep
    jobs = sorted((p for p in out.iterdir() if p.is_dir()), key=lambda p: int(p.name))
    assert [p.name for p in jobs] == [str(i) for i in range(8)]
    assert all((p / "summary.json").exists() for p in jobs)
    # each job ran its own combination
    combos = {
        tuple(yaml.safe_load((p / ".hydra" / "overrides.yaml").read_text())[:3]) for p in jobs
    }
    assert len(combos) == 8
    result = collect(out, tmp_path / "collected")
    runs = pq.read_table(result.runs_path).to_pandas()
    assert len(runs) == 8
    for column in (
        "run_id",
        "fleet.replicas",
        "precision.weights",
        "scheduler.max_num_seqs",
        "ttft_s.p99",
        "throughput.requests_per_s",
        "cost.usd_per_hour",
        "num_gpus",
    ):
        assert column in runs.columns, column
    assert sorted(runs["num_gpus"]) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert (runs["fleet.replicas"] == runs["num_gpus"]).all()
    # the progress line and the final ranking were printed
    assert "sweep: 8/8 done, 0 failed" in stderr
    assert "configuration(s) meet the SLO" in stdout


def test_a_failed_job_is_recorded_and_the_others_still_run(tmp_path):
    out = tmp_path / "s"
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "-m", "fleet.replicas=1,0", *TINY, f"output_dir={out}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert (out / "0" / "summary.json").exists()
    assert (out / "1" / "error.txt").read_text() == "error: fleet.replicas=0: must be >= 1\n"
    assert "1 failed" in proc.stdout


def test_a_job_whose_value_cannot_be_resolved_fails_alone(tmp_path):
    out = tmp_path / "s"
    unset = "${oc.env:FLEETCAST_UNSET_FOR_TESTS}"
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "-m", f"seed=0,{unset}", *TINY, f"output_dir={out}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert (out / "0" / "summary.json").exists()
    assert (
        (out / "1" / "error.txt")
        .read_text()
        .startswith(f"error: seed='{unset}': cannot be resolved: ")
    )
    assert "Traceback" not in proc.stderr and "1 failed" in proc.stdout


def test_job_count_and_swept_keys_follow_hydra_sweep_syntax():
    overrides = ["a=1,2,3", "b=x,y", "c=range(0,4)", "d=5", "hydra/launcher=joblib"]
    assert count_jobs(overrides) == 24
    assert swept_keys(overrides) == {"a", "b", "c"}
    assert count_jobs(["d=5"]) == 1


def _fake_job(
    root, name, overrides, usd_per_hour, good, num_requests=100, duration_s=10.0, verdict="stable"
):
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    summary = {
        "goodput_requests_per_s": good * num_requests / duration_s,
        "duration_s": duration_s,
        "num_requests": num_requests,
        "ttft_s": {"p99": 0.5},
        "tpot_s": {"p99": 0.02},
        "cost": {"usd_per_hour": usd_per_hour, "usd_per_million_output_tokens": 1.0},
        "stability": {"verdict": verdict},
    }
    (job / "summary.json").write_text(json.dumps(summary))


def test_rank_table_lists_only_slo_meeting_configs_cheapest_first(tmp_path):
    _fake_job(tmp_path, "0", ["fleet.replicas=4", "seed=1"], 12.0, good=1.0)
    _fake_job(tmp_path, "1", ["fleet.replicas=1", "seed=1"], 3.0, good=0.5)  # misses the SLO
    _fake_job(tmp_path, "2", ["fleet.replicas=2", "seed=1"], 6.0, good=0.995)
    # meets the SLO in a short run, but its queue grows: not a fleet to buy
    _fake_job(tmp_path, "4", ["fleet.replicas=1", "seed=2"], 3.0, good=1.0, verdict="unstable")
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "error.txt").write_text("error: x\n")
    table = rank_table(tmp_path, 0.99, keys={"fleet.replicas"}).splitlines()
    assert table[0].startswith(
        "2 configuration(s) meet the SLO for >= 99% of requests; 1 miss it; 1 unstable; 1 failed"
    )
    rows = table[2:]
    assert [row.split()[0] for row in rows] == ["2", "0"]  # $6/h before $12/h
    assert rows[0].endswith("fleet.replicas=2")  # labelled by the swept key only
    assert slo_attainment(
        {"goodput_requests_per_s": 9.9, "duration_s": 10.0, "num_requests": 100}
    ) == pytest.approx(0.99)


def test_a_sweep_over_the_traffic_ranks_each_run_only_against_runs_at_its_traffic(tmp_path):
    """At 4x the rate one replica serves 4x the tokens per dollar: ranked together, it came
    first, "cheaper" than the same fleet at 1x."""
    out = tmp_path / "s"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "-m",
            "fleet.replicas=1,2",
            "workload.rate_scale=1,4",
            "workload.num_requests=30",
            "sim.progress=false",
            f"output_dir={out}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranking = proc.stdout[proc.stdout.index("configuration(s) meet the SLO") :]
    tables = ranking.split("\ntraffic ")[1:]
    assert [t.splitlines()[0] for t in tables] == [
        "workload.rate_scale=1: 2 meet the SLO; 0 miss it; 0 unstable",
        "workload.rate_scale=4: 2 meet the SLO; 0 miss it; 0 unstable",
    ]
    for table, jobs in zip(tables, (["0", "2"], ["1", "3"]), strict=True):
        rows = [line.split() for line in table.splitlines()[2:] if line.strip()]
        assert [row[0] for row in rows] == jobs  # one replica, then two
        assert [row[-1] for row in rows] == ["fleet.replicas=1", "fleet.replicas=2"]
    # the 4x runs' $ per million tokens are lower, and no longer rank them above the 1x runs
    per_million = {
        row.split()[0]: float(row.split()[2])
        for row in ranking.splitlines()[3:]
        if row.split() and row.split()[0].isdigit()
    }
    assert per_million["1"] < per_million["0"] and per_million["3"] < per_million["2"]


def test_traffic_is_the_workload_and_the_arrival_rate_what_if():
    for key in (
        "workload.qps",
        "choice.workload",
        "config.workload.path",
        "+workload.x",
        "sim.arrival_rate_scale",
        "workload",
    ):
        assert is_traffic_key(key), key
    for key in ("fleet.replicas", "seed", "sim.step_time_scale", "workloads.x", "slo.ttft_s"):
        assert not is_traffic_key(key), key
    config = {
        "workload": {"kind": "poisson", "qps": 2.0, "prompt_tokens": {"dist": "fixed"}},
        "sim": {"arrival_rate_scale": 1.0, "progress": False},
        "seed": 3,
    }
    assert traffic_of(config) == {
        "workload.kind": "poisson",
        "workload.qps": 2.0,
        "workload.prompt_tokens.dist": "fixed",
        "sim.arrival_rate_scale": 1.0,
    }
    assert traffic_labels([{"a": 1, "b": 2}, {"a": 1, "b": 3}]) == ["b=2", "b=3"]
    assert traffic_labels([{"a": 1}, {}]) == ["the sweep's", "unknown (no readable config.yaml)"]


def test_each_traffic_gets_its_table_and_an_unreadable_config_still_ranks(tmp_path):
    for name, rate, usd in (("0", 1.0, 6.0), ("1", 4.0, 3.0), ("2", 1.0, 3.0), ("3", 4.0, 6.0)):
        _fake_job(
            tmp_path,
            name,
            [f"fleet.replicas={int(usd / 3)}", f"sim.arrival_rate_scale={rate}"],
            usd,
            good=1.0,
        )
        (tmp_path / name / "config.yaml").write_text(
            yaml.safe_dump(
                {"workload": {"kind": "poisson", "qps": 2.0}, "sim": {"arrival_rate_scale": rate}}
            )
        )
    _fake_job(tmp_path, "4", ["fleet.replicas=9"], 30.0, good=1.0)
    (tmp_path / "4" / "config.yaml").write_text("workload: [unclosed\n")
    table = rank_table(tmp_path, 0.99, keys={"fleet.replicas", "sim.arrival_rate_scale"})
    heads = [line for line in table.splitlines() if line.startswith("traffic ")]
    # the job without a readable config is a traffic of its own, not a crash
    assert heads == [
        "traffic sim.arrival_rate_scale=1.0: 2 meet the SLO; 0 miss it; 0 unstable",
        "traffic sim.arrival_rate_scale=4.0: 2 meet the SLO; 0 miss it; 0 unstable",
        "traffic unknown (no readable config.yaml): 1 meet the SLO; 0 miss it; 0 unstable",
    ]
    jobs = [line.split()[0] for line in table.splitlines() if line.strip()[:1].isdigit()][1:]
    assert jobs == ["2", "0", "1", "3", "4"]
