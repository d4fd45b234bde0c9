"""The commands of docs/how-to/compare-with-a-benchmark.md, run as a reader would: the run
simulates what the measured file measured (its GPU count), and every figure the page shows is
what the commands print, to the digits shown."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from sim.harness.formats import read_benchmark
from sim.resources import data_dir
from tests.support import fleetcast

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "compare-with-a-benchmark.md"
SHIPPED = "shipped:"
ELIDED = "..."  # a shown line holding this was shortened on the page: not compared


def examples(text: str) -> list[tuple[list[str], list[str]]]:
    """Each ``$ fleetcast ...`` command of the page's fenced blocks (continuation lines
    joined), with the output lines shown under it."""
    found: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"^```\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.startswith("$ fleetcast "):
                continue
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + " " + lines[i].strip()
                i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            found.append((shlex.split(command)[1:], shown))
    return found


def test_the_page_has_its_two_commands():
    commands = [args[0] for args, _ in examples(PAGE.read_text())]
    assert commands == ["bench", "compare"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every command of the page run in one empty folder, in order: (args, shown, printed)."""
    folder = tmp_path_factory.mktemp("docs_compare")
    out = []
    for args, shown in examples(PAGE.read_text()):
        done = fleetcast(*args, cwd=folder, timeout=120)
        assert done.returncode == 0, done.stderr
        out.append((args, shown, done.stdout.splitlines()))
    return folder, out


def test_the_simulated_fleet_has_the_measured_gpu_count(ran):
    folder, out = ran
    (bench_args, _, _), (compare_args, _, _) = out
    run_dir = compare_args[1]
    assert f"output_dir={run_dir}" in bench_args  # the compared run is the simulated benchmark
    measured_file = compare_args[2]
    assert measured_file.startswith(SHIPPED)
    (measured,) = read_benchmark(data_dir() / measured_file[len(SHIPPED) :])
    summary = json.loads((folder / run_dir / "summary.json").read_text())
    assert summary["num_gpus"] == int(str(measured.settings["gpu_count"])) == 1
    assert summary["completed"] - summary["warmup_requests"] == measured.completed


def test_every_figure_shown_is_printed(ran):
    _, out = ran
    for args, shown, printed in out:
        compared = [line for line in shown if ELIDED not in line and line.strip()]
        assert len(compared) >= 10, f"fleetcast {args[0]}: too few figures shown to check"
        missing = [line for line in compared if line.rstrip() not in printed]
        assert not missing, f"fleetcast {args[0]} no longer prints: {missing}"
