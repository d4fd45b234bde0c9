"""Step-time profiles: the measured curves and fitted coefficients ``step_time=calibrated`` reads.

A profile (JSON) holds, for one (model, GPU, weight precision, KV precision, backend), the GEMM and
lm_head curves of step time against tokens and the coefficients of the calibrated model
(``sim.engine.step_time.calibrated``), with its provenance and held-out error. Profiles are
written by ``fleetcast calibrate`` and shipped in ``data/profiles/`` (``shipped:profiles/``).

A coefficient that a profile does not hold costs nothing, except ``c_allreduce_latency``: absent
or null, a TP all-reduce pays the GPU catalog's interconnect latency.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sim.errors import ConfigError, require
from sim.resources import data_dir

SCHEMA_VERSION = 2
# Version 1 wrote c_allreduce_latency = 0 for "use the catalog's latency"; version 2 writes null
# (0 is a latency). Version 1 files are read with that translation.
READABLE_VERSIONS = (1, 2)
COEFFICIENTS = (
    "c0",
    "c_token",
    "c_prefill_step",
    "c_prefill_token",
    "c_prefill_attn",
    "c_decode_step",
    "c_decode_seq",
    "c_decode_attn",
    "c_allreduce_latency",
    # a mixture of experts: the time to read every routed expert's weights once (TP 1); a step
    # pays the share its tokens touch (calibrated.py's docstring)
    "c_expert_weights",
)
# how per-token work scales with tensor parallelism (calibrated.py's docstring); 1 = ideal
TP_EXPONENT = "tp_compute_exponent"
# may be null: the GPU catalog's latency is used
OPTIONAL_COEFFICIENTS = ("c_allreduce_latency",)


@dataclass
class Profile:
    """Everything a calibrated step time needs, and where it came from (times in seconds)."""

    model: str
    hardware: str
    weights_precision: str
    kv_precision: str
    backend: str
    coefficients: dict[str, float | None]
    gemm_tokens: list[float] = field(default_factory=list)
    gemm_s: list[float] = field(default_factory=list)
    lm_head_tokens: list[float] = field(default_factory=list)
    lm_head_s: list[float] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)
    modelled: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    holdout_error: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        path = Path(path)
        require(path.exists(), "step_time.profile", str(path), "file not found")
        try:
            data = json.loads(path.read_text())
            profile = cls(**data)
        except (json.JSONDecodeError, TypeError) as err:
            raise ConfigError(
                "step_time.profile", str(path), f"not a Fleetcast profile: {err}"
            ) from None
        require(
            profile.schema_version in READABLE_VERSIONS,
            "step_time.profile",
            str(path),
            f"schema version {profile.schema_version}, this Fleetcast reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}",
        )
        if profile.schema_version == 1 and profile.coefficients.get("c_allreduce_latency") == 0:
            profile.coefficients["c_allreduce_latency"] = None
        profile.schema_version = SCHEMA_VERSION
        for name in COEFFICIENTS:
            value = profile.coefficients.get(name, 0.0)
            if value is None and name in OPTIONAL_COEFFICIENTS:
                continue
            require(
                isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0,
                "step_time.profile",
                str(path),
                f"coefficient {name}={value!r} must be a number >= 0",
            )
        exponent = profile.coefficients.get(TP_EXPONENT, 1.0)
        require(
            isinstance(exponent, (int, float)) and 0 < exponent <= 1,
            "step_time.profile",
            str(path),
            f"coefficient {TP_EXPONENT}={exponent!r} must be in (0, 1]",
        )
        for xs, ys, name in (
            (profile.gemm_tokens, profile.gemm_s, "gemm"),
            (profile.lm_head_tokens, profile.lm_head_s, "lm_head"),
        ):
            require(
                len(xs) == len(ys)
                and all(b > a for a, b in zip(xs, xs[1:], strict=False))
                and all(b >= a for a, b in zip(ys, ys[1:], strict=False)),
                "step_time.profile",
                str(path),
                f"the {name} curve must have increasing tokens and non-decreasing times",
            )
        return profile

    def file_name(self) -> str:
        return profile_file_name(
            self.model, self.hardware, self.weights_precision, self.kv_precision, self.backend
        )


def shipped_profile_dir() -> Path:
    """The profiles Fleetcast ships (``data/profiles/``)."""
    return data_dir() / "profiles"


def profile_file_name(model: str, hardware: str, weights: str, kv: str, backend: str) -> str:
    slug = "".join(c if c.isalnum() else "_" for c in f"{model}_{hardware}").lower()
    return f"{slug}_w{weights}_kv{kv}_{backend}.json"
