"""Where Fleetcast's shipped configs and data are, in a checkout and in an installed copy alike.

``configs/`` and ``data/`` sit at the top of the repository and travel inside the package as
``sim.configs`` and ``sim.data`` (pyproject.toml maps them; an editable install maps them to
the checkout's folders). They are found through the import system, never through the current
directory, so ``fleetcast`` runs the same from any folder.

A shipped data file is named in configs as ``shipped:<path under data/>``, for example
``shipped:traces/azure_llm_2023_conv.parquet``. Any other path is the user's: a relative one
is relative to the current directory.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from sim.errors import ConfigError

SHIPPED_PREFIX = "shipped:"


@cache
def _package_dir(package: str) -> Path:
    # find_spec locates the folder without importing it (no __pycache__ among the configs)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is missing: Fleetcast is not installed (pip install .)")
    return Path(next(iter(spec.submodule_search_locations)))


def config_dir() -> Path:
    """The folder of Fleetcast's Hydra configs (``configs/`` in a checkout)."""
    return _package_dir("sim.configs")


def data_dir() -> Path:
    """The folder of the data Fleetcast ships: traces, profiles, calibration tables."""
    return _package_dir("sim.data")


def is_shipped(path: object) -> bool:
    return isinstance(path, str) and path.startswith(SHIPPED_PREFIX)


def shipped_path(name: str) -> Path:
    """The file or folder a ``shipped:NAME`` reference names."""
    return data_dir() / name.removeprefix(SHIPPED_PREFIX)


def resolve_path(path: object, field: str, *, kind: str = "file") -> Path:
    """A data path from a config field: ``shipped:NAME`` from the package, any other relative
    path from the current directory; ConfigError naming ``field`` if there is nothing there.

    ``kind`` is ``file`` or ``folder``: what must exist at the path.
    """
    if not isinstance(path, (str, Path)) or str(path) == "":
        raise ConfigError(field, path, f"required: a path to a {kind}")
    found = shipped_path(str(path)) if is_shipped(path) else Path(path).expanduser()
    exists = found.is_dir() if kind == "folder" else found.is_file()
    if exists:
        return found.resolve()
    if is_shipped(path):
        listing = sorted(f"{SHIPPED_PREFIX}{p.relative_to(data_dir()).as_posix()}"
                         for p in data_dir().glob("*/*") if not p.name.startswith(("_", ".")))
        raise ConfigError(field, str(path), f"no such shipped {kind}; shipped: "
                                            + ", ".join(listing))
    hint = ""
    if not found.is_absolute() and str(path).startswith("data/"):
        hint = (f" (relative to {Path.cwd()}; a file Fleetcast ships is named "
                f"{SHIPPED_PREFIX}{str(path).removeprefix('data/')})")
    raise ConfigError(field, str(path), f"{kind} not found{hint}")
