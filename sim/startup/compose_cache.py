"""A single run's composed config, kept on disk so that the same command composes it once.

Hydra's composing of the ~30 config files, and importing Hydra to do it, is about a third of
what a default run pays before its first event (``benchmarks/bench_startup.py``). What it gives
depends only on the config files, the command line, the folder it runs from, and the installed
Hydra and its plugins, so ``ComposeCache`` keeps each result under a key made of all of those
and of the code that checks the overrides (``_key``). The next run of the same command reads
it back (a few milliseconds) and imports neither Hydra nor its override parser; any change to
any of them is a new key, composed by Hydra as before. A run keeps its entry when it has
written its files, so a refused run keeps nothing. Only results that need no resolving at run
time are kept: a config without ``${...}`` interpolations, and a run folder that only asks for
the time (Hydra's ``outputs/${now:...}/${now:...}``), which is filled in here as Hydra would.

Where: ``$FLEETCAST_CACHE_DIR/compose`` if set, else ``$XDG_CACHE_HOME/fleetcast/compose``,
else ``~/.cache/fleetcast/compose``; at most ``MAX_ENTRIES`` files of about 20 KB, the
least recently used removed first. ``FLEETCAST_COMPOSE_CACHE=0`` turns it off. The cache is a
convenience, never a reason to fail: an entry that cannot be read is composed again, a folder
that cannot be written is not written.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import sim.config.compose
import sim.resources
from sim.config.compose import to_dict
from sim.resources import config_dir

# a new layout of the entries (or of what goes into the key) changes this
FORMAT = 2
MAX_ENTRIES = 256
JOB_NAME = "cli"
_NOW = re.compile(r"\$\{now:([^${}]*)\}")
# a run folder kept in the cache: plain text and ${now:FORMAT} parts only, filled in here
_KEEPABLE_RUN_DIR = re.compile(r"(?:[^$]|\$\{now:[^${}]*\})*")
STALE_TEMPORARY_S = 3600  # a temporary file this old was left by a killed run


class ComposeFailed(Exception):
    """Hydra refused the command line; ``str(err)`` is its message on one line."""


class ComposedRun:
    """What a single run needs from its composed config: the job's config (plain, resolved),
    the option chosen in each config group, Hydra's run folder (``run_dir`` as configured;
    ``resolved_run_dir``, as Hydra resolved it, where composed now), and the texts of the run's
    ``.hydra/config.yaml`` and ``hydra.yaml``.

    ``texts`` is the texts (read back from the cache), or what gives them when first asked
    (composed by Hydra): writing them is left until the run has written its files.
    ``to_json`` gives the config as composed, even where the run has since changed its copy.
    """

    def __init__(
        self,
        config: dict[str, Any],
        choices: dict[str, Any],
        run_dir: str,
        *,
        texts: dict[str, str] | Callable[[], dict[str, str]],
        resolved_run_dir: str | None = None,
        from_cache: bool = False,
    ) -> None:
        self.config, self.choices, self.run_dir = config, choices, run_dir
        self._texts = texts
        self.resolved_run_dir = resolved_run_dir
        self.from_cache = from_cache
        # what the cache keeps: the run is given ``config`` and may change it
        self._as_composed = config if from_cache else copy.deepcopy(config)

    @cached_property
    def texts(self) -> dict[str, str]:
        """``.hydra/config.yaml`` and ``hydra.yaml`` as Hydra writes them (unresolved)."""
        return self._texts() if callable(self._texts) else self._texts

    def run_folder(self) -> str:
        """The run folder: as Hydra resolved it, or (read back) its ``${now:FORMAT}`` parts
        filled with the time now, as Hydra's ``now`` resolver does."""
        if self.resolved_run_dir is not None:
            return self.resolved_run_dir
        now = datetime.now()
        return _NOW.sub(lambda match: now.strftime(match.group(1)), self.run_dir)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self._as_composed,
            "choices": self.choices,
            "run_dir": self.run_dir,
            "texts": self.texts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComposedRun:
        texts, config, choices, run_dir = (
            data["texts"],
            data["config"],
            data["choices"],
            data["run_dir"],
        )
        if not (
            isinstance(texts, dict)
            and set(texts) == {"config.yaml", "hydra.yaml"}
            and all(isinstance(text, str) for text in texts.values())
            and isinstance(config, dict)
            and isinstance(choices, dict)
            and isinstance(run_dir, str)
        ):
            raise ValueError("not an entry of this layout")
        return cls(config, choices, run_dir, texts=texts, from_cache=True)


