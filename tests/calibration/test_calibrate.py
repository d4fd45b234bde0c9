"""``fleetcast calibrate``: NNLS fits of the per-step CSV, the kernel-table profile, the command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.calibration.calibrate import main as calibrate_main
from sim.calibration.kernels import calibrate_kernels
from sim.calibration.step_fit import calibrate_steps, fit_steps, read_steps
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.errors import ConfigError
from sim.resources import data_dir
from tests.calibration.synthetic import KNOWN, synthetic_steps
from tests.support import compose


def test_fitting_recovers_the_coefficients_that_made_the_data(tmp_path):
    profile = calibrate_steps(
        synthetic_steps(tmp_path / "s.csv"),
        model="m",
        hardware="g",
        weights="bf16",
        kv="bf16",
        backend="vllm",
    )
    for name, value in KNOWN.items():
        assert profile.coefficients[name] == pytest.approx(value, rel=1e-6), name
    assert profile.holdout_error["step_time"]["mape"] < 1e-9
    assert profile.holdout_error["step_time"]["rows"] == 80  # every fifth row held out


def test_a_mixture_of_experts_fit_recovers_the_read_of_the_experts_its_tokens_touch(tmp_path):
    mixtral = ModelSpec.from_config(compose("model=mixtral_8x7b")["model"])
    assert (mixtral.num_experts, mixtral.experts_per_token) == (8, 2)
    path = synthetic_steps(tmp_path / "s.csv", experts=(8, 2, 3e-3))
    profile = calibrate_steps(
        path, model=mixtral, hardware="g", weights="bf16", kv="bf16", backend="vllm"
    )
    assert profile.model == mixtral.name
    assert profile.coefficients["c_expert_weights"] == pytest.approx(3e-3, rel=1e-6)
    for name, value in KNOWN.items():
        assert profile.coefficients[name] == pytest.approx(value, rel=1e-6), name
    assert profile.holdout_error["step_time"]["mape"] < 1e-9
    # a dense model's fit has no such term: the same steps leave a misfit instead
    dense = calibrate_steps(
        path, model="m", hardware="g", weights="bf16", kv="bf16", backend="vllm"
    )
    assert "c_expert_weights" not in dense.coefficients
    assert dense.holdout_error["step_time"]["mape"] > 0.01


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_mixture_of_experts_fit_with_noise_stays_close(tmp_path, seed):
    mixtral = ModelSpec.from_config(compose("model=mixtral_8x7b")["model"])
    path = synthetic_steps(tmp_path / "s.csv", n=2000, noise=0.02, seed=seed, experts=(8, 2, 3e-3))
    profile = calibrate_steps(
        path, model=mixtral, hardware="g", weights="bf16", kv="bf16", backend="vllm"
    )
    assert profile.coefficients["c_expert_weights"] == pytest.approx(3e-3, rel=0.05)
    assert profile.modelled == []


def test_without_small_steps_the_experts_term_is_not_fitted_and_the_profile_says_so(tmp_path):
    # every step touches at least 90% of Mixtral's experts: the share is one more constant
    mixtral = ModelSpec.from_config(compose("model=mixtral_8x7b")["model"])
    path = synthetic_steps(tmp_path / "s.csv", experts=(8, 2, 3e-3))
    rows = path.read_text().splitlines()
    kept = [rows[0]] + [r for r in rows[1:] if sum(map(int, r.split(",")[:2])) >= 8]
    path.write_text("\n".join(kept) + "\n")
    profile = calibrate_steps(
        path, model=mixtral, hardware="g", weights="bf16", kv="bf16", backend="vllm"
    )
    assert "c_expert_weights" not in profile.coefficients
    needed = -(-5 * (len(kept) - 1) // 100)  # 5% of the rows, rounded up (more than 10)
    assert needed > 10
    assert profile.modelled == [
        f"c_expert_weights not fitted: fewer than {needed} steps touch under 90% of the experts "
        "(give small decode batches); every step is priced as reading all of them"
    ]


def test_fitting_with_noise_stays_close_and_reports_its_held_out_error(tmp_path):
    profile = calibrate_steps(
        synthetic_steps(tmp_path / "s.csv", n=2000, noise=0.02),
        model="m",
        hardware="g",
        weights="bf16",
        kv="bf16",
        backend="vllm",
    )
    for name in ("c0", "c_token", "c_decode_attn"):
        assert profile.coefficients[name] == pytest.approx(KNOWN[name], rel=0.1), name
    assert 0.005 < profile.holdout_error["step_time"]["mape"] < 0.03  # the 2% noise


def test_kernel_calibration_rebuilds_the_shipped_profile(tmp_path):
    cfg = compose()
    profile = calibrate_kernels(
        data_dir() / "calibration",
        model=ModelSpec.from_config(cfg["model"]),
        gpu=GPU.from_config(cfg["hardware"]),
        weights="bf16",
        kv="bf16",
        backend="trtllm",
        c0=0.001,
        allreduce_latency_s=1e-5,
        tp_compute_exponent=0.7,
    )
    shipped = Profile.load(shipped_profile_dir() / profile.file_name())
    assert profile.coefficients == shipped.coefficients
    assert profile.gemm_s == shipped.gemm_s
    # decode at batch 1 is weight-bound: the GEMM curve is flat there and ~ 16 GB / 3 TB/s
    assert profile.gemm_s[0] == pytest.approx(profile.gemm_s[1], rel=0.05)
    assert 0.004 < profile.gemm_s[0] < 0.007
    with pytest.raises(ConfigError, match="^model='meta-llama/Llama-2-7b-hf'"):
        calibrate_kernels(
            data_dir() / "calibration",
            model=ModelSpec.from_config(compose("model=llama2_7b")["model"]),
            gpu=GPU.from_config(cfg["hardware"]),
            weights="bf16",
            kv="bf16",
            backend="trtllm",
            c0=0.0,
        )


def test_calibrate_command_fits_a_csv_and_refuses_a_bad_one(tmp_path):
    steps = synthetic_steps(tmp_path / "s.csv")
    out = tmp_path / "p.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim",
            "calibrate",
            "--steps",
            str(steps),
            "--out",
            str(out),
            "hardware=h200",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "held-out error" in proc.stdout
    assert Profile.load(out).hardware == "H200"
    bad = tmp_path / "bad.csv"
    bad.write_text("num_prefill_tokens,step_time_s\n1,0.1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "calibrate", "--steps", str(bad)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "missing column(s) num_decode_seqs, prefill_attn, decode_context" in proc.stderr


def test_fit_steps_keeps_every_coefficient_non_negative(tmp_path):
    rng = np.random.default_rng(3)
    n = 100
    cols = {
        "num_prefill_tokens": rng.integers(0, 100, n).astype(float),
        "num_decode_seqs": rng.integers(1, 50, n).astype(float),
        "prefill_attn": rng.integers(0, 10000, n).astype(float),
        "decode_context": rng.integers(100, 5000, n).astype(float),
    }
    cols["step_time_s"] = 0.01 - 1e-6 * cols["decode_context"] + 1e-4 * cols["num_decode_seqs"]
    coefficients, _ = fit_steps(cols)
    assert all(v >= 0 for v in coefficients.values())


def _calibrate(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "sim", "calibrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


KERNELS = [
    "--kernels",
    "shipped:calibration",
    "model=llama31_8b",
    "hardware=h200",
    "--backend",
    "trtllm",
    "--allreduce-latency",
    "1e-5",
    "--tp-exponent",
    "0.7",
]


def test_calibrate_never_overwrites_a_shipped_profile(tmp_path):
    """Without --out the profile goes to the current directory; a file already there, or a
    shipped profile, is never replaced unless asked (--force), and a shipped one never."""
    name = "meta_llama_llama_3_1_8b_h200_wbf16_kvbf16_trtllm.json"
    shipped = shipped_profile_dir() / name
    before = shipped.read_bytes()
    proc = _calibrate(*KERNELS, "--c0", "0.001", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"profile: {tmp_path / name}   (use it with step_time=calibrated "
        f"step_time.profile={tmp_path / name})\n"
    )
    written = Profile.load(tmp_path / name)
    assert written.coefficients == Profile.load(shipped).coefficients
    again = _calibrate(*KERNELS, "--c0", "0.002", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip().endswith("exists; use --force to replace it")
    assert Profile.load(tmp_path / name).coefficients["c0"] == 0.001
    forced = _calibrate(*KERNELS, "--c0", "0.002", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert Profile.load(tmp_path / name).coefficients["c0"] == 0.002
    into_shipped = _calibrate(*KERNELS, "--c0", "0", "--force", "--out", str(shipped), cwd=tmp_path)
    assert into_shipped.returncode == 2
    assert "is a profile Fleetcast ships" in into_shipped.stderr
    assert shipped.read_bytes() == before


def test_kernel_calibration_needs_the_step_overhead(tmp_path):
    proc = _calibrate(*KERNELS, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: calibrate.c0=None: required")
    assert list(tmp_path.iterdir()) == []


def test_without_an_allreduce_latency_the_profile_leaves_it_to_the_catalog(tmp_path):
    args = [a for a in KERNELS if a not in ("--allreduce-latency", "1e-5")]
    proc = _calibrate(*args, "--c0", "0.001", "--out", str(tmp_path / "p.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    profile = Profile.load(tmp_path / "p.json")
    assert profile.coefficients["c_allreduce_latency"] is None
    assert profile.schema_version == 2


def test_calibrate_steps_of_a_mixture_of_experts_gives_a_profile_a_run_uses(tmp_path):
    steps = synthetic_steps(tmp_path / "moe.csv", experts=(8, 2, 3e-3))
    out = tmp_path / "moe.json"
    proc = _calibrate("--steps", str(steps), "model=mixtral_8x7b", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    profile = Profile.load(out)
    assert profile.coefficients["c_expert_weights"] == pytest.approx(3e-3, rel=1e-6)
    cfg = compose(
        "model=mixtral_8x7b",
        "fleet.tp=2",
        "step_time=calibrated",
        f"step_time.profile={out}",
        "workload.num_requests=20",
    )
    from sim.run import simulate

    summary = simulate(cfg, tmp_path / "run").summary
    assert summary["completed"] == summary["num_requests"] == 20


def _steps_with(tmp_path, name: str, line: int, column: str, cell: str) -> Path:
    """The synthetic per-step CSV with one cell replaced (``line`` counts the header as 1)."""
    rows = [r.split(",") for r in synthetic_steps(tmp_path / "good.csv").read_text().splitlines()]
    rows[line - 1][rows[0].index(column)] = cell
    path = tmp_path / name
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize(
    "column, cell, says",
    [
        ("num_prefill_tokens", "abc", "line 3: num_prefill_tokens='abc' is not a number"),
        ("num_decode_seqs", "-5", "line 3: num_decode_seqs=-5.0 must be a whole number >= 0"),
        ("num_prefill_tokens", "1.5", "line 3: num_prefill_tokens=1.5 must be a whole number >= 0"),
        ("decode_context", "-1", "line 3: decode_context=-1.0 must be a finite number >= 0"),
        ("prefill_attn", "inf", "line 3: prefill_attn=inf must be a finite number >= 0"),
        ("step_time_s", "inf", "line 3: step_time_s=inf must be a finite time above 0"),
        ("step_time_s", "", "line 3: step_time_s=empty must be a finite time above 0"),
        ("step_time_s", "0", "line 3: step_time_s=0.0 must be a finite time above 0"),
    ],
)
def test_a_bad_cell_is_named_by_its_line_column_and_value(tmp_path, column, cell, says):
    path = _steps_with(tmp_path, "bad.csv", 3, column, cell)
    with pytest.raises(ConfigError) as err:
        read_steps(path)
    assert str(err.value) == f"calibrate.steps={str(path)!r}: {says}"


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "is empty"),
        ("num_prefill_tokens,num_decode_seqs\n1,2,3\n", "not a readable CSV (CSV parse error"),
        (
            "num_prefill_tokens,num_decode_seqs,prefill_attn,decode_context,step_time_s\n",
            "needs at least 10 rows",
        ),
    ],
    ids=["empty", "ragged", "header_only"],
)
def test_an_empty_or_broken_csv_is_one_line(tmp_path, text, says):
    path = tmp_path / "steps.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_steps(path)


def test_the_command_refuses_a_bad_csv_or_a_folder_in_one_line(tmp_path):
    bad = _steps_with(tmp_path, "bad.csv", 5, "num_prefill_tokens", "x")
    for given, says in ((bad, "line 5: num_prefill_tokens='x'"), (tmp_path, "is a folder")):
        proc = _calibrate("--steps", str(given), cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"error: calibrate.steps={str(given)!r}: {says}")


def test_an_out_that_is_a_folder_is_refused_even_with_force(tmp_path, capsys):
    steps = synthetic_steps(tmp_path / "s.csv")
    folder = tmp_path / "profiles"
    folder.mkdir()
    assert calibrate_main(["--steps", str(steps), "--out", str(folder), "--force"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: calibrate.out={str(folder)!r}: is a folder; name the profile's file\n"
    assert list(tmp_path.glob(".*partial")) == []  # nothing half-written left beside it
