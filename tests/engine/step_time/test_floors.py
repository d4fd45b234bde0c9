"""Physical floors: no shipped profile and no roofline prices a step below the time its memory
traffic or its arithmetic needs at the GPU's peaks (sim/engine/step_time/floors.py)."""

import itertools

import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.calibrated import CalibratedStepTime
from sim.engine.step_time.floors import PhysicalFloor
from sim.engine.step_time.linear import LinearStepTime
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.engine.step_time.roofline import RooflineStepTime
from tests.support import deployment

PREFILL = (0, 1, 64, 512, 2048, 8192, 32768)
DECODE = (0, 1, 8, 64, 256, 1024)
CONTEXT = (16, 1024, 16384)
CATALOG_GPU = {"H100-SXM": "h100_sxm", "H200": "h200"}


def shapes():
    """A grid of step shapes: prefill only, decode only and mixed, short to long contexts."""
    for p, d, context in itertools.product(PREFILL, DECODE, CONTEXT):
        if p + d:
            yield StepShape(p, d, p * (min(context, p) + p), d * context)


def below_floor(model, floor) -> list[tuple[StepShape, float]]:
    """The grid's shapes the model prices below the floor, with the ratio."""
    return [
        (shape, ratio)
        for shape in shapes()
        if (ratio := model.step_time_s(shape) / floor(shape)) < 1.0
    ]


def test_the_check_finds_a_model_that_beats_physics():
    # a linear model with a free step and 1 ns per token would decode 16 GB of weights in 1 ns
    dep = deployment()
    too_fast = LinearStepTime(c0=0.0, c_prefill_token=1e-9, c_decode_seq=1e-9)
    assert below_floor(too_fast, PhysicalFloor(dep))


def test_floors_are_the_hand_computed_figures():
    dep = deployment()  # Llama-3.1-8B BF16 on one H100 SXM
    floor = PhysicalFloor(dep)
    embedding = 128256 * 4096  # read one row per token, never whole
    weights = (dep.model.num_params - embedding) * 2
    kv_per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, BF16
    decode = StepShape(0, 4, 0, 4 * 1000)
    assert floor.memory_s(decode) == pytest.approx((weights + kv_per_token * 4000) / 3350e9)
    prefill = StepShape(1000, 0, 1000 * 1000, 0)
    # GEMMs less the embedding and LM head matrices, the LM head once (one logit row), at the
    # BF16 peak; attention on half the pairs (causal), at BF16 too
    gemm = 2 * (dep.model.num_active_params - 2 * embedding) * 1000 + 2 * embedding
    attention = 4 * 32 * 32 * 128 * 1000**2 / 2
    assert floor.compute_s(prefill) == pytest.approx((gemm + attention) / 989e12)
    on_two = PhysicalFloor(deployment(tp=2))
    assert on_two.memory_s(decode) == pytest.approx(floor.memory_s(decode) / 2)
    assert on_two.compute_s(prefill) == pytest.approx(floor.compute_s(prefill) / 2)


def test_each_kind_of_work_is_floored_at_the_peak_it_runs_at():
    # FP4 weights on a B200: GEMMs at the FP4 peak, but attention at BF16 (a BF16 KV cache):
    # a model pricing attention at the FP4 peak would fall below this floor
    dep = deployment(hardware="b200", weights="fp4")
    attention_only = StepShape(0, 0, 10**8, 0)
    pairs = 10**8 / 2
    assert PhysicalFloor(dep).compute_s(attention_only) == pytest.approx(
        4 * 32 * 32 * 128 * pairs / 2250e12
    )
    fp8_kv = deployment(hardware="b200", weights="fp4", kv="fp8")  # FP8 attention kernels
    assert PhysicalFloor(fp8_kv).compute_s(attention_only) == pytest.approx(
        4 * 32 * 32 * 128 * pairs / 4500e12
    )


