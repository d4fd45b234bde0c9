"""The command line: ``python -m sim`` writes a run, refuses bad input in one line, plans memory.

Each case is a real subprocess (about a second each), so the cases are few.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from sim.cli import BROKEN_PIPE_STATUS, COMMANDS, main
from sim.cli.folders import absolute_folder
from sim.cli.help import check_command, plain_text
from sim.errors import ConfigError
from sim.plan import INTERRUPTED_STATUS, STOPPED_BEFORE_RUNS
from tests.support import NO_WHATIFS, fleetcast

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


def test_memory_cfg_job_prints_a_runs_composed_config_and_other_flags_are_one_line(tmp_path):
    proc = fleetcast("memory", "--cfg", "job", "fleet.tp=2", "model=llama31_70b", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    run = fleetcast("--cfg", "job", "fleet.tp=2", "model=llama31_70b", cwd=tmp_path)
    assert proc.stdout == run.stdout  # as a run prints it
    config = yaml.safe_load(proc.stdout)
    assert config["fleet"]["tp"] == 2 and config["model"]["name"] == "meta-llama/Llama-3.1-70B"
    assert list(tmp_path.iterdir()) == []  # nothing planned, nothing written
    proc = fleetcast("memory", "-m", "fleet.tp=1,2", cwd=tmp_path)  # a sweep: no memory plan
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "error: flags='-m': fleetcast memory takes overrides, and --cfg job to print their config\n"
    )


# every command, and the subcommand of one, each asked for its help both ways
HELP_ASKED = [
    [],
    *([c] for c in COMMANDS),
    ["model", "import"],
]


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", HELP_ASKED, ids=lambda c: " ".join(c) or "fleetcast")
def test_every_command_prints_its_help_as_plain_text(command, flag, capsys):
    main([*command, flag])  # returns: exit status 0
    printed = capsys.readouterr()
    assert printed.err == ""
    text = printed.out
    assert text.strip()
    assert "``" not in text and ":mod:`" not in text  # no reStructuredText markup
    assert "Traceback" not in text
    if command and command[0] != "plan":  # (plan's help is its module's text)
        assert text.startswith(f"usage: fleetcast {' '.join(command).removeprefix('run')}".strip())


def test_help_names_the_command_asked_about(capsys):
    main(["help", "plan"])
    assert capsys.readouterr().out.startswith("fleetcast plan: for each candidate deployment")
    main(["run", "--help"])  # a run's overrides, its flags and every config group's options
    text = capsys.readouterr().out
    assert "GROUP=OPTION" in text and "--cfg job" in text
    assert "  scheduler: prefill_first, sarathi, sglang, static, trtllm, vllm" in text
    main(["workload=poisson", "-h"])  # a run's help, wherever the flag is
    assert capsys.readouterr().out == text


@pytest.mark.parametrize(
    "word, says",
    [
        ("reprot", "unknown command; did you mean report? (fleetcast --help lists the commands)"),
        ("nosuch", "unknown command (fleetcast --help lists the commands)"),
    ],
)
def test_help_on_an_unknown_command_is_refused_as_the_command_is(word, says, capsys):
    with pytest.raises(SystemExit) as end:
        main(["help", word])
    assert end.value.code == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == f"error: command={word!r}: {says}\n"


def test_memory_help_is_not_a_hydra_traceback(tmp_path):
    proc = fleetcast("memory", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("usage: fleetcast memory [OVERRIDE ...]")


def test_plain_text_takes_out_inline_markup():
    assert plain_text("``fleetcast plan`` (:mod:`sim.plan`, ``a`` and `b`)") == (
        "fleetcast plan (sim.plan, a and b)"
    )
    assert plain_text("no markup: x=1, [a|b]") == "no markup: x=1, [a|b]"


@pytest.mark.parametrize(
    "word, nearest",
    [("reprot", "report"), ("memroy", "memory"), ("plna", "plan"), ("Colect", "collect")],
)
def test_a_misspelled_command_is_named_with_the_nearest_one(word, nearest):
    with pytest.raises(ConfigError) as err:
        check_command(word)
    assert err.value.field == "command" and err.value.value == word
    assert f"unknown command; did you mean {nearest}?" in err.value.reason


@pytest.mark.parametrize(
    "first",
    [
        None,
        "report",
        "help",
        "workload.qps=2",  # overrides: key=value, +key, ~key, group@package
        "+seed=1",
        "~output_dir",
        "model@placement=hf",
        "-m",  # flags
        "--cfg",
        "placement",  # a config group without its option: close to plan, but an override
        "foo",  # a word close to no command: left to the override checks
    ],
)
def test_overrides_flags_and_far_words_are_not_taken_for_commands(first):
    check_command(first)  # no error


def test_a_misspelled_command_fails_in_one_line_and_real_overrides_still_run(tmp_path):
    proc = fleetcast("reprot", "x", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: command='reprot': unknown command; did you mean report? "
        "(fleetcast --help lists the commands)\n"
    )
    # a flag with a value (--cfg job) beside overrides: the composed config, nothing run
    proc = fleetcast("--cfg", "job", "fleet.replicas=3", "scheduler=sglang", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    assert config["fleet"]["replicas"] == 3
    assert config["scheduler"]["_target_"].endswith("SGLangScheduler")
    assert list(tmp_path.iterdir()) == []
    proc = fleetcast("-m", "--cfg", "job", "fleet.replicas=1,2", cwd=tmp_path)  # two modes
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: flags='--multirun --cfg': ")


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
    assert absolute_folder("${oc.env:FLEETCAST_TEST_SWEEPS}/s") == f"{tmp_path}/s"
    assert absolute_folder("s") == f"{tmp_path}/s"
    assert absolute_folder("runs/${seed}") == "runs/${seed}"  # the config's: Hydra resolves it
    with pytest.raises(ConfigError, match=r"^output_dir='\$\{oc.env:FLEETCAST_UNSET_FOR_TESTS\}'"):
        absolute_folder("${oc.env:FLEETCAST_UNSET_FOR_TESTS}")


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


@pytest.mark.parametrize(
    "args",
    [["--help"], ["help", "plan"], ["--cfg", "job"], ["memory"], ["memory", "--cfg", "job"]],
    ids=" ".join,
)
def test_a_reader_closing_the_output_early_ends_the_command_quietly(args, tmp_path):
    # `fleetcast ... | head`: the reader closes the pipe before the command writes (under
    # Hydra's runner too, which would print the BrokenPipeError as a traceback)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == BROKEN_PIPE_STATUS == 141
    assert err == b""


PLAN = [
    "workload=poisson",
    "workload.num_requests=20",
    "plan.max_replicas=2",
    "plan.jobs=1",
    *NO_WHATIFS,
]


def test_ctrl_c_while_hydra_starts_a_plan_is_one_line_exit_130(tmp_path, monkeypatch, capsys):
    def interrupted_start(argv):
        raise KeyboardInterrupt  # Ctrl-C while Hydra composes, before the sweeper runs

    monkeypatch.setattr("sim.cli.run_hydra", interrupted_start)
    folder = tmp_path / "plan"
    with pytest.raises(SystemExit) as end:
        main(["plan", *PLAN, f"plan.output_dir={folder}"])
    assert end.value.code == INTERRUPTED_STATUS == 130
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err == (
        f"interrupted: the plan in {folder} stopped; its finished simulations are kept, and "
        f"the same command (plan.output_dir={folder}) resumes from them\n"
    )


def test_ctrl_c_before_a_plan_is_checked_is_one_line_exit_130(monkeypatch, capsys):
    def interrupted_plan(argv, run_hydra):
        raise KeyboardInterrupt  # Ctrl-C while the plan's modules import

    monkeypatch.setattr("sim.plan.planner.main", interrupted_plan)
    with pytest.raises(SystemExit) as end:
        main(["plan", *PLAN])
    assert end.value.code == INTERRUPTED_STATUS
    assert capsys.readouterr().err == f"{STOPPED_BEFORE_RUNS}\n"
