"""Calibrated step times: fitting, profile files, the shipped profiles, and the command."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

import sim.config
from sim.calibrate import calibrate_kernels, calibrate_steps, fit_steps
from sim.config import REPO_ROOT, build, to_dict
from sim.errors import ConfigError
from sim.hardware import GPU
from sim.model import ModelSpec
from sim.run import build_deployment, simulate
from sim.step_time.calibrated import PROFILE_DIR, CalibratedStepTime, Profile

KNOWN = {"c0": 0.004, "c_token": 6e-5, "c_decode_seq": 2e-5, "c_prefill_attn": 3e-10,
         "c_decode_attn": 4e-8, "c_prefill_step": 5e-4}


def compose(*overrides):
    with initialize_config_dir(config_dir=str(sim.config.CONFIG_DIR), version_base="1.3"):
        return to_dict(hydra_compose("config", overrides=list(overrides)))


def synthetic_steps(path, n=400, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 4096, n) * (rng.random(n) < 0.5)
    d = rng.integers(0, 256, n)
    d[(p == 0) & (d == 0)] = 1
    ap = p * (p + rng.integers(0, 2048, n))
    ad = d * rng.integers(64, 8192, n)
    t = (KNOWN["c0"] + KNOWN["c_token"] * (p + d) + KNOWN["c_decode_seq"] * d
         + KNOWN["c_prefill_attn"] * ap + KNOWN["c_decode_attn"] * ad
         + KNOWN["c_prefill_step"] * (p > 0))
    t = t * (1 + noise * rng.standard_normal(n))
    lines = ["num_prefill_tokens,num_decode_seqs,prefill_attn,decode_context,step_time_s"]
    lines += [f"{a},{b},{c},{e},{float(f)!r}" for a, b, c, e, f in zip(p, d, ap, ad, t)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fitting_recovers_the_coefficients_that_made_the_data(tmp_path):
    profile = calibrate_steps(synthetic_steps(tmp_path / "s.csv"), model="m", hardware="g",
                              weights="bf16", kv="bf16", backend="vllm")
    for name, value in KNOWN.items():
        assert profile.coefficients[name] == pytest.approx(value, rel=1e-6), name
    assert profile.holdout_error["step_time"]["mape"] < 1e-9
    assert profile.holdout_error["step_time"]["rows"] == 80  # every fifth row held out


def test_fitting_with_noise_stays_close_and_reports_its_held_out_error(tmp_path):
    profile = calibrate_steps(synthetic_steps(tmp_path / "s.csv", n=2000, noise=0.02),
                              model="m", hardware="g", weights="bf16", kv="bf16",
                              backend="vllm")
    for name in ("c0", "c_token", "c_decode_attn"):
        assert profile.coefficients[name] == pytest.approx(KNOWN[name], rel=0.1), name
    assert 0.005 < profile.holdout_error["step_time"]["mape"] < 0.03  # the 2% noise


def test_profile_round_trips_through_its_file(tmp_path):
    profile = calibrate_steps(synthetic_steps(tmp_path / "s.csv"), model="m", hardware="g",
                              weights="fp8", kv="bf16", backend="trtllm")
    loaded = Profile.load(profile.save(tmp_path / "p.json"))
    assert loaded == profile
    assert loaded.provenance["sources"][0]["sha256"]


def test_a_profile_for_another_model_or_gpu_is_refused():
    path = PROFILE_DIR / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_vllm.json"
    for overrides, what in ((["model=llama2_7b"], "model"), (["hardware=h200"], "hardware"),
                            (["precision.weights=fp8"], "precision.weights")):
        cfg = compose(*overrides, "step_time=calibrated", f"step_time.profile={path}")
        with pytest.raises(ConfigError, match=f"profile is for {what} "):
            build(cfg["step_time"], "step_time", deployment=build_deployment(cfg))


def test_no_shipped_profile_is_a_clear_error():
    cfg = compose("hardware=a100_80g", "step_time=calibrated")
    with pytest.raises(ConfigError) as err:
        build(cfg["step_time"], "step_time", deployment=build_deployment(cfg))
    assert "no shipped profile for meta-llama/Llama-3.1-8B on A100" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("path", sorted(PROFILE_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_shipped_profiles_are_monotone_and_held_out_error_is_under_5_percent(path):
    profile = Profile.load(path)
    assert profile.holdout_error["step_time"]["mape"] < 0.05
    weights = "fp8" if "_wfp8_" in path.name else "bf16"
    hardware = "h200" if "h200" in path.name else "h100_sxm"
    for tp in (1, 2, 8):
        cfg = compose(f"hardware={hardware}", f"precision.weights={weights}",
                      f"precision.kv={weights}", f"fleet.tp={tp}", "step_time=calibrated",
                      f"step_time.profile={path}")
        step = CalibratedStepTime(build_deployment(cfg), profile=str(path))
        grid = [0, 1, 7, 64, 500, 4096, 20000, 40000]
        for base in grid:
            t = [step.step_time_s(base + x, 0, (base + x) ** 2, 0) for x in grid]
            assert t == sorted(t), "more prefill tokens must never be faster"
            t = [step.step_time_s(0, d, 0, d * 1000) for d in grid[1:]]
            assert t == sorted(t), "more decoding sequences must never be faster"
            t = [step.step_time_s(0, 8, 0, 8 * c) for c in grid[1:]]
            assert t == sorted(t), "more context must never be faster"


def _step_time_with_exponent(tmp_path, exponent: float, tp: int) -> CalibratedStepTime:
    profile = Profile.load(PROFILE_DIR / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json")
    profile.coefficients["tp_compute_exponent"] = exponent
    path = profile.save(tmp_path / f"p_{exponent}.json")
    cfg = compose(f"fleet.tp={tp}", "step_time=calibrated", "step_time.backend=trtllm",
                  f"step_time.profile={path}")
    return CalibratedStepTime(build_deployment(cfg), backend="trtllm", profile=str(path))


def test_tp_exponent_slows_per_token_work_only(tmp_path):
    ideal, slow = (_step_time_with_exponent(tmp_path, e, tp=4) for e in (1.0, 0.5))
    c = ideal.profile.coefficients
    floor = ideal.profile.gemm_s[0]
    # a whole-prompt step: the per-token terms take 1/sqrt(4) of their TP-1 time, not 1/4
    p, ap = 8192, 8192 ** 2
    per_token = (float(np.interp(p, ideal.profile.gemm_tokens, ideal.profile.gemm_s)) - floor
                 + (c["c_token"] + c["c_prefill_token"]) * p + c["c_prefill_attn"] * ap)
    gap = slow.step_time_s(p, 0, ap, 0) - ideal.step_time_s(p, 0, ap, 0)
    assert gap == pytest.approx(per_token * (1 / 2 - 1 / 4), rel=1e-9)
    # a batch-1 decode reads the weights and the KV cache: split over 4 GPUs either way
    decode_gap = slow.step_time_s(0, 1, 0, 1000) - ideal.step_time_s(0, 1, 0, 1000)
    assert 0 < decode_gap < 0.01 * ideal.step_time_s(0, 1, 0, 1000)
    # at TP 1 the exponent changes nothing
    one = [_step_time_with_exponent(tmp_path, e, tp=1).step_time_s(4096, 8, 4096 ** 2, 8000)
           for e in (1.0, 0.5)]
    assert one[0] == pytest.approx(one[1], rel=1e-12)


@pytest.mark.parametrize("exponent", [0.0, 1.5, "fast"])
def test_a_tp_exponent_outside_0_1_is_refused(tmp_path, exponent):
    profile = Profile.load(PROFILE_DIR / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_vllm.json")
    profile.coefficients["tp_compute_exponent"] = exponent
    path = profile.save(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match=r"^step_time.profile=.*tp_compute_exponent=.* must be in \(0, 1\]"):
        Profile.load(path)


def test_kernel_calibration_rebuilds_the_shipped_profile(tmp_path):
    cfg = compose()
    profile = calibrate_kernels(REPO_ROOT / "data" / "calibration",
                                model=ModelSpec.from_config(cfg["model"]),
                                gpu=GPU.from_config(cfg["hardware"]), weights="bf16", kv="bf16",
                                backend="trtllm", c0=0.001, allreduce_latency_s=1e-5,
                                tp_compute_exponent=0.7)
    shipped = Profile.load(PROFILE_DIR / profile.file_name())
    assert profile.coefficients == shipped.coefficients
    assert profile.gemm_s == shipped.gemm_s
    # decode at batch 1 is weight-bound: the GEMM curve is flat there and ~ 16 GB / 3 TB/s
    assert profile.gemm_s[0] == pytest.approx(profile.gemm_s[1], rel=0.05)
    assert 0.004 < profile.gemm_s[0] < 0.007
    with pytest.raises(ConfigError, match="^model='meta-llama/Llama-2-7b-hf'"):
        calibrate_kernels(REPO_ROOT / "data" / "calibration",
                          model=ModelSpec.from_config(compose("model=llama2_7b")["model"]),
                          gpu=GPU.from_config(cfg["hardware"]), weights="bf16", kv="bf16",
                          backend="trtllm", c0=0.0)


def test_a_calibrated_run_meets_the_contract(tmp_path):
    result = simulate(compose("step_time=calibrated", "workload=poisson",
                              "workload.num_requests=100", "workload.qps=10",
                              "fleet.replicas=1", "fleet.tp=2", "sim.progress=false"))
    assert result.summary["completed"] == 100
    # TPOT of a few requests decoding together on H100 is a weights read: ~ 3-8 ms at tp=2
    assert 0.002 < result.summary["tpot_s"]["p50"] < 0.008


def test_calibrate_command_fits_a_csv_and_refuses_a_bad_one(tmp_path):
    steps = synthetic_steps(tmp_path / "s.csv")
    out = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "sim", "calibrate", "--steps", str(steps),
                           "--out", str(out), "hardware=h200"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "held-out error" in proc.stdout
    assert Profile.load(out).hardware == "H200"
    bad = tmp_path / "bad.csv"
    bad.write_text("num_prefill_tokens,step_time_s\n1,0.1\n")
    proc = subprocess.run([sys.executable, "-m", "sim", "calibrate", "--steps", str(bad)],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "missing column(s) num_decode_seqs, prefill_attn, decode_context" in proc.stderr


def test_fit_steps_keeps_every_coefficient_non_negative(tmp_path):
    rng = np.random.default_rng(3)
    n = 100
    cols = {"num_prefill_tokens": rng.integers(0, 100, n).astype(float),
            "num_decode_seqs": rng.integers(1, 50, n).astype(float),
            "prefill_attn": rng.integers(0, 10000, n).astype(float),
            "decode_context": rng.integers(100, 5000, n).astype(float)}
    cols["step_time_s"] = 0.01 - 1e-6 * cols["decode_context"] + 1e-4 * cols["num_decode_seqs"]
    coefficients, _ = fit_steps(cols)
    assert all(v >= 0 for v in coefficients.values())
