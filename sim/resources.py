"""Where Fleetcast's shipped configs and data are, in a checkout and in an installed copy alike.

``configs/`` and ``data/`` sit at the top of the repository and travel inside the package as
``sim.configs`` and ``sim.data`` (setup.py maps them). They are found beside the ``sim`` folder
when it is a checkout's (so a second checkout or a worktree uses its own, installed or not), else
through the import system (an installed copy); never through the current directory, so
``fleetcast`` runs the same from any folder.

A shipped data file is named in configs as ``shipped:<path under data/>``, for example
``shipped:traces/azure_llm_2023_conv.parquet``. Any other path is the user's: a relative one
is relative to the current directory. Configs written before the data became package data said
``data/traces/<file>``; where no such file is in the current directory and ``<file>`` is
shipped, that spelling still finds it (``legacy_shipped``).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

SHIPPED_PREFIX = "shipped:"


@cache
def _package_dir(package: str, checkout_folder: str) -> Path:
    root = Path(__file__).resolve().parents[1]
    if (root / "setup.py").is_file() and (root / checkout_folder / "__init__.py").is_file():
        return root / checkout_folder  # this code's own checkout
    # find_spec locates the folder without importing it (no __pycache__ among the configs)
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    raise RuntimeError(f"{package} is missing: reinstall Fleetcast (pip install fleetcast)")


def config_dir() -> Path:
    """The folder of Fleetcast's Hydra configs (``configs/`` in a checkout)."""
    return _package_dir("sim.configs", "configs")


def yaml_loader() -> Any:
    """PyYAML's C parser where PyYAML was built with libyaml (a shipped config file in well
    under a millisecond; the pure-Python parser, which OmegaConf uses, takes a few)."""
    # imported here: PyYAML (~12 ms of CPU): not for --help, nor before the collector pause
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def config_file(relative: str) -> Any:
    """A shipped config file (``config.yaml``, ``sim/default.yaml``) as plain data, read once:
    for looking its keys up, not for composing (no interpolation, YAML 1.1 scalars). Shared:
    not to be changed."""
    # imported here: PyYAML (~12 ms of CPU): not for --help, nor before the collector pause
    import yaml

    return yaml.load((config_dir() / relative).read_text(), Loader=yaml_loader())


def data_dir() -> Path:
    """The folder of the data Fleetcast ships: traces, profiles, calibration tables."""
    return _package_dir("sim.data", "data")


def is_shipped(path: object) -> bool:
    return isinstance(path, str) and path.startswith(SHIPPED_PREFIX)


def shipped_path(name: str) -> Path:
    """The file or folder a ``shipped:NAME`` reference names."""
    return data_dir() / name.removeprefix(SHIPPED_PREFIX)


LEGACY_DATA_PREFIX = "data/"


def legacy_shipped(path: str) -> str | None:
    """``shipped:X`` for a path configs wrote before the data was package data
    (``data/X``), when Fleetcast ships ``X``; else None."""
    if not path.startswith(LEGACY_DATA_PREFIX):
        return None
    name = SHIPPED_PREFIX + path.removeprefix(LEGACY_DATA_PREFIX)
    return name if shipped_path(name).exists() else None


DATA_SUFFIXES = (".parquet", ".csv", ".json")


def _shipped(kind: str, asked: str) -> list[str]:
    """What a ``shipped:`` reference of ``kind`` can name: data files (those of the folder
    ``asked`` names, when it is a shipped folder), or the folders."""
    base = data_dir()
    if kind == "folder":
        found = [p for p in base.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))]
    else:
        folder = asked.removeprefix(SHIPPED_PREFIX).split("/")[0]
        pattern = f"{folder}/*" if folder and (base / folder).is_dir() else "*/*"
        found = [p for p in base.glob(pattern) if p.suffix in DATA_SUFFIXES]
    return sorted(SHIPPED_PREFIX + p.relative_to(base).as_posix() for p in found)


def resolve_path(path: object, field: str, *, kind: str = "file") -> Path:
    """A data path from a config field: ``shipped:NAME`` from the package, any other relative
    path from the current directory; ConfigError naming ``field`` if there is nothing there.

    ``kind`` is ``file`` or ``folder``: what must exist at the path.
    """
    if not isinstance(path, (str, Path)) or str(path) == "":
        raise ConfigError(field, path, f"required: a path to a {kind}")
    found = shipped_path(str(path)) if is_shipped(path) else Path(path).expanduser()
    exists = found.is_dir() if kind == "folder" else found.is_file()
    if not exists and not found.is_absolute() and (legacy := legacy_shipped(str(path))):
        found, exists = shipped_path(legacy), True  # an older config's spelling
    if exists:
        return found.resolve()
    if is_shipped(path):
        raise ConfigError(
            field,
            str(path),
            f"no such shipped {kind}; shipped: " + ", ".join(_shipped(kind, str(path))),
        )
    if found.exists():  # a file where a folder belongs, or the other way round
        other = "folder" if kind == "file" else "file"
        raise ConfigError(field, str(path), f"is a {other}, not a {kind}")
    hint = ""
    if not found.is_absolute():
        hint = f" (relative to {Path.cwd()}; a shipped {kind} is named {SHIPPED_PREFIX}<path>)"
    raise ConfigError(field, str(path), f"{kind} not found{hint}")
