"""From a config node to the object it names: ``_target_`` plus options, checked first.

Policies (scheduler, router, step-time model) name their class in ``_target_``, so adding one is
one Python file plus one YAML file. ``build`` checks the node's options against the class's
signature before calling it: an option the class does not take, or a value of another type than
its annotation (through the same schema layer as every config group, ``sim.config.validation``),
is a one-line ``ConfigError`` rather than a ``TypeError``; ranges are the class's own checks. A
``_target_`` written by an older Fleetcast (``sim.config.legacy``) still builds.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel, create_model

from sim.config.legacy import canonical_target
from sim.config.validation import Int, StrictModel, validate
from sim.errors import ConfigError, require
from sim.signature import constructor


def target_class(node: Mapping[str, Any], group: str) -> Any:
    """The class ``node['_target_']`` names (ConfigError when it names none)."""
    target = node.get("_target_")
    require(
        isinstance(target, str) and "." in target,
        f"{group}._target_",
        target,
        "must name a class as module.Class",
    )
    module_name, _, class_name = canonical_target(str(target)).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ConfigError(f"{group}._target_", target, "no such class") from None


def build(node: Mapping[str, Any], group: str, **context: Any) -> Any:
    """Instantiate ``node['_target_']`` with the node's other keys plus ``context``.

    ``context`` holds what the run provides (the KV cache, the deployment, an RNG stream);
    each class is given the parts its constructor names.
    """
    cls = target_class(node, group)
    class_name = cls.__name__
    node = {k: v for k, v in node.items() if k != "_target_"}
    params = constructor(cls)[0].parameters
    known = [
        n
        for n, p in params.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in context
    ]
    for key in node:
        if key not in known:
            raise ConfigError(
                f"{group}.{key}",
                node[key],
                f"unknown option for {class_name}; known: {', '.join(known)}",
            )
    checked: BaseModel = validate(_options_schema(cls, tuple(known)), node, group)
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    given = {k: v for k, v in context.items() if takes_any or k in params}
    # only the options the node gave: the class's own defaults stay the defaults
    return cls(**given, **checked.model_dump(exclude_unset=True))


@cache
def _options_schema(cls: type[Any], options: tuple[str, ...]) -> type[BaseModel]:
    """A schema of ``cls``'s options from its constructor's annotations and defaults."""
    signature, hints = constructor(cls)
    params = signature.parameters
    fields: dict[str, Any] = {}
    for name in options:
        default = params[name].default
        annotation = _with_whole_ints(hints.get(name, Any))
        fields[name] = (annotation, ... if default is inspect.Parameter.empty else default)
    return create_model(f"{cls.__name__}Options", __base__=StrictModel, **fields)


def _with_whole_ints(annotation: Any) -> Any:
    """``int`` as the schema's ``Int`` (which reads ``2.0`` as 2), inside unions too."""
    if annotation is int:
        return Int
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        converted = tuple(_with_whole_ints(a) for a in args)
        union = converted[0]
        for arg in converted[1:]:
            union = union | arg
        return union
    return annotation
