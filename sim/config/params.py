"""Reading and checking config values at the boundary.

Config nodes arrive as plain dicts (``OmegaConf.to_container(resolve=True)``). These helpers
fetch one field, check its type and range, and raise ``ConfigError`` naming the full dotted
field (``workload.qps``, ``fleet.tp``) and the offending value, so every bad input gives the
same one-line error. They hold no state and know nothing about what the values mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, TypeGuard, overload

from sim.errors import ConfigError


def field_name(key: str, prefix: str) -> str:
    """The dotted name users see in errors, e.g. ``workload.qps``."""
    return f"{prefix}.{key}" if prefix else key


def _is_number(value: object) -> TypeGuard[int | float]:
    # bool is an int subclass; ``qps: true`` is a typo, not a rate of 1.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_number(
    value: object,
    name: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """``value`` as a finite float within the bounds, or ConfigError naming ``name``."""
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ConfigError(name, value, "must be a finite number")
    # errors show the value as the user wrote it
    if gt is not None and not value > gt:
        raise ConfigError(name, value, f"must be > {gt:g}")
    if ge is not None and not value >= ge:
        raise ConfigError(name, value, f"must be >= {ge:g}")
    if le is not None and not value <= le:
        raise ConfigError(name, value, f"must be <= {le:g}")
    return float(value)


def check_integer(value: object, name: str, *, ge: int | None = None) -> int:
    """``value`` as an int (``2.0`` is accepted as 2, ``2.5`` is not), or ConfigError."""
    if not _is_number(value) or not math.isfinite(float(value)) or float(value) != int(value):
        raise ConfigError(name, value, "must be an integer")
    value = int(value)
    if ge is not None and value < ge:
        raise ConfigError(name, value, f"must be >= {ge}")
    return value


def _fetch(
    cfg: Mapping[str, Any], key: str, default: object, required: bool, prefix: str
) -> tuple[Any, str]:
    """The field's value and dotted name. A missing key and an explicit null both mean "not
    given": the default, if there is one; None when there is none and it is not required."""
    value = cfg.get(key)
    if value is None:
        value = default
    name = field_name(key, prefix)
    if value is None and required:
        raise ConfigError(name, value, "required")
    return value, name


# ``required=True`` or a number as ``default`` gives a number (``null`` in the config is "not
# given", so it also takes the default).
@overload
def number(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: float,
    required: bool = ...,
    gt: float | None = ...,
    ge: float | None = ...,
    le: float | None = ...,
    prefix: str,
) -> float: ...
@overload
def number(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: None = ...,
    required: Literal[True],
    gt: float | None = ...,
    ge: float | None = ...,
    le: float | None = ...,
    prefix: str,
) -> float: ...
@overload
def number(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: object = ...,
    required: bool = ...,
    gt: float | None = ...,
    ge: float | None = ...,
    le: float | None = ...,
    prefix: str,
) -> float | None: ...
def number(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: object = None,
    required: bool = False,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    prefix: str,
) -> float | None:
    """A finite float field; ``None`` when unset and not required."""
    value, name = _fetch(cfg, key, default, required, prefix)
    return None if value is None else check_number(value, name, gt=gt, ge=ge, le=le)


@overload
def integer(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: int,
    required: bool = ...,
    ge: int | None = ...,
    prefix: str,
) -> int: ...
@overload
def integer(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: None = ...,
    required: Literal[True],
    ge: int | None = ...,
    prefix: str,
) -> int: ...
@overload
def integer(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: object = ...,
    required: bool = ...,
    ge: int | None = ...,
    prefix: str,
) -> int | None: ...
def integer(
    cfg: Mapping[str, Any],
    key: str,
    *,
    default: object = None,
    required: bool = False,
    ge: int | None = None,
    prefix: str,
) -> int | None:
    """An integer field; ``None`` when unset and not required."""
    value, name = _fetch(cfg, key, default, required, prefix)
    return None if value is None else check_integer(value, name, ge=ge)


def choice(cfg: Mapping[str, Any], key: str, choices: list[str], *, prefix: str) -> str:
    """A required field that must be one of ``choices``; the error lists them."""
    value = cfg.get(key)
    if value not in choices:
        raise ConfigError(
            field_name(key, prefix), value, f"unknown; choose one of {', '.join(sorted(choices))}"
        )
    return value
