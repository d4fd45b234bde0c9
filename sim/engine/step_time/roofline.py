"""A roofline step time: the slower of compute and memory traffic, plus fixed costs.

Per step, on each of the ``tp`` GPUs of a replica:

- FLOPs = (2·active_params·(P + D) + attention_pair_flops·(Ap + Ad)) / tp, against the GPU's
  dense peak at the weights' precision times ``compute_efficiency`` (achieved MFU);
- bytes = weights read once (for an MoE, the experts the batch touches) + the KV of every
  decoding sequence's context read + the step's new KV written, per GPU, against HBM bandwidth
  times ``bandwidth_efficiency``;
- tensor parallelism adds two all-reduces per layer of ``(P + D)·hidden·2`` bytes (ring:
  ``2(tp−1)/tp`` of the message over the interconnect, plus ``interconnect_latency_s``);
- ``step_overhead_s`` is the fixed CPU/launch cost of a step.

``t = max(t_compute, t_memory) + t_allreduce + step_overhead_s``. Compute and memory are assumed
to overlap perfectly inside a step; all-reduces are not overlapped. Left out: kernel-level
effects (tile quantisation, small-batch GEMM inefficiency), which the calibrated model captures;
the causal mask (Ap counts every query-key pair of a chunk, about twice what causal attention
computes inside the chunk, so very long prefills are priced high); and the reads of earlier KV
by a prefill chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.catalog.deployment import Deployment
from sim.catalog.model import bytes_per_element
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import VECTOR_MIN_STEPS, StepTimeModel
from sim.errors import require

_SURE = 1.0 - 1e-9  # a margin far above float rounding, far below any modelling difference


class RooflineStepTime(StepTimeModel):
    def __init__(
        self,
        deployment: Deployment,
        compute_efficiency: float = 0.6,
        bandwidth_efficiency: float = 0.8,
        step_overhead_s: float = 0.002,
        allreduce_bytes_per_element: float = 2.0,
    ) -> None:
        require(
            0 < compute_efficiency <= 1,
            "step_time.compute_efficiency",
            compute_efficiency,
            "must be in (0, 1]",
        )
        require(
            0 < bandwidth_efficiency <= 1,
            "step_time.bandwidth_efficiency",
            bandwidth_efficiency,
            "must be in (0, 1]",
        )
        require(step_overhead_s >= 0, "step_time.step_overhead_s", step_overhead_s, "must be >= 0")
        require(
            allreduce_bytes_per_element > 0,
            "step_time.allreduce_bytes_per_element",
            allreduce_bytes_per_element,
            "must be > 0",
        )
        model, gpu, tp = deployment.model, deployment.gpu, deployment.tp
        self._model = model
        self._tp = tp
        self._bytes_per_param = bytes_per_element(deployment.weights_precision, "precision.weights")
        flops_per_s = gpu.flops_per_s(deployment.weights_precision) * compute_efficiency
        bytes_per_s = gpu.hbm_bandwidth_bytes_per_s * bandwidth_efficiency
        # Seconds per unit of each term, per GPU, precomputed: this runs every step.
        self._s_per_token_flops = model.flops_per_token() / tp / flops_per_s
        self._s_per_attn_pair = model.attention_flops_per_token_pair() / tp / flops_per_s
        self._s_per_kv_token = deployment.memory.kv_bytes_per_token_per_gpu / bytes_per_s
        self._bytes_per_s = bytes_per_s
        self._dense = model.num_experts <= 1
        self._weights_s = model.weight_bytes(self._bytes_per_param) / tp / bytes_per_s
        if tp > 1:
            ring = 2.0 * (tp - 1) / tp
            per_token = (
                ring
                * model.hidden_size
                * allreduce_bytes_per_element
                / gpu.interconnect_bytes_per_s
            )
            n_allreduce = 2 * model.num_layers
            self._allreduce_s_per_token = n_allreduce * per_token
            self._allreduce_fixed_s = n_allreduce * gpu.interconnect_latency_s
        else:
            self._allreduce_s_per_token = 0.0
            self._allreduce_fixed_s = 0.0
        self._fixed_s = self._allreduce_fixed_s + float(step_overhead_s)  # every step pays it

    def _weights_read_s(self, num_tokens: int) -> float:
        if self._dense:
            return self._weights_s
        active = self._model.active_weight_bytes_per_step(self._bytes_per_param, num_tokens)
        return active / self._tp / self._bytes_per_s

    def step_time_s(self, shape: StepShape) -> float:
        decode_context = shape.decode_context
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        compute = self._s_per_token_flops * tokens + self._s_per_attn_pair * (
            shape.prefill_attn + decode_context
        )
        memory = self._weights_read_s(tokens) + self._s_per_kv_token * (decode_context + tokens)
        busy = compute if compute > memory else memory
        return busy + (self._allreduce_s_per_token * tokens + self._fixed_s)

    def decode_stretch_s(self, first: StepShape, context_growth: int, num_steps: int) -> Any:
        # step_time_s with P = Ap = 0, operation for operation (the same products and sums in
        # the same order), so each duration is bit-for-bit what a single step would cost.
        tokens = first.num_decode_seqs
        decode_context = first.decode_context
        token_compute = self._s_per_token_flops * tokens
        weights = self._weights_read_s(tokens)
        per_step = self._allreduce_s_per_token * tokens + self._fixed_s
        s_attn, s_kv = self._s_per_attn_pair, self._s_per_kv_token
        if num_steps >= VECTOR_MIN_STEPS:
            each = decode_context + context_growth * np.arange(num_steps, dtype=np.int64)
            busy = np.maximum(token_compute + s_attn * each, weights + s_kv * (each + tokens))
            return busy + per_step
        contexts = (
            range(decode_context, decode_context + context_growth * num_steps, context_growth)
            if context_growth
            else [decode_context] * num_steps
        )
        # Compute and memory time are both linear in the context: when memory wins at both
        # ends of the stretch, by more than rounding could undo, it wins at every step between.
        lo, hi = contexts[0], contexts[-1]
        if (
            token_compute + s_attn * lo < (weights + s_kv * (lo + tokens)) * _SURE
            and token_compute + s_attn * hi < (weights + s_kv * (hi + tokens)) * _SURE
        ):
            return [weights + s_kv * (context + tokens) + per_step for context in contexts]
        durations = []
        for context in contexts:
            compute = token_compute + s_attn * context
            memory = weights + s_kv * (context + tokens)
            durations.append((compute if compute > memory else memory) + per_step)
        return durations
