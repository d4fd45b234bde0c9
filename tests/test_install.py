"""Fleetcast installed as a package, not run from a checkout: a wheel built from the tree holds
every module, config and shipped data file, and once installed into a fresh virtual environment
``fleetcast`` runs the default simulation and ``fleetcast memory`` from another directory."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.contract import run_problems


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
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import sim; print(sim.__file__)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout
    # no test tools, no PyTorch: running needs only the core dependencies
    for absent in ("pytest", "torch", "scipy", "pandas", "seaborn"):
        probe = subprocess.run([str(python), "-c", f"import {absent}"], capture_output=True)
        assert probe.returncode != 0, f"{absent} was installed with the core package"

    fleetcast = venv / "bin" / "fleetcast"
    run = subprocess.run(
        [str(fleetcast), "output_dir=run", "sim.progress=false"],
        cwd=elsewhere,
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
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert memory.returncode == 0, memory.stderr[-3000:]
    assert "Memory plan: Llama-3.1-8B on H200" in memory.stdout
    assert sorted(p.name for p in elsewhere.iterdir()) == ["run"]  # nothing else written here
