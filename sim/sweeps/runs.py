"""Reading a sweep's run folders: which runs exist, whether each finished, and what each holds.

A run folder has ``config.yaml``; it is finished once ``summary.json`` is there too (a run
writes it last). A run is read as its flattened resolved config (dotted keys), its flattened
summary, the keys its job overrode and the config-group options it chose, the raw material of
``fleetcast collect``'s tables (``sim.sweeps.collect``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.config.legacy import canonical_run_config
from sim.output.run_files import CONFIG_FILE, SUMMARY_FILE
from sim.resources import yaml_loader
from sim.sweeps.resume import PRESENTATION_KEYS

# Overrides that say where a run was written, not what it simulated.
NOT_PARAMETERS = frozenset(PRESENTATION_KEYS)


class CollectError(ValueError):
    """A sweep folder that cannot be collected; ``str(err)`` is one line."""


@dataclass
class Run:
    run_id: str
    path: Path
    config: dict  # flattened resolved config
    summary: dict  # flattened summary.json
    override_keys: list[str]
    choices: dict[str, str]  # config group -> option name


def _natural_key(run_id: str) -> list[int | str]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", run_id)]


def find_runs(sweep_dir: Path, skip: tuple[Path, ...] = ()) -> tuple[list[Path], list[Path]]:
    """The finished and the unfinished run folders under ``sweep_dir``, in natural order.

    A run folder has ``config.yaml``; it is finished when ``summary.json`` is there too (the
    run writes it last). Hidden folders (``.hydra``, temporaries) and ``skip`` are not searched,
    nor are the insides of a run folder.
    """
    finished: list[Path]
    unfinished: list[Path]
    finished, unfinished = [], []
    skip_set = {p.resolve() for p in skip}
    for root, dirs, files in os.walk(sweep_dir):
        here = Path(root)
        if CONFIG_FILE in files:
            (finished if SUMMARY_FILE in files else unfinished).append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and (here / d).resolve() not in skip_set
        )

    def order(p: Path) -> list[int | str]:
        return _natural_key(_run_id(sweep_dir, p))

    return sorted(finished, key=order), sorted(unfinished, key=order)


def _run_id(sweep_dir: Path, run_dir: Path) -> str:
    rel = run_dir.relative_to(sweep_dir).as_posix()
    return run_dir.name if rel == "." else rel


def flatten(node: object, prefix: str = "", *, keep_lists: bool) -> dict:
    """Nested dicts as one dict of dotted keys. Lists become JSON text (``keep_lists``) or are
    left out."""
    out: dict = {}
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten(value, name, keep_lists=keep_lists))
    elif isinstance(node, (list, tuple)):
        if keep_lists and prefix:
            out[prefix] = json.dumps(node)
    elif prefix:
        out[prefix] = node
    return out


def _override_key(override: str) -> str | None:
    """``fleet.replicas`` of ``fleet.replicas=2`` (also ``+k=v``, ``++k=v``, ``~k``,
    ``k@pkg=v``)."""
    key = override.split("=", 1)[0].lstrip("~+").split("@", 1)[0].strip()
    if not key or key in NOT_PARAMETERS or key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return None
    return key


def _load_yaml(path: Path, run_id: str) -> Any:
    # libyaml's loader where installed: reading the YAML is most of the time a collect takes
    try:
        return yaml.load(path.read_text(), Loader=yaml_loader())
    except (OSError, yaml.YAMLError) as err:
        raise CollectError(
            f"run {run_id}: cannot read {path.name}: {' '.join(str(err).split())}"
        ) from None


def read_run(sweep_dir: Path, run_dir: Path) -> Run:
    run_id = _run_id(sweep_dir, run_dir)
    try:  # config.yaml is resolved already (OmegaConf.to_yaml): plain YAML
        config = yaml.load((run_dir / CONFIG_FILE).read_text(), Loader=yaml_loader())
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except Exception as err:  # a damaged file: name the run, in one line
        raise CollectError(
            f"run {run_id}: cannot read its config.yaml or summary.json: "
            f"{' '.join(str(err).split())}"
        ) from None
    if not isinstance(config, dict) or not isinstance(summary, dict):
        raise CollectError(f"run {run_id}: config.yaml and summary.json must each hold a mapping")
    # older spellings made current (sim.config.legacy): a run from an older Fleetcast and
    # one from this one differ only where their configs do
    config = canonical_run_config({k: v for k, v in config.items() if k not in NOT_PARAMETERS})

    override_keys, choices = [], {}
    overrides_path = run_dir / ".hydra" / "overrides.yaml"
    if overrides_path.is_file():
        overrides = _load_yaml(overrides_path, run_id) or []
        for item in overrides if isinstance(overrides, list) else []:
            key = _override_key(str(item))
            if key is None:
                continue
            override_keys.append(key)
            if isinstance(_lookup(config, key), dict) and "=" in str(item):
                choices[key] = str(item).split("=", 1)[1]  # a group chosen by name
    hydra_path = run_dir / ".hydra" / "hydra.yaml"
    if hydra_path.is_file():
        hydra_cfg = _load_yaml(hydra_path, run_id) or {}
        runtime = (hydra_cfg.get("hydra") or {}).get("runtime") or {}
        for group, option in (runtime.get("choices") or {}).items():
            if not str(group).startswith("hydra") and option is not None:
                choices[str(group)] = str(option)
    return Run(
        run_id,
        run_dir,
        flatten(config, keep_lists=True),
        flatten(summary, keep_lists=False),
        override_keys,
        choices,
    )


def _lookup(config: dict[str, Any], dotted: str) -> object:
    node: object = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# ---------------------------------------------------------------------------------------------
# the runs table