class ComposeCache:
    """The cache entry of one command line (``overrides``), in the folder of ``cache_folder``.

    An entry is written (``keep``) only after the command's overrides passed
    ``check_overrides`` and Hydra composed them, and its key covers what both read (``_key``):
    a command that finds its entry needs neither again.
    """

    def __init__(self, overrides: list[str]) -> None:
        self.overrides = list(overrides)
        self.folder = cache_folder()
        self.entry = self._entry()

    def _entry(self) -> Path | None:
        if self.folder is None:
            return None
        try:
            return self.folder / f"{_key(self.overrides)}.json"
        except OSError:  # a folder removed from under the run, a file it cannot read
            return None

    def read(self) -> ComposedRun | None:
        """This command's composed config as it was kept, or None (never composed, or the
        cache is off)."""
        if self.entry is None:
            return None
        cached = _read(self.entry)
        if cached is not None:
            try:  # the trim removes the least recently used first
                os.utime(self.entry)
            except OSError:
                pass
        return cached

    def compose(self) -> ComposedRun:
        """The config composed by Hydra (``keep`` keeps it for the next run of the command);
        ``ComposeFailed`` where Hydra refuses it, ``ConfigError`` where a value cannot be
        resolved."""
        return _compose_with_hydra(self.overrides)

    def keep(self, composed: ComposedRun) -> None:
        """Keep what ``compose`` gave, where it reads back unchanged (``_keepable``), and
        where nothing in the key changed while Hydra read the files."""
        if self.entry is None or composed.from_cache or not _keepable(composed):
            return
        if self._entry() == self.entry:
            _write(self.entry, composed)


def cache_folder() -> Path | None:
    """Where composed configs are kept, or None when the cache is turned off."""
    if turned_off("FLEETCAST_COMPOSE_CACHE"):
        return None
    root = os.environ.get("FLEETCAST_CACHE_DIR", "")
    if not os.path.isabs(root):  # a relative folder would follow the current one
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(xdg):  # unset or relative: ignored, as the XDG spec says
            xdg = os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "fleetcast")
    if not os.path.isabs(root):  # no home folder either
        return None
    return Path(root) / "compose"