@pytest.mark.parametrize("path", sorted(shipped_profile_dir().glob("*.json")), ids=lambda p: p.stem)
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_no_shipped_profile_prices_a_step_below_its_floors(path, tp):
    profile = Profile.load(path)
    dep = deployment(
        hardware=CATALOG_GPU[profile.hardware],
        tp=tp,
        weights=profile.weights_precision,
        kv=profile.kv_precision,
    )
    model = CalibratedStepTime(dep, backend=profile.backend, profile=str(path))
    assert below_floor(model, PhysicalFloor(dep)) == []


ROOFLINE_CASES = [
    # model, GPU, tp, weights, kv, pp, ep
    ("llama31_8b", "h100_sxm", 1, "bf16", "bf16", 1, 1),
    ("llama31_8b", "h100_sxm", 8, "fp8", "fp8", 1, 1),
    ("llama31_8b", "b200", 1, "fp4", "fp8", 1, 1),
    ("llama31_70b", "h100_sxm", 4, "bf16", "bf16", 2, 1),
    ("llama31_70b", "a100_80g", 8, "bf16", "bf16", 1, 1),
    ("llama2_7b", "l40s", 2, "fp8", "bf16", 1, 1),
    ("qwen25_32b", "mi300x", 1, "bf16", "bf16", 1, 1),
    ("mixtral_8x7b", "h200", 1, "bf16", "bf16", 1, 1),
    ("mixtral_8x7b", "h100_sxm", 4, "fp8", "fp8", 1, 4),
    ("mixtral_8x7b", "h100_sxm", 2, "bf16", "bf16", 2, 2),
]


@pytest.mark.parametrize("case", ROOFLINE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_roofline_never_prices_a_step_below_its_floors(case):
    model, gpu, tp, weights, kv, pp, ep = case
    dep = deployment(model=model, hardware=gpu, tp=tp, weights=weights, kv=kv, pp=pp, ep=ep)
    assert below_floor(RooflineStepTime(dep), PhysicalFloor(dep)) == []
    # even with every efficiency at 1 and no fixed costs: the floors use the same peaks (to
    # within the norms and biases the roofline's GEMM shapes leave out: < 0.2% of the weights)
    ideal = RooflineStepTime(
        dep,
        compute_efficiency=1.0,
        quantized_compute_efficiency=1.0,
        attention_compute_efficiency=1.0,
        bandwidth_efficiency=1.0,
        attention_bandwidth_efficiency=1.0,
        gemm_half_tokens=0.0,
        gemm_half_n=0.0,
        gemm_half_k=0.0,
        gemm_floor_s=0.0,
        quantized_gemm_floor_s=0.0,
        attention_floor_s=0.0,
        step_overhead_s=0.0,
    )
    assert [(shape, r) for shape, r in below_floor(ideal, PhysicalFloor(dep)) if r < 0.998] == []


def test_the_roofline_holds_to_the_floors_for_mla_and_shared_experts():
    # DeepSeek-V2-Lite: MLA attention, 2 shared experts, a dense first layer (config dict in
    # tests/catalog/test_hf_config.py), on one H200
    from sim.catalog.deployment import build_deployment
    from sim.catalog.hf_config import model_fields
    from tests.catalog.test_hf_config import DEEPSEEK_V2_LITE
    from tests.support import option

    for tp, ep, pp in ((1, 1, 1), (2, 2, 1), (1, 1, 4)):
        dep = build_deployment(
            {
                "model": model_fields(DEEPSEEK_V2_LITE),
                "hardware": option("hardware", "h200"),
                "precision": {"weights": "bf16", "kv": "bf16"},
                "memory": option("memory", "default"),
                "kv": {"block_size": 16, "num_blocks": None, "watermark": 0.01},
                "fleet": {"replicas": 1, "tp": tp, "ep": ep, "pp": pp},
            }
        )
        assert dep.model.is_mla and dep.model.num_shared_experts == 2
        assert below_floor(RooflineStepTime(dep), PhysicalFloor(dep)) == []
