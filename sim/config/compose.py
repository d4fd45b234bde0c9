"""Composing configs outside a Hydra run, and checking command-line overrides before Hydra does.

Configs live in ``configs/`` (package data, ``sim.resources.config_dir``), one folder per swappable
concern (docs/explanation/architecture.md). ``compose_config`` gives the resolved config the
``memory``, ``calibrate`` and ``plan`` commands and the benchmarks need; ``check_overrides`` refuses
an unknown group option or key in one line, before Hydra would in several.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from sim.errors import ConfigError
from sim.resources import config_dir, config_file

if TYPE_CHECKING:
    from omegaconf import DictConfig

# overrides of Hydra's own config (its launcher, sweeper, folders, logging)
HYDRA_OVERRIDE = ("hydra.", "hydra/", "+hydra", "~hydra")


def to_dict(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A plain, resolved dict of a config (or a copy of a mapping)."""
    # A DictConfig exists only once OmegaConf is imported; a run given a plain dict (read back
    # from the compose cache, or composed in a child) does not import it for this.
    omegaconf = sys.modules.get("omegaconf")
    if omegaconf is not None and isinstance(cfg, omegaconf.DictConfig):
        try:
            # to_container is typed for any container; a DictConfig gives a dict
            return cast(dict[str, Any], omegaconf.OmegaConf.to_container(cfg, resolve=True))
        except omegaconf.errors.OmegaConfBaseException as err:  # ${oc.env:UNSET}, ${no.key}
            raise unresolvable_error(cfg, err) from None
    return dict(cfg)


def unresolvable_error(cfg: DictConfig, err: Exception) -> ConfigError:
    """The one-line error of a value OmegaConf could not resolve, naming its key and the value
    as written (the interpolation)."""
    # imported here: OmegaConf (~56 ms of CPU): sim.cli imports this module, --help needs none
    from omegaconf import OmegaConf

    key = str(getattr(err, "full_key", "") or "config")
    written = _select(OmegaConf.to_container(cfg, resolve=False), key)
    reason = (str(err).splitlines() or ["cannot be resolved"])[0]
    return ConfigError(
        key, None if written is _MISSING else written, f"cannot be resolved: {reason}"
    )


def compose_config(overrides: list[str]) -> dict[str, Any]:
    """The resolved config of ``configs/`` with ``overrides``, outside a Hydra run (the
    ``memory`` and ``calibrate`` commands, benchmarks)."""
    # imported here: Hydra (~120 ms of CPU), never needed by a run read back from the compose cache
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return to_dict(compose("config", overrides=list(overrides)))


