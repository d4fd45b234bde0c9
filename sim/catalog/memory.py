"""The memory plan: how one GPU's memory splits into weights, a runtime reserve and KV blocks.

Every serving number starts here: the KV cache left after the weights bounds how many requests
run at once, which bounds batch size, throughput and cost. Per GPU of a replica split ``tp`` ways
by tensor parallelism and ``pp`` ways by pipeline parallelism::

    +--------------------------- memory_bytes (as the device reports it) ----------------------+
    | weights / (tp*pp) | reserve (activations, graphs, NCCL) | KV free           | held back   |
                                                              \\_ num_blocks x block_size tokens
                                                                 x kv_bytes_per_token_per_gpu

How much of the memory the KV cache gets is each engine's own rule (``memory.*``):

- vLLM (the default): ``KV = memory x gpu_memory_utilization - weights - reserve``.
- TensorRT-LLM, ``memory.kv_cache_free_gpu_mem_fraction=f``: the KV cache takes the fraction
  ``f`` of the memory still free once the weights and the runtime's buffers are in:
  ``KV = f x (memory - weights - reserve)`` (TensorRT-LLM docs, reference/memory.md, "C++
  runtime"; examples/kvcacheconfig.md: default 0.9 "of free GPU memory (after loading weights)").
- SGLang, ``memory.mem_fraction_static=s``: weights and the KV pool share the static fraction
  ``s`` of the memory free at start; activations and CUDA graphs live in the ``1 - s`` left
  outside, so no reserve is taken from the pool: ``KV = s x memory - weights`` (sglang
  python/sglang/srt/model_executor/pool_configurator.py ``profile_available_bytes``:
  ``rest = free_after_weights - free_at_start x (1 - s)``).

``num_blocks = floor(KV / (block_size * kv_bytes_per_token_per_gpu))``, unless the
``kv.num_blocks`` override fixes it. Every GPU of a replica holds the same number of blocks (with
tp each holds its share of every token's KV heads; with pp each holds the KV of its
``ceil(num_layers / pp)`` layers), so ``kv_capacity_tokens`` is also the replica's.

Left out on purpose: measuring the reserve (vLLM profiles a dummy forward pass; here it is a
config field), the driver's own slice of the device memory (a few hundred MiB that nvidia-smi
counts and CUDA cannot allocate; the reserve covers it), memory for the sampler, LoRA or the
vision encoder, KV offload to host memory, uneven weight splits (the embedding and LM head are
counted in every pipeline stage's even share), and the pipeline stages' different activation
sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.catalog.hardware import GPU
from sim.catalog.model import PRECISION_BYTES, ModelSpec, bytes_per_element
from sim.errors import ConfigError, require

_GIB = 2**30  # the plan is in GiB, as engines, nvidia-smi and the reserve field use
_KIB = 1024

VLLM, TRTLLM, SGLANG = "vllm", "tensorrt-llm", "sglang"


@dataclass(frozen=True, slots=True)
class EngineRule:
    """Which engine's memory rule sizes the KV cache, and its fraction (see the module doc)."""

    engine: str
    fraction: float

    @classmethod
    def choose(
        cls,
        gpu_memory_utilization: float,
        kv_cache_free_gpu_mem_fraction: float | None = None,
        mem_fraction_static: float | None = None,
    ) -> EngineRule:
        """vLLM's rule unless TensorRT-LLM's or SGLang's knob is set (the config refuses both)."""
        assert kv_cache_free_gpu_mem_fraction is None or mem_fraction_static is None, (
            "at most one of kv_cache_free_gpu_mem_fraction and mem_fraction_static"
        )
        if kv_cache_free_gpu_mem_fraction is not None:
            return cls(TRTLLM, kv_cache_free_gpu_mem_fraction)
        if mem_fraction_static is not None:
            return cls(SGLANG, mem_fraction_static)
        return cls(VLLM, gpu_memory_utilization)

    @property
    def knob(self) -> str:
        """The config field that holds the fraction."""
        return {
            VLLM: "memory.gpu_memory_utilization",
            TRTLLM: "memory.kv_cache_free_gpu_mem_fraction",
            SGLANG: "memory.mem_fraction_static",
        }[self.engine]

    def describe(self) -> str:
        """The rule in one line, as the printed plan states it."""
        f = f"{self.fraction:g}"
        return {
            VLLM: f"vLLM: KV = memory x gpu_memory_utilization ({f}) - weights - reserve",
            TRTLLM: f"TensorRT-LLM: KV = kv_cache_free_gpu_mem_fraction ({f})"
            " x (memory - weights - reserve)",
            SGLANG: f"SGLang: KV = memory x mem_fraction_static ({f}) - weights"
            " (reserve is outside the static fraction)",
        }[self.engine]

    def split(self, memory: float, weights: float, reserve: float) -> tuple[float, float, float]:
        """``(usable, reserve, kv_free)`` bytes per GPU: ``usable`` is what the rule lets
        weights, reserve and KV take together, so ``kv_free = usable - weights - reserve``."""
        if self.engine == TRTLLM:
            kv = self.fraction * (memory - weights - reserve)
            return weights + reserve + kv, reserve, kv
        if self.engine == SGLANG:
            usable = memory * self.fraction
            return usable, 0.0, usable - weights
        usable = memory * self.fraction
        return usable, reserve, usable - weights - reserve


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Per-GPU memory budget of one replica; all byte figures are per GPU."""

    tp: int
    pp: int
    rule: EngineRule
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

    def host_blocks(self, gib: float) -> int:
        """Blocks ``gib`` GiB of host memory hold for the whole replica (each of its
        ``tp x pp`` GPUs keeps its own share of a block there, as in GPU memory)."""
        per_block = self.block_size * self.kv_bytes_per_token_per_gpu * self.tp * self.pp
        return int(gib * 2**30 // per_block)

    def requests_that_fit(self, tokens_per_request: int) -> int:
        """How many requests of ``tokens_per_request`` tokens the KV cache holds at once."""
        assert tokens_per_request >= 1, f"tokens_per_request={tokens_per_request} must be >= 1"
        return self.num_blocks // self.blocks_for(tokens_per_request)


def _check_parallelism(model: ModelSpec, tp: int, pp: int) -> None:
    """Tensor parallelism splits attention heads, so tp must divide them (as vLLM requires);
    pipeline parallelism splits layers, so a stage needs at least one."""
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
    require(pp >= 1, "fleet.pp", pp, "must be >= 1")
    require(
        pp <= model.num_layers,
        "fleet.pp",
        pp,
        f"must be at most {model.short_name}'s {model.num_layers} layers (one per stage)",
    )


def _kv_bytes_per_token_per_gpu(model: ModelSpec, kv_bpe: float, tp: int, pp: int) -> float:
    """One token's KV on one GPU: its share of the KV heads (tp) for the layers of the largest
    pipeline stage, ``ceil(num_layers / pp)``."""
    per_layer = model.kv_bytes_per_token(kv_bpe, tp) / model.num_layers
    return per_layer * math.ceil(model.num_layers / pp)


@dataclass(frozen=True)
class _Budget:
    """What one replica must fit in each GPU: the weights, the reserve and ``kv_blocks`` KV
    blocks (none when the user set the number of blocks), under the engine's rule."""

    model: ModelSpec
    gpu: GPU
    weights_precision: str
    kv_bytes_per_element: float
    block_size: int
    reserve_bytes: float
    kv_blocks: int
    rule: EngineRule
    pp: int

    def fits(
        self,
        tp: int,
        rule: EngineRule | None = None,
        weights_precision: str | None = None,
        reserve_bytes: float | None = None,
    ) -> bool:
        precision = weights_precision or self.weights_precision
        reserve = self.reserve_bytes if reserve_bytes is None else reserve_bytes
        weights = self.model.weight_bytes(PRECISION_BYTES[precision]) / (tp * self.pp)
        kv_per_token = _kv_bytes_per_token_per_gpu(
            self.model, self.kv_bytes_per_element, tp, self.pp
        )
        needed_kv = self.kv_blocks * self.block_size * kv_per_token
        usable, _, kv_free = (rule or self.rule).split(self.gpu.memory_bytes, weights, reserve)
        return weights <= usable and kv_free >= needed_kv and kv_free >= 0

    def shortfall(self, tp: int) -> str:
        """What does not fit at ``tp`` and by how much, in GiB, against the room the engine's
        rule gives, as the start of a refusal."""
        memory, rule = self.gpu.memory_bytes, self.rule
        weights = self.model.weight_bytes(PRECISION_BYTES[self.weights_precision]) / (tp * self.pp)
        blocks = self.kv_blocks * self.block_size
        kv = blocks * _kv_bytes_per_token_per_gpu(
            self.model, self.kv_bytes_per_element, tp, self.pp
        )
        _, reserve, _ = rule.split(memory, weights, self.reserve_bytes)
        parts = ["weights", *(["reserve"] if reserve else []), *(["one KV block"] if kv else [])]
        what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        if rule.engine == TRTLLM:
            # the KV cache gets the fraction of what weights and reserve leave of all the memory
            room, needed = memory, weights + reserve + kv / rule.fraction
            of = f"{rule.knob}={rule.fraction:g} of what weights and reserve leave of"
        else:
            room, needed = memory * rule.fraction, weights + reserve + kv
            of = f"{rule.knob}={rule.fraction:g} of"
            if weights > room:
                what, needed = "weights", weights
        split = f"tp={tp}" if self.pp == 1 else f"tp={tp}, pp={self.pp}"
        return (
            f"{self.model.short_name} {what} at {self.weights_precision} need"
            f" {needed / _GIB:.1f} GiB per GPU with {split}, {(needed - room) / _GIB:.1f} GiB more"
            f" than the {room / _GIB:.1f} GiB usable ({of} {memory / _GIB:.1f} GiB); "
        )

    def what_fits(self, tp: int) -> str:
        """The nearest settings that make it fit, each changed alone, as a hint."""
        heads, kv_heads = self.model.num_attention_heads, self.model.num_kv_heads
        fits = []
        for t in range(tp + 1, heads + 1):
            splits = heads % t == 0 and (kv_heads % t == 0 if t <= kv_heads else t % kv_heads == 0)
            if splits and self.fits(t):
                fits.append(f"fleet.tp={t}")
                break
        for precision in ("fp8", "fp4"):
            smaller = PRECISION_BYTES[precision] < PRECISION_BYTES[self.weights_precision]
            computes = self.gpu.dense_flops_per_s.get(precision) is not None
            if smaller and computes and self.fits(tp, weights_precision=precision):
                fits.append(f"precision.weights={precision}")
                break
        # a larger fraction, where the rule's fraction bounds the weights' room
        if self.rule.engine in (VLLM, SGLANG) and self.rule.fraction < 0.95:
            if self.fits(tp, rule=EngineRule(self.rule.engine, 0.95)):
                fits.append(f"{self.rule.knob}=0.95")
        uses_reserve = self.rule.engine != SGLANG
        if uses_reserve and self.reserve_bytes > 0 and self.fits(tp, reserve_bytes=0.0):
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
    kv_cache_free_gpu_mem_fraction: float | None = None,
    mem_fraction_static: float | None = None,
    pp: int = 1,
) -> MemoryPlan:
    """Split one GPU's memory into weights, reserve and KV blocks; ConfigError if it cannot.

    The values' types and ranges were checked with the config (``sim.config.schema``); here:
    a tp that does not divide the model's heads, a pp above its layer count, and (field
    ``hardware``) weights that do not fit or, without a ``num_blocks`` override, leave no room
    for a single KV block. Whether the GPU can *compute* at ``weights_precision`` is the
    step-time model's question (``GPU.flops_per_s``): storage alone is planned here.
    """
    weight_bpe = bytes_per_element(weights_precision, "precision.weights")
    kv_bpe = bytes_per_element(kv_precision, "precision.kv")
    _check_parallelism(model, tp, pp)
    rule = EngineRule.choose(
        gpu_memory_utilization, kv_cache_free_gpu_mem_fraction, mem_fraction_static
    )

    weights_per_gpu = model.weight_bytes(weight_bpe) / (tp * pp)
    kv_per_token = _kv_bytes_per_token_per_gpu(model, kv_bpe, tp, pp)
    usable, reserve, kv_free = rule.split(
        gpu.memory_bytes, weights_per_gpu, activation_reserve_gib * _GIB
    )

    one_block = block_size * kv_per_token
    # TensorRT-LLM needs the reserve in, whatever the blocks: its KV is a share of what is left
    weights_fit = weights_per_gpu <= usable and (rule.engine != TRTLLM or kv_free >= 0)
    if not weights_fit or (num_blocks is None and kv_free < one_block):
        needs_reserve = num_blocks is None or rule.engine == TRTLLM
        budget = _Budget(
            model,
            gpu,
            weights_precision,
            kv_bpe,
            block_size,
            activation_reserve_gib * _GIB if needs_reserve else 0.0,
            1 if num_blocks is None else 0,
            rule,
            pp,
        )
        raise ConfigError("hardware", gpu.name, budget.shortfall(tp) + budget.what_fits(tp))
    if num_blocks is None:
        num_blocks = math.floor(kv_free / one_block)

    return MemoryPlan(
        tp=tp,
        pp=pp,
        rule=rule,
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
    """A readable table of the plan, per GPU, in GiB (2**30 bytes) as engines and nvidia-smi
    print memory; KiB = 1024 bytes."""
    split = f"tp={plan.tp}" if plan.pp == 1 else f"tp={plan.tp}, pp={plan.pp}"
    reserve_label = (
        "activation/runtime reserve (outside the static fraction)"
        if plan.rule.engine == SGLANG
        else "activation/runtime reserve"
    )
    rows: list[tuple[str, str]] = [
        ("GPU memory (as the device reports it)", f"{plan.gpu_memory_bytes / _GIB:,.2f} GiB"),
        (
            f"usable ({plan.rule.knob.removeprefix('memory.')})",
            f"{plan.usable_bytes / _GIB:,.2f} GiB",
        ),
        (
            f"weights per GPU ({weights_precision}, {split})",
            f"{plan.weight_bytes_per_gpu / _GIB:,.2f} GiB",
        ),
        (reserve_label, f"{plan.reserve_bytes_per_gpu / _GIB:,.2f} GiB"),
        ("KV free", f"{plan.kv_free_bytes_per_gpu / _GIB:,.2f} GiB"),
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
        f"Memory plan: {model.short_name} on {gpu.name}"
        " (per GPU; GiB = 2**30 bytes, as nvidia-smi and the engines print; KiB = 1024 bytes)"
    )
    width = max(len(label) for label, _ in rows)
    return "\n".join(
        [
            title,
            f"  rule: {plan.rule.describe()}",
            *(f"  {label:<{width}}  {value:>14}" for label, value in rows),
        ]
    )
