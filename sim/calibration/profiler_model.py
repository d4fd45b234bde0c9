"""The model ``fleetcast profile`` times: a decoder-only transformer of a catalog shape.

Random weights (nothing is downloaded), the shape of a ``ModelSpec``: embedding; per layer an
RMSNorm, a fused QKV projection with grouped KV heads, attention through
``scaled_dot_product_attention`` over a preallocated KV cache, the output projection, a second
RMSNorm and a SwiGLU FFN; a final norm and the LM head on each sequence's last token. Rotary
embedding and sampling are left out: cheap element-wise work next to the GEMMs and attention.
PyTorch is imported only when a model is built, so the rest of Fleetcast runs without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from sim.catalog.model import ModelSpec
from sim.errors import require

if TYPE_CHECKING:  # PyTorch is optional: imported at run time only when a model is built
    from torch import Tensor
    from torch.nn.attention.bias import CausalBias

TORCH_MISSING = "fleetcast profile needs PyTorch: pip install 'fleetcast[profile]'"

DTYPES = ("bf16", "fp16", "fp32")
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class TorchMissing(RuntimeError):
    """PyTorch is not installed; ``str(err)`` is the one-line install hint."""


def _torch() -> ModuleType:
    try:
        # imported here: PyTorch, the profile extra (~1 s of CPU)
        import torch
    except ImportError as err:
        raise TorchMissing(TORCH_MISSING) from err
    return torch


class Group:
    """Sequences that advance alike in one step: ``tokens`` [batch, new] after ``context``
    tokens each already in ``cache`` [layers, 2 (K, V), batch, kv_heads, capacity, head_dim]."""

    def __init__(self, tokens: Tensor, context: int, cache: Tensor) -> None:
        self.tokens = tokens
        self.context = context
        self.cache = cache
        self.mask: CausalBias | None = (
            None  # causal, aligned to the last key: only for a chunk after cached tokens
        )


class Decoder:
    """A decoder-only transformer of ``spec``'s shape with random weights (see the module doc)."""

    def __init__(
        self, spec: ModelSpec, device: str = "cpu", dtype: str = "fp32", seed: int = 0
    ) -> None:
        torch = _torch()
        require(
            not spec.is_moe,
            "model",
            spec.short_name,
            f"is a mixture of experts ({spec.num_experts} experts); fleetcast profile "
            "measures dense models only",
        )
        require(dtype in DTYPES, "dtype", dtype, "choose bf16, fp16 or fp32")
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        h, hd = spec.hidden_size, spec.head_dim
        self.q_size = spec.num_attention_heads * hd
        self.kv_size = spec.num_kv_heads * hd
        gen = torch.Generator(device=self.device).manual_seed(seed)

        def weight(
            rows: int, cols: int
        ) -> Tensor:  # [out, in] as F.linear takes it; unit-variance output
            w = torch.empty(rows, cols, device=self.device, dtype=self.dtype)
            return w.normal_(0.0, 1.0 / math.sqrt(cols), generator=gen)

        def norm() -> Tensor:
            return torch.ones(h, device=self.device, dtype=self.dtype)

        self.embed = weight(spec.vocab_size, h)
        self.layers = [
            {
                "attn_norm": norm(),
                "wqkv": weight(self.q_size + 2 * self.kv_size, h),
                "wo": weight(h, self.q_size),
                "ffn_norm": norm(),
                "w_gate_up": weight(2 * spec.ffn_size, h),
                "w_down": weight(h, spec.ffn_size),
            }
            for _ in range(spec.num_layers)
        ]
        self.final_norm = norm()
        self.lm_head = weight(spec.vocab_size, h)
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        self._sdpa_gqa = version >= (2, 5)  # enable_gqa: no copy of K/V per query head

    def new_group(
        self,
        batch: int,
        new_tokens: int,
        context: int = 0,
        capacity: int | None = None,
        tokens: Tensor | None = None,
    ) -> Group:
        """A group whose cache holds ``context`` tokens per sequence (random K/V: the values do
        not change the time) and room for ``capacity`` (default: context + new_tokens)."""
        torch = _torch()
        spec = self.spec
        capacity = context + new_tokens if capacity is None else capacity
        assert capacity >= context + new_tokens, "cache too small for the step"
        cache = torch.empty(
            spec.num_layers,
            2,
            batch,
            spec.num_kv_heads,
            capacity,
            spec.head_dim,
            device=self.device,
            dtype=self.dtype,
        )
        if context:
            cache[:, :, :, :, :context].normal_()
        if tokens is None:
            tokens = torch.randint(0, spec.vocab_size, (batch, new_tokens), device=self.device)
        return self.with_tokens(Group(tokens, context, cache), tokens, context)

    def with_tokens(self, group: Group, tokens: Tensor, context: int) -> Group:
        """The same sequences and cache, now advancing by ``tokens`` after ``context`` cached."""
        # imported here: PyTorch, the profile extra (~1 s of CPU)
        from torch.nn.attention.bias import causal_lower_right

        new = Group(tokens.to(self.device), context, group.cache)
        n = tokens.shape[1]
        if context and n > 1:  # query i sits at position context + i and sees keys 0..context+i
            new.mask = causal_lower_right(n, context + n)  # flash attention, no mask tensor
        return new

    def _rmsnorm(self, x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
        torch = _torch()
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, group: Group, layer: int) -> Tensor:
        """Write this group's new K/V into its cache and attend over the cached context."""
        # imported here: PyTorch, the profile extra (~1 s of CPU)
        import torch.nn.functional as F

        spec = self.spec
        b, n = group.tokens.shape
        ctx = group.context
        q = q.view(b, n, spec.num_attention_heads, spec.head_dim).transpose(1, 2)
        k = k.view(b, n, spec.num_kv_heads, spec.head_dim).transpose(1, 2)
        v = v.view(b, n, spec.num_kv_heads, spec.head_dim).transpose(1, 2)
        k_cache, v_cache = group.cache[layer, 0], group.cache[layer, 1]
        k_cache[:, :, ctx : ctx + n] = k
        v_cache[:, :, ctx : ctx + n] = v
        if ctx == 0:  # a whole prompt: attend the fresh K/V, causally
            keys, values, causal = k, v, n > 1
        else:  # a chunk or a decode: attend the cache (a decode sees all of it)
            keys, values, causal = k_cache[:, :, : ctx + n], v_cache[:, :, : ctx + n], False
        if self._sdpa_gqa:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=group.mask, is_causal=causal, enable_gqa=True
            )
        else:
            rep = spec.num_attention_heads // spec.num_kv_heads
            out = F.scaled_dot_product_attention(
                q,
                keys.repeat_interleave(rep, 1),
                values.repeat_interleave(rep, 1),
                attn_mask=group.mask,
                is_causal=causal,
            )
        return out.transpose(1, 2).reshape(b * n, self.q_size)

    def forward(self, groups: Sequence[Group]) -> Tensor:
        """One step over all groups' tokens in one pass; logits [sequences, vocab] of each
        sequence's last token, in group order. GEMMs run on all tokens together."""
        torch = _torch()
        # imported here: PyTorch, the profile extra (~1 s of CPU)
        import torch.nn.functional as F

        sizes = [g.tokens.numel() for g in groups]
        x = self.embed[torch.cat([g.tokens.reshape(-1) for g in groups])]
        for i, layer in enumerate(self.layers):
            qkv = F.linear(self._rmsnorm(x, layer["attn_norm"]), layer["wqkv"])
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            attn = [
                self._attend(qg, kg, vg, g, i)
                for g, qg, kg, vg in zip(
                    groups, q.split(sizes), k.split(sizes), v.split(sizes), strict=True
                )
            ]
            x = x + F.linear(attn[0] if len(attn) == 1 else torch.cat(attn), layer["wo"])
            gate, up = F.linear(self._rmsnorm(x, layer["ffn_norm"]), layer["w_gate_up"]).chunk(
                2, dim=-1
            )
            x = x + F.linear(F.silu(gate) * up, layer["w_down"])
        last = [
            xg.view(*g.tokens.shape, -1)[:, -1]
            for g, xg in zip(groups, x.split(sizes), strict=True)
        ]
        return F.linear(self._rmsnorm(torch.cat(last), self.final_norm), self.lm_head)
