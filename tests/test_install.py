"""Fleetcast installed as a package, not run from a checkout: a wheel built from the tree holds
every module, config and shipped data file, and once installed into a fresh virtual environment
``fleetcast`` runs the default simulation and ``fleetcast memory`` from another directory.

Under ``make test-compiled`` (``FLEETCAST_COMPILE=1``) the wheel is the compiled build's: it
also holds the loop's extension modules, and the installed ``sim`` runs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import build_backend
from build_backend import COMPILED, MYPYC, compiling
from tests.contract import run_problems
from tests.support import REPO_ROOT

# the compiled build's extension modules: one per module of build_backend.COMPILED, and their shared
# library (its name: group_name in setup.py)
EXTENSIONS = {m.removesuffix(".py") for m in COMPILED} | {"fleetcast__mypyc"}


def test_the_compiled_modules_exist():
    assert COMPILED and all((REPO_ROOT / path).is_file() for path in COMPILED)


@pytest.mark.parametrize("asked", ["1", "yes", "0", ""])
def test_the_compiled_build_asks_for_mypy_and_lists_its_requirements_without_it(asked, monkeypatch):
    """Setuptools runs setup.py to list the build's requirements, before mypy is there: that
    run does not compile, and mypy and the runtime dependencies join the list only when
    FLEETCAST_COMPILE asks."""
    seen = []

    def setuptools_hook(config_settings):
        seen.append(os.environ["FLEETCAST_COMPILE"])
        return ["wheel"]

    monkeypatch.setenv("FLEETCAST_COMPILE", asked)
    requirements = build_backend._with_mypy(setuptools_hook, None)
    compiled = asked in ("1", "yes")
    # mypyc type-checks against numpy, SimPy, ...: the build environment gets them too
    dependencies = [*MYPYC, *build_backend.runtime_dependencies()] if compiled else []
    assert requirements == ["wheel", *dependencies]
    assert "numpy>=1.24" in dependencies or not compiled
    assert seen == ["0" if compiled else asked]
    assert os.environ["FLEETCAST_COMPILE"] == asked  # as it was


@pytest.fixture(scope="module")
def wheel(source_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a clean copy of the tree (building in the checkout would leave build/ and
    egg-info there, and a stale build/ could slip deleted modules into the wheel)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(out),
            str(source_copy),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (found,) = out.glob("fleetcast-*.whl")
    return found


def test_the_wheel_holds_every_module_config_and_shipped_file_and_nothing_else(wheel, source_copy):
    names = {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    extensions = {n for n in names if n.endswith(".so")}
    names -= extensions
    # "sim/fleet/replica.cpython-311-x86_64-linux-gnu.so" is sim/fleet/replica's
    assert {n.split(".")[0] for n in extensions} == (EXTENSIONS if compiling() else set())
    files = {p.relative_to(source_copy).as_posix() for p in source_copy.rglob("*") if p.is_file()}
    expected = {p for p in files if p.startswith(("sim/", "hydra_plugins/"))}
    expected |= {
        "sim/configs/" + p.removeprefix("configs/") for p in files if p.startswith("configs/")
    }
    expected |= {"sim/data/" + p.removeprefix("data/") for p in files if p.startswith("data/")}
    assert sorted(expected - names) == []
    assert sorted(names - expected) == []


def test_an_installed_wheel_runs_from_another_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    # the installed copy's environment: no PYTHONPATH (make test-compiled points it at its tree)
    outside = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
        env=outside,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where, loop = subprocess.run(
        [str(python), "-c", "import sim, sim.fleet.replica as m; print(sim.__file__, m.__file__)"],
        cwd=elsewhere,
        env=outside,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout
    assert loop.endswith(".so") == compiling(), loop  # the loop compiled in the compiled build
    # no test tools, no PyTorch: running needs only the core dependencies
    for absent in ("pytest", "torch", "scipy", "pandas", "seaborn"):
        probe = subprocess.run(
            [str(python), "-c", f"import {absent}"], capture_output=True, env=outside
        )
        assert probe.returncode != 0, f"{absent} was installed with the core package"

    fleetcast = venv / "bin" / "fleetcast"
    run = subprocess.run(
        [str(fleetcast), "output_dir=run", "sim.progress=false"],
        cwd=elsewhere,
        env=outside,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("Fleetcast: meta-llama/Llama-3.1-8B on 4 replica(s)")
    assert "2,867 completed" in run.stdout
    assert run_problems(elsewhere / "run") == []

    memory = subprocess.run(
        [str(fleetcast), "memory", "hardware=h200"],
        cwd=elsewhere,
        env=outside,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert memory.returncode == 0, memory.stderr[-3000:]
    assert "Memory plan: Llama-3.1-8B on H200" in memory.stdout
    assert sorted(p.name for p in elsewhere.iterdir()) == ["run"]  # nothing else written here
