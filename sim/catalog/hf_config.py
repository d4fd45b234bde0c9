"""A catalog entry from a Hugging Face ``config.json``: the shapes, and the parameters counted
exactly from them.

``model_fields(source)`` reads a config.json (a path, ``shipped:<path under data/>``, or the
parsed mapping) and returns the ``model`` config fields (``sim.config.schema.ModelConfig``):
what ``model=hf model.config_path=PATH`` runs with and what ``fleetcast model import`` writes.
The architecture is the config's ``model_type`` (else ``architectures[0]``).

Parameters are counted from the shapes, per decoder layer (h = hidden_size, q = attention heads x
head_dim, kv = KV heads x head_dim)::

    attention     q_proj h*q, k_proj and v_proj h*kv each, o_proj q*h; their biases where the
                  architecture has them (Qwen2 and Qwen2-MoE: q, k, v; Llama, Qwen3 and Gemma:
                  all four when attention_bias); Qwen3 and Gemma-3's q and k RMSNorm weights
                  (head_dim each)
    MLA           (DeepSeek-V2/V3) q: h*H*(nope+rope), or through q_lora_rank (h*r + r + r*H*(nope
                  +rope)); kv_a_proj h*(kv_lora_rank+rope) + its norm kv_lora_rank;
                  kv_b_proj kv_lora_rank*H*(nope+v); o_proj H*v*h
    dense FFN     3*h*intermediate_size (gate, up, down; + 2*intermediate + h with mlp_bias)
    MoE layer     router h*E (+ E score-correction biases with DeepSeek-V3's noaux_tc), E routed
                  experts of 3*h*moe_ffn, shared experts of 3*h*shared_ffn each, and Qwen-MoE's
                  shared-expert gate h
    norms         2*h (Gemma-2/3: 4*h, a norm before and after attention and FFN)

and once: the embedding table vocab*h, the final norm h, and the LM head vocab*h unless
``tie_word_embeddings``. Active parameters per token are all of them but the routed experts a
token does not use: ``num_params - (E - experts_per_token) * routed expert * MoE layers``.

Left out on purpose: sliding-window attention (Mistral-7B-v0.1's 4096-token window, Gemma-2/3's
local layers, Qwen2's ``use_sliding_window``): every layer is counted as a full-attention layer
that caches every token, which overstates their KV at long context. DeepSeek-V3's
multi-token-prediction module (``num_nextn_predict_layers``; 14B of the 685B its checkpoint
holds) serves only speculative decoding, which Fleetcast does not model. Multimodal configs (a
``text_config`` inside), quantization configs (weight bytes come from ``precision.weights``) and
RoPE scaling (``max_context_tokens`` is ``max_position_embeddings``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sim.errors import ConfigError
from sim.resources import resolve_path

FIELD = "model.config_path"

# architectures[0] -> model_type, for a config.json that lacks model_type
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}


@dataclass(frozen=True)
class Family:
    """What a model_type's layers hold beyond the common decoder layer (from the Hugging Face
    transformers modelling code of each family)."""

    qkv_bias: bool | None  # None: the config's attention_bias (default false)
    o_bias: bool | None  # None: the config's attention_bias
    qk_norm: bool  # an RMSNorm of head_dim on queries and on keys
    norms_per_layer: int
    tied_by_default: bool  # tie_word_embeddings when the config does not say
    ffn: Literal["dense", "mixtral", "qwen_moe", "deepseek"]


FAMILIES: dict[str, Family] = {
    "llama": Family(None, None, False, 2, False, "dense"),
    "mistral": Family(False, False, False, 2, False, "dense"),
    "qwen2": Family(True, False, False, 2, False, "dense"),
    "qwen3": Family(None, None, True, 2, False, "dense"),
    "gemma": Family(None, None, False, 2, True, "dense"),
    "gemma2": Family(None, None, False, 4, True, "dense"),
    "gemma3_text": Family(None, None, True, 4, True, "dense"),
    "mixtral": Family(False, False, False, 2, False, "mixtral"),
    "qwen2_moe": Family(True, False, False, 2, False, "qwen_moe"),
    "qwen3_moe": Family(None, None, True, 2, False, "qwen_moe"),
    "deepseek_v2": Family(None, None, False, 2, False, "deepseek"),
    "deepseek_v3": Family(None, None, False, 2, False, "deepseek"),
}


class _Config:
    """A config.json's keys, each read once with the file named in any error."""

    def __init__(self, data: Mapping[str, Any], where: str, model_type: str) -> None:
        self.data, self.where, self.model_type = data, where, model_type

    def fail(self, reason: str) -> ConfigError:
        return ConfigError(FIELD, self.where, reason)

    def whole(self, key: str, default: int | None = None, minimum: int = 0) -> int:
        """The whole number at ``key`` (``default`` where absent or null), >= ``minimum``."""
        value = self.data.get(key)
        if value is None:  # absent, or null as some configs write it: the default
            value = default
        if value is None:
            raise self.fail(f"{self.model_type} config.json has no {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{key}={value!r} in config.json must be a whole number >= {minimum}")
        return value

    def size(self, key: str, default: int | None = None) -> int:
        """A size or a count that a layer cannot do without (heads, layers, a width, a number
        of experts): a whole number >= 1, so that nothing divides by it at 0 or silently
        drops a part of the model."""
        return self.whole(key, default, minimum=1)

    def optional_whole(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.whole(key)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"{key}={value!r} in config.json must be true or false")
        return value


