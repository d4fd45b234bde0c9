"""Every key a run's config may hold, its type and its bounds: the shape of ``configs/``.

A run's config is checked against ``RunConfig`` before anything is built (``validate_run``):
a key no group declares, a value of the wrong type, a number out of range or not finite is a
one-line ``ConfigError`` naming the dotted field and the value. The defaults and the reasons for
them live in the YAML files; here are only the rules a value must keep. What needs the catalog
or two fields at once (tp dividing the attention heads, a GPU that can run FP4) is checked where
the meaning is known (``sim.catalog``, ``sim.workload``).

The ``workload`` group's shapes are in ``sim.config.workload_schema``, the ``autoscale``
group's in ``sim.config.autoscale``, the ``spec_decode`` group's in ``sim.config.speculation``;
``RunConfig`` here holds them all.

The policy groups (``scheduler``, ``step_time``, ``router``) name a class in ``_target_``; their
options are checked against that class's signature when it is built (``sim.config.build``).

Bounds and why:
- token counts, KV blocks: at most 2**31 - 1, what the int32 output columns hold;
- request counts: at most a billion (``MAX_REQUESTS``); replicas: at most 100,000;
- every float finite (NaN and infinity are refused everywhere).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.config.autoscale import AutoscaleConfig
from sim.config.faults import FaultsConfig
from sim.config.speculation import SpecDecodeConfig
from sim.config.tiers import TierMix
from sim.config.validation import (
    INT32_MAX,
    MAX_REPLICAS,
    Fraction,
    Int,
    NonNegative,
    NonNegativeInt,
    Positive,
    StrictModel,
    Text,
    Tokens,
    validate,
)
from sim.config.workload_schema import WorkloadConfig

PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
KV_PRECISIONS = ("bf16", "fp16", "fp8")
GB = 1e9  # decimal gigabyte: datasheets' unit
GIB = 2**30  # binary gibibyte: what nvidia-smi, rocm-smi and the engines report


# -- what is deployed -----------------------------------------------------------------------


Dim = Annotated[Int, Field(ge=1, le=INT32_MAX)]
"""A layer count, a width or a head count."""


class ModelConfig(StrictModel):
    """A transformer's serving-relevant shape (``configs/model/``; ``sim.catalog.model``).

    With ``config_path`` (a Hugging Face config.json; ``model=hf``) the shape fields may be left
    out or null: the catalog fills them from that file when it builds the model
    (``sim.catalog.hf_config``), and a field given here wins over the file's. The filling
    happens in the catalog, not here, because ``sim.config`` may not import ``sim.catalog``.
    Without ``config_path`` every shape field is required.
    """

    section: ClassVar[str] = "model"
    FROM_CONFIG_JSON: ClassVar[tuple[str, ...]] = (
        "name",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "ffn_size",
        "vocab_size",
        "num_experts",
        "experts_per_token",
        "max_context_tokens",
        "num_params",
        "num_active_params",
    )
    """The required fields, which a config.json can give instead."""

    config_path: Text | None = None  # a path, or shipped:models/<entry>/config.json
    name: Text | None
    num_layers: Dim | None
    hidden_size: Dim | None
    num_attention_heads: Dim | None
    num_kv_heads: Dim | None
    head_dim: Dim | None  # of queries and keys (MLA: qk_nope_head_dim + qk_rope_head_dim)
    ffn_size: Dim | None  # the dense FFN's intermediate size (and the experts' by default)
    vocab_size: Dim | None
    num_experts: Dim | None  # routed experts per MoE layer; 1: dense
    experts_per_token: Dim | None
    max_context_tokens: Tokens | None
    num_params: Positive | None
    num_active_params: Positive | None
    # mixture of experts beyond Mixtral's shape (null / 0: like Mixtral)
    moe_ffn_size: Dim | None = None  # a routed expert's intermediate size; null: ffn_size
    num_shared_experts: NonNegativeInt = 0  # experts every token uses (DeepSeek, Qwen-MoE)
    shared_expert_ffn_size: Dim | None = None  # null: moe_ffn_size
    num_dense_layers: NonNegativeInt = 0  # layers with a dense FFN instead of experts
    # multi-head latent attention (DeepSeek-V2/V3); null: ordinary K and V heads
    kv_lora_rank: Dim | None = None  # the cached latent's width
    qk_rope_head_dim: Dim | None = None  # the cached RoPE key's width
    v_head_dim: Dim | None = None  # null: head_dim
    sources: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _required_unless_config_json(cls, data: Any) -> Any:
        """Without ``config_path`` a null shape field is a missing one ("required"); with it, a
        missing one is null: to be read from the file."""
        if not isinstance(data, Mapping):
            return data
        if data.get("config_path") is None:
            return {k: v for k, v in data.items() if v is not None or k not in cls.FROM_CONFIG_JSON}
        return {**dict.fromkeys(cls.FROM_CONFIG_JSON), **data}


class HardwareConfig(StrictModel):
    """One GPU's datasheet figures in vendor units (``configs/hardware/``;
    ``sim.catalog.hardware``).

    Memory is given one of two ways. ``memory_gib``: the total the device reports (nvidia-smi,
    rocm-smi), in GiB = 2**30 bytes; the catalog uses it. ``memory_gb``: decimal GB = 1e9 bytes,
    the datasheet's unit and the key older configs and overrides use; when it is set it wins
    (``memory_gib`` is then derived from it). One of the two is required.
    """

    section: ClassVar[str] = "hardware"

    name: Text
    # memory_gb before memory_gib: a bad memory_gb is reported before "memory_gib required"
    memory_gb: Positive | None = None
    memory_gib: Positive
    hbm_bandwidth_gb_per_s: Positive
    dense_tflops: dict[Literal["bf16", "fp16", "fp8", "fp4"], Positive | None]
    interconnect_gb_per_s: Positive
    interconnect_latency_us: Positive
    usd_per_gpu_hour: Positive
    power_w: Positive
    # measured kernel floors (null: not measured; the roofline then uses its default)
    gemm_floor_us: Positive | None = None
    attention_floor_us: Positive | None = None
    # host memory <-> GPU, GB/s each way (PCIe, or NVLink-C2C on Grace parts); read only with
    # kv.cpu_offload_gib > 0 (null: unknown)
    host_link_gbps: Positive | None = None
    sources: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _memory_gb_wins(cls, data: Any) -> Any:
        """A decimal ``memory_gb`` given by the user replaces the catalog's ``memory_gib``; a
        ``memory_gb`` that is not a positive number is left for its own check to refuse."""
        if not isinstance(data, Mapping):
            return data
        gb = data.get("memory_gb")
        if (
            isinstance(gb, int | float)
            and not isinstance(gb, bool)
            and math.isfinite(gb)
            and gb > 0
        ):
            return {**data, "memory_gib": gb * GB / GIB}
        return data

    @field_validator("dense_tflops")
    @classmethod
    def _needs_bf16(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        # every serving GPU runs bf16, and the step-time models need at least that figure
        if value.get("bf16") is None:
            raise ValueError("needs a bf16 figure (TFLOP/s): set hardware.dense_tflops.bf16")
        return value


class PrecisionConfig(StrictModel):
    section: ClassVar[str] = "precision"

    weights: Literal["bf16", "fp16", "fp8", "fp4"]
    kv: Literal["bf16", "fp16", "fp8"]


class MemoryConfig(StrictModel):
    """How an engine splits a GPU's memory (``configs/memory/``; ``sim.catalog.memory``). The
    vLLM rule (``gpu_memory_utilization``) applies unless one of the other engines' knobs is
    set: TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` or SGLang's
    ``mem_fraction_static`` (at most one of the two)."""

    section: ClassVar[str] = "memory"

    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)]
    activation_reserve_gib: NonNegative
    kv_cache_free_gpu_mem_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = None
    request_tokens: Tokens | None = None  # fleetcast memory only: one request length to show

    @field_validator("mem_fraction_static")
    @classmethod
    def _one_engine_rule(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("kv_cache_free_gpu_mem_fraction") is not None:
            raise ValueError(
                "cannot be set together with memory.kv_cache_free_gpu_mem_fraction: one engine's"
                " rule at a time (SGLang's or TensorRT-LLM's)"
            )
        return value


class KvConfig(StrictModel):
    section: ClassVar[str] = "kv"

    block_size: Annotated[Int, Field(ge=1, le=2**16)]
    num_blocks: Annotated[Int, Field(ge=1, le=INT32_MAX)] | None = None
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prefix_caching: bool = False
    # host memory per replica (over all its GPUs) for blocks a prefix cache evicts (0: none)
    cpu_offload_gib: Annotated[float, Field(ge=0, le=2**20)] = 0.0


class FleetConfig(StrictModel):
    section: ClassVar[str] = "fleet"

    replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)]
    tp: Annotated[Int, Field(ge=1, le=1024)] = 1
    pp: Annotated[Int, Field(ge=1, le=1024)] = 1
    ep: Annotated[Int, Field(ge=1, le=1024)] = 1
    pp_microbatches: Annotated[Int, Field(ge=1, le=1024)] | None = None  # null: pp
    tiers: TierMix | None = None  # price tiers' replicas (sim.config.tiers); null: one price


class SinglePlacement(StrictModel):
    mode: Literal["single"]


class ColocatedPlacement(StrictModel):
    mode: Literal["colocated"]
    second_model: Text
    traffic_share: Fraction
    kv_share: Annotated[float, Field(gt=0, lt=1)]


class DedicatedPlacement(StrictModel):
    mode: Literal["dedicated"]
    second_model: Text
    traffic_share: Fraction
    second_model_replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)] | None = None


class PoolConfig(StrictModel):
    """One pool of a disaggregated fleet (``sim.catalog.pools``): its replica count, and what
    it changes of the run's own deployment (null: the run's)."""

    replicas: Annotated[Int, Field(ge=1, le=MAX_REPLICAS)] | None = None
    hardware: Text | None = None  # a name from configs/hardware/
    tp: Annotated[Int, Field(ge=1, le=1024)] | None = None
    weights: Literal["bf16", "fp16", "fp8", "fp4"] | None = None
    kv_precision: Literal["bf16", "fp16", "fp8"] | None = None
    scheduler: Text | None = None  # a name from configs/scheduler/
    # any other keys over the run's config, as autoscale.engines: {scheduler.max_num_seqs: 512}
    # (null in the YAML, so that a command line can set the whole mapping without a +)
    settings: dict[str, Any] | None = None
    tiers: TierMix | None = None  # the pool's replicas by price tier (sim.config.tiers)


class KvLinkConfig(StrictModel):
    """A KV-transfer link given by its figures instead of a catalog name."""

    gb_per_s: Positive  # each way, per GPU, decimal GB/s
    latency_us: NonNegative


class DisaggregatedPlacement(StrictModel):
    mode: Literal["disaggregated"]
    # (factories: see RunConfig)
    prefill: PoolConfig = Field(default_factory=lambda: PoolConfig(replicas=1))
    decode: PoolConfig = Field(default_factory=PoolConfig)
    decode_router: Text = "least_outstanding"  # a name from configs/router/
    kv_link: Literal["nvlink", "infiniband", "roce", "ethernet"] | KvLinkConfig = "infiniband"
    kv_transfer_overlap: bool = True


PlacementConfig = Annotated[
    SinglePlacement | ColocatedPlacement | DedicatedPlacement | DisaggregatedPlacement,
    Field(discriminator="mode"),
]


# -- what a run reports and costs -------------------------------------------------------------


class SloConfig(StrictModel):
    section: ClassVar[str] = "slo"

    ttft_s: Positive | None = None
    tpot_s: Positive | None = None
    e2e_s: Positive | None = None


class SimConfig(StrictModel):
    section: ClassVar[str] = "sim"

    horizon_s: Positive | None = None
    fast_forward_decode: bool = True
    progress: Literal["auto"] | bool = "auto"
    step_time_scale: Positive = 1.0  # what-if: every step this many times its modelled time
    arrival_rate_scale: Positive = 1.0  # what-if: open-loop arrival rates times this


class OutputConfig(StrictModel):
    section: ClassVar[str] = "output"

    steps: Literal["full", "bucketed", "none"] = "full"
    step_bucket_s: Positive = 60.0
    # summary.json's model_error block: the step-time model's error band for this deployment's
    # class, measured on validation runs (sim/output/model_error.py); false: none
    model_error: bool = False


class FrontendConfig(StrictModel):
    section: ClassVar[str] = "frontend"

    token_s: NonNegative = 0.0


class GpuPrices(StrictModel):
    """One GPU's list prices in $/GPU-hour by tier (null: not listed), and their source."""

    on_demand: NonNegative | None = None
    reserved: NonNegative | None = None  # a 1-year commitment
    reserved_3y: NonNegative | None = None
    spot: NonNegative | None = None
    source: str | None = None
    date: str | None = None


class EnergyConfig(StrictModel):
    enabled: bool = False
    usd_per_kwh: NonNegative
    idle_power_fraction: Fraction
    pue: Annotated[float, Field(ge=1)]


class CostConfig(StrictModel):
    """The ``cost`` group (``sim.output.cost``); an absent group is the catalog's price."""

    section: ClassVar[str] = "cost"

    tier: Literal["on_demand", "reserved", "reserved_3y", "spot"] | None = None
    usd_per_gpu_hour: NonNegative | None = None
    requests_per_day: Positive | None = None
    energy: EnergyConfig | None = None
    prices: dict[str, GpuPrices] = {}


# -- a run ----------------------------------------------------------------------------------


class DeploymentConfig(StrictModel):
    """The groups that say what one replica is (``sim.catalog.deployment``)."""

    model: ModelConfig
    hardware: HardwareConfig
    precision: PrecisionConfig
    memory: MemoryConfig
    kv: KvConfig
    fleet: FleetConfig


class PolicyNode(StrictModel):
    """A ``_target_`` group: the class, and options its signature checks (``build``)."""

    model_config = StrictModel.model_config | {"extra": "allow"}
    target: Annotated[Text, Field(alias="_target_")]


class RunConfig(DeploymentConfig):
    """A whole run's config, as composed from ``configs/`` (plus what older configs lack)."""

    scheduler: PolicyNode
    router: PolicyNode
    step_time: PolicyNode
    workload: WorkloadConfig
    # (factories: a model built at import would build its validator at every start-up, even
    # for a group the run's config holds, and pydantic's plugin lookup with it)
    slo: SloConfig = Field(default_factory=SloConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    frontend: FrontendConfig = Field(default_factory=FrontendConfig)
    placement: PlacementConfig = Field(default_factory=lambda: SinglePlacement(mode="single"))
    cost: CostConfig = Field(default_factory=CostConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    autoscale: AutoscaleConfig = Field(default_factory=AutoscaleConfig)
    spec_decode: SpecDecodeConfig = Field(default_factory=SpecDecodeConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    seed: Annotated[NonNegativeInt, Field(le=2**63 - 1)] = 0
    output_dir: str | None = None


def validate_run(cfg: Any) -> RunConfig:
    """``cfg`` (a plain dict of a composed config) checked against the schema."""
    return validate(RunConfig, cfg, "")
