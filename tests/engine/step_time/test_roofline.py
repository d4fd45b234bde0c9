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


# Llama-3.1-8B's GEMMs per layer on one GPU, (n, k): fused QKV, output, fused gate+up, down
LAYER_GEMMS = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
LM_HEAD = (128256, 4096)
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # bytes: K and V, 32 layers, 8 KV heads of 128, BF16
ATTN_PAIR_FLOPS = 4 * 32 * 32 * 128  # QK^T and AV, 32 layers, 32 heads of 128
EXACT = dict(gemm_half_tokens=0.0, gemm_half_n=0.0, gemm_half_k=0.0)  # efficiency = its share


def test_roofline_decode_at_batch_one_is_memory_bound_kernel_by_kernel():
    floor, attn_floor, bw, attn_bw, overhead = 3e-6, 8e-6, 0.8, 0.9, 0.002
    m = RooflineStepTime(
        deployment(),
        bandwidth_efficiency=bw,
        attention_bandwidth_efficiency=attn_bw,
        gemm_floor_s=floor,
        attention_floor_s=attn_floor,
        step_overhead_s=overhead,
    )
    stream = 3350e9 * bw  # H100 SXM HBM3, achieved
    gemms = 32 * sum(floor + n * k * 2 / stream for n, k in LAYER_GEMMS)
    gemms += floor + LM_HEAD[0] * LM_HEAD[1] * 2 / stream
    attention = 32 * attn_floor + (128 + 1) * KV_PER_TOKEN / (3350e9 * attn_bw)
    t = m.step_time_s(StepShape(0, 1, 0, 128))
    assert t == pytest.approx(gemms + attention + overhead, rel=1e-12)
    # one token's arithmetic is a small fraction of the weight read
    compute_s = 2 * 8.03e9 / (989e12 * 0.82)
    assert compute_s < 0.01 * gemms


def test_roofline_large_prefill_is_compute_bound():
    m = RooflineStepTime(
        deployment(),
        compute_efficiency=0.8,
        attention_compute_efficiency=0.7,
        gemm_floor_s=0.0,
        attention_floor_s=0.0,
        step_overhead_s=0.0,
        **EXACT,
    )
    p = 8192
    gemm = 32 * sum(2 * p * n * k for n, k in LAYER_GEMMS) / (989e12 * 0.8)
    lm_head = LM_HEAD[0] * LM_HEAD[1] * 2 / (3350e9 * 0.79)  # one logit row: memory-bound
    attention = ATTN_PAIR_FLOPS * p * p / (989e12 * 0.7)
    kv_write = p * KV_PER_TOKEN / (3350e9 * 0.94)  # the chunk's new KV, stored
    assert m.step_time_s(StepShape(p, 0, p * p, 0)) == pytest.approx(
        gemm + lm_head + attention + kv_write, rel=1e-12
    )


def test_narrow_shards_and_few_tokens_run_below_the_peak():
    # efficiency = share · m/(m + m½) · n/(n + n½) · k/(k + k½): a TP-8 shard of the output
    # projection (k = 4096/8) is less efficient than the whole matrix
    kwargs = dict(gemm_floor_s=0.0, attention_floor_s=0.0, step_overhead_s=0.0)
    shaped = RooflineStepTime(
        deployment(tp=8), gemm_half_tokens=73, gemm_half_n=0, gemm_half_k=132, **kwargs
    )
    ideal = RooflineStepTime(deployment(tp=8), **EXACT, **kwargs)
    p = 4096
    slow = shaped._gemms.seconds(p, 1) / ideal._gemms.seconds(p, 1)
    # every layer GEMM loses 4096/(4096+73); the narrow k = 512 and 1792 ones lose more
    assert slow > 1 / (p / (p + 73))
    qkv, out, up, down = ((6144 / 8, 4096), (4096, 512), (28672 / 8, 4096), (4096, 1792))
    weights = [n * k for n, k in (qkv, out, up, down)]
    losses = [(p + 73) / p * (k + 132) / k for _, k in (qkv, out, up, down)]
    expected = sum(w * loss for w, loss in zip(weights, losses, strict=True)) / sum(weights)
    lm = LM_HEAD[0] / 8 * LM_HEAD[1] * 2 / (3350e9 * 0.79)  # memory-bound in both
    layers = ideal._gemms.seconds(p, 1) - lm
    assert shaped._gemms.seconds(p, 1) - lm == pytest.approx(layers * expected, rel=1e-9)


def test_tensor_parallel_divides_compute_and_adds_allreduce():
    kwargs = dict(gemm_floor_s=0.0, attention_floor_s=0.0, step_overhead_s=0.0, **EXACT)
    one = RooflineStepTime(deployment(tp=1), **kwargs)
    two = RooflineStepTime(deployment(tp=2), allreduce_bandwidth_efficiency=0.5, **kwargs)
    p = 8192
    t1 = one.step_time_s(StepShape(p, 0, p * p, 0))  # compute-bound: halves with tp=2
    t2 = two.step_time_s(StepShape(p, 0, p * p, 0))
    # two all-reduces per layer, ring factor 2(tp-1)/tp = 1, BF16 activations, NVLink 450 GB/s
    # at half its bandwidth, plus the catalog's latency each
    latency = deployment().gpu.interconnect_latency_s
    allreduce = 2 * 32 * (p * 4096 * 2 / (450e9 * 0.5) + latency)
    assert t2 == pytest.approx(t1 / 2 + allreduce, rel=1e-9)
    # a tp=1 replica pays no all-reduce at all
    assert one._comm_per_token == 0.0 and one._fixed_s == 0.0


