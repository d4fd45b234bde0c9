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
    # Llama-3.1-70B on TP 4 x PP 2 with 2 micro-batches, a compute-bound prefill of 8,192 tokens,
    # by hand: each micro-batch (4,096 tokens) crosses stage 1 (40 layers), then stage 2 (40
    # layers and the LM head) runs both micro-batches: 1 pass without the LM head + 2 with it
    kwargs = dict(gemm_floor_s=0.0, attention_floor_s=0.0, step_overhead_s=0.0, **EXACT)
    dep = deployment(model="llama31_70b", tp=4, pp=2, pp_microbatches=2)
    staged = RooflineStepTime(dep, **kwargs)
    p, t = 8192, 4096
    h, link = 8192, 450e9 * 0.57
    # per GPU (n, k): QKV (16 + 2x2 heads of 128), output, gate+up, down, as tp=4 splits them
    shapes = [(2560, h), (h, 2048), (14336, h), (h, 7168)]
    gemms = 40 * sum(2 * t * n * k for n, k in shapes) / (989e12 * 0.82)
    lm_head = (128256 / 4) * h * 2 / (3350e9 * 0.79)  # half a logit row: memory-bound
    attention = 4 * 80 * 64 * 128 / 4 / 2 * (p * p / 2) / (989e12 * 0.7)
    kv_write = t * 2 * 40 * 2 * 128 * 2 / (3350e9 * 0.94)  # 2 KV heads per GPU, 40 layers
    latency = dep.gpu.interconnect_latency_s
    allreduces = 80 * (1.5 * t * h * 2 / link + latency)
    stage = gemms + attention + kv_write + allreduces
    handoff = t * h * 2 / link + latency
    expected = 1 * stage + 2 * (stage + lm_head) + handoff
    assert staged.step_time_s(StepShape(p, 0, p * p, 0)) == pytest.approx(expected, rel=1e-9)
    assert dep.num_gpus == 8 and dep.memory.pp == 2
    # the bubble: one micro-batch per stage leaves pp - 1 passes idle, so a step of one
    # micro-batch on two stages costs more than on one stage of twice the layers
    flat = RooflineStepTime(deployment(model="llama31_70b", tp=4), **kwargs)
    one = RooflineStepTime(deployment(model="llama31_70b", tp=4, pp=2, pp_microbatches=1), **kwargs)
    decode = StepShape(0, 64, 0, 64 * 1000)
    assert one.step_time_s(decode) > flat.step_time_s(decode)


def test_pipeline_needs_layers_for_every_stage():
    with pytest.raises(
        ConfigError, match=r"^fleet\.pp=33: must be at most Llama-3.1-8B's 32 layers"
    ):
        deployment(pp=33)


def test_expert_parallelism_runs_whole_experts_and_keeps_the_allreduce():
    kwargs = dict(gemm_floor_s=0.0, gemm_half_tokens=0, gemm_half_k=0)
    tp = RooflineStepTime(deployment(model="mixtral_8x7b", tp=4), gemm_half_n=10, **kwargs)
    ep = RooflineStepTime(deployment(model="mixtral_8x7b", tp=4, ep=4), gemm_half_n=10, **kwargs)
    # one data-parallel rank: the MoE output is all-reduced over the group either way
    assert (ep._comm_per_token, ep._fixed_s) == (tp._comm_per_token, tp._fixed_s)
    # a decode of one token reads the same expert bytes per GPU either way
    assert ep._gemms._experts(1) == pytest.approx(tp._gemms._experts(1), rel=1e-12)
    # compute-bound experts: whole experts (n = 14,336) run closer to the peak than a quarter
    # of each (n = 3,584): efficiency n/(n + 10)
    tokens = 65536
    ratio = (3584 / (3584 + 10)) / (14336 / (14336 + 10))
    assert ep._gemms._experts(tokens) == pytest.approx(tp._gemms._experts(tokens) * ratio)


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
