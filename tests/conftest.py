"""Fixtures several test folders share."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import _pytest._code.code
import pytest
from hypothesis import settings

from tests.support import REPO_ROOT

# Property tests scale with the profile: "ci" keeps the suite fast, "deep" (make test-deep, or
# HYPOTHESIS_PROFILE=deep) draws twenty times as many examples, for a nightly run.
settings.register_profile("ci", max_examples=100, deadline=None)
settings.register_profile("deep", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _tolerate_compiled_frames() -> None:
    """A failure raised inside a module compiled with mypyc (``make test-compiled``) has frames
    without a line number, on which pytest's report crashes (INTERNALERROR, the failure itself
    unshown): such a frame's line reads as 0 instead. (A pytest internal: where it has moved,
    nothing is patched, and only such failures' reports suffer.)"""
    entry = getattr(_pytest._code.code, "TracebackEntry", None)
    plain = getattr(getattr(entry, "lineno", None), "fget", None)
    if entry is None or plain is None:
        return

    def lineno(self: Any) -> int:
        try:
            return plain(self)
        except TypeError:  # tb_lineno is None
            return 0

    entry.lineno = property(lineno)  # type: ignore[method-assign,assignment]


_tolerate_compiled_frames()

_CACHE_FOLDER = pytest.StashKey[tuple[str, "str | None"]]()


def pytest_configure(config: pytest.Config) -> None:
    # Runs composed in the suite (in process and in the subprocesses it starts) keep their
    # configs in a folder of the suite's own, not in the user's ~/.cache
    # (sim.startup.compose_cache); each test has its own (own_compose_cache), this one is for
    # session fixtures
    folder = tempfile.mkdtemp(prefix="fleetcast-test-cache-")
    config.stash[_CACHE_FOLDER] = (folder, os.environ.get("FLEETCAST_CACHE_DIR"))
    os.environ["FLEETCAST_CACHE_DIR"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder, before = config.stash.get(_CACHE_FOLDER, (None, None))
    if folder is None:
        return
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("FLEETCAST_CACHE_DIR", None)
    else:
        os.environ["FLEETCAST_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def own_compose_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Each test composes into a cache of its own, so that no test reads what another kept
    (a hit skips Hydra and the override check): results never depend on the tests' order."""
    monkeypatch.setenv("FLEETCAST_CACHE_DIR", str(tmp_path_factory.mktemp("compose-cache")))


@pytest.fixture(scope="session")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout as a clean clone of the working tree holds it: the files git
    tracks or would track (nothing ignored: no .venv, caches, build/ or egg-info)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    names = [n for n in listed.decode().split("\0") if n and (REPO_ROOT / n).is_file()]
    assert "setup.py" in names, "git lists nothing: not a checkout?"
    copy = tmp_path_factory.mktemp("source") / "fleetcast"
    for name in names:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, copy / name)
    return copy
