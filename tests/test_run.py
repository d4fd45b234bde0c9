"""One run from a config to its files (``sim.run`` and ``sim.output.run_files``): the same seed
gives the same bytes, and written runs keep the interface contract and its invariants
(``tests.contract``), which in turn catch runs that break them."""

import json
import shutil
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.output.run_files import write_run
from sim.run import simulate
from tests.contract import run_problems
from tests.scenarios import RANDOM, TINY_KV
from tests.support import compose

# a run of several seconds, long enough to be killed while it writes
LONG = ["workload=poisson", "workload.num_requests=200000", "workload.qps=50", "sim.progress=false"]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    overrides = [*RANDOM, *TINY_KV, "fleet.replicas=2"]
    a = write_run(simulate(compose(*overrides, "seed=3")), tmp_path / "a")
    b = write_run(simulate(compose(*overrides, "seed=3")), tmp_path / "b")
    c = write_run(simulate(compose(*overrides, "seed=4")), tmp_path / "c")
    names = ["requests.parquet", "steps.parquet", "summary.json", "config.yaml"]
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in ["requests.parquet", "steps.parquet", "summary.json"]:
        assert (a / name).read_bytes() != (c / name).read_bytes(), name
    assert sorted(p.name for p in a.iterdir()) == sorted(names)  # no temporary files left


@pytest.mark.parametrize(
    "overrides",
    [
        [*RANDOM, "fleet.replicas=2", "scheduler=sarathi"],
        [*RANDOM, "fleet.replicas=2", "frontend.token_s=0.0003", "sim.horizon_s=4"],
        [*RANDOM, *TINY_KV],
        [*RANDOM, "placement=colocated", "placement.second_model=llama31_8b"],
        [
            *RANDOM,
            "fleet.replicas=3",
            "placement=dedicated",
            "placement.second_model=llama2_7b",
            "step_time=constant",
        ],
        # most requests never fit: rejected, with their reason
        [*RANDOM, "workload.prompt_tokens={dist:uniform,low:1,high:6000}", "kv.num_blocks=200"],
    ],
    ids=["sarathi", "frontend_horizon", "preemptions", "colocated", "dedicated", "rejected"],
)
def test_written_runs_keep_the_contract(tmp_path, overrides):
    out = write_run(simulate(compose(*overrides)), tmp_path / "run")
    assert run_problems(out) == []


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return write_run(simulate(compose(*RANDOM, *TINY_KV)), tmp_path_factory.mktemp("good"))


def _doctor(good_run, tmp_path, file, change):
    """A copy of ``good_run`` whose ``file`` table (or summary) went through ``change``."""
    out = shutil.copytree(good_run, tmp_path / "bad")
    if file == "summary.json":
        summary = json.loads((out / file).read_text())
        change(summary)
        (out / file).write_text(json.dumps(summary))
    else:
        table = pq.read_table(out / file)
        pq.write_table(change(table), out / file)
    return out


def _set(table, name, values):
    index = table.column_names.index(name)
    return table.set_column(index, name, pa.array(values, table.schema.field(name).type))


@pytest.mark.parametrize(
    "file, change, problem",
    [
        ("requests.parquet", lambda t: t.slice(1), "request ids are not 0..n-1"),
        (
            "requests.parquet",
            lambda t: _set(t, "status", ["done"] + t["status"].to_pylist()[1:]),
            "unknown status",
        ),
        (
            "requests.parquet",
            lambda t: _set(t, "ttft_s", [x + 1 for x in t["ttft_s"].to_pylist()]),
            "ttft_s !=",
        ),
        (
            "steps.parquet",
            lambda t: _set(t, "kv_blocks_used", [41] * t.num_rows),
            "KV blocks in use above the pool",
        ),
        ("steps.parquet", lambda t: _set(t, "start_time_s", [0.0] * t.num_rows), "steps overlap"),
        ("steps.parquet", lambda t: t.slice(0, t.num_rows // 2), "fewer decode tokens"),
        ("summary.json", lambda s: s.update(completed=s["completed"] - 1), "summary completed="),
    ],
    ids=[
        "request_lost",
        "unknown_status",
        "ttft",
        "kv_over_capacity",
        "overlap",
        "steps_lost",
        "summary_count",
    ],
)
def test_the_contract_check_catches_a_broken_run(good_run, tmp_path, file, change, problem):
    assert run_problems(good_run) == []
    problems = run_problems(_doctor(good_run, tmp_path, file, change))
    assert any(problem in p for p in problems), problems


def test_the_contract_check_catches_a_missing_file_and_a_temporary_one(good_run, tmp_path):
    out = shutil.copytree(good_run, tmp_path / "bad")
    (out / ".steps.parquet.ab12.partial").write_bytes(b"half")
    assert any("temporary files" in p for p in run_problems(out))
    (out / "summary.json").unlink()
    assert run_problems(out) == ["missing summary.json"]


def test_a_failed_run_leaves_no_temporaries_and_no_summary(tmp_path, monkeypatch):
    out = tmp_path / "run"
    simulate(compose(*RANDOM), out)  # an earlier run's files

    def fail_midway(self):
        self.env.run(until=1.0)
        raise RuntimeError("the machine went away")

    monkeypatch.setattr("sim.fleet.cluster.Cluster.run", fail_midway)
    with pytest.raises(RuntimeError):
        simulate(compose(*RANDOM), out)
    # the earlier run was removed as this one began, and this one committed nothing: no
    # file of one run is left beside another's (sim.output.run_files)
    assert sorted(p.name for p in out.iterdir()) == []


def test_no_temporary_is_left_once_the_summary_marks_the_run_finished(tmp_path, monkeypatch):
    # A kill right after summary.json is written must not leave a temporary (the step spill)
    # behind: a resumed sweep skips the folder as done and would never clean it.
    from sim.output.run_files import LOCK_FILE, SUMMARY_FILE, RunFolder

    monkeypatch.setattr("sim.output.step_log.SPILL_BYTES", 1)  # spill every piece to disk
    seen: list[list[str]] = []
    write = RunFolder.write

    def spy(self, name, text):
        if name == SUMMARY_FILE:
            seen.append(sorted(p.name for p in self.path.iterdir() if p.name.startswith(".")))
        write(self, name, text)

    monkeypatch.setattr(RunFolder, "write", spy)
    simulate(compose(*RANDOM), tmp_path / "run")
    # only the folder's lock, held until the summary is in place (a dead run's lock is no
    # obstacle: it goes with its process, sim.output.run_files)
    assert seen == [[LOCK_FILE]]
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_a_killed_run_leaves_no_summary_and_the_next_run_no_temporaries(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", *LONG, f"output_dir={out}"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob(".*.partial")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # midway through the run, its tables streaming
    finally:
        proc.kill()
        proc.wait()
    assert list(out.glob(".*.partial")), "the run was killed before it began writing"
    assert not (out / "summary.json").exists()
    finished = subprocess.run(
        [sys.executable, "-m", "sim", *RANDOM, f"output_dir={out}"], cwd=tmp_path, check=True
    )
    assert finished.returncode == 0
    assert not list(out.glob(".*.partial"))
    assert run_problems(out) == []
