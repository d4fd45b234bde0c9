"""Step-time models: the linear contract formula, constant, roofline physics, decode stretches."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sim.errors import ConfigError
from sim.run import build_deployment
from sim.step_time.constant import ConstantStepTime
from sim.step_time.linear import LinearStepTime
from sim.step_time.roofline import RooflineStepTime

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def load(group: str, name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONFIGS / group / f"{name}.yaml"))


def deployment(model="llama31_8b", hardware="h100_sxm", tp=1, weights="bf16"):
    cfg = {
        "model": load("model", model),
        "hardware": load("hardware", hardware),
        "precision": {"weights": weights, "kv": "bf16"},
        "memory": load("memory", "default"),
        "kv": {"block_size": 16, "num_blocks": None, "watermark": 0.01},
        "fleet": {"replicas": 1, "tp": tp},
    }
    return build_deployment(cfg)


def roofline(tp=1, **kwargs):
    return RooflineStepTime(deployment(tp=tp), **kwargs)


# -- linear --------------------------------------------------------------------------------


def test_linear_equals_the_contract_formula():
    m = LinearStepTime(c0=0.5, c_prefill_token=0.25, c_decode_seq=0.125, c_prefill_attn=2.0**-10,
                       c_decode_attn=2.0**-6)
    # One 6-token chunk after 10 computed (Ap = 6 * 16 = 96) and two decodes of context 20, 44.
    p, d, ap, ad = 6, 2, 96, 64
    # all powers of two: the float result is exact
    assert m.step_time_s(p, d, ap, ad) == 0.5 + 1.5 + 0.25 + 96 / 1024 + 1.0
    assert m.step_time_s(0, 0, 0, 0) == 0.5


def test_linear_defaults_and_validation():
    m = LinearStepTime()
    assert m.step_time_s(0, 1, 0, 1000) == pytest.approx(0.006 + 1e-5 + 3e-5)
    with pytest.raises(ConfigError, match=r"^step_time\.c_decode_attn=-1"):
        LinearStepTime(c_decode_attn=-1)
    with pytest.raises(ConfigError, match=r"^step_time\.c0="):
        LinearStepTime(c0=0, c_prefill_token=0, c_decode_seq=0)


def test_constant():
    m = ConstantStepTime(seconds=0.25)
    assert m.step_time_s(0, 1, 0, 1) == m.step_time_s(8192, 256, 10**9, 10**7) == 0.25
    assert list(m.decode_stretch_s(3, 100, 3, 4)) == [0.25] * 4
    with pytest.raises(ConfigError, match=r"^step_time\.seconds=0"):
        ConstantStepTime(seconds=0)


# -- roofline ------------------------------------------------------------------------------


def test_roofline_is_monotone_in_every_shape_number():
    m = roofline()
    grid = [0, 1, 16, 512, 4096]
    for p, d in itertools.product(grid, [0, 1, 8, 64, 256]):
        if p + d == 0:
            continue
        ap = p * p
        ad = d * 1000
        t = m.step_time_s(p, d, ap, ad)
        assert t > 0
        assert m.step_time_s(p + 64, d, (p + 64) ** 2, ad) >= t
        assert m.step_time_s(p, d + 1, ap, ad + 1000) >= t
        assert m.step_time_s(p, d, ap + 10**6, ad) >= t
        assert m.step_time_s(p, d, ap, ad + 10**5) >= t


def test_roofline_decode_at_batch_one_is_memory_bound():
    dep = deployment()
    m = RooflineStepTime(dep, bandwidth_efficiency=0.8, step_overhead_s=0.002)
    weights_s = 8.03e9 * 2 / (3350e9 * 0.8)  # Llama-3.1-8B BF16 weights on H100 SXM
    t = m.step_time_s(0, 1, 0, 128)
    assert t == pytest.approx(weights_s + 0.002, rel=1e-3)
    # the exact memory term: weights + (context + the new token) KV at 128 KiB per token
    kv_s = (128 + 1) * 131_072 / (3350e9 * 0.8)
    assert t == pytest.approx(weights_s + kv_s + 0.002, rel=1e-12)
    # compute for one token is a small fraction of the weight read
    compute_s = 2 * 8.03e9 / (989e12 * 0.6)
    assert compute_s < 0.01 * weights_s


def test_roofline_large_prefill_is_compute_bound():
    m = RooflineStepTime(deployment(), compute_efficiency=0.6, step_overhead_s=0.0)
    p = 8192
    flops = 2 * 8.03e9 * p + 4 * 32 * 32 * 128 * p * p
    assert m.step_time_s(p, 0, p * p, 0) == pytest.approx(flops / (989e12 * 0.6), rel=1e-9)


def test_tensor_parallel_divides_compute_and_adds_allreduce():
    one = RooflineStepTime(deployment(tp=1), step_overhead_s=0.0)
    two = RooflineStepTime(deployment(tp=2), step_overhead_s=0.0)
    p = 8192
    t1 = one.step_time_s(p, 0, p * p, 0)  # compute-bound: halves with tp=2
    t2 = two.step_time_s(p, 0, p * p, 0)
    # two all-reduces per layer, ring factor 2(tp-1)/tp = 1, BF16 activations, NVLink 450 GB/s
    allreduce = 2 * 32 * (p * 4096 * 2 / 450e9 + 6e-6)
    assert t2 == pytest.approx(t1 / 2 + allreduce, rel=1e-9)
    assert t2 > t1 / 2
    # a tp=1 replica pays no all-reduce at all: batch-1 decode is exactly memory + overhead
    assert one.step_time_s(0, 1, 0, 0) == pytest.approx(
        (8.03e9 * 2 + 131_072) / (3350e9 * 0.8), rel=1e-12)


def test_roofline_validation_names_fields():
    with pytest.raises(ConfigError, match=r"^step_time\.compute_efficiency=0"):
        roofline(compute_efficiency=0)
    with pytest.raises(ConfigError, match=r"^step_time\.bandwidth_efficiency=1\.5"):
        roofline(bandwidth_efficiency=1.5)
    with pytest.raises(ConfigError, match=r"^step_time\.step_overhead_s=-"):
        roofline(step_overhead_s=-1)


def test_roofline_fp4_needs_blackwell():
    with pytest.raises(ConfigError, match=r"^precision\.weights='fp4'"):
        RooflineStepTime(deployment(weights="fp4"))
    b200 = RooflineStepTime(deployment(hardware="b200", weights="fp4"))
    b200_bf16 = RooflineStepTime(deployment(hardware="b200"))
    assert b200.step_time_s(0, 1, 0, 100) < b200_bf16.step_time_s(0, 1, 0, 100)


# -- decode stretches ----------------------------------------------------------------------


@pytest.mark.parametrize("model", [
    ConstantStepTime(seconds=0.013),
    LinearStepTime(),
    LinearStepTime(c0=0.001, c_decode_attn=7.1e-8, c_decode_seq=3.3e-6),
    roofline(),
    roofline(tp=4),
    RooflineStepTime(deployment(model="mixtral_8x7b", hardware="h200", tp=2)),
], ids=["constant", "linear", "linear2", "roofline", "roofline_tp4", "mixtral_tp2"])
@pytest.mark.parametrize("d, ctx, k", [(1, 17, 1), (3, 1000, 50), (64, 123_457, 300),
                                        (7, 5, 4096)])
def test_decode_stretch_equals_stepping_exactly(model, d, ctx, k):
    # long stretches may come back as a numpy array: compare element by element, as floats
    stretch = np.asarray(model.decode_stretch_s(d, ctx, d, k), dtype=np.float64).tolist()
    stepped = [model.step_time_s(0, d, 0, ctx + i * d) for i in range(k)]
    assert stretch == stepped  # bit for bit, not approximately
