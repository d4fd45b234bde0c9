"""The calibrated step time: the profile must match the deployment, TP slows per-token work only,
and a calibrated run meets the contract."""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.deployment import build_deployment
from sim.config.build import build
from sim.engine.step_shape import StepShape
from sim.engine.step_time.calibrated import CalibratedStepTime
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.errors import ConfigError
from sim.run import simulate
from tests.support import compose, deployment


def test_a_profile_for_another_model_or_gpu_is_refused():
    path = shipped_profile_dir() / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_vllm.json"
    for overrides, what in (
        (["model=llama2_7b"], "model"),
        (["hardware=h200"], "hardware"),
        (["precision.weights=fp8"], "precision.weights"),
    ):
        cfg = compose(*overrides, "step_time=calibrated", f"step_time.profile={path}")
        with pytest.raises(ConfigError, match=f"profile is for {what} "):
            build(cfg["step_time"], "step_time", deployment=build_deployment(cfg))


def test_no_shipped_profile_is_a_clear_error():
    cfg = compose("hardware=a100_80g", "step_time=calibrated")
    with pytest.raises(ConfigError) as err:
        build(cfg["step_time"], "step_time", deployment=build_deployment(cfg))
    assert "no shipped profile for meta-llama/Llama-3.1-8B on A100" in str(err.value)
    assert "\n" not in str(err.value)


def _step_time_with_exponent(tmp_path, exponent: float, tp: int) -> CalibratedStepTime:
    profile = Profile.load(
        shipped_profile_dir() / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json"
    )
    profile.coefficients["tp_compute_exponent"] = exponent
    path = profile.save(tmp_path / f"p_{exponent}.json")
    cfg = compose(
        f"fleet.tp={tp}",
        "step_time=calibrated",
        "step_time.backend=trtllm",
        f"step_time.profile={path}",
    )
    return CalibratedStepTime(build_deployment(cfg), backend="trtllm", profile=str(path))


def test_tp_exponent_slows_per_token_work_only(tmp_path):
    ideal, slow = (_step_time_with_exponent(tmp_path, e, tp=4) for e in (1.0, 0.5))
    c = ideal.profile.coefficients
    floor = ideal.profile.gemm_s[0]
    # a whole-prompt step: the per-token terms take 1/sqrt(4) of their TP-1 time, not 1/4
    p, ap = 8192, 8192**2
    per_token = (
        float(np.interp(p, ideal.profile.gemm_tokens, ideal.profile.gemm_s))
        - floor
        + (c["c_token"] + c["c_prefill_token"]) * p
        + c["c_prefill_attn"] * ap
    )
    gap = slow.step_time_s(StepShape(p, 0, ap, 0)) - ideal.step_time_s(StepShape(p, 0, ap, 0))
    assert gap == pytest.approx(per_token * (1 / 2 - 1 / 4), rel=1e-9)
    # a batch-1 decode reads the weights and the KV cache: split over 4 GPUs either way
    decode_gap = slow.step_time_s(StepShape(0, 1, 0, 1000)) - ideal.step_time_s(
        StepShape(0, 1, 0, 1000)
    )
    assert 0 < decode_gap < 0.01 * ideal.step_time_s(StepShape(0, 1, 0, 1000))
    # at TP 1 the exponent changes nothing
    one = [
        _step_time_with_exponent(tmp_path, e, tp=1).step_time_s(StepShape(4096, 8, 4096**2, 8000))
        for e in (1.0, 0.5)
    ]
    assert one[0] == pytest.approx(one[1], rel=1e-12)


def test_a_mixture_of_experts_step_reads_the_experts_its_tokens_touch(tmp_path):
    # worked by hand for Mixtral (E = 8 routed experts, k = 2 per token) at TP 2: a step of n
    # tokens reads 1 - (3/4)**n of the experts' weights, half of them on each GPU
    profile = Profile(
        model="mistralai/Mixtral-8x7B-v0.1",
        hardware="H100-SXM",
        weights_precision="bf16",
        kv_precision="bf16",
        backend="vllm",
        coefficients={"c0": 0.001, "c_expert_weights": 0.008, "c_allreduce_latency": 0.0},
    )
    path = profile.save(tmp_path / "moe.json")
    cfg = compose(
        "model=mixtral_8x7b", "fleet.tp=2", "step_time=calibrated", f"step_time.profile={path}"
    )
    step_time = build(cfg["step_time"], "step_time", deployment=build_deployment(cfg))
    allreduce = step_time.step_time_s(StepShape(0, 1, 0, 0)) - 0.001 - 0.004 * 0.25
    for decodes, touched in ((1, 0.25), (2, 0.4375), (4, 0.68359375)):
        got = step_time.step_time_s(StepShape(0, decodes, 0, 0))
        want = 0.001 + 0.004 * touched + allreduce * decodes
        assert got == pytest.approx(want, rel=1e-12), decodes
    assert allreduce == pytest.approx(
        2 * 32 * (2 * 1 / 2) * 4096 * 2 / build_deployment(cfg).gpu.interconnect_bytes_per_s
    )
    # the term is a mixture of experts': a dense model's profile with it is refused
    profile.model = "meta-llama/Llama-3.1-8B"
    dense_path = profile.save(tmp_path / "dense.json")
    dense = compose("step_time=calibrated", f"step_time.profile={dense_path}")
    with pytest.raises(ConfigError, match="c_expert_weights is a mixture of experts' term"):
        build(dense["step_time"], "step_time", deployment=build_deployment(dense))
    # a large prefill touches every expert: the whole read, once
    whole = step_time.step_time_s(StepShape(512, 0, 0, 0))
    assert whole == pytest.approx(0.001 + 0.004 * (1 - 0.75**512) + allreduce * 512)
    assert step_time.decode_stretch_s(StepShape(0, 2, 0, 10), 2, 3) == pytest.approx(
        [step_time.step_time_s(StepShape(0, 2, 0, 10 + 2 * i)) for i in range(3)]
    )


def test_a_calibrated_run_meets_the_contract(tmp_path):
    result = simulate(
        compose(
            "step_time=calibrated",
            "workload=poisson",
            "workload.num_requests=100",
            "workload.qps=10",
            "fleet.replicas=1",
            "fleet.tp=2",
            "sim.progress=false",
        )
    )
    assert result.summary["completed"] == 100
    # TPOT of a few requests decoding together on H100 is a weights read: ~ 3-8 ms at tp=2
    assert 0.002 < result.summary["tpot_s"]["p50"] < 0.008


@pytest.mark.parametrize("overrides", [{"pp": 2}, {"ep": 2, "model": "mixtral_8x7b", "tp": 2}])
def test_calibrated_refuses_pipeline_and_expert_parallelism(overrides):
    field = "pp" if "pp" in overrides else "ep"
    with pytest.raises(ConfigError, match=rf"^fleet\.{field}=2: a calibrated profile"):
        CalibratedStepTime(deployment(**overrides))
