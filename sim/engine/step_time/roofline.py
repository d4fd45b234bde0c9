"""A roofline step time, kernel by kernel: each kind of kernel is bound by compute or memory
traffic, and the kernels of a step run one after another.

A GPU runs one kernel at a time per stream, so a step's time is the sum of its kernels' times,
not one roofline over the whole step. Per pipeline stage, on each of the ``tp`` GPUs:

- GEMMs (all layers' projections and the LM head; every GEMM of a step has the same token
  count, so they all sit on the same side of the ridge point together):
  ``max(2·active_params·T / tp / (peak_w·compute_eff_w), weights_read / tp / (bw·bandwidth_eff))
  + gemm_calls·gemm_floor_s``. ``peak_w`` is the GPU's dense peak at the weights' precision;
  FP8/FP4 GEMMs reach a smaller share of their peak (``quantized_compute_efficiency``: scaling
  and activation quantisation) than BF16 ones. ``gemm_floor_s`` is a GEMM's fixed cost however
  small the matrix, which is why narrow tensor-parallel shards are slower than 1/tp.
- attention: prefill ``attn_flops·Ap / tp / (peak_a·attention_compute_efficiency)``; decode
  ``max(attn_flops·Ad / tp / (peak_a·attention_compute_efficiency),
  KV bytes of (Ad + T) / (bw·attention_bandwidth_efficiency))``; plus one
  ``attention_floor_s`` per layer. Attention runs at BF16 (``peak_a``) whatever the weights:
  FP8 or FP4 weights do not make softmax(QK^T)V low-precision. Only an FP8 KV cache runs
  FP8 attention kernels (FP8 FMHA in TensorRT-LLM, FlashAttention-3 in vLLM).
- tensor parallelism: two all-reduces per layer of ``T·hidden·2`` bytes, each
  ``interconnect_latency_s + ring_bytes / (interconnect_bw·allreduce_bandwidth_efficiency)``
  (ring: ``2(tp−1)/tp`` of the message). Not overlapped with compute.
- expert parallelism (``fleet.ep`` = tp, MoE only, with one data-parallel rank, as vLLM's
  ``--enable-expert-parallel`` runs without ``--data-parallel-size``): the routed experts are
  spread whole over the ``ep`` GPUs instead of each being split, so their GEMMs run at the
  experts' full width; the MoE output is still all-reduced over the group (vLLM uses
  all-to-all kernels only with data-parallel attention, ``use_all2all_kernels = dp_size > 1
  and use_ep`` in its FusedMoEParallelConfig; that mode is not modelled).
- pipeline parallelism (``fleet.pp`` stages, ``m`` micro-batches): each stage holds
  ``num_layers/pp`` layers; the batch is cut into ``m`` micro-batches that flow through the
  stages: the first crosses the ``pp − 1`` stages before the last, which then runs all ``m``
  with the LM head, so a step takes ``(pp − 1)`` stage passes without the LM head plus ``m``
  with it (GPipe's bubble), plus ``pp − 1`` activation hand-offs of ``T/m·hidden·2`` bytes over
  the catalog's interconnect (NVLink figures: stages across nodes hand off slower). Engines
  keep ``pp`` batches in flight across steps (vLLM's virtual engines) instead of paying the
  bubble every step, so memory-bound decode throughput with ``pp > 1`` is underestimated, by up
  to ``(2pp − 1)/pp`` with one micro-batch per stage.
- ``step_overhead_s``: the engine's fixed per-step cost (scheduling, sampling, launch), and
  ``token_overhead_s`` per sequence that produces a token in the step (the host's sampling,
  detokenising and output handling of each; 0 by default, fitted by ``calibrate --bench``).
- ``request_overhead_s``: the server's fixed time per request before the engine queues it
  (HTTP, tokenising, hand-off; ``StepTimeModel``): 0 by default, fitted by
  ``calibrate --bench``.
- ``profile``: a file from ``fleetcast calibrate --bench`` (``bench_profile``): its fitted
  terms replace the defaults of those keys.

Where the defaults come from: the GEMM and attention terms were read off NVIDIA
aiconfigurator's measured H100-SXM kernel tables shipped in ``data/calibration`` (TensorRT-LLM
1.3.0rc20, Llama-3.1-8B shapes), the all-reduce terms off its measured H100 custom all-reduce
table (TensorRT-LLM 1.3.0rc20, 2-8 GPUs, 1 K-32 M elements); ``configs/step_time/roofline.yaml``
gives each figure. They are kernel measurements, not serving runs: nothing here is fitted to
the end-to-end runs that ``benchmarks/fidelity.py`` scores the roofline on.

Left out: tile and wave quantisation (the measured efficiencies average over them), GEMM
efficiency falling at small token counts beyond the floor, the causal mask (Ap counts every
query-key pair of a chunk; the efficiency was read off on that count), the reads of earlier KV
by a prefill chunk, element-wise kernels (norms, activations: fused or small), overlap of
communication with compute, and load imbalance between experts.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from sim.catalog.deployment import Deployment
from sim.catalog.model import ModelSpec, bytes_per_element
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import VECTOR_MIN_STEPS, StepTimeModel
from sim.engine.step_time.bench_profile import load_bench_profile
from sim.errors import require
from sim.signature import constructor

_LOW_PRECISION = ("fp8", "fp4")
# Kernel floors for a GPU the catalog has no measurement for: the medians over the 7 GPUs that
# have one (configs/hardware/*.yaml, gemm_floor_us 2.8-10.1 us, attention_floor_us 6.6-10.5 us)
DEFAULT_GEMM_FLOOR_S = 3.7e-6
DEFAULT_ATTENTION_FLOOR_S = 7.3e-6
_ACTIVATION_BYTES = 2.0  # activations travel between stages in BF16


def _fraction(value: float, field: str) -> float:
    require(0 < value <= 1, f"step_time.{field}", value, "must be in (0, 1]")
    return float(value)


def _non_negative(value: float, field: str) -> float:
    require(value >= 0, f"step_time.{field}", value, "must be >= 0")
    return float(value)


class RooflineStepTime(StepTimeModel):
    def __init__(
        self,
        deployment: Deployment,
        compute_efficiency: float = 0.82,
        quantized_compute_efficiency: float = 0.61,
        gemm_half_tokens: float = 73.0,
        gemm_half_n: float = 10.0,
        gemm_half_k: float = 132.0,
        attention_compute_efficiency: float = 0.7,
        bandwidth_efficiency: float = 0.79,
        attention_bandwidth_efficiency: float = 0.94,
        gemm_floor_s: float | None = None,
        quantized_gemm_floor_s: float = 13.1e-6,
        attention_floor_s: float | None = None,
        step_overhead_s: float = 0.002,
        allreduce_bytes_per_element: float = 2.0,
        allreduce_bandwidth_efficiency: float = 0.57,
        token_overhead_s: float = 0.0,
        request_overhead_s: float = 0.0,
        profile: str | None = None,
    ) -> None:
        if profile is not None:
            # the fitted terms (bench_profile.TERMS) take the place of those keywords (none of
            # which the run set); named one by one, since a compiled build has no locals()
            given: dict[str, float] = {
                "compute_efficiency": compute_efficiency,
                "quantized_compute_efficiency": quantized_compute_efficiency,
                "attention_compute_efficiency": attention_compute_efficiency,
                "bandwidth_efficiency": bandwidth_efficiency,
                "attention_bandwidth_efficiency": attention_bandwidth_efficiency,
                "step_overhead_s": step_overhead_s,
                "token_overhead_s": token_overhead_s,
                "request_overhead_s": request_overhead_s,
                "allreduce_bandwidth_efficiency": allreduce_bandwidth_efficiency,
            }
            given.update(load_bench_profile(profile, deployment, given, _DEFAULTS))
            compute_efficiency = given["compute_efficiency"]
            quantized_compute_efficiency = given["quantized_compute_efficiency"]
            attention_compute_efficiency = given["attention_compute_efficiency"]
            bandwidth_efficiency = given["bandwidth_efficiency"]
            attention_bandwidth_efficiency = given["attention_bandwidth_efficiency"]
            step_overhead_s = given["step_overhead_s"]
            token_overhead_s = given["token_overhead_s"]
            request_overhead_s = given["request_overhead_s"]
            allreduce_bandwidth_efficiency = given["allreduce_bandwidth_efficiency"]
        compute_efficiency = _fraction(compute_efficiency, "compute_efficiency")
        quantized = _fraction(quantized_compute_efficiency, "quantized_compute_efficiency")
        attn_eff = _fraction(attention_compute_efficiency, "attention_compute_efficiency")
        bw_eff = _fraction(bandwidth_efficiency, "bandwidth_efficiency")
        attn_bw_eff = _fraction(attention_bandwidth_efficiency, "attention_bandwidth_efficiency")
        ar_eff = _fraction(allreduce_bandwidth_efficiency, "allreduce_bandwidth_efficiency")
        half = {
            name: _non_negative(value, name)
            for name, value in (
                ("gemm_half_tokens", gemm_half_tokens),
                ("gemm_half_n", gemm_half_n),
                ("gemm_half_k", gemm_half_k),
            )
        }
        gpu = deployment.gpu
        # null: the GPU's measured figure (hardware.gemm_floor_us, attention_floor_us), else the
        # median over the GPUs that have one
        if gemm_floor_s is None:
            gemm_floor_s = gpu.gemm_floor_s or DEFAULT_GEMM_FLOOR_S
        if attention_floor_s is None:
            attention_floor_s = gpu.attention_floor_s or DEFAULT_ATTENTION_FLOOR_S
        gemm_floor_s = _non_negative(gemm_floor_s, "gemm_floor_s")
        quantized_floor_s = _non_negative(quantized_gemm_floor_s, "quantized_gemm_floor_s")
        attention_floor_s = _non_negative(attention_floor_s, "attention_floor_s")
        step_overhead_s = _non_negative(step_overhead_s, "step_overhead_s")
        token_overhead_s = _non_negative(token_overhead_s, "token_overhead_s")
        self.request_overhead_s = _non_negative(request_overhead_s, "request_overhead_s")
        require(
            allreduce_bytes_per_element > 0,
            "step_time.allreduce_bytes_per_element",
            allreduce_bytes_per_element,
            "must be > 0",
        )
        model, tp, pp = deployment.model, deployment.tp, deployment.pp
        bpp = bytes_per_element(deployment.weights_precision, "precision.weights")
        layers = model.num_layers / pp  # per stage
        low = deployment.weights_precision in _LOW_PRECISION
        self._gemms = _Gemms(
            model,
            tp=tp,
            ep=deployment.ep,
            layers=layers,
            bytes_per_param=bpp,
            flops_per_s=gpu.flops_per_s(deployment.weights_precision)
            * (quantized if low else compute_efficiency),
            bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * bw_eff,
            floor_s=quantized_floor_s if low else gemm_floor_s,
            half_tokens=half["gemm_half_tokens"],
            half_n=half["gemm_half_n"],
            half_k=half["gemm_half_k"],
        )
        attn_flops_per_s = gpu.flops_per_s(deployment.attention_precision) * attn_eff
        # Seconds per unit of each term, per GPU and per pipeline stage, precomputed: this runs
        # every step.
        self._s_per_attn_pair = model.attention_flops_per_token_pair() / tp / attn_flops_per_s / pp
        kv_per_token_stage = deployment.memory.kv_bytes_per_token_per_gpu
        self._s_per_kv_token = kv_per_token_stage / (gpu.hbm_bandwidth_bytes_per_s * attn_bw_eff)
        attention_fixed_s = layers * attention_floor_s

        link_s_per_byte = 1.0 / (gpu.interconnect_bytes_per_s * ar_eff)
        latency = gpu.interconnect_latency_s
        token_bytes = model.hidden_size * allreduce_bytes_per_element
        comm_per_token = 0.0
        comm_fixed = 0.0
        if tp > 1:
            ring = 2.0 * (tp - 1) / tp
            allreduces = 2 * layers  # after attention and after the FFN (or experts)
            comm_per_token += allreduces * ring * token_bytes * link_s_per_byte
            comm_fixed += allreduces * latency
        self._comm_per_token = comm_per_token
        self._fixed_s = comm_fixed + attention_fixed_s  # every stage pass pays it
        # pipeline: (m + pp - 1) passes of one micro-batch through a stage, pp - 1 hand-offs
        self._pp = pp
        self._microbatches = deployment.pp_microbatches
        self._handoff_per_token = (pp - 1) * model.hidden_size * _ACTIVATION_BYTES * link_s_per_byte
        self._handoff_fixed = (pp - 1) * latency if pp > 1 else 0.0
        self._step_overhead_s = step_overhead_s
        self._token_overhead_s = token_overhead_s

    def _stage_s(
        self, tokens: float, logits: float, prefill_attn: float, decode_context: float
    ) -> float:
        """One micro-batch's pass through a stage; ``logits`` rows through the LM head (0 on
        every stage but the last)."""
        gemm = self._gemms.seconds(tokens, logits)
        decode_compute = self._s_per_attn_pair * decode_context
        kv = self._s_per_kv_token * (decode_context + tokens)
        attention = self._s_per_attn_pair * prefill_attn + (
            decode_compute if decode_compute > kv else kv
        )
        return gemm + attention + (self._comm_per_token * tokens + self._fixed_s)

    def step_time_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        # the LM head runs for each decode and the last token of the prefills (counted as one,
        # as the step shape does not say how many prompts end in the step)
        logits = shape.num_decode_seqs + (1 if shape.num_prefill_tokens else 0)
        overhead = self._step_overhead_s + self._token_overhead_s * logits
        if self._pp == 1:
            stage = self._stage_s(tokens, logits, shape.prefill_attn, shape.decode_context)
            return stage + overhead
        m = min(self._microbatches, tokens) or 1  # no micro-batch smaller than one token
        per = (tokens / m, shape.prefill_attn / m, shape.decode_context / m)
        before_last = self._stage_s(per[0], 0, per[1], per[2])  # no LM head there
        last = self._stage_s(per[0], logits / m, per[1], per[2])
        handoff = self._handoff_per_token * (tokens / m) + self._handoff_fixed
        return (self._pp - 1) * before_last + m * last + handoff + overhead

    def host_overhead_s(self, shape: StepShape) -> float:
        logits = shape.num_decode_seqs + (1 if shape.num_prefill_tokens else 0)
        return self._step_overhead_s + self._token_overhead_s * logits

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        if self._pp > 1:
            return super().decode_stretch_s(first, context_growth, num_steps)
        # _stage_s + overhead with P = Ap = 0 and pp = 1, operation for operation (the same
        # products and sums in the same order; the prefill attention term is 0.0, and adding
        # 0.0 changes no float), so each duration is bit-for-bit what a single step costs.
        tokens = first.num_decode_seqs
        gemm = self._gemms.seconds(tokens, tokens)
        tail = self._comm_per_token * tokens + self._fixed_s
        overhead = self._step_overhead_s + self._token_overhead_s * tokens
        s_attn, s_kv = self._s_per_attn_pair, self._s_per_kv_token
        if num_steps >= VECTOR_MIN_STEPS:
            each = first.decode_context + context_growth * np.arange(num_steps, dtype=np.int64)
            attention = np.maximum(s_attn * each, s_kv * (each + tokens))
            return ((gemm + attention) + tail) + overhead
        durations = []
        context = first.decode_context
        for _ in range(num_steps):
            compute = s_attn * context
            kv = s_kv * (context + tokens)
            durations.append(((gemm + (compute if compute > kv else kv)) + tail) + overhead)
            context += context_growth
        return durations


# each keyword's default: a profile's fitted term may replace a key only while it has it
_DEFAULTS = {
    name: p.default
    for name, p in constructor(RooflineStepTime)[0].parameters.items()
    if p.default is not inspect.Parameter.empty
}


class _Gemms:
    """The GEMMs of one pipeline stage on one GPU, each priced as
    ``floor + max(flops / (peak·eff(m, n, k)), weight bytes / bandwidth)``.

    ``eff(m, n, k) = peak_share · m/(m + m½) · n/(n + n½) · k/(k + k½)``: a GEMM reaches its
    share of the peak only when the token count ``m`` and both of its per-GPU matrix dimensions
    are large; a tensor-parallel shard is narrower, so it runs further below the peak. Dense
    layers have four GEMMs (fused QKV, output, fused gate+up, down) with their per-GPU shapes;
    an MoE's routed experts are one grouped GEMM per layer over the weights the batch touches,
    each expert seeing ``m·experts_per_token/num_experts`` tokens on average. The LM head runs
    once per stage pass for the sequences that produce a token.
    """

    def __init__(
        self,
        model: ModelSpec,
        *,
        tp: int,
        ep: int = 1,
        layers: float,
        bytes_per_param: float,
        flops_per_s: float,
        bytes_per_s: float,
        floor_s: float,
        half_tokens: float,
        half_n: float,
        half_k: float,
    ) -> None:
        self._model = model
        self._tp = tp
        # the width of a routed expert's GEMMs on one GPU: split by tp, or whole under EP
        self._expert_width = model.expert_ffn_size / (1 if ep > 1 else tp)
        self._layers = layers
        self._bpp = bytes_per_param
        self._flops_per_s = flops_per_s
        self._bytes_per_s = bytes_per_s
        self._floor_s = floor_s
        self._half = (half_tokens, half_n, half_k)
        h, d = model.hidden_size, model.head_dim
        q_heads = model.num_attention_heads / tp
        kv_heads = max(1.0, model.num_kv_heads / tp)  # a KV head is replicated, never split
        # (n, k) per GPU of each GEMM that every layer runs, and their parameters. MLA's
        # low-rank projections are not spelled out: they join the per-token remainder below.
        self._layer_shapes: list[tuple[float, float]] = []
        attention_params = 0.0
        if not model.is_mla:
            self._layer_shapes += [
                ((q_heads + 2 * kv_heads) * d, h),  # fused QKV projection
                (h, q_heads * d),  # attention output projection
            ]
            attention_params = float(
                (2 * model.num_attention_heads + 2 * model.num_kv_heads) * d * h
            )
        if model.is_moe:
            # a routed expert's share of one MoE layer; dense layers have none
            self._expert_params_per_layer = model.expert_params() / model.num_moe_layers
            self._moe_layer_share = model.num_moe_layers / model.num_layers
        else:
            self._layer_shapes += [
                (2 * model.ffn_size / tp, h),  # fused gate and up projections
                (h, model.ffn_size / tp),  # down projection
            ]
            self._expert_params_per_layer = self._moe_layer_share = 0.0
        # MoE: what the attention, embeddings, LM head and routed experts leave (router, shared
        # experts, dense layers' FFNs, MLA's projections) runs for every token whatever the
        # routing, spread evenly over the layers
        shared = model.non_expert_params() - model.num_layers * attention_params
        shared -= 2 * model.vocab_size * h
        self._shared_params_per_layer = max(0.0, shared) / model.num_layers if model.is_moe else 0.0
        self._lm_head = (model.vocab_size / tp, h)
        self._cache: dict[tuple[float, float], float] = {}

    def _eff(self, m: float, n: float, k: float) -> float:
        hm, hn, hk = self._half
        return m / (m + hm) * n / (n + hn) * k / (k + hk)

    def _kernel(self, calls: int, flops: float, eff: float, weight_bytes: float) -> float:
        """``calls`` GEMM launches doing ``flops`` at ``eff`` of the peak over ``weight_bytes``
        of weights: their floors plus the slower of compute and the weight read."""
        compute = flops / (self._flops_per_s * eff)
        memory = weight_bytes / self._bytes_per_s
        return calls * self._floor_s + (compute if compute > memory else memory)

    def _one(self, m: float, n: float, k: float) -> float:
        """Seconds of one GEMM of ``m`` tokens against an ``n × k`` weight shard."""
        if m <= 0:
            return 0.0
        return self._kernel(1, 2.0 * m * n * k, self._eff(m, n, k), n * k * self._bpp)

    def seconds(self, tokens: float, logits: float) -> float:
        """All GEMMs of a stage pass over ``tokens`` tokens, ``logits`` of them through the LM
        head. Memoised: a run has few distinct (tokens, logits) pairs."""
        key = (tokens, logits)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        per_layer = sum(self._one(tokens, n, k) for n, k in self._layer_shapes)
        if self._model.is_moe:
            per_layer += self._experts(tokens) * self._moe_layer_share + self._shared(tokens)
        total = self._layers * per_layer + self._one(logits, *self._lm_head)
        if len(self._cache) < 100_000:
            self._cache[key] = total
        return total

    def _experts(self, tokens: float) -> float:
        """One layer's routed experts (gate+up and down: two grouped GEMMs) on one GPU."""
        model = self._model
        if tokens <= 0:
            return 0.0
        per_expert_tokens = tokens * model.experts_per_token / model.num_experts
        touched = model.expected_experts_touched(math.ceil(tokens))  # a micro-batch: a share
        params = self._expert_params_per_layer / self._tp
        eff = self._eff(per_expert_tokens, self._expert_width, model.hidden_size)
        flops = 2.0 * tokens * model.experts_per_token * params
        return self._kernel(2, flops, eff, touched * params * self._bpp)

    def _shared(self, tokens: float) -> float:
        """One layer's share of the MoE weights every token runs through."""
        shared = self._shared_params_per_layer / self._tp
        if shared <= 0 or tokens <= 0:
            return 0.0
        h = self._model.hidden_size
        return self._kernel(1, 2.0 * tokens * shared, self._eff(tokens, h, h), shared * self._bpp)
