"""The command line: ``python -m sim`` writes a run, refuses bad input in one line, plans memory.

Each case is a real subprocess (about a second each), so the cases are few.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from sim.cli import _absolute_folder
from sim.errors import ConfigError
from tests.support import fleetcast

FILES = ["requests.parquet", "steps.parquet", "summary.json", "config.yaml"]


def test_default_run_writes_the_four_files_and_prints_a_summary(tmp_path):
    out = tmp_path / "run"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = fleetcast(f"output_dir={out}", cwd=cwd)  # the default config: finishes in seconds
    assert proc.returncode == 0, proc.stderr
    # the run's files, plus the record Hydra would keep (.hydra/) in the same folder, and
    # nothing in the current directory (no outputs/DATE/TIME beside it)
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, ".hydra"])
    record = out / ".hydra"
    assert sorted(p.name for p in record.iterdir()) == [
        "config.yaml",
        "hydra.yaml",
        "overrides.yaml",
    ]
    assert yaml.safe_load((record / "overrides.yaml").read_text()) == [f"output_dir={out}"]
    choices = yaml.safe_load((record / "hydra.yaml").read_text())["hydra"]["runtime"]["choices"]
    assert choices["scheduler"] == "vllm" and choices["hardware"] == "h100_sxm"
    assert list(cwd.iterdir()) == []
    assert "TTFT" in proc.stdout and str(out) in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] > 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["output_dir"] == str(out)
    assert config["scheduler"]["_target_"].endswith("VLLMScheduler")


@pytest.fixture(scope="module")
def csv_without_output_tokens(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "no_output.csv"
    path.write_text("arrival_time_s,prompt_tokens\n0.0,10\n1.0,20\n")
    return path


TINY = [
    "fleet.replicas=1",
    "workload=poisson",
    "workload.num_requests=20",
    "workload.prompt_tokens=64",
    "workload.output_tokens=16",
]


@pytest.mark.parametrize(
    "overrides, field, value",
    [
        (["workload=poisson", "workload.qps=-1"], "workload.qps", "-1"),
        ([*TINY, "kv.num_blocks=0"], "kv.num_blocks", "0"),
        (["hardware=nope"], "hardware", "nope"),
        (["workload=trace", "workload.path={csv}"], "workload.path", "output_tokens"),
        ([*TINY, "scheduler.max_num_seqs=0"], "scheduler.max_num_seqs", "0"),
        ([*TINY, "+scheduler.bogus=1"], "scheduler.bogus", "1"),
        ([*TINY, "scheduler.bogus=1"], "scheduler.bogus", "1"),
    ],
    ids=[
        "negative_qps",
        "zero_blocks",
        "unknown_gpu",
        "trace_missing_column",
        "zero_seqs",
        "unknown_option_plus",
        "unknown_option",
    ],
)
def test_bad_input_fails_in_one_line_and_leaves_no_summary(
    tmp_path, csv_without_output_tokens, overrides, field, value
):
    out = tmp_path / "run"
    args = [o.format(csv=csv_without_output_tokens) for o in overrides]
    proc = fleetcast(*args, f"output_dir={out}", cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert field in lines[0] and value in lines[0]
    assert not (out / "summary.json").exists()


def test_memory_prints_the_plan(tmp_path):
    proc = fleetcast("memory", "model=llama31_8b", "hardware=h100_sxm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Llama-3.1-8B on H100-SXM" in proc.stdout
    assert "28,019" in proc.stdout  # KV blocks of 16 tokens (see test_memory.py)
    assert "128.0 KiB" in proc.stdout


def test_memory_refuses_a_model_that_does_not_fit(tmp_path):
    proc = fleetcast("memory", "model=llama31_70b", "hardware=h100_sxm", cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: hardware=")
    assert "fleet.tp" in lines[0]
    assert proc.stdout == ""


def test_multirun_gives_each_job_its_own_folder_under_output_dir(tmp_path):
    out = tmp_path / "sweep"
    proc = fleetcast(
        "-m", "fleet.replicas=1,2", f"output_dir={out}", "workload.duration_s=10", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    summaries = [json.loads((out / str(job) / "summary.json").read_text()) for job in (0, 1)]
    assert [s["num_gpus"] for s in summaries] == [1, 2]
    assert not (out / "summary.json").exists()


def test_a_sweep_folder_from_an_environment_variable_is_where_it_says(tmp_path):
    elsewhere, sweeps = tmp_path / "cwd", tmp_path / "sweeps"
    elsewhere.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "-m",
            "fleet.replicas=1,2",
            "output_dir=${oc.env:FLEETCAST_TEST_SWEEPS}/s",
            "workload.duration_s=10",
        ],
        cwd=elsewhere,
        env={**os.environ, "FLEETCAST_TEST_SWEEPS": str(sweeps)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert all((sweeps / "s" / str(job) / "summary.json").is_file() for job in (0, 1))
    assert list(elsewhere.iterdir()) == []  # not under the caller's folder


def test_output_dir_interpolations_are_resolved_where_they_need_no_config(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCAST_TEST_SWEEPS", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert _absolute_folder("${oc.env:FLEETCAST_TEST_SWEEPS}/s") == f"{tmp_path}/s"
    assert _absolute_folder("s") == f"{tmp_path}/s"
    assert _absolute_folder("runs/${seed}") == "runs/${seed}"  # the config's: Hydra resolves it
    with pytest.raises(ConfigError, match=r"^output_dir='\$\{oc.env:FLEETCAST_UNSET_FOR_TESTS\}'"):
        _absolute_folder("${oc.env:FLEETCAST_UNSET_FOR_TESTS}")


@pytest.mark.parametrize("missing", ["scipy", "pandas"])
def test_calibrate_without_its_extra_says_what_to_install(tmp_path, missing):
    # a core install: the calibrate extra's packages cannot be imported
    code = (
        f"import sys; sys.modules[{missing!r}] = None; from sim.cli import main; "
        "main(['calibrate', '--kernels', 'shipped:calibration', '--c0', '0.001', "
        "'--out', 'p.json'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: fleetcast calibrate needs {missing}: pip install 'fleetcast[calibrate]'"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_collector_is_paused_while_a_run_starts_and_given_back_as_it_was(tmp_path, monkeypatch):
    import gc

    import sim.run
    from sim.cli import STARTUP, main

    seen = []
    real_simulate = sim.run.simulate

    def simulate(*args, **kwargs):
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        return real_simulate(*args, **kwargs)

    monkeypatch.setattr(sim.run, "simulate", simulate)
    run = ["workload.num_requests=5", "sim.progress=false", f"output_dir={tmp_path / 'run'}"]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    # as the command (its own argv): start-up frozen during the run, unfrozen after
    monkeypatch.setattr(sys, "argv", ["fleetcast", *run])
    main()
    assert seen[-1][0] and seen[-1][1] > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    # called in-process with an argv: paused, never frozen (its garbage stays collectable)
    main(run)
    assert seen[-1] == (True, 0)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with pytest.raises(SystemExit):  # a refused run gives it back too
        main(["fleet.replicas=0", f"output_dir={tmp_path / 'bad'}"])
    assert gc.isenabled() and gc.get_freeze_count() == 0 and not STARTUP.paused

    gc.disable()  # a caller that runs without the collector keeps it off
    try:
        STARTUP.begin(freeze=True)
        STARTUP.begin()  # twice: still gives back what the first found
        STARTUP.end()
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        STARTUP.release()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
    gc.freeze()  # a process that froze objects of its own keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        STARTUP.begin(freeze=True)
        STARTUP.end()
        STARTUP.release()
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()
