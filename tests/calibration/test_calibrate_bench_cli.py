"""``fleetcast calibrate --bench``, the command: it fits, writes a profile a run then uses, and
prints the terms and the error; a bad argument ends with exit 2 and one ``error:`` line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.calibration.calibrate import main as calibrate_main
from sim.engine.step_time.bench_profile import BenchProfile
from tests.calibration.test_bench_fit import write_vllm
from tests.harness.samples import VLLM_70B
from tests.support import fleetcast

DEPLOY = ["model=llama31_8b", "hardware=h100_sxm"]
TERM_NAMES = (
    "compute_efficiency",
    "bandwidth_efficiency",
    "step_overhead_s",
    "token_overhead_s",
    "request_overhead_s",
)


def _bench_file(path, rate=4.0, n=24):
    """A small vLLM bench serve result (``n`` requests of a few lengths; made-up figures)."""
    ins = [(37 * i) % 400 + 20 for i in range(n)]
    outs = [(53 * i) % 60 + 5 for i in range(n)]
    return write_vllm(path, rate, ins, outs, ttft_s=0.045, tpot_s=0.0105)


def test_calibrate_bench_writes_a_profile_that_a_run_uses(tmp_path):
    a, b = _bench_file(tmp_path / "a.json"), _bench_file(tmp_path / "b.json", rate=8.0)
    out = tmp_path / "fit" / "profile.json"
    proc = fleetcast(
        "calibrate",
        *DEPLOY,
        "--bench",
        str(a),
        "--bench",
        str(b),
        "--out",
        str(out),
        "--max-evals",
        "3",
        "--jobs",
        "1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"profile: {out}   (use it with step_time.profile={out})"
    assert lines[1].startswith("  fitted on 1 runs, 1 held out, 3 simulations of the fitted runs")
    assert "TP scaling kept at its default" in lines[1]
    assert lines[2].split() == ["term", "default", "fitted"]
    for name in TERM_NAMES:
        assert any(line.split()[:1] == [name] for line in lines), name
    assert any(line.strip().startswith("fitted runs, TTFT") for line in lines)
    assert any(line.strip().startswith("held-out runs, TTFT") for line in lines)
    assert any(line.strip().startswith("held-out runs, TPOT") for line in lines)
    assert lines[-2].startswith("    a.json [0] TTFT 45 / ")  # measured first, in ms
    assert lines[-1].startswith("  * b.json [0] TTFT 45 / ")  # * held out
    profile = BenchProfile.load(out)
    assert [r["held_out"] for r in profile.runs] == [False, True]
    assert profile.provenance["evaluations"] == 3
    assert profile.provenance["command"].startswith("fleetcast calibrate ")
    assert set(profile.error) == {"fit", "held_out"}

    run = [
        f"step_time.profile={out}",
        *DEPLOY,
        "fleet.replicas=1",
        "workload=poisson",
        "workload.num_requests=20",
        "workload.qps=5",
        "workload.prompt_tokens=200",
        "workload.output_tokens=20",
        "sim.progress=false",
    ]
    used = fleetcast(*run, f"output_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert used.returncode == 0, used.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["completed"] == 20
    # the profile is read: on another GPU it is refused, in one line
    refused = fleetcast(*run, "hardware=h200", f"output_dir={tmp_path / 'h200'}", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert refused.stderr.startswith(f"error: step_time.profile='{out}': fitted for ")


def test_one_run_says_there_is_nothing_held_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _bench_file(tmp_path / "a.json")
    # overrides after the file apply to its runs
    argv = ["--bench", "a.json", *DEPLOY, "--out", "p.json", "--max-evals", "2", "--jobs", "1"]
    assert calibrate_main(argv) == 0
    out = capsys.readouterr().out
    assert "  held-out runs: none (give more runs for a held-out figure)" in out
    assert "fitted on 1 runs, 0 held out, 2 simulations" in out
    profile = BenchProfile.load(tmp_path / "p.json")
    assert profile.runs[0]["overrides"] == ["scheduler=vllm", *DEPLOY]
    assert "held_out" not in profile.error


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-evals", "0"], "error: calibrate.max_evals=0: must be >= 1"),
        (["--holdout-every", "-1"], "error: calibrate.holdout_every=-1: must be >= 0"),
        (["--jobs", "0"], "error: calibrate.jobs=0: must be >= 1"),
        (["--out", "exists.json"], "error: calibrate.out='exists.json': exists; use --force"),
        (["--bench", str(VLLM_70B) + ".missing"], "error: bench_file='"),
        (["--bench", "notbench.json"], "not a known benchmark result"),
        (["step_time=calibrated"], "leave step_time at roofline"),
        (["step_time.profile=p.json"], "error: step_time.profile='p.json': calibrate --bench"),
        (["--bench", "a.json", "--holdout-every", "1"], "error: calibrate.holdout_every=1"),
        # measured figures no benchmark measures: refused before any simulation, by their key
        (["--bench", "negative.json"], "mean_ttft_ms=-45.0 is not a measured time"),
        (["--bench", "zero.json"], "median_ttft_ms=0.0 is not a measured time"),
        (["--bench", "infinite.json"], "mean_tpot_ms=inf is not a measured time"),
        (["--bench", "years.json"], "mean_ttft_ms=30000000000000.0 is 8.333e+06 hours"),
        (["--bench", "negative.json"], "(--bench negative.json)"),
    ],
    ids=[
        "max_evals",
        "holdout",
        "jobs",
        "out_exists",
        "missing_file",
        "not_a_benchmark",
        "step_time",
        "profile",
        "holdout_every_1",
        "negative_ttft",
        "zero_ttft",
        "infinite_tpot",
        "years_ttft",
        "names_the_file",
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    _bench_file(tmp_path / "a.json")
    (tmp_path / "exists.json").write_text("{}")
    (tmp_path / "notbench.json").write_text('{"hello": "world"}')
    good = json.loads((tmp_path / "a.json").read_text())
    for name, changes in (
        ("negative", {"mean_ttft_ms": -45.0}),
        ("zero", {"median_ttft_ms": 0.0}),
        ("infinite", {"mean_tpot_ms": float("inf")}),
        ("years", {"mean_ttft_ms": 3e13}),  # a year is 3.2e10 ms
    ):
        (tmp_path / f"{name}.json").write_text(json.dumps({**good, **changes}))
    base = ["--bench", "a.json", *DEPLOY, "--out", "out.json", "--jobs", "1"]
    evals = [] if "--max-evals" in args else ["--max-evals", "1"]
    code = calibrate_main([*base, *args, *evals])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().count("\n") == 0, err
    assert err.startswith("error: ")
    assert message in err
    assert not (tmp_path / "out.json").exists()


def test_the_command_exits_2_with_one_line(tmp_path):
    _bench_file(tmp_path / "a.json")
    proc = fleetcast("calibrate", "--bench", "a.json", "--max-evals", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: calibrate.max_evals=0: must be >= 1\n"
    proc = fleetcast("calibrate", "--steps", "steps.csv", "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: --jobs goes with --bench\n"


def test_bench_flags_need_bench(capsys):
    for flag in ("--jobs", "--max-evals", "--holdout-every"):
        assert calibrate_main(["--steps", "steps.csv", flag, "2"]) == 2
        assert capsys.readouterr().err == f"error: {flag} goes with --bench\n"


def test_files_in_one_bench_group_share_its_overrides(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _bench_file(tmp_path / "a.json")
    _bench_file(tmp_path / "b.json", rate=6.0)
    _bench_file(tmp_path / "c.json", rate=9.0)
    argv = ["--bench", "a.json", "b.json", "fleet.tp=2", *DEPLOY, "--bench", "c.json", *DEPLOY]
    code = calibrate_main([*argv, "--out", "p.json", "--max-evals", "1", "--jobs", "1"])
    assert code == 0, capsys.readouterr().err
    runs = BenchProfile.load(tmp_path / "p.json").runs
    assert [r["file"] for r in runs] == ["a.json", "b.json", "c.json"]
    assert runs[0]["overrides"] == runs[1]["overrides"] == ["scheduler=vllm", "fleet.tp=2", *DEPLOY]
    assert runs[2]["overrides"] == ["scheduler=vllm", *DEPLOY]
    assert [r["held_out"] for r in runs] == [False, False, True]


def test_a_bench_group_without_a_file_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--bench", "fleet.tp=2", "--out", "p.json", "--max-evals", "1", "--jobs", "1"]
    assert calibrate_main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_bench_group_without_model_or_hardware_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _bench_file(tmp_path / "a.json")
    argv = ["--bench", "a.json", "hardware=h100_sxm", "--out", "p.json", "--jobs", "1"]
    assert calibrate_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model=None: say what ran the benchmark") and "a.json" in err
    assert not (tmp_path / "p.json").exists()


def test_terms_left_at_a_bound_are_printed_with_what_they_suggest(tmp_path, capsys):
    # TTFT 1 ms for prompts of 50-800 tokens at 4 req/s: faster than peak compute, so the fit
    # caps a compute efficiency at 1 and says what that suggests; the profile records it
    rng = np.random.default_rng(0)
    ins, outs = rng.integers(50, 800, 40).tolist(), rng.integers(20, 300, 40).tolist()
    path = write_vllm(tmp_path / "fast.json", 4.0, ins, outs, ttft_s=0.001, tpot_s=0.006)
    out = tmp_path / "p.json"
    args = [*DEPLOY, "--bench", str(path), "--out", str(out), "--max-evals", "30", "--jobs", "1"]
    assert calibrate_main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(
        "  at a bound of its range (the fitted form is absorbing a mismatch of the load "
        "model or the deployment; check those before trusting the profile):"
    )
    pinned = BenchProfile.load(out).provenance["at_bounds"]
    compute = next(entry for entry in pinned if entry["term"] == "compute_scale")
    assert compute["bound"] == "upper" and 1.0 in compute["terms"].values()
    shown = [line for line in lines[start + 1 :] if line.startswith("    compute_scale ")]
    assert len(shown) == 1
    assert shown[0].startswith("    compute_scale at its upper bound (")
    assert shown[0].endswith(compute["meaning"])
    assert lines[start + 1 + len(pinned)].split()[:2] == ["error", "(MAPE)"]
