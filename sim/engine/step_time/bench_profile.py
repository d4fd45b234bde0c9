"""Roofline terms fitted to measured serving benchmarks: the file ``fleetcast calibrate --bench``
writes and ``step_time=roofline step_time.profile=PATH`` reads.

A bench profile holds a few global terms of the roofline (``sim.engine.step_time.roofline``),
fitted by simulating the user's benchmark files (``sim.calibration.bench_fit``):

- ``step_overhead_s``: the engine's fixed cost per step;
- ``token_overhead_s``: the host's cost per sequence that produces a token in a step;
- ``request_overhead_s``: the server's fixed time per request before the engine queues it;
- ``compute_efficiency`` (with ``quantized_compute_efficiency`` and
  ``attention_compute_efficiency``, all scaled by one factor): how fast compute-bound work runs;
- ``bandwidth_efficiency`` (with ``attention_bandwidth_efficiency``): how fast weights and KV
  stream;
- ``allreduce_bandwidth_efficiency``: tensor-parallel scaling (fitted only from runs at two or
  more TP degrees).

The terms are roofline keys, so the profile is the same as giving them as ``step_time.*``
overrides; the file adds what they are for (the deployments of the runs they were fitted on),
where they came from (each file with its sha256 and the overrides it was simulated with) and
how far off they are (the error on the runs the fit used and on the runs it held out).

A run whose model, GPU or precisions are not among the deployments of the fitted runs is
refused: terms fitted on one GPU are not known to transfer (give them as overrides to try).
The engine and the TP degree are not checked: the profile's ``runs`` record the scheduler and
overrides each run was simulated with; use it with the same scheduler, and at a TP degree it
saw unless ``allreduce_bandwidth_efficiency`` was fitted.
A fitted key that the run also sets to a value other than its default is refused too, so no
setting is silently replaced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.engine.step_time.profile import from_fields, read_json_object
from sim.errors import ConfigError, require
from sim.resources import resolve_path

if TYPE_CHECKING:
    from sim.catalog.deployment import Deployment

KIND = "roofline_bench_terms"
SCHEMA_VERSION = 1
# the roofline keys a bench profile may set, and the range each must be in
TERMS: dict[str, tuple[float, float]] = {
    "step_overhead_s": (0.0, 1.0),
    "token_overhead_s": (0.0, 0.1),
    "request_overhead_s": (0.0, 10.0),
    "compute_efficiency": (1e-6, 1.0),
    "quantized_compute_efficiency": (1e-6, 1.0),
    "attention_compute_efficiency": (1e-6, 1.0),
    "bandwidth_efficiency": (1e-6, 1.0),
    "attention_bandwidth_efficiency": (1e-6, 1.0),
    "allreduce_bandwidth_efficiency": (1e-6, 1.0),
}
DEPLOYMENT_KEYS = ("model", "hardware", "weights_precision", "kv_precision")


def deployment_key(deployment: Deployment) -> dict[str, str]:
    """What a bench profile says it is for, of one deployment."""
    return {
        "model": deployment.model.name,
        "hardware": deployment.gpu.name,
        "weights_precision": deployment.weights_precision,
        "kv_precision": deployment.kv_precision,
    }


@dataclass
class BenchProfile:
    """Fitted roofline terms, the deployments they are for, their provenance and error."""

    terms: dict[str, float]
    fitted_for: list[dict[str, str]]
    fitted: list[str] = field(default_factory=list)  # the terms the fit moved (others: default)
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    kind: str = KIND
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

    def overrides(self) -> list[str]:
        """The same terms as ``step_time.*`` overrides of the roofline."""
        return [f"step_time.{name}={value!r}" for name, value in self.terms.items()]

    @classmethod
    def load(cls, path: str | Path, field_name: str = "step_time.profile") -> BenchProfile:
        path = Path(path)
        shown = str(path)
        require(path.exists(), field_name, shown, "file not found")
        require(path.is_file(), field_name, shown, "is a folder, not a file")
        data = read_json_object(path, field_name, shown, "a bench profile")
        if data.get("kind") != KIND:
            hint = (
                ": a kernel profile (fleetcast calibrate --steps/--kernels) goes with "
                "step_time=calibrated: add step_time=calibrated to use it"
                if "coefficients" in data
                else ""
            )
            raise ConfigError(
                field_name, shown, f"not a bench profile (fleetcast calibrate --bench){hint}"
            )
        require(
            data.get("schema_version") == SCHEMA_VERSION,
            field_name,
            shown,
            f"schema version {data.get('schema_version')!r}, this Fleetcast reads {SCHEMA_VERSION}",
        )
        profile = from_fields(cls, data, field_name, shown, "a bench profile")
        require(
            isinstance(profile.terms, dict) and bool(profile.terms),
            field_name,
            shown,
            "holds no terms",
        )
        for name, value in profile.terms.items():
            require(name in TERMS, field_name, shown, f"unknown term {name!r}")
            low, high = TERMS[name]
            require(
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and low <= value <= high,
                field_name,
                shown,
                f"term {name}={value!r} must be a number in [{low:g}, {high:g}]",
            )
        require(
            isinstance(profile.fitted_for, list)
            and bool(profile.fitted_for)
            and all(
                isinstance(d, dict) and all(isinstance(d.get(k), str) for k in DEPLOYMENT_KEYS)
                for d in profile.fitted_for
            ),
            field_name,
            shown,
            f"fitted_for must list the deployments ({', '.join(DEPLOYMENT_KEYS)})",
        )
        return profile


def load_bench_profile(
    path: str, deployment: Deployment, given: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, float]:
    """The terms of the profile at ``path`` for ``deployment``; ConfigError when the profile
    is for other deployments, or when ``given`` (the step-time keys of the run) sets a fitted
    key to a value other than its entry in ``defaults``."""
    profile = BenchProfile.load(resolve_path(path, "step_time.profile"))
    key = deployment_key(deployment)
    if key not in profile.fitted_for:
        fitted = "; ".join(", ".join(d[k] for k in DEPLOYMENT_KEYS) for d in profile.fitted_for)
        raise ConfigError(
            "step_time.profile",
            path,
            f"fitted for {fitted}; this run is {', '.join(key.values())} (to try its terms "
            f"anyway, give them as overrides: {' '.join(profile.overrides())})",
        )
    for name in profile.terms:
        if name in given and given[name] != defaults[name]:
            raise ConfigError(
                f"step_time.{name}",
                given[name],
                f"the profile {path} fits this term ({profile.terms[name]:.6g}); "
                "leave the key at its default or drop the profile",
            )
    return {name: float(value) for name, value in profile.terms.items()}
