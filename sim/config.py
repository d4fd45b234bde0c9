"""From a composed Hydra config to the objects of a run, with every bad value named.

Configs live in ``configs/``, one folder per swappable concern (GUIDE section 4). Policies
(scheduler, router, step-time model) name their class in ``_target_``, so adding one is one
Python file plus one YAML file. ``build`` checks the options against the class's signature
before calling it, so a typo is a one-line ``ConfigError`` rather than a ``TypeError``.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from sim.errors import ConfigError, require

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"


def to_dict(cfg: DictConfig | Mapping) -> dict:
    """A plain, resolved dict of a config (or a copy of a mapping)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def compose_config(overrides: list[str]) -> dict:
    """The resolved config of ``configs/`` with ``overrides``, outside a Hydra run (the
    ``memory`` and ``calibrate`` commands, benchmarks)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_dict(compose("config", overrides=list(overrides)))


def build(node: Mapping, group: str, **context: Any) -> Any:
    """Instantiate ``node['_target_']`` with the node's other keys plus ``context``.

    ``context`` holds what the run provides (the KV cache, the deployment, an RNG stream);
    classes take the parts they need and ignore the rest through ``**_``.
    """
    node = dict(node)
    target = node.pop("_target_", None)
    require(isinstance(target, str) and "." in target, f"{group}._target_", target,
            "must name a class as module.Class")
    module_name, _, class_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ConfigError(f"{group}._target_", target, "no such class") from None
    params = inspect.signature(cls).parameters
    known = [n for n, p in params.items()
             if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in context]
    for key in node:
        if key not in known:
            raise ConfigError(f"{group}.{key}", node[key],
                              f"unknown option for {class_name}; known: {', '.join(known)}")
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    given = {k: v for k, v in context.items() if takes_any or k in params}
    return cls(**given, **node)


def group_options(group: str) -> list[str]:
    """The options of a config group: the YAML files in ``configs/<group>/``."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def _default_options() -> dict[str, str]:
    """The option each config group takes when the command line does not choose one."""
    defaults = OmegaConf.load(CONFIG_DIR / "config.yaml").get("defaults", [])
    return {k: v for entry in defaults if isinstance(entry, DictConfig) for k, v in entry.items()}


def check_overrides(overrides: list[str]) -> None:
    """Refuse, in one line, overrides that name an unknown group option or an unknown key.

    Hydra would refuse them too, but in several lines; this catches them first by reading the
    YAML files the overrides select. ``+key=value`` (adding a key) is left to the builders.
    """
    options = _default_options()
    plain = []
    extra = OmegaConf.create()  # keys that selected experiments add
    for override in overrides:
        key, sep, value = override.partition("=")
        if key.lstrip("+") == "experiment" and sep:
            for name in value.split(","):
                if name not in group_options("experiment"):
                    raise ConfigError("experiment", name, "unknown experiment; choose one of "
                                      + ", ".join(group_options("experiment")))
            body = OmegaConf.load(CONFIG_DIR / "experiment" / f"{value.split(',')[0]}.yaml")
            for entry in body.pop("defaults", []):
                for k, v in (entry.items() if isinstance(entry, DictConfig) else ()):
                    options[k.removeprefix("override ").lstrip("/")] = v
            extra = OmegaConf.merge(extra, body)
            continue
        if not sep or key.startswith(("+", "~", "hydra")):
            continue
        if (CONFIG_DIR / key).is_dir():
            for option in value.split(","):  # a multirun sweeps comma-separated options
                if option not in group_options(key):
                    raise ConfigError(key, option, "unknown option; choose one of "
                                      + ", ".join(group_options(key)))
            options[key] = value.split(",")[0]
        else:
            plain.append((key, value))
    top = OmegaConf.load(CONFIG_DIR / "config.yaml")
    for key, value in plain:
        group, _, rest = key.partition(".")
        if group in options and rest:
            node = OmegaConf.load(CONFIG_DIR / group / f"{options[group]}.yaml")
            path = rest
        else:
            node, path = top, key
        if (OmegaConf.select(node, path, default=_MISSING) is _MISSING
                and OmegaConf.select(extra, key, default=_MISSING) is _MISSING):
            where = f"{group}={options[group]}" if group in options else "config.yaml"
            raise ConfigError(key, value, f"unknown key in {where} (use +{key}=... to add one)")


_MISSING = object()