def group_options(group: str) -> list[str]:
    """The options of a config group: the YAML files in ``configs/<group>/``."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def load_option(group: str, name: object, field: str) -> dict[str, Any]:
    """The plain config of option ``name`` of ``group`` (``configs/<group>/<name>.yaml``), or a
    ConfigError naming ``field`` and listing the options."""
    options = group_options(group)
    if name not in options:
        raise ConfigError(field, name, f"unknown {group}; choose one of {', '.join(options)}")
    # imported here: OmegaConf (~56 ms of CPU): sim.cli imports this module, --help needs none
    from omegaconf import DictConfig, OmegaConf

    # OmegaConf.load is typed for a list too; the option files are mappings
    return to_dict(cast(DictConfig, OmegaConf.load(config_dir() / group / f"{name}.yaml")))


def _default_options() -> dict[str, str]:
    """The option each config group takes when the command line does not choose one."""
    return {
        str(k): v
        for entry in config_file("config.yaml").get("defaults", [])
        if isinstance(entry, dict)
        for k, v in entry.items()
        if not str(k).startswith("override ")  # Hydra's own groups (launcher, sweeper)
    }


def check_overrides(overrides: list[str]) -> None:
    """Refuse, in one line, overrides that Hydra's grammar cannot read, or that name an unknown
    group option or an unknown key.

    Hydra would refuse them too, but in several lines; this catches them first by reading the
    YAML files the overrides select. ``+key=value`` (adding a key) is left to the schema, which
    refuses a key no group declares (``sim.config.schema``).
    """
    _check_grammar(overrides)
    options = _default_options()
    plain: list[tuple[str, str]] = []
    extra: dict[str, Any] = {}  # keys that selected experiments add
    for override in overrides:
        key, sep, value = override.partition("=")
        if key.lstrip("+") == "experiment" and sep:
            for name in value.split(","):
                if name not in group_options("experiment"):
                    raise ConfigError(
                        "experiment",
                        name,
                        "unknown experiment; choose one of "
                        + ", ".join(group_options("experiment")),
                    )
            body = config_file(f"experiment/{value.split(',')[0]}.yaml") or {}
            for entry in body.get("defaults", []):
                for k, v in entry.items() if isinstance(entry, dict) else ():
                    options[str(k).removeprefix("override ").lstrip("/")] = v
            extra = _merged(extra, {k: v for k, v in body.items() if k != "defaults"})
            continue
        if not sep or key.startswith(("+", "~", "hydra")):
            continue
        if (config_dir() / key).is_dir():
            for option in value.split(","):  # a multirun sweeps comma-separated options
                if option not in group_options(key):
                    raise ConfigError(
                        key,
                        option,
                        "unknown option; choose one of " + ", ".join(group_options(key)),
                    )
            options[key] = value.split(",")[0]
        else:
            plain.append((key, value))
    top = config_file("config.yaml")
    for key, value in plain:
        group, _, rest = key.partition(".")
        if group in options and rest:
            node = config_file(f"{group}/{options[group]}.yaml") or {}
            path = rest
        else:
            node, path = top, key
        if _select(node, path) is _MISSING and _select(extra, key) is _MISSING:
            where = f"{group}={options[group]}" if group in options else "config.yaml"
            known = _keys_at(node, path.rpartition(".")[0])
            if node is top and "." not in path:  # a top-level key: the groups count too
                known = sorted({*known, *options} - {"hydra"})
            hint = f"; known: {', '.join(known)}" if known else ""
            raise ConfigError(key, value, f"unknown key in {where}{hint}")
        if "dist" in value and isinstance(_select(node, path), dict):
            # Hydra merges a mapping into a mapping default: a length distribution given over a
            # preset's would keep the preset's other keys (its clip, say), or fail for another
            # kind of distribution
            raise ConfigError(
                key,
                value,
                f"would be merged into the preset's mapping, not replace it: write "
                f"'~{key}' '+{key}={value}'",
            )


_MISSING = object()


def _select(node: Any, path: str) -> Any:
    """The value at dotted ``path`` (``scheduler.max_num_seqs``, ``workload.slo.0``) of plain
    config data, or ``_MISSING``."""
    for part in path.split("."):
        if isinstance(node, dict):
            node = next((v for k, v in node.items() if str(k) == part), _MISSING)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _merged(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """``more`` merged into a copy of ``base``, mappings key by key (as Hydra merges them)."""
    out = dict(base)
    for k, v in more.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _keys_at(node: Any, path: str) -> list[str]:
    """The keys of the mapping at ``path`` in ``node`` (the top when ``path`` is empty)."""
    found = _select(node, path) if path else node
    if isinstance(found, dict):
        return sorted(str(k) for k in found if k != "defaults")
    return []


def _check_grammar(overrides: list[str]) -> None:
    """Each override as Hydra's grammar reads it, or a one-line ConfigError naming it."""
    # imported here: Hydra's parser (~117 ms of CPU), never needed by a run read back from the cache
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException as err:
            key, _, value = override.partition("=")
            lines = [
                line
                for line in str(err).splitlines()
                if not line.startswith(("Error parsing override", "See https://"))
            ]
            reason = lines[0] if lines else "not an override"
            raise ConfigError(
                key.lstrip("+~") or override,
                value,
                f"cannot be read as an override ({reason}); quote values with spaces or braces",
            ) from None


# what an engine configuration of ``autoscale.engines`` may change (sim.config.autoscale): how
# a replica runs, not what the fleet serves or how the run goes
ENGINE_GROUPS = ("hardware", "precision", "memory", "kv", "scheduler", "step_time", "fleet")
ENGINE_GROUP_OPTIONS = ("hardware", "scheduler", "step_time")  # a name here loads the option
RUN_WIDE_KEYS = ("kv.prefix_caching", "kv.cpu_offload_gib")  # no engine may change these


def with_settings(
    cfg: dict[str, Any],
    settings: Mapping[str, Any],
    field: str,
    counts_from: str = "the schedule gives the counts",
) -> dict[str, Any]:
    """A copy of the composed ``cfg`` with ``settings`` (``{"hardware": "h200",
    "precision.weights": "fp8", ...}``) applied: a group of ``ENGINE_GROUP_OPTIONS`` set to a
    name takes that option whole, a dotted key sets one value of a key the group has. Errors
    name ``field.KEY``; ``counts_from`` says where the replica counts come from instead
    (``fleet.replicas`` is not an engine setting)."""
    out = copy.deepcopy(cfg)
    for key, value in settings.items():
        where = f"{field}.{key}"
        group, _, rest = str(key).partition(".")
        if key in RUN_WIDE_KEYS:
            raise ConfigError(
                where,
                value,
                "is the same for the whole run (the workload's prefix groups and the host tier "
                f"are built once): set it outside {field.rsplit('.', 1)[0]}",
            )
        if group not in ENGINE_GROUPS or key == "fleet.replicas":
            raise ConfigError(
                where,
                value,
                "an engine configuration sets only "
                + ", ".join(f"{g}.*" for g in ENGINE_GROUPS)
                + f" (not fleet.replicas: {counts_from})",
            )
        if not rest:
            if group not in ENGINE_GROUP_OPTIONS:
                raise ConfigError(where, value, f"set the keys of {group}, as {group}.KEY")
            out[group] = load_option(group, value, where)
            continue
        node = out.get(group)
        *parents, leaf = rest.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            raise ConfigError(where, value, f"{group} has no key {rest!r}")
        node[leaf] = value
    return out
