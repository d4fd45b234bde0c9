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
  resamples that column with replacement, or with ``in_order: true`` gives request i the
  column's row i (cycling past the last row): a benchmark's own lengths replayed in order.

A workload-level ``pattern:`` picks one of the four traffic shapes (long or short prompts, long or
short outputs; data/traces/README.md) as lognormal presets and overrides both fields; see
``PATTERNS``. Left out: correlation between prompt and output length (real traces have some; replay
a trace to keep it), and per-session structure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from sim.config.validation import StrictModel, validate
from sim.config.workload_schema import (
    EmpiricalLengthSpec,
    FixedLengthSpec,
    LengthSpec,
    LogNormalLengthSpec,
    SyntheticWorkload,
    UniformLengthSpec,
)
from sim.errors import ConfigError
from sim.resources import resolve_path
from sim.workload.traces import read_columns, token_counts


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
    in_order: bool = False  # row i for request i (cycling), no draw

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.in_order:
            return self.values[np.arange(n) % self.values.size].astype(np.int64)
        return rng.choice(self.values, size=n, replace=True).astype(np.int64)


# The four traffic shapes as lognormal presets. The trace README splits lengths at
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


def build_length(spec: LengthSpec | Mapping[str, Any], name: str) -> LengthDist:
    """A distribution from a checked length field (a plain mapping is checked first); ``name``
    is the dotted field for errors.

    ``name`` ends in ``prompt_tokens`` or ``output_tokens``, which is also the default trace
    column for ``empirical``.
    """
    if not isinstance(spec, StrictModel):
        spec = validate(LengthSpec, spec, name)
    if isinstance(spec, int):
        return FixedLength(spec)
    if isinstance(spec, FixedLengthSpec):
        return FixedLength(spec.value)
    if isinstance(spec, UniformLengthSpec):
        return UniformLength(spec.low, spec.high)
    if isinstance(spec, LogNormalLengthSpec):
        return LogNormalLength(spec.median, spec.sigma, spec.min, spec.max)
    assert isinstance(spec, EmpiricalLengthSpec), f"{name}: no length distribution for {spec}"
    column = spec.column or name.rsplit(".", 1)[-1]
    path = resolve_path(spec.path, f"{name}.path")
    values = read_columns(path, (column,), f"{name}.path", spec.path)[column]
    if values.size == 0:
        raise ConfigError(f"{name}.path", spec.path, f"column {column} has no rows")
    return EmpiricalLength(
        token_counts(values, column, f"{name}.path", spec.path), in_order=spec.in_order
    )


def build_lengths(
    spec: SyntheticWorkload | Mapping[str, Any], prefix: str = "workload"
) -> tuple[LengthDist, LengthDist]:
    """(prompt, output) distributions of a generated workload (its ``prompt_tokens``,
    ``output_tokens`` and ``pattern``, checked first when plain data); ``pattern`` wins when
    set."""
    if not isinstance(spec, SyntheticWorkload):
        spec = SyntheticWorkload.from_config(spec, prefix)
    if spec.pattern is not None:
        prompt, output = PATTERNS[spec.pattern]
        return build_length(prompt, f"{prefix}.pattern"), build_length(output, f"{prefix}.pattern")
    return (
        build_length(spec.prompt_tokens, f"{prefix}.prompt_tokens"),
        build_length(spec.output_tokens, f"{prefix}.output_tokens"),
    )
