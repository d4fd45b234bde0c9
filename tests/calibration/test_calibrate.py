"""``fleetcast calibrate``: NNLS fits of the per-step CSV, the kernel-table profile, the command."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sim.calibration.calibrate import calibrate_kernels, calibrate_steps, fit_steps
from sim.catalog.hardware import GPU
from sim.catalog.model import ModelSpec
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.errors import ConfigError
from sim.resources import data_dir
from tests.support import REPO_ROOT, compose

KNOWN = {
    "c0": 0.004,
    "c_token": 6e-5,
    "c_decode_seq": 2e-5,
    "c_prefill_attn": 3e-10,
    "c_decode_attn": 4e-8,
    "c_prefill_step": 5e-4,
}


def synthetic_steps(path, n=400, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 4096, n) * (rng.random(n) < 0.5)
    d = rng.integers(0, 256, n)
    d[(p == 0) & (d == 0)] = 1
    ap = p * (p + rng.integers(0, 2048, n))
    ad = d * rng.integers(64, 8192, n)
    t = (
        KNOWN["c0"]
        + KNOWN["c_token"] * (p + d)
        + KNOWN["c_decode_seq"] * d
        + KNOWN["c_prefill_attn"] * ap
        + KNOWN["c_decode_attn"] * ad
        + KNOWN["c_prefill_step"] * (p > 0)
    )
    t = t * (1 + noise * rng.standard_normal(n))
    lines = ["num_prefill_tokens,num_decode_seqs,prefill_attn,decode_context,step_time_s"]
    lines += [f"{a},{b},{c},{e},{float(f)!r}" for a, b, c, e, f in zip(p, d, ap, ad, t)]
    path.write_text("\n".join(lines) + "\n")
    return path


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
        cwd=REPO_ROOT,
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
        cwd=REPO_ROOT,
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
