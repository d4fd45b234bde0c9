"""Physical floors: no step can finish faster than its memory traffic or its arithmetic allows.

For one engine step of a replica (``tp`` GPUs per stage, ``pp`` stages):

- memory floor: the weights the step reads (an MoE: the experts its tokens touch; never the
  input embedding table, of which a step reads one row per token) plus the KV
  cache its decoding sequences attend, over the GPUs' peak HBM bandwidth. Each GPU holds
  ``1/tp`` of its stage's weights and KV. The batch's first (micro-)batch crosses the ``pp``
  stages one after the other, each reading its weights, and the last stage then reads its
  KV share: ``(weights_read / tp + kv_bytes_per_token_on_one_gpu_of_tp · Ad / pp) / peak``.
- compute floor: the step's FLOPs (GEMMs ``2·active_params`` per token less the embedding
  lookup, which multiplies nothing; attention
  ``attn_flops`` per query-key pair, with causal prefill counted as half of Ap, which is never
  more than it computes) shared by all ``tp·pp`` GPUs at their highest dense peak.

A model that prices a step below either floor has an efficiency above 1 somewhere, or
forgot a term. ``tests/engine/step_time/test_floors.py`` holds every shipped profile and the
roofline to them over a grid of step shapes.
"""

from __future__ import annotations

from sim.catalog.deployment import Deployment
from sim.catalog.model import bytes_per_element
from sim.engine.step_shape import StepShape


class PhysicalFloor:
    """The memory and compute floors of one deployment's steps, in seconds."""

    def __init__(self, deployment: Deployment) -> None:
        model, gpu = deployment.model, deployment.gpu
        self._model = model
        self._tp, self._pp = deployment.tp, deployment.pp
        self._bytes_per_param = bytes_per_element(deployment.weights_precision, "precision.weights")
        self._bandwidth = gpu.hbm_bandwidth_bytes_per_s
        # the fastest tensor cores the GPU has: no kernel beats them
        self._peak = max(f for f in gpu.dense_flops_per_s.values() if f is not None)
        self._embedding_bytes = model.vocab_size * model.hidden_size * self._bytes_per_param
        self._embedding_flops_per_token = 2.0 * model.vocab_size * model.hidden_size
        kv_bpe = bytes_per_element(deployment.kv_precision, "precision.kv")
        self._kv_per_token = model.kv_bytes_per_token(kv_bpe, deployment.tp)  # every layer's

    def memory_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        weights = self._model.active_weight_bytes_per_step(self._bytes_per_param, tokens)
        weights -= self._embedding_bytes
        kv = self._kv_per_token * shape.decode_context / self._pp
        return (weights / self._tp + kv) / self._bandwidth

    def compute_s(self, shape: StepShape) -> float:
        tokens = shape.num_prefill_tokens + shape.num_decode_seqs
        pairs = shape.prefill_attn / 2 + shape.decode_context
        gemm_flops_per_token = self._model.flops_per_token() - self._embedding_flops_per_token
        flops = gemm_flops_per_token * tokens + self._model.attention_flops_per_token_pair() * pairs
        return flops / (self._tp * self._pp * self._peak)

    def __call__(self, shape: StepShape) -> float:
        """The larger floor: a step takes at least this long."""
        return max(self.memory_s(shape), self.compute_s(shape))
