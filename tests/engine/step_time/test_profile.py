"""Step-time profiles: a profile round-trips through its file, the shipped ones are monotone with a
small held-out error, and bad coefficients are refused."""

from __future__ import annotations

import numpy as np
import pytest

from sim.calibration.calibrate import calibrate_steps
from sim.catalog.deployment import build_deployment
from sim.engine.step_shape import StepShape
from sim.engine.step_time.calibrated import CalibratedStepTime
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.errors import ConfigError
from tests.support import compose

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


def test_profile_round_trips_through_its_file(tmp_path):
    profile = calibrate_steps(
        synthetic_steps(tmp_path / "s.csv"),
        model="m",
        hardware="g",
        weights="fp8",
        kv="bf16",
        backend="trtllm",
    )
    loaded = Profile.load(profile.save(tmp_path / "p.json"))
    assert loaded == profile
    assert loaded.provenance["sources"][0]["sha256"]


@pytest.mark.parametrize("path", sorted(shipped_profile_dir().glob("*.json")), ids=lambda p: p.stem)
def test_shipped_profiles_are_monotone_and_held_out_error_is_under_5_percent(path):
    profile = Profile.load(path)
    assert profile.holdout_error["step_time"]["mape"] < 0.05
    weights = "fp8" if "_wfp8_" in path.name else "bf16"
    hardware = "h200" if "h200" in path.name else "h100_sxm"
    for tp in (1, 2, 8):
        cfg = compose(
            f"hardware={hardware}",
            f"precision.weights={weights}",
            f"precision.kv={weights}",
            f"fleet.tp={tp}",
            "step_time=calibrated",
            f"step_time.profile={path}",
        )
        step = CalibratedStepTime(build_deployment(cfg), profile=str(path))
        grid = [0, 1, 7, 64, 500, 4096, 20000, 40000]
        for base in grid:
            t = [step.step_time_s(StepShape(base + x, 0, (base + x) ** 2, 0)) for x in grid]
            assert t == sorted(t), "more prefill tokens must never be faster"
            t = [step.step_time_s(StepShape(0, d, 0, d * 1000)) for d in grid[1:]]
            assert t == sorted(t), "more decoding sequences must never be faster"
            t = [step.step_time_s(StepShape(0, 8, 0, 8 * c)) for c in grid[1:]]
            assert t == sorted(t), "more context must never be faster"


@pytest.mark.parametrize("exponent", [0.0, 1.5, "fast"])
def test_a_tp_exponent_outside_0_1_is_refused(tmp_path, exponent):
    profile = Profile.load(
        shipped_profile_dir() / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_vllm.json"
    )
    profile.coefficients["tp_compute_exponent"] = exponent
    path = profile.save(tmp_path / "bad.json")
    with pytest.raises(
        ConfigError, match=r"^step_time.profile=.*tp_compute_exponent=.* must be in \(0, 1\]"
    ):
        Profile.load(path)
