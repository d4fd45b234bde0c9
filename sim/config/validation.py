"""Checking a config against its schema, and saying what is wrong in one line.

The schema (``sim.config.schema``) is written with pydantic: every key of every group has a
type and its bounds, and keys it does not declare are refused. This module holds what the
schema is built from and the one translation users see:

- ``StrictModel``: the base of every group's model. Strict types (the text ``"2"`` is not a
  number, ``true`` is not 1, ``maybe`` is not a boolean), finite floats only, unknown keys
  refused, values frozen once checked.
- Field types with their reasons: ``Int`` (a whole number; ``2.0`` is read as 2, ``2.5`` is
  refused), ``Tokens`` and ``Count`` bounded by what the output columns hold, ``Positive``,
  ``NonNegative`` and ``Fraction`` floats.
- ``validate``: a model from plain data, or a ``ConfigError`` naming the dotted field, the value
  as the user wrote it, and the reason in Fleetcast's words (``workload.qps=-1: must be > 0``).

Pydantic reports every error it finds; the user gets the first that is about their input (a
union tries each of its members: a mapping given where an integer or a distribution belongs
fails as an integer too, and that failure is not the interesting one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails
from typing_extensions import Self

from sim.errors import ConfigError

INT32_MAX = 2**31 - 1
"""The largest token count, block count or step count the output columns (int32) hold."""
MAX_REQUESTS = 10**9
"""A run's request count: a billion requests is about 30 GB of arrays before anything runs,
so more is a typo, not a plan (replay a trace in windows instead)."""
MAX_REPLICAS = 100_000
"""Replicas in one fleet: each is a Python object with its own scheduler and KV pool."""


class StrictModel(BaseModel):
    """A config group: declared keys only, strict types, finite numbers, frozen."""

    # defer_build: a model's validator is built when first used, so a run pays only for the
    # groups and policy options it has (start-up, benchmarks/bench_startup.py)
    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, frozen=True, defer_build=True
    )
    section: ClassVar[str] = ""
    """The group's name in a run's config, for error messages (``model``, ``cost``, ...)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_given(cls, data: Any) -> Any:
        """``null`` for a field that does not take null means "not given": its default (or,
        for a required field, "required"). A key the group does not declare stays, to be
        refused as unknown."""
        if not isinstance(data, Mapping):
            return data
        takes_null = _takes_null(cls)
        return {k: v for k, v in data.items() if v is not None or takes_null.get(k, True)}

    @classmethod
    def from_config(cls, data: object, prefix: str | None = None) -> Self:
        """The group checked from plain config data (errors name ``prefix``, by default the
        group's own name)."""
        return validate(cls, data, cls.section if prefix is None else prefix)


def _whole(value: object) -> object:
    """A float holding a whole number is that integer (YAML and the command line write
    ``2.0`` or ``1e3`` for 2 and 1000; ``1e30`` then meets the field's upper bound); anything
    else is left for the type check to refuse."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_whole)]
NonNegativeInt = Annotated[Int, Field(ge=0)]
Count = Annotated[Int, Field(ge=1, le=MAX_REQUESTS)]
Tokens = Annotated[Int, Field(ge=1, le=INT32_MAX)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Text = Annotated[str, Field(min_length=1)]


@cache
def _takes_null(model: type[BaseModel]) -> dict[str, bool]:
    """For each field of ``model``, whether null is one of its values."""
    return {name: _allows_none(field.annotation) for name, field in model.model_fields.items()}


def _allows_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None):
        return True
    if annotation is Any:
        return True
    return any(
        _allows_none(arg)
        for arg in getattr(annotation, "__args__", ()) or ()
        if arg is not Ellipsis and not isinstance(arg, str)
    )


M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def validate(schema: type[T] | Any, data: object, prefix: str) -> T:
    """``data`` checked against ``schema`` (a model, or a type such as a tagged union of
    models), or a ConfigError naming the field under ``prefix``."""
    try:
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return schema.model_validate(data)  # type: ignore[return-value]
        return _adapter(schema).validate_python(data)
    except ValidationError as err:
        raise config_error(err, data, prefix, schema) from None


@cache
def _adapter(schema: Any) -> TypeAdapter[Any]:
    return TypeAdapter(schema)


# -- from pydantic's errors to one line ----------------------------------------------------------

_TYPE_REASONS = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a finite number",
    "float_parsing": "must be a finite number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "string_too_short": "must not be empty",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "missing": "required",
}
# Errors that say "not this member of a union": dropped when the same field has a better one.
_MISMATCH = {
    "int_type",
    "float_type",
    "bool_type",
    "string_type",
    "dict_type",
    "model_type",
    "model_attributes_type",
    "list_type",
    "literal_error",
    "none_required",
}


def _reason(error: ErrorDetails, known: Sequence[str]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        sign = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        bound = next(iter(ctx.values()))
        shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
        return f"must be {sign} {shown}"
    if kind == "literal_error":
        return f"unknown; choose one of {_choices(ctx.get('expected', ''))}"
    if kind == "union_tag_invalid":
        return f"unknown; choose one of {_choices(ctx.get('expected_tags', ''))}"
    if kind == "union_tag_not_found":
        return f"must have a {ctx.get('discriminator', '').strip(chr(39))} key"
    if kind == "extra_forbidden":
        return "unknown key" + (f"; known: {', '.join(known)}" if known else "")
    if kind in ("too_short", "too_long"):
        return f"must hold {ctx.get('min_length', ctx.get('max_length'))} values"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"])).removeprefix("Value error, ")
    if kind in _TYPE_REASONS:
        return _TYPE_REASONS[kind]
    return error["msg"][:1].lower() + error["msg"][1:]


def _choices(listed: str) -> str:
    """pydantic's "'a', 'b' or 'c'" as "a, b, c"."""
    return listed.replace("'", "").replace(" or ", ", ")