def test_attention_runs_at_bf16_unless_the_kv_cache_is_fp8():
    def attention_s(weights, kv):
        m = RooflineStepTime(deployment(weights=weights, kv=kv), attention_floor_s=0.0)
        p = 4096
        # the prefill attention term alone: the step with Ap minus the step without it
        return m.step_time_s(StepShape(p, 0, p * p, 0)) - m.step_time_s(StepShape(p, 0, 0, 0))

    bf16 = attention_s("bf16", "bf16")
    assert attention_s("fp8", "bf16") == pytest.approx(bf16, rel=1e-9)  # FP8 weights: no gain
    # FP8 FMHA at H100's FP8 peak (1,979 TFLOP/s against 989)
    assert attention_s("fp8", "fp8") == pytest.approx(bf16 * 989 / 1979, rel=1e-9)


def test_fp8_gemms_reach_a_smaller_share_of_their_peak():
    kwargs = dict(gemm_floor_s=0.0, quantized_gemm_floor_s=0.0, **EXACT)
    bf16 = RooflineStepTime(deployment(), compute_efficiency=0.8, **kwargs)
    fp8 = RooflineStepTime(deployment(weights="fp8"), quantized_compute_efficiency=0.6, **kwargs)
    # compute-bound GEMMs: about 2x the peak at 0.6/0.8 of the share is 1.5x faster, not 2x
    p = 16384
    layers_bf16 = bf16._gemms.seconds(p, 0)
    layers_fp8 = fp8._gemms.seconds(p, 0)
    assert layers_bf16 / layers_fp8 == pytest.approx(1979 / 989 * 0.6 / 0.8, rel=1e-9)


def test_pipeline_stages_split_the_layers_and_pay_the_bubble():
    kwargs = dict(gemm_floor_s=0.0, attention_floor_s=0.0, step_overhead_s=0.0, **EXACT)
    flat = RooflineStepTime(deployment(model="llama31_70b", tp=4), **kwargs)
    for pp, micro in ((2, 1), (2, 2), (4, 4)):
        dep = deployment(model="llama31_70b", tp=4, pp=pp, pp_microbatches=micro)
        staged = RooflineStepTime(dep, **kwargs)
        p = 8192  # compute-bound: a stage does 1/pp of the layers on 1/micro of the tokens
        shape = StepShape(p, 0, p * p, 0)
        stage = staged._stage_s(p / micro, 1 / micro, p * p / micro, 0)
        gpu = dep.gpu
        handoff = (pp - 1) * (p / micro * 8192 * 2 / (gpu.interconnect_bytes_per_s * 0.57))
        handoff += (pp - 1) * gpu.interconnect_latency_s
        assert staged.step_time_s(shape) == pytest.approx((micro + pp - 1) * stage + handoff)
        # the bubble: pp - 1 idle stage passes, so never faster than the flat replica
        assert staged.step_time_s(shape) > flat.step_time_s(shape) * (micro + pp - 1) / pp / micro
    assert deployment(model="llama31_70b", tp=4, pp=2).num_gpus == 8


def test_pipeline_needs_layers_for_every_stage():
    with pytest.raises(
        ConfigError, match=r"^fleet\.pp=33: must be at most Llama-3.1-8B's 32 layers"
    ):
        deployment(pp=33)


def test_expert_parallelism_trades_the_ffn_allreduce_for_all_to_alls():
    tp = RooflineStepTime(deployment(model="mixtral_8x7b", tp=4))
    ep = RooflineStepTime(deployment(model="mixtral_8x7b", tp=4, ep=4))
    latency = deployment().gpu.interconnect_latency_s
    # tp: 2 all-reduces per layer; ep: 1 all-reduce (attention) + 2 all-to-alls per layer
    assert tp._fixed_s - ep._fixed_s == pytest.approx(32 * (2 - 3) * latency)
    link = 450e9 * 0.57
    ring = 2 * 3 / 4 * 4096 * 2 / link
    all_to_all = 2 * (3 / 16) * 4096 * 2 / link  # 2 experts per token, (ep-1)/ep^2 leaves a GPU
    assert tp._comm_per_token == pytest.approx(32 * 2 * ring)
    assert ep._comm_per_token == pytest.approx(32 * (ring + 2 * all_to_all))


def test_expert_parallelism_needs_experts_and_the_tp_group():
    with pytest.raises(ConfigError, match=r"^fleet\.ep=2: .* is dense"):
        deployment(tp=2, ep=2)
    with pytest.raises(ConfigError, match=r"^fleet\.ep=2: expert parallelism spans"):
        deployment(model="mixtral_8x7b", tp=4, ep=2)


def test_roofline_validation_names_fields():
    with pytest.raises(ConfigError, match=r"^step_time\.compute_efficiency=0"):
        roofline(compute_efficiency=0)
    with pytest.raises(ConfigError, match=r"^step_time\.bandwidth_efficiency=1\.5"):
        roofline(bandwidth_efficiency=1.5)
    with pytest.raises(ConfigError, match=r"^step_time\.step_overhead_s=-"):
        roofline(step_overhead_s=-1)
    with pytest.raises(ConfigError, match=r"^step_time\.gemm_floor_s=-"):
        roofline(gemm_floor_s=-1e-6)
    with pytest.raises(ConfigError, match=r"^step_time\.allreduce_bandwidth_efficiency=0"):
        roofline(allreduce_bandwidth_efficiency=0)


def test_roofline_fp4_needs_blackwell():
    with pytest.raises(ConfigError, match=r"^precision\.weights='fp4'"):
        RooflineStepTime(deployment(weights="fp4"))
    b200 = RooflineStepTime(deployment(hardware="b200", weights="fp4"))
    b200_bf16 = RooflineStepTime(deployment(hardware="b200"))
    assert b200.step_time_s(StepShape(0, 1, 0, 100)) < b200_bf16.step_time_s(
        StepShape(0, 1, 0, 100)
    )
