"""The layout keeps its promises: imports point down the data flow, SimPy stays in the fleet,
optional extras stay in the packages that need them, every package says what it holds and may
import, the documented layout (docs/explanation/architecture.md) names every module, and tests/
mirrors sim/.

The rules are the table below, the same as each package's docstring and the documented layout.
"""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

SIM = REPO_ROOT / "sim"
BASICS = {"errors", "rng", "resources", "arrow_numpy", "signature"}
# What each part of sim/ may import from sim/ (besides itself). Top-level modules are parts of
# their own; ``run`` (the composition root) and ``cli`` (the command) may import anything.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "rng": set(),
    "arrow_numpy": set(),
    "signature": set(),  # a class's constructor, compiled or not (sim.config.build, the roofline)
    "resources": {"errors"},
    # before a run's first event: the collector paused, the composed config kept for the same
    # command (its key covers config.compose, the override check)
    "startup": BASICS | {"config.compose"},
    "config": BASICS,
    "catalog": BASICS | {"config"},
    "workload": BASICS | {"config"},
    "engine": BASICS | {"catalog"},
    "output": BASICS | {"config", "catalog", "engine"},
    "fleet": BASICS
    | {
        "engine",
        "workload",
        "output.metrics",
        "output.request_log",
        "output.step_log",
        "output.scaling",  # the autoscaler's log of the fleet's changes
        "config.autoscale",  # the autoscaler's settings
        "output.faults",  # the faults' log of replicas down and up
        "config.faults",  # the faults' settings
    },
    # what a run deploys, built from its config for the composition root (sim.run): each fleet
    # shape (fixed, autoscaled, disaggregated) with its engines, the requests it can serve
    # (workload.source), priced and summed up; speculative decoding's drafter built for an
    # engine configuration
    "deploy": BASICS | {"config", "catalog", "engine", "fleet", "output", "workload.source"},
    # calibrate --bench simulates (sim.run) the benchmark files sim.harness reads
    # (and a bench profile's own held-out error band, output.model_error)
    "calibration": BASICS | {"config", "catalog", "engine", "harness", "run", "output.model_error"},
    "sweeps": BASICS | {"config", "output.run_files"},
    # benchmark result files and run folders, read as files
    "harness": BASICS | {"output.run_files"},
    # fleetcast plan: composes and simulates points into run folders resumed as a sweep's,
    # flattens summaries as collect does
    "plan": BASICS
    | {
        "config",
        "run",
        "sweeps.runs",
        "sweeps.resume",
        "output.run_files",
        "output.summary_table",
        # a day plan's periods and the workloads that stand for them (pure numpy)
        "workload.day",
        # an hour's latency statistics, computed as a run's summary computes them
        "output.results",
        # the step-time model's error band of a candidate's class
        "output.model_error",
        # a candidate's replica priced at each tier its spares weigh (plan.faults.tiers), as a
        # run prices it: its GPU and the price list (sim.plan.spares)
        "catalog.hardware",
        "output.cost",
    },
    # fleetcast report reads files: run folders (their names), a sweep's SLO attainment as it is
    # ranked, a plan's SLO grammar, intervals and run folder names; never engine/ or fleet/
    "report": BASICS
    | {
        "output.run_files",
        "output.summary_table",
        "sweeps.monitor",
        "plan.slo",
        "output.model_error",  # a plan answer's model-error block in words
        "plan.replications",
        "plan.runs",
        "plan.rounds",
        "plan.spares",  # a plan answer's spares (N + k) in words, as the plan prints them
    },
}
ANYTHING = {"run", "cli", "__main__", "__init__"}
# Third-party packages only some parts may use: SimPy moves time (the fleet only); the
# optional extras (calibrate, profile, report) stay where they are needed.
ONLY_IN = {
    "simpy": {"fleet"},
    "torch": {"calibration"},
    "scipy": {"calibration"},
    "pandas": {"calibration", "report"},
    "hydra": {"config", "sweeps", "cli", "startup"},
    "seaborn": {"report"},
    "matplotlib": {"report"},
}


def _modules() -> list[Path]:
    return sorted(p for p in SIM.rglob("*.py") if "__pycache__" not in p.parts)


