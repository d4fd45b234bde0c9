"""The GPU catalog: what one accelerator offers a serving engine, as a handful of peak numbers.

A ``GPU`` is memory capacity (what bounds weights + KV cache), memory bandwidth (what bounds
decode, which reads every weight and each request's KV every step), dense tensor-core throughput
per precision (what bounds prefill), an interconnect for tensor-parallel all-reduce (bandwidth and
a fixed latency per all-reduce), a price and a power draw. The numbers live in
``configs/hardware/*.yaml`` in the units their sources use (decimal GB/s, TFLOP/s, microseconds);
``GPU.from_config`` converts them to SI units (bytes, FLOP/s, seconds) so that nothing
downstream converts again.

Memory is the capacity the device reports, not the datasheet's round number: an "80 GB" H100
shows 81,559 MiB in nvidia-smi, about 79.6 GiB = 85.5e9 bytes, not 80e9 bytes (HBM is sized in
binary units). The catalog gives it as ``memory_gib``; ``memory_gb`` (decimal GB, the key older
configs use) still works and wins when set. Engines size the KV cache from that total, so the
difference (about 7%) is KV capacity.

Two measured kernel figures, where NVIDIA's aiconfigurator has collected them for the GPU
(``gemm_floor_us``: what a GEMM costs however small its matrix, the intercept of time against
weight bytes at 1-8 tokens; ``attention_floor_us``: the fastest decode attention call). They
set the roofline's per-kernel floors; a GPU without them gets the roofline's defaults.

Left out on purpose: the few hundred MiB the driver keeps out of what CUDA can allocate (vLLM
sees about 0.5 GiB less than nvidia-smi's total on an H100; the runtime reserve covers it),
achievable-vs-peak efficiency (the step-time models own those factors as
named config fields), sparsity (serving runs dense GEMMs, so the catalog holds dense figures),
clock throttling and power capping, MIG partitions, and multi-node networking (InfiniBand
between nodes). The host link (``host_link_gbps``: PCIe, or NVLink-C2C on Grace parts) is the
datasheet's figure, read only by a prefix cache's host tier (``kv.cpu_offload_gib``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.config.schema import HardwareConfig
from sim.errors import ConfigError

# Precisions the tensor-core table knows. fp16 is not listed in the YAML because every GPU here
# runs fp16 at its bf16 rate; from_config copies the bf16 figure.
PRECISIONS = ("bf16", "fp16", "fp8", "fp4")

_GB = 1e9  # vendors quote bandwidth (and datasheet memory) in decimal gigabytes
_GIB = 2**30  # devices report memory in binary gibibytes
_TERA = 1e12
_US = 1e-6


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
    gemm_floor_s: float | None = None
    attention_floor_s: float | None = None
    host_link_bytes_per_s: float | None = None  # host memory <-> GPU, each way (None: unknown)
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
    def from_config(cls, cfg: Mapping[str, Any] | HardwareConfig) -> GPU:
        """Build a GPU from a ``hardware`` config node in vendor units (checked against
        ``HardwareConfig`` when it is plain data), converted to SI units. Memory is
        ``memory_gb`` decimal GB when set, else ``memory_gib`` GiB. fp16 runs at the bf16 rate
        where the table does not say otherwise."""
        c = cfg if isinstance(cfg, HardwareConfig) else HardwareConfig.from_config(cfg)
        flops: dict[str, float | None] = {
            p: None if v is None else v * _TERA for p, v in c.dense_tflops.items()
        }
        flops.setdefault("fp16", flops["bf16"])
        return cls(
            name=c.name,
            memory_bytes=c.memory_gb * _GB if c.memory_gb is not None else c.memory_gib * _GIB,
            hbm_bandwidth_bytes_per_s=c.hbm_bandwidth_gb_per_s * _GB,
            dense_flops_per_s={p: flops.get(p) for p in PRECISIONS},
            interconnect_bytes_per_s=c.interconnect_gb_per_s * _GB,
            interconnect_latency_s=c.interconnect_latency_us * _US,
            usd_per_gpu_hour=c.usd_per_gpu_hour,
            power_w=c.power_w,
            gemm_floor_s=None if c.gemm_floor_us is None else c.gemm_floor_us * _US,
            attention_floor_s=None if c.attention_floor_us is None else c.attention_floor_us * _US,
            host_link_bytes_per_s=None if c.host_link_gbps is None else c.host_link_gbps * _GB,
            sources=dict(c.sources),
        )
