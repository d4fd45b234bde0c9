"""The model catalog: the shapes of a transformer that decide its memory and its arithmetic.

A ``ModelSpec`` is the handful of config.json numbers a serving simulator needs: parameter counts
(weight bytes and GEMM FLOPs per token), layers x KV heads x head size (KV-cache bytes per token),
attention heads (attention FLOPs, which grow with context), and for a mixture of experts how many
experts exist, how large they are and how many each token uses. The numbers live in
``configs/model/*.yaml``, or come from a Hugging Face config.json (``model=hf
model.config_path=PATH``; ``sim.catalog.hf_config`` counts them).

Accounting used here, all per token unless said otherwise::

    weights           = num_params * bytes_per_param               (all of it sits in memory)
    GEMM FLOPs        = 2 * num_active_params                      (one multiply-add per weight)
    attention FLOPs   = 2 * layers * heads * (head_dim + v_head_dim)
                        per (query token, key token) pair          (QK^T, then AV)
    KV bytes          = 2 (K and V) * layers * kv_heads * head_dim * bytes_per_kv_element
    KV bytes, MLA     = layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_kv_element
                        (one latent and one RoPE key per token, the same on every GPU)

A MoE layer holds ``num_experts`` routed experts of ``moe_ffn_size`` (each token uses
``experts_per_token``) and ``num_shared_experts`` that every token uses; the first
``num_dense_layers`` layers (DeepSeek's first_k_dense_replace) have a dense FFN instead.

Left out on purpose: embedding lookups being cheaper than GEMMs (the embedding table is counted
in ``num_active_params`` like any weight, a small overestimate), sliding-window or cross-layer KV
sharing, MLA's absorbed decode path (vLLM multiplies the latent into the queries and attends over
kv_lora_rank + qk_rope_head_dim per head, more FLOPs per pair than counted here), speculative
decoding, and LoRA adapters. MoE routing is modelled as uniform and independent per token, which
real routers are not (they are skewed, so fewer distinct experts get touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.catalog.hf_config import model_fields
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
    config_path: str | None = None  # the config.json the shape came from, if any
    moe_ffn_size: int | None = None  # None: ffn_size
    num_shared_experts: int = 0
    shared_expert_ffn_size: int | None = None  # None: the routed experts' size
    num_dense_layers: int = 0  # MoE models: layers with a dense FFN instead of experts
    kv_lora_rank: int | None = None  # MLA: the cached latent's width; None: plain K and V
    qk_rope_head_dim: int | None = None  # MLA: the cached RoPE key's width
    v_head_dim: int | None = None  # None: head_dim
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def short_name(self) -> str:
        """The name without the Hugging Face organisation, for messages: "Llama-3.1-8B"."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds a compressed latent."""
        return self.kv_lora_rank is not None

    @property
    def num_moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts (0 for a dense model)."""
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def expert_ffn_size(self) -> int:
        """A routed expert's intermediate size."""
        return self.moe_ffn_size if self.moe_ffn_size is not None else self.ffn_size

    # ---- memory -------------------------------------------------------------------------

    def kv_bytes_per_token(self, kv_bytes_per_element: float, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one GPU of a ``tp``-way tensor-parallel group.

        Each GPU holds ``num_kv_heads / tp`` KV heads. When ``tp > num_kv_heads`` a KV head
        cannot be split, so it is replicated and every GPU still holds one whole head.

        MLA caches one latent of ``kv_lora_rank`` and one RoPE key of ``qk_rope_head_dim`` per
        token and layer, shared by all heads, so it is not split: every GPU of the group holds
        all of it. vLLM counts one KV head for MLA whatever the TP ("When using MLA during
        decode it becomes MQA", ``ModelConfig.get_num_kv_heads`` in vllm/config/model.py) of
        head size ``kv_lora_rank + qk_rope_head_dim`` (``get_head_size`` in
        vllm/transformers_utils/model_arch_config_convertor.py, vllm-project/vllm 00bb6f59,
        read 2026-12).
        """
        if self.kv_lora_rank is not None:
            assert self.qk_rope_head_dim is not None, "MLA needs qk_rope_head_dim"
            latent = self.kv_lora_rank + self.qk_rope_head_dim
            return self.num_layers * latent * kv_bytes_per_element
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

        Two matmuls, each one multiply-add (2 FLOPs) per head dimension per head: QK^T over the
        query/key head size ``head_dim``, AV over the value head size (MLA: ``v_head_dim``).
        """
        v_dim = self.v_head_dim if self.v_head_dim is not None else self.head_dim
        return 2.0 * self.num_layers * self.num_attention_heads * (self.head_dim + v_dim)

    # ---- mixture of experts -------------------------------------------------------------

    def expert_params(self) -> float:
        """Parameters of one routed expert summed over the MoE layers: a SwiGLU FFN has three
        hidden x ``expert_ffn_size`` matrices (0 for a dense model)."""
        return 3.0 * self.hidden_size * self.expert_ffn_size * self.num_moe_layers

    def non_expert_params(self) -> float:
        """Parameters every token uses: attention, norms, embeddings, LM head, routers, shared
        experts and the dense layers' FFNs.

        ``num_params - num_experts * expert_params()`` (Mixtral-8x7B: 1.6e9).
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

        Dense models read every weight. A MoE reads the non-expert weights (shared experts
        included: every token uses them) plus the routed experts some token in the batch chose
        (see ``expected_experts_touched``): about the active parameters for one token,
        approaching all parameters for large batches.
        """
        if not self.is_moe:
            return self.weight_bytes(bytes_per_param)
        experts = self.expected_experts_touched(batch_tokens)
        return (self.non_expert_params() + experts * self.expert_params()) * bytes_per_param

    # ---- loading ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | ModelConfig) -> ModelSpec:
        """Build a ModelSpec from a ``model`` config node (checked against ``ModelConfig`` when
        it is plain data; with ``config_path``, the fields it leaves out read from that
        config.json), then check what needs two fields at once: GQA head counts that do not
        divide, more active than total parameters, MoE and MLA fields that do not fit together,
        and (for MoE) expert parameters that exceed the total. Errors name the field as
        ``model.<field>``.
        """
        c = cfg if isinstance(cfg, ModelConfig) else ModelConfig.from_config(cfg)
        if c.config_path is not None:
            c = with_config_json(c)
        shape = c.model_dump()
        assert all(shape[k] is not None for k in ModelConfig.FROM_CONFIG_JSON), shape
        spec = cls(**shape)
        require(
            spec.num_attention_heads % spec.num_kv_heads == 0,
            "model.num_kv_heads",
            spec.num_kv_heads,
            f"must divide num_attention_heads={spec.num_attention_heads}",
        )
        require(
            spec.experts_per_token <= spec.num_experts,
            "model.experts_per_token",
            spec.experts_per_token,
            f"must be <= num_experts={spec.num_experts}",
        )
        require(
            spec.num_active_params <= spec.num_params,
            "model.num_active_params",
            spec.num_active_params,
            f"must be <= num_params={spec.num_params:.4g}",
        )
        require(
            (spec.kv_lora_rank is None) == (spec.qk_rope_head_dim is None),
            "model.qk_rope_head_dim",
            spec.qk_rope_head_dim,
            f"MLA needs both kv_lora_rank and qk_rope_head_dim (kv_lora_rank={spec.kv_lora_rank})",
        )
        if not spec.is_moe:
            require(
                spec.num_active_params == spec.num_params,
                "model.num_active_params",
                spec.num_active_params,
                f"a dense model (num_experts=1) uses all num_params={spec.num_params:.4g}",
            )
            return spec
        require(
            spec.num_dense_layers < spec.num_layers,
            "model.num_dense_layers",
            spec.num_dense_layers,
            f"must leave a MoE layer of num_layers={spec.num_layers}",
        )
        require(
            spec.non_expert_params() > 0,
            "model.num_params",
            spec.num_params,
            f"smaller than {spec.num_experts} experts of 3*hidden_size*expert_ffn_size*"
            f"num_moe_layers = {spec.expert_params():.4g} parameters each",
        )
        return spec


# the fields a parameter count depends on: the required shape fields and the optional ones
_SHAPES_BEHIND_THE_COUNTS = (
    set(ModelConfig.FROM_CONFIG_JSON)
    - {"name", "max_context_tokens", "num_params", "num_active_params"}
) | {
    "moe_ffn_size",
    "num_shared_experts",
    "shared_expert_ffn_size",
    "num_dense_layers",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "v_head_dim",
}


def with_config_json(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` with the fields it leaves out (or null) read from its ``config_path``
    (``sim.catalog.hf_config``); a field it sets wins over the file's."""
    derived = model_fields(cfg.config_path)
    given = {k: getattr(cfg, k) for k in cfg.model_fields_set if getattr(cfg, k) is not None}
    # A shape changed here would leave the file's parameter counts behind (16 layers priced
    # with 32 layers' weights): such a change must bring its own counts, or go in the file.
    reshaped = sorted(
        k for k in given if k in _SHAPES_BEHIND_THE_COUNTS and given[k] != derived.get(k)
    )
    if reshaped and not {"num_params", "num_active_params"} <= set(given):
        key = reshaped[0]
        raise ConfigError(
            f"model.{key}",
            given[key],
            f"with model.config_path the parameter counts come from the file ({key}="
            f"{derived.get(key)} there): set model.num_params and model.num_active_params too, or"
            " change the config.json",
        )
    sources = {**derived.pop("sources", {}), **cfg.sources}
    return ModelConfig.from_config({**derived, **given, "sources": sources})
