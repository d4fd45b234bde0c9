"""The model catalog: the shapes of a transformer that decide its memory and its arithmetic.

A ``ModelSpec`` is the handful of config.json numbers a serving simulator needs: parameter counts
(weight bytes and GEMM FLOPs per token), layers x KV heads x head size (KV-cache bytes per token),
attention heads (attention FLOPs, which grow with context), and for a mixture of experts how many
experts exist and how many each token uses. The numbers live in ``configs/model/*.yaml``.

Accounting used here, all per token unless said otherwise::

    weights           = num_params * bytes_per_param               (all of it sits in memory)
    GEMM FLOPs        = 2 * num_active_params                      (one multiply-add per weight)
    attention FLOPs   = 4 * layers * heads * head_dim  per (query token, key token) pair
    KV bytes          = 2 (K and V) * layers * kv_heads * head_dim * bytes_per_kv_element

Left out on purpose: biases and norms beyond what ``num_params`` already counts, embedding
lookups being cheaper than GEMMs (the embedding table is counted in ``num_active_params`` like
any weight, a small overestimate), sliding-window or cross-layer KV sharing, MLA-style compressed
KV, speculative decoding, and LoRA adapters. MoE routing is modelled as uniform and independent
per token, which real routers are not (they are skewed, so fewer distinct experts get touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.config.schema import ModelConfig
from sim.errors import ConfigError, require

# Bytes per stored element at each precision. fp4 packs two values per byte; per-group scale
# factors (a few percent) are ignored.
PRECISION_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def bytes_per_element(precision: str, field: str) -> float:
    """Bytes per element at ``precision``; ConfigError naming ``field`` if it is unknown."""
    if precision not in PRECISION_BYTES:
        choices = "bf16, fp16, fp8" if field == "precision.kv" else "bf16, fp16, fp8, fp4"
        raise ConfigError(field, precision, f"unknown precision; choose one of {choices}")
    return PRECISION_BYTES[precision]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A transformer's serving-relevant shape. Dense models have ``num_experts == 1``."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    num_params: float
    num_active_params: float
    num_experts: int
    experts_per_token: int
    max_context_tokens: int
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def short_name(self) -> str:
        """The name without the Hugging Face organisation, for messages: "Llama-3.1-8B"."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    # ---- memory -------------------------------------------------------------------------

    def kv_bytes_per_token(self, kv_bytes_per_element: float, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one GPU of a ``tp``-way tensor-parallel group.

        Each GPU holds ``num_kv_heads / tp`` KV heads. When ``tp > num_kv_heads`` a KV head
        cannot be split, so it is replicated and every GPU still holds one whole head.
        """
        kv_heads_per_gpu = max(1.0, self.num_kv_heads / tp)
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * kv_bytes_per_element

    def weight_bytes(self, bytes_per_param: float) -> float:
        """Bytes of all weights (the whole model, before splitting over tensor parallelism)."""
        return self.num_params * bytes_per_param

    # ---- compute ------------------------------------------------------------------------

    def flops_per_token(self) -> float:
        """Dense GEMM FLOPs per token: 2 per active parameter. Attention scores are separate."""
        return 2.0 * self.num_active_params

    def attention_flops_per_token_pair(self) -> float:
        """FLOPs of QK^T and AV for one (query token, key token) pair, summed over layers.

        Two matmuls, each one multiply-add (2 FLOPs) per head dimension per head.
        """
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_dim

    # ---- mixture of experts -------------------------------------------------------------

    def expert_params(self) -> float:
        """Parameters of one expert summed over layers: a SwiGLU FFN has 3 hidden x ffn matrices."""
        return 3.0 * self.hidden_size * self.ffn_size * self.num_layers

    def non_expert_params(self) -> float:
        """Parameters every token uses: attention, norms, embeddings and LM head.

        Estimated as ``num_params - num_experts * expert_params()`` (Mixtral-8x7B: 1.6e9).
        """
        return self.num_params - self.num_experts * self.expert_params()

    def expected_experts_touched(self, batch_tokens: int) -> float:
        """Expected distinct experts per layer hit by ``batch_tokens`` tokens.

        Each token picks ``experts_per_token`` of ``num_experts`` uniformly, so an expert is
        missed by one token with probability ``1 - k/E`` and by all of them with that to the
        power of the token count: ``E * (1 - (1 - k/E) ** tokens)``.
        """
        assert batch_tokens >= 0, f"batch_tokens={batch_tokens} must be >= 0"
        k_over_e = self.experts_per_token / self.num_experts
        return self.num_experts * (1.0 - (1.0 - k_over_e) ** batch_tokens)

    def active_weight_bytes_per_step(self, bytes_per_param: float, batch_tokens: int) -> float:
        """Weight bytes one forward step over ``batch_tokens`` tokens must read from memory.

        Dense models read every weight. A MoE reads the non-expert weights plus the experts
        some token in the batch was routed to (see ``expected_experts_touched``): about the
        active parameters for one token, approaching all parameters for large batches.
        """
        if not self.is_moe:
            return self.weight_bytes(bytes_per_param)
        experts = self.expected_experts_touched(batch_tokens)
        return (self.non_expert_params() + experts * self.expert_params()) * bytes_per_param

    # ---- loading ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | ModelConfig) -> ModelSpec:
        """Build a ModelSpec from a ``model`` config node (checked against ``ModelConfig`` when
        it is plain data), then check what needs two fields at once: GQA head counts that do
        not divide, more active than total parameters, and (for MoE) expert parameters that
        exceed the total. Errors name the field as ``model.<field>``.
        """
        c = cfg if isinstance(cfg, ModelConfig) else ModelConfig.from_config(cfg)
        require(
            c.num_attention_heads % c.num_kv_heads == 0,
            "model.num_kv_heads",
            c.num_kv_heads,
            f"must divide num_attention_heads={c.num_attention_heads}",
        )
        require(
            c.experts_per_token <= c.num_experts,
            "model.experts_per_token",
            c.experts_per_token,
            f"must be <= num_experts={c.num_experts}",
        )
        require(
            c.num_active_params <= c.num_params,
            "model.num_active_params",
            c.num_active_params,
            f"must be <= num_params={c.num_params:.4g}",
        )
        if c.num_experts == 1:
            require(
                c.num_active_params == c.num_params,
                "model.num_active_params",
                c.num_active_params,
                f"a dense model (num_experts=1) uses all num_params={c.num_params:.4g}",
            )
        spec = cls(**c.model_dump())
        if spec.is_moe:
            require(
                spec.non_expert_params() > 0,
                "model.num_params",
                spec.num_params,
                f"smaller than {spec.num_experts} experts of 3*hidden_size*ffn_size*num_layers "
                f"= {spec.expert_params():.4g} parameters each",
            )
        return spec