def _part(path: Path) -> str:
    """``engine`` for sim/engine/..., ``run`` for sim/run.py."""
    rel = path.relative_to(SIM).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (absolute names), at any depth of the file."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _allowed(part: str, target: str) -> bool:
    """Whether ``part`` may import ``sim.<target>`` (target: dotted, without ``sim.``)."""
    if part in ANYTHING or target.split(".")[0] == part:
        return True
    for rule in MAY_IMPORT[part]:
        if target == rule or target.startswith(rule + "."):
            return True
    return False


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SIM)))
def test_imports_point_down_the_data_flow(path):
    part = _part(path)
    assert part in MAY_IMPORT or part in ANYTHING, f"{part}: add it to MAY_IMPORT"
    wrong = []
    for name in _imports(path):
        if name == "sim" or not name.startswith("sim."):
            top = name.split(".")[0]
            if top in ONLY_IN and part not in ONLY_IN[top] and part not in ANYTHING - {"run"}:
                wrong.append(f"{name} (only in {sorted(ONLY_IN[top]) or 'notebooks'})")
            continue
        target = name.removeprefix("sim.")
        # "from sim.engine import x" lists both sim.engine and sim.engine.x: judge the longer
        if not _allowed(part, target) and not any(
            other.startswith(name + ".") and _allowed(part, other.removeprefix("sim."))
            for other in _imports(path)
        ):
            wrong.append(name)
    assert not wrong, f"sim/{path.relative_to(SIM)} ({part}) imports {wrong}"


def _module_name(path: Path) -> str:
    """``sim.plan.day`` for sim/plan/day.py, ``sim.plan`` for sim/plan/__init__.py."""
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_no_import_runs_back_in_a_circle():
    # every import at any depth (inside functions, under TYPE_CHECKING) counts: a circle hidden
    # in a function is still a circle
    names = {_module_name(p): p for p in _modules()}
    graph = {
        name: {
            target
            for target in _imports(path)
            if target in names and not name.startswith(target + ".") and target != name
        }
        for name, path in names.items()
    }
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"imports run in a circle: {' -> '.join(err.args[1])}")


def test_the_rules_catch_a_wrong_import():
    assert not _allowed("engine", "fleet.replica")
    assert not _allowed("output", "fleet.cluster")
    assert not _allowed("fleet", "output.results")
    assert _allowed("fleet", "output.metrics") and _allowed("engine", "catalog.deployment")
    assert not _allowed("report", "engine.kv_cache") and not _allowed("report", "fleet.cluster")
    assert not _allowed("report", "run") and _allowed("report", "output.run_files")


PACKAGES = sorted(p for p in SIM.iterdir() if (p / "__init__.py").is_file())


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_package_says_what_it_holds_and_what_it_may_import(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
    assert doc, f"sim/{package.name}/__init__.py has no docstring"
    for module in sorted(package.glob("*.py")):
        if module.name != "__init__.py":
            assert f"``{module.stem}``" in doc, f"sim/{package.name}: {module.stem} not described"
    assert "May import" in doc, f"sim/{package.name}: the docstring does not say what it may import"


ARCHITECTURE_PAGE = REPO_ROOT / "docs" / "explanation" / "architecture.md"


def _documented_layout() -> str:
    """The '## Layout' section of the architecture page."""
    text = ARCHITECTURE_PAGE.read_text()
    match = re.search(r"^## Layout\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"{ARCHITECTURE_PAGE.relative_to(REPO_ROOT)} has no '## Layout' section"
    return match.group(1)


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if p.name not in ("__init__.py", "__main__.py")],
    ids=lambda p: str(p.relative_to(SIM)),
)
def test_the_documented_layout_names_every_module(path):
    layout = _documented_layout()
    assert re.search(rf"\b{re.escape(path.name)}\b", layout), (
        f"{ARCHITECTURE_PAGE.relative_to(REPO_ROOT)}'s layout does not name "
        f"sim/{path.relative_to(SIM)} as {path.name}"
    )


README = REPO_ROOT / "README.md"


def _readme_layout() -> dict[str, set[str]]:
    """The README's '## Layout' block: each package folder and the modules named on its lines
    (a line that starts with blanks goes on naming the folder above it's)."""
    text = README.read_text()
    match = re.search(r"^## Layout\n.*?```\n(.*?)```", text, flags=re.S | re.M)
    assert match, "README.md has no '## Layout' section with a module block"
    named: dict[str, set[str]] = {}
    folder = ""
    for line in match.group(1).splitlines():
        if not line.startswith(" "):
            folder, _, line = line.partition(" ")
        named.setdefault(folder, set()).update(line.split())
    return named


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if p.name not in ("__init__.py", "__main__.py")],
    ids=lambda p: str(p.relative_to(SIM)),
)
def test_the_readme_layout_names_every_module(path):
    folder = f"sim/{path.parent.relative_to(SIM)}/".replace("/./", "/")
    assert path.stem in _readme_layout().get(folder, set()), (
        f"README.md's layout does not name sim/{path.relative_to(SIM)} under {folder}"
    )


def test_tests_mirror_sim():
    tests = REPO_ROOT / "tests"
    folders = {
        p.relative_to(tests)
        for p in tests.rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts and not p.name.startswith(".")
    }
    for folder in folders:
        assert (SIM / folder).is_dir(), f"tests/{folder} mirrors no folder of sim/"
        assert (tests / folder / "__init__.py").is_file(), f"tests/{folder} is not a package"
    for package in PACKAGES:
        assert Path(package.name) in folders, f"sim/{package.name} has no tests/{package.name}"
