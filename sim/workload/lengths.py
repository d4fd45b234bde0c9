"""How long requests are: prompt and output token-count distributions.

Each distribution draws integer token counts >= 1 from a ``numpy.random.Generator`` and knows
its analytic ``mean`` (Ciw style), so tests compare sample means with theory. Prompt and output
lengths are drawn independently from their own streams (``workload.prompt_tokens`` and
``workload.output_tokens``), so changing one never changes the other or the arrivals.

A length field in the workload config is either an int (fixed length) or a mapping with
``dist:`` one of

- ``fixed``: ``value``.
- ``uniform``: ``low``, ``high``, both inclusive.
- ``lognormal``: ``median``, ``sigma`` (of the underlying normal), ``min``, ``max``. Draws are
  rounded to whole tokens and then clipped to ``[min, max]`` (``max: null`` = no upper clip).
  The clip piles the tail mass on the bounds, so the sample mean differs from ``mean`` (the
  unclipped ``median * exp(sigma^2 / 2)``) by the clipped tails.
- ``empirical``: ``path`` to a trace file, ``column`` (defaults to the field's own name);
  resamples that column with replacement.

A workload-level ``pattern:`` picks one of the GUIDE's four traffic shapes as lognormal presets
and overrides both fields; see ``PATTERNS``. Left out: correlation between prompt and output
length (real traces have some; replay a trace to keep it), and per-session structure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from sim.config import params
from sim.errors import ConfigError
from sim.resources import resolve_path
from sim.workload.traces import read_columns


class LengthDist(Protocol):
    """A token-count distribution: ``sample`` gives int64 values >= 1."""

    @property
    def mean(self) -> float: ...

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...


@dataclass(frozen=True)
class FixedLength:
    value: int

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class UniformLength:
    low: int
    high: int  # inclusive

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(frozen=True)
class LogNormalLength:
    median: float
    sigma: float
    min_tokens: int = 1
    max_tokens: int | None = None  # None: no upper clip

    @property
    def mean(self) -> float:
        """The mean of the unclipped lognormal (clipping shifts the sample mean slightly)."""
        return float(self.median * np.exp(self.sigma**2 / 2))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        draws = np.rint(rng.lognormal(np.log(self.median), self.sigma, size=n))
        upper = np.inf if self.max_tokens is None else self.max_tokens
        return np.clip(draws, self.min_tokens, upper).astype(np.int64)


@dataclass(frozen=True, eq=False)
class EmpiricalLength:
    values: np.ndarray = field(repr=False)  # int64, >= 1, the observed lengths

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self.values, size=n, replace=True).astype(np.int64)


# The GUIDE's four traffic shapes as lognormal presets. The trace README splits lengths at
# prompt 1024 / output 256 tokens ("fixed 1024/256"); each preset's median sits a factor 4 from
# that threshold and its clip range [median/4, median*4] (sigma 0.5 puts ~0.3% on each bound)
# keeps every draw on its side of the split, so the shape is guaranteed, not just likely.
_LONG_IN = {"dist": "lognormal", "median": 4096, "sigma": 0.5, "min": 1025, "max": 16384}
_SHORT_IN = {"dist": "lognormal", "median": 256, "sigma": 0.5, "min": 64, "max": 1024}
_LONG_OUT = {"dist": "lognormal", "median": 1024, "sigma": 0.5, "min": 257, "max": 4096}
_SHORT_OUT = {"dist": "lognormal", "median": 64, "sigma": 0.5, "min": 16, "max": 256}
PATTERNS: dict[str, tuple[dict, dict]] = {
    "long_in_short_out": (_LONG_IN, _SHORT_OUT),  # summarization, RAG, code completion
    "long_in_long_out": (_LONG_IN, _LONG_OUT),  # long-document rewriting, reasoning over context
    "short_in_long_out": (_SHORT_IN, _LONG_OUT),  # generation, reasoning traces
    "short_in_short_out": (_SHORT_IN, _SHORT_OUT),  # chat turns, classification
}
DISTS = ["fixed", "uniform", "lognormal", "empirical"]


def build_length(spec: object, name: str) -> LengthDist:
    """A distribution from a config value; ``name`` is the dotted field for errors.

    ``name`` ends in ``prompt_tokens`` or ``output_tokens``, which is also the default trace
    column for ``empirical``.
    """
    if isinstance(spec, Mapping):
        return _from_mapping(spec, name)
    if spec is None:
        raise ConfigError(name, spec, "required: an int or a mapping with dist:")
    return FixedLength(_whole(spec, name))


def _whole(value: Any, name: str) -> int:
    """A fixed length given as a bare number: a whole number >= 1."""
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and float(value).is_integer()
        and value >= 1
    )
    if not ok:
        raise ConfigError(name, value, "must be an integer >= 1 or a mapping with dist:")
    return int(value)


def _from_mapping(spec: Mapping[str, Any], name: str) -> LengthDist:
    high: int | None  # None: no upper bound (lognormal)
    kind = params.choice(spec, "dist", DISTS, prefix=name)
    if kind == "fixed":
        return FixedLength(params.integer(spec, "value", required=True, ge=1, prefix=name))
    if kind == "uniform":
        low = params.integer(spec, "low", required=True, ge=1, prefix=name)
        high = params.integer(spec, "high", required=True, ge=1, prefix=name)
        if high < low:
            raise ConfigError(f"{name}.high", high, f"must be >= low ({low})")
        return UniformLength(low, high)
    if kind == "lognormal":
        median = params.number(spec, "median", required=True, gt=0, prefix=name)
        sigma = params.number(spec, "sigma", required=True, ge=0, prefix=name)
        low = params.integer(spec, "min", default=1, ge=1, prefix=name)
        high = params.integer(spec, "max", ge=1, prefix=name)
        if high is not None and high < low:
            raise ConfigError(f"{name}.max", high, f"must be >= min ({low})")
        return LogNormalLength(median, sigma, low, high)
    # empirical
    column = spec.get("column") or name.rsplit(".", 1)[-1]
    path = resolve_path(spec.get("path"), f"{name}.path")
    values = read_columns(path, (column,), f"{name}.path", str(spec.get("path")))[column]
    if values.size == 0 or not np.issubdtype(values.dtype, np.number):
        raise ConfigError(f"{name}.path", str(spec.get("path")), f"column {column} is empty")
    if not np.all(np.isfinite(values)) or np.any(values < 1):
        raise ConfigError(f"{name}.path", str(spec.get("path")), f"column {column} must be >= 1")
    return EmpiricalLength(values.astype(np.int64))


def build_lengths(
    cfg: Mapping[str, Any], prefix: str = "workload"
) -> tuple[LengthDist, LengthDist]:
    """(prompt, output) distributions of a workload config; ``pattern`` wins when set."""
    prompt_spec: object
    output_spec: object
    pattern = cfg.get("pattern")
    if pattern is not None:
        params.choice(cfg, "pattern", list(PATTERNS), prefix=prefix)
        prompt_spec, output_spec = PATTERNS[pattern]
    else:
        prompt_spec, output_spec = cfg.get("prompt_tokens"), cfg.get("output_tokens")
    return (
        build_length(prompt_spec, f"{prefix}.prompt_tokens"),
        build_length(output_spec, f"{prefix}.output_tokens"),
    )
