"""The GPU catalog: what one accelerator offers a serving engine, as a handful of peak numbers.

A ``GPU`` is memory capacity (what bounds weights + KV cache), memory bandwidth (what bounds
decode, which reads every weight and each request's KV every step), dense tensor-core throughput
per precision (what bounds prefill), an interconnect for tensor-parallel all-reduce (bandwidth and
a fixed latency per all-reduce), a price and a power draw. The numbers live in
``configs/hardware/*.yaml`` as vendor datasheet figures in the vendors' units (decimal GB,
TFLOP/s, microseconds); ``GPU.from_config`` converts them to SI units (bytes, FLOP/s, seconds)
so that nothing downstream converts again.

Left out on purpose: achievable-vs-peak efficiency (the step-time models own those factors as
named config fields), sparsity (serving runs dense GEMMs, so the catalog holds dense figures),
clock throttling and power capping, MIG partitions, multi-node networking (InfiniBand between
nodes), and host memory / PCIe offload bandwidth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.config.params import check_number
from sim.errors import ConfigError, require

# Precisions the tensor-core table knows. fp16 is not listed in the YAML because every GPU here
# runs fp16 at its bf16 rate; from_config copies the bf16 figure.
PRECISIONS = ("bf16", "fp16", "fp8", "fp4")

_GB = 1e9  # vendors quote memory and bandwidth in decimal gigabytes
_TERA = 1e12
_US = 1e-6

_NUMBER_FIELDS = (
    "memory_gb",
    "hbm_bandwidth_gb_per_s",
    "interconnect_gb_per_s",
    "interconnect_latency_us",
    "usd_per_gpu_hour",
    "power_w",
)
_KNOWN_FIELDS = frozenset(("name", "dense_tflops", "sources", *_NUMBER_FIELDS))


def _positive_number(value: object, field_name: str) -> float:
    return check_number(value, field_name, gt=0)


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator's peak capabilities in SI units (bytes, FLOP/s, seconds, USD, watts).

    ``dense_flops_per_s`` maps each precision in ``PRECISIONS`` to dense tensor-core FLOP/s, or
    ``None`` where the GPU has no tensor-core support for it (e.g. fp4 before Blackwell).
    """

    name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    dense_flops_per_s: dict[str, float | None]
    interconnect_bytes_per_s: float
    interconnect_latency_s: float
    usd_per_gpu_hour: float
    power_w: float
    sources: dict[str, str] = field(default_factory=dict)

    def flops_per_s(self, precision: str) -> float:
        """Dense tensor-core FLOP/s at ``precision``; ConfigError if the GPU cannot run it."""
        if precision not in self.dense_flops_per_s:
            raise ConfigError(
                "precision.weights",
                precision,
                "unknown precision; choose one of bf16, fp16, fp8, fp4",
            )
        flops = self.dense_flops_per_s[precision]
        if flops is None:
            # fp16 is left out of the advice: it always runs at the bf16 rate.
            supported = [p for p in ("bf16", "fp8", "fp4") if self.supports(p)]
            raise ConfigError(
                "precision.weights",
                precision,
                f"{self.name} has no {precision} tensor cores; use {' or '.join(supported)}",
            )
        return flops

    def supports(self, precision: str) -> bool:
        """True when the GPU has tensor cores for ``precision``."""
        return self.dense_flops_per_s.get(precision) is not None

    @classmethod
    def from_config(cls, cfg: Mapping) -> GPU:
        """Build a GPU from a ``hardware`` config node (vendor units), validating every field.

        Errors name the field as ``hardware.<field>``: a missing or unknown field, a
        non-positive number, or a ``dense_tflops`` table without a bf16 figure.
        """
        require(isinstance(cfg, Mapping), "hardware", cfg, "must be a mapping of GPU fields")
        for key in cfg:
            # Keys starting with "_" (e.g. Hydra's _target_) belong to the config system.
            if not str(key).startswith("_"):
                require(key in _KNOWN_FIELDS, f"hardware.{key}", cfg[key], "unknown field")
        for key in ("name", "dense_tflops", *_NUMBER_FIELDS):
            require(key in cfg, f"hardware.{key}", None, "missing field")

        name = cfg["name"]
        require(
            isinstance(name, str) and name.strip() != "",
            "hardware.name",
            name,
            "must be a non-empty string",
        )
        numbers = {key: _positive_number(cfg[key], f"hardware.{key}") for key in _NUMBER_FIELDS}

        tflops = cfg["dense_tflops"]
        require(
            isinstance(tflops, Mapping),
            "hardware.dense_tflops",
            tflops,
            "must map bf16/fp8/fp4 to dense TFLOP/s (null where unsupported)",
        )
        flops: dict[str, float | None] = {}
        for precision, value in tflops.items():
            field_name = f"hardware.dense_tflops.{precision}"
            require(
                precision in PRECISIONS,
                field_name,
                value,
                "unknown precision; choose one of bf16, fp16, fp8, fp4",
            )
            flops[precision] = (
                None if value is None else _positive_number(value, field_name) * _TERA
            )
        # Every serving GPU runs bf16; the step-time models need at least that figure.
        require(
            flops.get("bf16") is not None,
            "hardware.dense_tflops.bf16",
            tflops.get("bf16"),
            "missing field",
        )
        flops.setdefault("fp16", flops["bf16"])
        for precision in PRECISIONS:
            flops.setdefault(precision, None)

        sources = cfg.get("sources") or {}
        require(
            isinstance(sources, Mapping),
            "hardware.sources",
            sources,
            "must map field names to source text",
        )

        return cls(
            name=name,
            memory_bytes=numbers["memory_gb"] * _GB,
            hbm_bandwidth_bytes_per_s=numbers["hbm_bandwidth_gb_per_s"] * _GB,
            dense_flops_per_s={p: flops[p] for p in PRECISIONS},
            interconnect_bytes_per_s=numbers["interconnect_gb_per_s"] * _GB,
            interconnect_latency_s=numbers["interconnect_latency_us"] * _US,
            usd_per_gpu_hour=numbers["usd_per_gpu_hour"],
            power_w=numbers["power_w"],
            sources={str(k): str(v) for k, v in sources.items()},
        )
