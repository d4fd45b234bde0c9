"""From a config node to the object it names: ``_target_`` plus options, checked first.

Policies (scheduler, router, step-time model) name their class in ``_target_``, so adding one is
one Python file plus one YAML file. ``build`` checks the node's options against the class's
signature before calling it, so a typo is a one-line ``ConfigError`` rather than a
``TypeError``. A ``_target_`` written by an older Fleetcast (``sim.config.legacy``) still builds.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from sim.config.legacy import canonical_target
from sim.errors import ConfigError, require


def build(node: Mapping, group: str, **context: Any) -> Any:
    """Instantiate ``node['_target_']`` with the node's other keys plus ``context``.

    ``context`` holds what the run provides (the KV cache, the deployment, an RNG stream);
    classes take the parts they need and ignore the rest through ``**_``.
    """
    node = dict(node)
    target = node.pop("_target_", None)
    require(
        isinstance(target, str) and "." in target,
        f"{group}._target_",
        target,
        "must name a class as module.Class",
    )
    module_name, _, class_name = canonical_target(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ConfigError(f"{group}._target_", target, "no such class") from None
    params = inspect.signature(cls).parameters
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
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    given = {k: v for k, v in context.items() if takes_any or k in params}
    return cls(**given, **node)
