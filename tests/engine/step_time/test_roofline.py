"""The roofline step time: monotone in every shape number, memory-bound decode, compute-bound
prefill, tensor parallelism, and precision support."""

import itertools

import pytest

from sim.engine.step_shape import StepShape
from sim.engine.step_time.roofline import RooflineStepTime
from sim.errors import ConfigError
from tests.support import deployment


def roofline(tp=1, **kwargs):
    return RooflineStepTime(deployment(tp=tp), **kwargs)


def test_roofline_is_monotone_in_every_shape_number():
    m = roofline()
    grid = [0, 1, 16, 512, 4096]
    for p, d in itertools.product(grid, [0, 1, 8, 64, 256]):
        if p + d == 0:
            continue
        ap = p * p
        ad = d * 1000
        t = m.step_time_s(StepShape(p, d, ap, ad))
        assert t > 0
        assert m.step_time_s(StepShape(p + 64, d, (p + 64) ** 2, ad)) >= t
        assert m.step_time_s(StepShape(p, d + 1, ap, ad + 1000)) >= t
        assert m.step_time_s(StepShape(p, d, ap + 10**6, ad)) >= t
        assert m.step_time_s(StepShape(p, d, ap, ad + 10**5)) >= t


def test_roofline_decode_at_batch_one_is_memory_bound():
    dep = deployment()
    m = RooflineStepTime(dep, bandwidth_efficiency=0.8, step_overhead_s=0.002)
    weights_s = 8.03e9 * 2 / (3350e9 * 0.8)  # Llama-3.1-8B BF16 weights on H100 SXM
    t = m.step_time_s(StepShape(0, 1, 0, 128))
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
    assert m.step_time_s(StepShape(p, 0, p * p, 0)) == pytest.approx(
        flops / (989e12 * 0.6), rel=1e-9
    )


def test_tensor_parallel_divides_compute_and_adds_allreduce():
    one = RooflineStepTime(deployment(tp=1), step_overhead_s=0.0)
    two = RooflineStepTime(deployment(tp=2), step_overhead_s=0.0)
    p = 8192
    t1 = one.step_time_s(StepShape(p, 0, p * p, 0))  # compute-bound: halves with tp=2
    t2 = two.step_time_s(StepShape(p, 0, p * p, 0))
    # two all-reduces per layer, ring factor 2(tp-1)/tp = 1, BF16 activations, NVLink 450 GB/s
    allreduce = 2 * 32 * (p * 4096 * 2 / 450e9 + 6e-6)
    assert t2 == pytest.approx(t1 / 2 + allreduce, rel=1e-9)
    assert t2 > t1 / 2
    # a tp=1 replica pays no all-reduce at all: batch-1 decode is exactly memory + overhead
    assert one.step_time_s(StepShape(0, 1, 0, 0)) == pytest.approx(
        (8.03e9 * 2 + 131_072) / (3350e9 * 0.8), rel=1e-12
    )


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
    assert b200.step_time_s(StepShape(0, 1, 0, 100)) < b200_bf16.step_time_s(
        StepShape(0, 1, 0, 100)
    )