def turned_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns a start-up shortcut off (``0``,
    ``false`` or ``no``; on when unset)."""
    return os.environ.get(variable, "1").strip().lower() in ("0", "false", "no")


def _key(overrides: list[str]) -> str:
    """Everything the entry depends on:

    - the config files (their names and content, and the folders' names: a folder is a group);
    - the command line, the working folder (``hydra.runtime.cwd``) and the interpreter (not
      ``sys.path`` itself, which differs between ``fleetcast`` and ``python -m sim``: what it
      finds, Hydra, OmegaConf and the plugins, is below);
    - the code that checks the overrides and composes (this module, ``sim.config.compose``,
      ``sim.resources``: their content, for an edited checkout);
    - Hydra's plugins (``hydra_plugins`` on ``sys.path``, Fleetcast's sweeper among them: its
      dataclass is part of the run's Hydra config), by each file's size and modification time;
    - the installed packages: a pip install or uninstall changes the mtime of the folder Hydra
      and OmegaConf are installed in (its ``*.dist-info`` folders come and go), so upgrading
      Fleetcast, Hydra, OmegaConf or a launcher plugin there is a new key.
    """
    digest = hashlib.blake2b(digest_size=20)
    configs = config_dir()
    header: list[Any] = [
        FORMAT,
        str(configs),
        os.getcwd(),
        sys.executable,
        sys.version,
        list(overrides),
    ]
    for package in ("hydra", "omegaconf"):
        spec = importlib.util.find_spec(package)  # finds it without importing it
        installed = Path(spec.origin).parents[1] if spec and spec.origin else None
        header.append([str(installed), installed.stat().st_mtime_ns if installed else None])
    for folder in _plugin_folders():
        for root, folders, files in os.walk(folder):
            folders.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    stat = os.stat(os.path.join(root, name))
                    header.append([root, name, stat.st_size, stat.st_mtime_ns])
    digest.update(json.dumps(header).encode())
    for module in (__file__, *_checking_sources()):
        with open(module, "rb") as file:
            digest.update(file.read())
    for root, folders, files in os.walk(configs):
        folders.sort()
        digest.update(f"\0{os.path.relpath(root, configs)}/\0".encode())
        for name in sorted(files):
            if name.endswith(".yaml"):
                path = os.path.join(root, name)
                digest.update(f"\0{os.path.relpath(path, configs)}\0".encode())
                with open(path, "rb") as file:
                    digest.update(file.read())
    return digest.hexdigest()


def _checking_sources() -> list[str]:
    """The sources of the code whose outcome an entry stands for: the override check
    (``sim.config.compose``) and the config files it reads (``sim.resources``)."""
    return [str(sim.config.compose.__file__), str(sim.resources.__file__)]


def _plugin_folders() -> list[str]:
    """The folders of the ``hydra_plugins`` namespace (found without importing a plugin)."""
    spec = importlib.util.find_spec("hydra_plugins")
    locations = spec.submodule_search_locations if spec is not None else None
    return sorted({str(folder) for folder in (locations or []) if os.path.isdir(folder)})


def _compose_with_hydra(overrides: list[str]) -> ComposedRun:
    # imported here: Hydra (~120 ms of CPU) and OmegaConf, never by a run read back from the cache
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict

    try:
        with initialize_config_dir(
            config_dir=str(config_dir()), version_base="1.3", job_name=JOB_NAME
        ):
            cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    except HydraException as err:  # what check_overrides could not foresee
        raise ComposeFailed(" ".join(str(err).split())) from None
    hydra_cfg = cfg.hydra
    resolved_run_dir = str(hydra_cfg.run.dir)  # while the hydra node can resolve its keys
    with open_dict(cfg):
        del cfg["hydra"]
    config = to_dict(cfg)  # (a value that cannot be resolved: a ConfigError naming it)
    choices = cast(dict[str, Any], OmegaConf.to_container(hydra_cfg.runtime.choices))
    run = cast(dict[str, Any], OmegaConf.to_container(hydra_cfg.run, resolve=False))

    def texts() -> dict[str, str]:
        return {
            "config.yaml": OmegaConf.to_yaml(cfg),
            "hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
        }

    return ComposedRun(
        config, choices, str(run["dir"]), texts=texts, resolved_run_dir=resolved_run_dir
    )


def _keepable(composed: ComposedRun) -> bool:
    """Kept only where reading it back gives exactly what Hydra gave, at any later time: no
    interpolation left to resolve in the config (an override may add one), a run folder that
    only asks for the time, and values that JSON carries unchanged (string keys, no tuples)."""
    if "${" in composed.texts["config.yaml"] or not _KEEPABLE_RUN_DIR.fullmatch(composed.run_dir):
        return False
    try:
        if "${" in json.dumps(composed.choices):
            return False
        data = composed.to_json()
        return bool(json.loads(json.dumps(data)) == data)
    except (TypeError, ValueError):  # a value JSON cannot write
        return False


def _read(entry: Path) -> ComposedRun | None:
    try:
        with open(entry, encoding="utf-8") as file:
            data = json.load(file)
        return ComposedRun.from_json(data)
    except (OSError, ValueError, TypeError, KeyError):  # missing, cut short, another layout
        return None


def _write(entry: Path, composed: ComposedRun) -> None:
    """Write ``entry`` whole (a temporary file renamed into place: a reader sees the old entry
    or the new, never half of one), then trim the folder to ``MAX_ENTRIES``."""
    temporary = None
    try:
        # private: an entry's config names classes the run builds (``_target_``)
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=entry.parent, suffix=".tmp", delete=False, encoding="utf-8"
        ) as file:
            temporary = file.name
            json.dump(composed.to_json(), file)
        os.replace(temporary, entry)
        temporary = None
        _trim(entry.parent)
    except OSError:  # a read-only home, a full disk: the run goes on without the cache
        pass
    finally:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


def _trim(folder: Path) -> None:
    """Keep the ``MAX_ENTRIES`` most recently used entries; remove temporary files that killed
    runs left."""
    stale = time.time() - STALE_TEMPORARY_S
    for path in folder.glob("*.tmp"):
        try:
            if path.stat().st_mtime < stale:
                path.unlink()
        except OSError:  # renamed or removed by its run meanwhile
            continue
    entries = []
    for path in folder.glob("*.json"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed by another run meanwhile
            continue
    entries.sort()
    for _, path in entries[: max(0, len(entries) - MAX_ENTRIES)]:
        path.unlink(missing_ok=True)
