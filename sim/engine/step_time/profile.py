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
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

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
FIELD = "step_time.profile"
# what a profile's fields must hold, checked before use (a wrong type would otherwise surface as
# a Python error deep in the step-time model)
_TEXT = ("model", "hardware", "weights_precision", "kv_precision", "backend")
_CURVES = ("gemm_tokens", "gemm_s", "lm_head_tokens", "lm_head_s")

T = TypeVar("T")


def read_json_object(path: Path, field_name: str, shown: str, what: str) -> dict[str, Any]:
    """The JSON object in the file at ``path``; ConfigError on ``field_name`` = ``shown``
    saying it is ``not {what}`` (not JSON, not an object, unreadable) otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(
            field_name, shown, f"not {what}: not JSON ({err.msg} at line {err.lineno})"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(field_name, shown, f"not {what}: not a text file") from None
    except OSError as err:
        raise ConfigError(field_name, shown, f"cannot be read ({err.strerror or err})") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError(field_name, shown, f"not {what}: holds a JSON {kind}, not an object")
    return data


SHOWN_KEYS = 5  # keys named in one error line; the rest are counted


def _listed(keys: list[str]) -> str:
    shown = ", ".join(map(repr, keys[:SHOWN_KEYS]))
    return shown if len(keys) <= SHOWN_KEYS else f"{shown} and {len(keys) - SHOWN_KEYS} more"


def from_fields(cls: type[T], data: dict[str, Any], field_name: str, shown: str, what: str) -> T:
    """``cls(**data)`` for a dataclass read from JSON; ConfigError naming the keys it lacks or
    does not know (instead of Python's TypeError)."""
    known = fields(cls)  # type: ignore[arg-type]
    required = [f.name for f in known if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in data]
    unknown = sorted(set(data) - {f.name for f in known})
    if missing or unknown:
        parts = [f"lacks {_listed(missing)}"] if missing else []
        parts += [f"has unknown key(s) {_listed(unknown)}"] if unknown else []
        raise ConfigError(field_name, shown, f"not {what}: {'; '.join(parts)}")
    return cls(**data)


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
        """Write atomically (a temporary file renamed over the target; removed on failure)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        try:
            tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """The profile at ``path``; ConfigError on ``step_time.profile`` naming what is wrong,
        and saying what to do with a bench profile (``fleetcast calibrate --bench``'s)."""
        path = Path(path)
        shown = str(path)
        require(path.exists(), FIELD, shown, "file not found")
        require(path.is_file(), FIELD, shown, "is a folder, not a file")
        data = read_json_object(path, FIELD, shown, "a Fleetcast profile")
        if "terms" in data and "coefficients" not in data:
            raise ConfigError(
                FIELD,
                shown,
                "a bench profile (fleetcast calibrate --bench) sets the roofline's terms: "
                "give it without step_time=calibrated (the default step_time=roofline)",
            )
        profile = from_fields(cls, data, FIELD, shown, "a Fleetcast profile")
        require(
            isinstance(profile.coefficients, dict),
            FIELD,
            shown,
            "coefficients must be an object of coefficient: seconds",
        )
        for name in _TEXT:
            value = getattr(profile, name)
            require(isinstance(value, str), FIELD, shown, f"{name}={value!r} must be text")
        for name in _CURVES:
            values = getattr(profile, name)
            require(
                isinstance(values, list)
                and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                    for v in values
                ),
                FIELD,
                shown,
                f"{name} must be a list of numbers >= 0",
            )
        require(
            profile.schema_version in READABLE_VERSIONS,
            FIELD,
            shown,
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
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and value >= 0,
                FIELD,
                shown,
                f"coefficient {name}={value!r} must be a number >= 0",
            )
        exponent = profile.coefficients.get(TP_EXPONENT, 1.0)
        require(
            isinstance(exponent, (int, float))
            and not isinstance(exponent, bool)
            and 0 < exponent <= 1,
            FIELD,
            shown,
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
                FIELD,
                shown,
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
