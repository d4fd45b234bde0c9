"""The memory plan: how one GPU's memory splits into weights, a runtime reserve and KV blocks.

Every serving number starts here: the KV cache left after the weights bounds how many requests
run at once, which bounds batch size, throughput and cost. Per GPU of a ``tp``-way
tensor-parallel replica::

    +------------------------------ memory_bytes ------------------------------+
    |<------------- usable = memory * gpu_memory_utilization ------------>|    |
    | weights / tp | reserve (activations, graphs, NCCL) | KV free        |    |
                                                          \\_ num_blocks x block_size tokens
                                                             x kv_bytes_per_token_per_gpu

``num_blocks = floor(kv_free / (block_size * kv_bytes_per_token_per_gpu))``, unless the
``kv.num_blocks`` override fixes it. Every GPU of a replica holds the same number of blocks (each
holds its share of every token's KV heads), so ``kv_capacity_tokens`` is also the replica's.

Left out on purpose: measuring the reserve (vLLM profiles a dummy forward pass; here it is a
config field), memory for the sampler, LoRA or the vision encoder, pipeline parallelism, KV
offload to host memory, and uneven weight splits (the embedding and LM head also shard by tp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.catalog.hardware import GPU
from sim.catalog.model import PRECISION_BYTES, ModelSpec, bytes_per_element
from sim.errors import ConfigError, require

_GIB = 2**30  # the reserve is configured in GiB, as vLLM and nvidia-smi report it
_GB = 1e9  # the plan is printed in decimal GB, the unit of GPU datasheets
_KIB = 1024


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Per-GPU memory budget of one replica; all byte figures are per GPU."""

    tp: int
    gpu_memory_bytes: float
    usable_bytes: float
    weight_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    kv_free_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    block_size: int
    num_blocks: int
    kv_capacity_tokens: int

    def blocks_for(self, tokens: int) -> int:
        """KV blocks a request of ``tokens`` tokens holds: ``ceil(tokens / block_size)``."""
        return -(-tokens // self.block_size)

    def requests_that_fit(self, tokens_per_request: int) -> int:
        """How many requests of ``tokens_per_request`` tokens the KV cache holds at once."""
        assert tokens_per_request >= 1, f"tokens_per_request={tokens_per_request} must be >= 1"
        return self.num_blocks // self.blocks_for(tokens_per_request)


def _check_tp(model: ModelSpec, tp: int) -> None:
    """Tensor parallelism splits attention heads, so tp must divide them (as vLLM requires)."""
    require(
        model.num_attention_heads % tp == 0,
        "fleet.tp",
        tp,
        f"must divide {model.short_name}'s {model.num_attention_heads} attention heads",
    )
    # KV heads split when tp <= kv_heads and are replicated when tp > kv_heads.
    kv = model.num_kv_heads
    require(
        kv % tp == 0 if tp <= kv else tp % kv == 0,
        "fleet.tp",
        tp,
        f"must divide or be a multiple of {model.short_name}'s {kv} KV heads",
    )


@dataclass(frozen=True)
class _Budget:
    """What one replica must fit in each GPU: the weights, the reserve and ``kv_blocks`` KV
    blocks (none when the user set the number of blocks)."""

    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_bytes_per_element: float
    block_size: int
    reserve_bytes: float
    kv_blocks: int

    def fits(
        self,
        tp: int,
        utilization: float,
        weights_precision: str | None = None,
        reserve_bytes: float | None = None,
    ) -> bool:
        precision = weights_precision or self.weights_precision
        reserve = self.reserve_bytes if reserve_bytes is None else reserve_bytes
        weights = self.model.weight_bytes(PRECISION_BYTES[precision]) / tp
        kv = (
            self.kv_blocks
            * self.block_size
            * self.model.kv_bytes_per_token(self.kv_bytes_per_element, tp)
        )
        return weights + reserve + kv <= self.gpu.memory_bytes * utilization

    def what_fits(self, tp: int, utilization: float) -> str:
        """The nearest settings that make it fit, each changed alone, as a hint."""
        heads, kv_heads = self.model.num_attention_heads, self.model.num_kv_heads
        fits = []
        for t in range(tp + 1, heads + 1):
            splits = heads % t == 0 and (kv_heads % t == 0 if t <= kv_heads else t % kv_heads == 0)
            if splits and self.fits(t, utilization):
                fits.append(f"fleet.tp={t}")
                break
        for precision in ("fp8", "fp4"):
            smaller = PRECISION_BYTES[precision] < PRECISION_BYTES[self.weights_precision]
            computes = self.gpu.dense_flops_per_s.get(precision) is not None
            if smaller and computes and self.fits(tp, utilization, weights_precision=precision):
                fits.append(f"precision.weights={precision}")
                break
        if utilization < 0.95 and self.fits(tp, 0.95):
            fits.append("memory.gpu_memory_utilization=0.95")
        if self.reserve_bytes > 0 and self.fits(tp, utilization, reserve_bytes=0.0):
            fits.append("a smaller memory.activation_reserve_gib")
        if not fits:
            return "no one change of fleet.tp, precision.weights or memory.* fits: a larger GPU"
        return "it fits with " + " or ".join(fits)


def plan_memory(
    model: ModelSpec,
    gpu: GPU,
    *,
    weights_precision: str,
    kv_precision: str,
    tp: int,
    gpu_memory_utilization: float,
    activation_reserve_gib: float,
    block_size: int,
    num_blocks: int | None = None,
) -> MemoryPlan:
    """Split one GPU's memory into weights, reserve and KV blocks; ConfigError if it cannot.

    The values' types and ranges were checked with the config (``sim.config.schema``); here:
    a tp that does not divide the model's heads, and (field ``hardware``) weights that do not
    fit or, without a ``num_blocks`` override, leave no room for a single KV block. Whether the
    GPU can *compute* at ``weights_precision`` is the step-time model's question
    (``GPU.flops_per_s``): storage alone is planned here.
    """
    weight_bpe = bytes_per_element(weights_precision, "precision.weights")
    kv_bpe = bytes_per_element(kv_precision, "precision.kv")
    _check_tp(model, tp)

    usable = gpu.memory_bytes * gpu_memory_utilization
    weights_per_gpu = model.weight_bytes(weight_bpe) / tp
    reserve = activation_reserve_gib * _GIB
    kv_per_token = model.kv_bytes_per_token(kv_bpe, tp)

    kv_free = usable - weights_per_gpu - reserve
    one_block = block_size * kv_per_token
    if (num_blocks is None and kv_free < one_block) or weights_per_gpu > usable:
        # what does not fit: the weights alone, or with the reserve and one KV block
        budget = _Budget(
            model,
            gpu,
            weights_precision,
            kv_bpe,
            block_size,
            reserve if num_blocks is None else 0.0,
            1 if num_blocks is None else 0,
        )
        if weights_per_gpu > usable:
            what, needed = "weights", weights_per_gpu
        else:
            what, needed = (
                "weights, reserve and one KV block",
                weights_per_gpu + reserve + one_block,
            )
        raise ConfigError(
            "hardware",
            gpu.name,
            f"{model.short_name} {what} at {weights_precision} need {needed / _GB:.1f} GB per"
            f" GPU with tp={tp}, {(needed - usable) / _GB:.1f} GB more than the"
            f" {usable / _GB:.1f} GB usable (memory.gpu_memory_utilization="
            f"{gpu_memory_utilization:g} of {gpu.memory_bytes / _GB:.0f} GB); "
            + budget.what_fits(tp, gpu_memory_utilization),
        )
    if num_blocks is None:
        num_blocks = math.floor(kv_free / one_block)

    return MemoryPlan(
        tp=tp,
        gpu_memory_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weight_bytes_per_gpu=weights_per_gpu,
        reserve_bytes_per_gpu=reserve,
        kv_free_bytes_per_gpu=kv_free,
        kv_bytes_per_token_per_gpu=kv_per_token,
        block_size=block_size,
        num_blocks=num_blocks,
        kv_capacity_tokens=num_blocks * block_size,
    )


def format_plan(
    plan: MemoryPlan,
    model: ModelSpec,
    gpu: GPU,
    weights_precision: str,
    kv_precision: str,
    request_tokens: list[int],
) -> str:
    """A readable table of the plan, per GPU. GB = 1e9 bytes; KiB = 1024 bytes."""
    rows: list[tuple[str, str]] = [
        ("GPU memory", f"{plan.gpu_memory_bytes / _GB:,.1f} GB"),
        ("usable (x utilization)", f"{plan.usable_bytes / _GB:,.1f} GB"),
        (
            f"weights per GPU ({weights_precision}, tp={plan.tp})",
            f"{plan.weight_bytes_per_gpu / _GB:,.2f} GB",
        ),
        ("activation/runtime reserve", f"{plan.reserve_bytes_per_gpu / _GB:,.2f} GB"),
        ("KV free", f"{plan.kv_free_bytes_per_gpu / _GB:,.2f} GB"),
        (
            f"KV bytes per token ({kv_precision})",
            f"{plan.kv_bytes_per_token_per_gpu / _KIB:,.1f} KiB",
        ),
        (f"KV blocks ({plan.block_size} tokens each)", f"{plan.num_blocks:,}"),
        ("KV tokens", f"{plan.kv_capacity_tokens:,}"),
    ]
    for tokens in request_tokens:
        rows.append(
            (
                f"requests of {tokens:,} tokens that fit at once",
                f"{plan.requests_that_fit(tokens):,}",
            )
        )
    title = (
        f"Memory plan: {model.short_name} on {gpu.name} (per GPU; GB = 1e9 bytes, KiB = 1024 bytes)"
    )
    width = max(len(label) for label, _ in rows)
    return "\n".join([title, *(f"  {label:<{width}}  {value:>14}" for label, value in rows)])