def read_config_json(path: object) -> tuple[dict[str, Any], Path]:
    """The parsed config.json at ``path`` (a path or ``shipped:NAME``) and where it is;
    ConfigError naming ``model.config_path`` if it is missing or not a JSON object."""
    found = resolve_path(path, FIELD)
    try:
        data = json.loads(found.read_text())
    except json.JSONDecodeError as err:
        reason = f"not JSON: {err.msg} at line {err.lineno}"
        raise ConfigError(FIELD, str(path), reason) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(FIELD, str(path), f"cannot be read ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(FIELD, str(path), "config.json must hold a JSON object")
    return data, found


def model_type_of(data: Mapping[str, Any], where: str) -> str:
    """The supported model_type of a config (its ``model_type``, else its ``architectures[0]``);
    ConfigError listing the supported ones otherwise."""
    declared = data.get("model_type")
    architectures = data.get("architectures") or [None]
    first = architectures[0] if isinstance(architectures, list) else None
    model_type = declared if declared is not None else ARCHITECTURES.get(str(first))
    if model_type in FAMILIES:
        return str(model_type)
    said = f"model_type {declared!r}" if declared is not None else f"architectures {first!r}"
    raise ConfigError(
        FIELD,
        where,
        f"{said} is not supported; supported model_type: {', '.join(FAMILIES)}",
    )


def model_fields(source: object, *, name: str | None = None) -> dict[str, Any]:
    """The ``model`` config fields a config.json gives (``source``: a path, ``shipped:NAME``,
    or the parsed mapping). ``name`` defaults to the config's ``_name_or_path``, else the name
    of the file's folder. Fields at their default (dense models' MoE fields, MLA's for others)
    are left out."""
    return fields_and_keys(source, name=name)[0]


def fields_and_keys(
    source: object, *, name: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``model_fields`` and, for each field, the config.json key or formula it came from."""
    if isinstance(source, Mapping):
        data, where = dict(source), "<config dict>"
        folder = None
    else:
        data, found = read_config_json(source)
        where, folder = str(source), found.parent.name
    model_type = model_type_of(data, where)
    cfg = _Config(data, where, model_type)
    family = FAMILIES[model_type]

    hidden = cfg.size("hidden_size")
    layers = cfg.size("num_hidden_layers")
    heads = cfg.size("num_attention_heads")
    kv_heads = cfg.size("num_key_value_heads", heads)
    if heads % kv_heads:  # grouped-query attention: each KV head serves a whole group
        raise cfg.fail(
            f"num_key_value_heads={kv_heads} in config.json must divide num_attention_heads={heads}"
        )
    vocab = cfg.size("vocab_size")
    ffn = cfg.size("intermediate_size")
    keys = {
        "num_layers": "num_hidden_layers",
        "hidden_size": "hidden_size",
        "num_attention_heads": "num_attention_heads",
        "num_kv_heads": "num_key_value_heads",
        "ffn_size": "intermediate_size",
        "vocab_size": "vocab_size",
        "max_context_tokens": "max_position_embeddings",
    }
    extra: dict[str, Any] = {}  # the MoE and MLA fields, where they differ from the defaults

    if family.ffn == "deepseek":
        attention, head_dim = _mla(cfg, extra, keys, hidden, heads)
    else:
        attention, head_dim = _attention(cfg, family, hidden, heads, kv_heads)
        given = data.get("head_dim")
        keys["head_dim"] = "head_dim" if given else "hidden_size / num_attention_heads"

    dense_ffn = 3 * hidden * ffn
    if cfg.flag("mlp_bias", False):
        dense_ffn += 2 * ffn + hidden
    moe = _moe(cfg, family, extra, keys, layers, hidden)
    routed = 3 * hidden * moe.ffn_size  # one routed expert in one layer
    moe_layer = hidden * moe.routed + moe.routed * routed + moe.other_per_layer  # router, experts
    tied = cfg.flag("tie_word_embeddings", family.tied_by_default)
    num_params = (
        layers * (attention + family.norms_per_layer * hidden)
        + (layers - moe.moe_layers) * dense_ffn
        + moe.moe_layers * moe_layer
        + vocab * hidden * (1 if tied else 2)
        + hidden  # final norm
    )
    skipped = moe.moe_layers * (moe.routed - moe.per_token) * routed
    keys["num_params"] = "counted from the shapes (sim/catalog/hf_config.py)"
    keys["num_active_params"] = (
        "num_params less the routed experts a token skips"
        if moe.routed
        else "dense: every parameter is used for every token"
    )
    fields: dict[str, Any] = {
        "name": str(name or data.get("_name_or_path") or folder or model_type),
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "ffn_size": ffn,
        "vocab_size": vocab,
        "num_params": num_params,
        "num_active_params": num_params - skipped,
        "num_experts": moe.routed or 1,
        "experts_per_token": moe.per_token or 1,
        "max_context_tokens": cfg.size("max_position_embeddings"),
        **extra,
    }
    if not isinstance(source, Mapping):
        fields["sources"] = {"config_json": str(source)}
    return fields, keys


def _attention(
    cfg: _Config, family: Family, hidden: int, heads: int, kv_heads: int
) -> tuple[int, int]:
    """Parameters of one layer's (grouped-query) attention, and the head size."""
    head_dim = cfg.optional_whole("head_dim") or 0
    if not head_dim:
        if hidden % heads:
            raise cfg.fail(
                f"no 'head_dim', and hidden_size={hidden} is not a multiple of "
                f"num_attention_heads={heads}"
            )
        head_dim = hidden // heads
    attention_bias = cfg.flag("attention_bias", False)
    qkv_bias = attention_bias if family.qkv_bias is None else family.qkv_bias
    o_bias = attention_bias if family.o_bias is None else family.o_bias
    q, kv = heads * head_dim, kv_heads * head_dim
    params = hidden * q + 2 * hidden * kv + q * hidden
    params += (q + 2 * kv) * qkv_bias + hidden * o_bias
    params += 2 * head_dim * family.qk_norm
    return params, head_dim


def _mla(
    cfg: _Config, fields: dict[str, Any], keys: dict[str, str], hidden: int, heads: int
) -> tuple[int, int]:
    """Parameters of one layer's multi-head latent attention (DeepSeek-V2/V3), and the query and
    key head size (nope + rope); records the MLA fields."""
    nope, rope = cfg.whole("qk_nope_head_dim"), cfg.size("qk_rope_head_dim")
    v_dim, kv_rank = cfg.size("v_head_dim"), cfg.size("kv_lora_rank")
    q_rank = None if cfg.data.get("q_lora_rank") is None else cfg.size("q_lora_rank")
    bias = cfg.flag("attention_bias", False)
    qk = nope + rope
    if q_rank is None:
        q = hidden * heads * qk
    else:  # q_a_proj (+ bias), q_a_layernorm, q_b_proj
        q = hidden * q_rank + q_rank * bias + q_rank + q_rank * heads * qk
    kv = hidden * (kv_rank + rope) + (kv_rank + rope) * bias + kv_rank  # kv_a_proj, its norm
    kv += kv_rank * heads * (nope + v_dim)  # kv_b_proj
    o = heads * v_dim * hidden + hidden * bias
    fields.update(kv_lora_rank=kv_rank, qk_rope_head_dim=rope, v_head_dim=v_dim)
    keys.update(
        head_dim="qk_nope_head_dim + qk_rope_head_dim",
        kv_lora_rank="kv_lora_rank (MLA: the cached latent)",
        qk_rope_head_dim="qk_rope_head_dim (MLA: the cached RoPE key)",
        v_head_dim="v_head_dim",
    )
    return q + kv + o, qk


@dataclass(frozen=True)
class _Experts:
    """A config's mixture of experts; ``routed == 0``: a dense model."""

    routed: int = 0  # routed experts per MoE layer
    per_token: int = 0
    ffn_size: int = 0  # a routed expert's intermediate size
    moe_layers: int = 0
    other_per_layer: int = 0  # shared experts, their gate, the router's score biases


def _moe(
    cfg: _Config,
    family: Family,
    fields: dict[str, Any],
    keys: dict[str, str],
    layers: int,
    hidden: int,
) -> _Experts:
    """The config's experts; records the MoE fields and the keys they came from."""
    if family.ffn == "dense":
        return _Experts()
    if family.ffn == "mixtral":  # every layer: num_local_experts experts of intermediate_size
        keys.update(num_experts="num_local_experts", experts_per_token="num_experts_per_tok")
        return _checked(
            cfg,
            _Experts(
                cfg.size("num_local_experts"),
                _per_token(cfg, "num_local_experts"),
                cfg.size("intermediate_size"),
                layers,
            ),
        )
    if family.ffn == "qwen_moe":
        # layer i has experts unless listed in mlp_only_layers or off the decoder_sparse_step
        step = cfg.size("decoder_sparse_step", 1)
        only_dense = cfg.data.get("mlp_only_layers") or []
        if not isinstance(only_dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in only_dense
        ):
            raise cfg.fail(
                f"mlp_only_layers={only_dense!r} in config.json must be a list of layers"
            )
        moe_layers = sum(
            1 for i in range(layers) if i not in only_dense and step and (i + 1) % step == 0
        )
        qwen2 = cfg.model_type == "qwen2_moe"  # Qwen2-MoE has a shared expert, Qwen3-MoE none
        shared = cfg.whole("shared_expert_intermediate_size") if qwen2 else 0
        expert_ffn = cfg.size("moe_intermediate_size")
        keys.update(
            num_experts="num_experts",
            experts_per_token="num_experts_per_tok",
            moe_ffn_size="moe_intermediate_size",
            num_dense_layers="mlp_only_layers and decoder_sparse_step",
            num_shared_experts="one shared expert when shared_expert_intermediate_size > 0",
            shared_expert_ffn_size="shared_expert_intermediate_size",
        )
        _record_moe(fields, expert_ffn, layers - moe_layers, 1 if shared else 0, shared)
        # the shared expert and its sigmoid gate (hidden x 1)
        other = 3 * hidden * shared + hidden if shared else 0
        return _checked(
            cfg,
            _Experts(
                cfg.size("num_experts"),
                _per_token(cfg, "num_experts"),
                expert_ffn,
                moe_layers,
                other,
            ),
        )
    # DeepSeek: the first first_k_dense_replace layers are dense, then every moe_layer_freq-th
    experts, expert_ffn = cfg.size("n_routed_experts"), cfg.size("moe_intermediate_size")
    first_dense, freq = cfg.whole("first_k_dense_replace", 0), cfg.size("moe_layer_freq", 1)
    moe_layers = sum(1 for i in range(layers) if i >= first_dense and freq and i % freq == 0)
    shared_experts = cfg.whole("n_shared_experts", 0)
    keys.update(
        num_experts="n_routed_experts",
        experts_per_token="num_experts_per_tok",
        moe_ffn_size="moe_intermediate_size",
        num_dense_layers="first_k_dense_replace (and moe_layer_freq)",
        num_shared_experts="n_shared_experts (each of moe_intermediate_size)",
    )
    _record_moe(fields, expert_ffn, layers - moe_layers, shared_experts, None)
    # noaux_tc routing (DeepSeek-V3) learns a score-correction bias per expert
    score_bias = experts if cfg.data.get("topk_method") == "noaux_tc" else 0
    other = shared_experts * 3 * hidden * expert_ffn + score_bias
    return _checked(
        cfg,
        _Experts(experts, _per_token(cfg, "n_routed_experts"), expert_ffn, moe_layers, other),
    )


def _per_token(cfg: _Config, experts_key: str) -> int:
    """``num_experts_per_tok``: at least 1 and at most the routed experts at ``experts_key``."""
    per_token = cfg.size("num_experts_per_tok")
    experts = cfg.size(experts_key)
    if per_token > experts:
        raise cfg.fail(
            f"num_experts_per_tok={per_token} in config.json is more than {experts_key}={experts}"
        )
    return per_token


def _checked(cfg: _Config, experts: _Experts) -> _Experts:
    """``experts``, unless no layer has experts: a mixture-of-experts config whose layer
    pattern (``decoder_sparse_step``, ``mlp_only_layers``, ``first_k_dense_replace``,
    ``moe_layer_freq``) leaves every layer dense would run as a dense model it does not say."""
    if not experts.moe_layers:
        raise cfg.fail(
            f"a {cfg.model_type} config.json whose layer pattern leaves no layer with experts "
            "(check decoder_sparse_step, mlp_only_layers, first_k_dense_replace, moe_layer_freq)"
        )
    return experts


def _record_moe(
    fields: dict[str, Any],
    expert_ffn: int,
    dense_layers: int,
    shared_experts: int,
    shared_ffn: int | None,
) -> None:
    """The MoE fields that differ from their defaults (ModelConfig)."""
    fields["moe_ffn_size"] = expert_ffn
    if dense_layers:
        fields["num_dense_layers"] = dense_layers
    if shared_experts:
        fields["num_shared_experts"] = shared_experts
        if shared_ffn is not None and shared_ffn != expert_ffn:
            fields["shared_expert_ffn_size"] = shared_ffn
