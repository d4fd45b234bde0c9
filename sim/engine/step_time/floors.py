"""Physical floors: no step can finish faster than its memory traffic or its arithmetic allows.

For one engine step of a replica (``tp`` GPUs per stage, ``pp`` stages, ``m`` micro-batches):

- memory floor: the weights the step reads plus the KV cache its decoding sequences attend,
  over the GPUs' peak HBM bandwidth. Never counted: the input embedding table, of which a step
  reads one row per token. Each GPU holds ``1/tp`` of its stage's weights and KV. The first
  micro-batch crosses the ``pp`` stages one after the other, each reading its weights (an MoE:
  the experts that micro-batch's ``T/m`` tokens touch), and the last stage then reads its KV
  share: ``(weights_read(T/m) / tp + kv_bytes_per_token_on_one_gpu_of_tp · Ad / pp) / peak``.
- compute floor: the step's FLOPs shared by all ``tp·pp`` GPUs, each kind at the peak of the
  precision it runs at: GEMMs ``2·active_params`` per token, less the embedding and LM head
  matrices (the LM head then counted once per token that produces a logit: each decode, one
  per step's prefills), at the weights' precision; attention ``attn_flops`` per query-key pair,
  with causal prefill counted as half of Ap (never more than it computes), at the attention's
  precision (``Deployment.attention_precision``).

A model that prices a step below either floor has an efficiency above 1 somewhere, or
forgot a term. ``tests/engine/step_time/test_floors.py`` holds every shipped profile and the
roofline to them over a grid of step shapes.
"""

from __future__ import annotations

import math

from sim.catalog.deployment import Deployment
from sim.catalog.model import bytes_per_element
from sim.engine.step_shape import StepShape


class PhysicalFloor:
    """The memory and compute floors of one deployment's steps, in seconds."""

    def __init__(self, deployment: Deployment) -> None:
        model, gpu = deployment.model, deployment.gpu
        self._model = model
        self._tp, self._pp = deployment.tp, deployment.pp
        self._microbatches = deployment.pp_microbatches if deployment.pp > 1 else 1
        self._bytes_per_param = bytes_per_element(deployment.weights_precision, "precision.weights")
        self._bandwidth = gpu.hbm_bandwidth_bytes_per_s
        self._gemm_peak = gpu.flops_per_s(deployment.weights_precision)
        self._attention_peak = gpu.flops_per_s(deployment.attention_precision)
        vocab_matrix = model.vocab_size * model.hidden_size
        self._embedding_bytes = vocab_matrix * self._bytes_per_param
        # per-token GEMM FLOPs without the embedding and the LM head (untied: both are in the
        # parameter count; tied: one is, and taking two off leaves a lower floor, still true)
        self._gemm_flops_per_token = max(0.0, model.flops_per_token() - 2 * 2.0 * vocab_matrix)
        self._lm_head_flops = 2.0 * vocab_matrix
        kv_bpe = bytes_per_element(deployment.kv_precision, "precision.kv")
        self._kv_per_token = model.kv_bytes_per_token(kv_bpe, deployment.tp)  # every layer's

    def memory_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        first = math.ceil(tokens / self._microbatches)  # the first micro-batch's tokens
        weights = self._model.active_weight_bytes_per_step(self._bytes_per_param, first)
        weights -= self._embedding_bytes
        kv = self._kv_per_token * shape.decode_context / self._pp
        return (weights / self._tp + kv) / self._bandwidth

    def compute_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        logits = shape.num_decode_seqs + (1 if shape.num_prefill_tokens else 0)
        gemm = self._gemm_flops_per_token * tokens + self._lm_head_flops * logits
        pairs = shape.prefill_attn / 2 + shape.decode_context
        attention = self._model.attention_flops_per_token_pair() * pairs
        gpus = self._tp * self._pp
        return (gemm / self._gemm_peak + attention / self._attention_peak) / gpus

    def __call__(self, shape: StepShape) -> float:
        """The larger floor: a step takes at least this long."""
        return max(self.memory_s(shape), self.compute_s(shape))