def _walk(data: object, error: ErrorDetails) -> tuple[list[str], object]:
    """The user's path to an error (pydantic's location minus union-member markers) and the
    value found there."""
    path: list[str] = []
    node = data
    loc = tuple(error["loc"])
    for i, part in enumerate(loc):
        if isinstance(node, Mapping) and part in node:
            path.append(str(part))
            node = node[part]
        elif (
            isinstance(node, Sequence)
            and not isinstance(node, str)
            and isinstance(part, int)
            and 0 <= part < len(node)
        ):
            path.append(str(part))
            node = node[part]
        elif i == len(loc) - 1 and error["type"] == "missing" and isinstance(part, str):
            path.append(part)
            node = None
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        tag = str((error.get("ctx") or {}).get("discriminator", "")).strip("'")
        path.append(tag)
        node = node.get(tag) if isinstance(node, Mapping) else None
    return path, node


def _known_keys(model: Any, data: object, path: list[str]) -> list[str]:
    """The keys declared where an unknown key was found (following tagged unions by the
    input's own tag)."""
    current: Any = _model_for(model, data)
    node: Any = data
    for part in path[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(part)
        if field is None:
            return []
        node = node[part] if isinstance(node, Mapping) else None
        current = _model_for(field.annotation, node)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _model_for(annotation: Any, node: object) -> Any:
    """The model a field's annotation means for this input (the union member whose tag the
    input carries, or the only model in it)."""
    candidates = _models_in(annotation)
    if len(candidates) == 1:
        return candidates[0]
    for candidate in candidates:
        for name, field in candidate.model_fields.items():
            literal = getattr(field.annotation, "__args__", ())
            if (
                isinstance(node, Mapping)
                and node.get(name) in literal
                and str(field.annotation).startswith("typing.Literal")
            ):
                return candidate
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _models_in(arg)
    metadata = getattr(annotation, "__origin__", None)
    if metadata is not None and not found:
        found += _models_in(metadata)
    return found


def config_error(err: ValidationError, data: object, prefix: str, model: Any = None) -> ConfigError:
    """The first error of ``err`` that is about the user's input, as a ConfigError."""
    located = [(e, *_walk(data, e)) for e in err.errors(include_url=False)]
    # A union member that does not fit the input's type ("not an integer" for a mapping) is
    # noise when another error is about the same field or something inside it.
    real = [tuple(p) for e, p, _ in located if e["type"] not in _MISMATCH]

    def noise(error: ErrorDetails, path: list[str]) -> bool:
        return error["type"] in _MISMATCH and any(r[: len(path)] == tuple(path) for r in real)

    kept = [(e, p, v) for e, p, v in located if not noise(e, p)]
    error, path, value = kept[0]
    same_field = [e for e, p, _ in kept if p == path]
    if error["type"] in _MISMATCH and len(same_field) > 1:
        reason = _union_reason(same_field)  # every member of a union refused the value
    elif error["type"] == "extra_forbidden":
        reason = _reason(error, _known_keys(model, data, path))
    else:
        reason = _reason(error, [])
    field = ".".join([prefix, *path] if prefix else path) or prefix
    if not path:
        value = error["input"]
    return ConfigError(field, value, reason)


def _union_reason(errors: list[ErrorDetails]) -> str:
    """Every member of a union refused the value: say what it may be."""
    kinds = []
    for error in errors:
        kind = error["type"]
        if kind in ("int_type",):
            kinds.append("an integer")
        elif kind in ("float_type",):
            kinds.append("a number")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            kinds.append("a mapping")
        elif kind == "string_type":
            kinds.append("text")
        elif kind == "bool_type":
            kinds.append("true or false")
        elif kind == "literal_error":
            kinds.append((error.get("ctx") or {}).get("expected", "").replace("'", ""))
    return "must be " + " or ".join(dict.fromkeys(k for k in kinds if k))
