"""Composing in a forked child while the run imports (``sim.startup.compose_ahead``).

Whether the child composes or the run's own process does, a command must give the same files,
the same summary and the same refusals in the same order; a child that fails in any way must
leave the run to compose in-process, as without it; and no child is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sim.startup
from sim.startup.compose_ahead import _worth_forking
from tests.startup.test_compose_cache import TINY, run_files

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "fork")), reason="forks on Linux only"
)

# The command as its own process (sim.cli.main() reads sys.argv: the only caller that forks).
# Whether a second core is free does not change what the child does, so the probe lets it
# fork on any machine. It prints a banner first (buffered: stdout is a pipe here), and at the
# end whether the run's process had imported Hydra before the simulation and at all, and
# whether any child of it is left. PATCH may break the child.
PROBE = """
import os, sys
import sim.cli
import sim.startup.compose_ahead as ahead
if os.environ["FLEETCAST_COMPOSE_AHEAD"] == "1":
    ahead._worth_forking = lambda: True
seen = {{}}
simulate_into = sim.cli._simulate_into
def _simulate_into(*args):
    seen["hydra before the run"] = "hydra" in sys.modules
    return simulate_into(*args)
sim.cli._simulate_into = _simulate_into
fail = sim.cli._fail
def _fail(err):
    seen["refused with sim.run imported"] = "sim.run" in sys.modules
    fail(err)
sim.cli._fail = _fail
{patch}
print("banner")
sys.argv = ["sim", *sys.argv[1:]]
try:
    sim.cli.main()
finally:
    try:
        os.waitpid(-1, os.WNOHANG)
        left = "some"
    except ChildProcessError:
        left = "none"
    print("refused with sim.run imported:", seen.get("refused with sim.run imported"))
    print("hydra before the run:", seen.get("hydra before the run"))
    print("hydra imported:", "hydra" in sys.modules)
    print("children left:", left)
"""

# The child's n-th message (1: the check's answer, 2: Hydra's, 3: the texts) is not sent.
FAIL_AT = """
send = ahead._send
count = []
def failing(pipe, message):
    count.append(message)
    if len(count) == {n}:
        {failure}
    send(pipe, message)
ahead._send = failing
"""


def command(folder: Path, args: list[str], *, ahead: bool, patch: str = "") -> tuple[int, str, str]:
    """Exit status, stdout (with the seconds it took, on a last line) and stderr of the command
    ``args`` run in ``folder`` with an empty compose cache of its own, composing in a child
    (``ahead``) or in its own process."""
    env = dict(
        os.environ,
        FLEETCAST_CACHE_DIR=str(folder / f"cache-{ahead}-{len(list(folder.iterdir()))}"),
        FLEETCAST_COMPOSE_AHEAD="1" if ahead else "0",
    )
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered, as into a pipe or a file
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(patch=patch), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = f"seconds: {time.monotonic() - start:.1f}\n"
    return proc.returncode, proc.stdout + took, proc.stderr


REPORT_LINES = 5  # the probe's four lines and the seconds


def report(out: str) -> dict[str, str]:
    """The probe's last lines and the seconds the command took, and how often the banner
    was printed."""
    lines = out.splitlines()
    found = dict(line.split(": ", 1) for line in lines[-REPORT_LINES:])
    return {**found, "banners": str(lines.count("banner"))}


def without_time(found: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in found.items() if key != "seconds"}


def run_both(tmp_path: Path, patch: str = "") -> dict[str, str]:
    """The tiny run composed in a child (with ``patch`` applied) and in-process, into the same
    folder: asserts the same stdout and files, and gives the child's probe report."""
    outputs = {}
    for ahead in (True, False):
        status, out, err = command(tmp_path, [*TINY, "output_dir=out"], ahead=ahead, patch=patch)
        assert status == 0, err
        outputs[ahead] = out.splitlines()[:-REPORT_LINES], run_files(tmp_path / "out"), report(out)
        (tmp_path / "out").rename(tmp_path / f"out-{ahead}")
    (lines, files, probed), (lines_in_process, files_in_process, in_process) = (
        outputs[True],
        outputs[False],
    )
    assert lines == lines_in_process  # the banner and the summary, word for word
    assert files == files_in_process
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", "summary.json", "config.yaml"} <= set(files)
    assert without_time(in_process) == {
        "refused with sim.run imported": "None",
        "hydra before the run": "True",
        "hydra imported": "True",
        "children left": "none",
        "banners": "1",
    }
    assert probed["children left"] == "none" and probed["banners"] == "1"
    return probed


def test_the_child_composes_the_same_run_and_the_run_never_imports_hydra(tmp_path):
    probed = run_both(tmp_path)
    assert probed["hydra imported"] == "False"  # Hydra ran in the child only
    # and it is kept for the next run, as a composed config is
    assert len(list(tmp_path.glob("cache-True-*/compose/*.json"))) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["fleet=no_such_option", "output_dir=/dev/null"],  # the check's refusal comes first
        ["fleet.replicas={", "output_dir=out"],  # Hydra's grammar
        ["+seed=1", "output_dir=/dev/null"],  # the output folder's, before Hydra's
        ["+seed=1", "output_dir=out"],  # Hydra's own
        ["fleet.replicas=0", "output_dir=out"],  # the schema's, after composing
    ],
)
def test_refusals_are_the_same_and_in_the_same_order(tmp_path, args):
    status, out, err = command(tmp_path, [*TINY, *args], ahead=True)
    status_in_process, out_in_process, err_in_process = command(
        tmp_path, [*TINY, *args], ahead=False
    )
    assert (status, err) == (status_in_process, err_in_process)
    assert status == 2 and err.startswith("error: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "summary.json").exists()
    # the child's answers were used (the run's process never imported Hydra), and it is reaped
    found = report(out)
    del found["refused with sim.run imported"]  # (how far the imports got: the machine's pace)
    assert without_time(found) == {
        "hydra before the run": "False" if "replicas=0" in args[0] else "None",
        "hydra imported": "False",
        "children left": "none",
        "banners": "1",
    }
    assert report(out_in_process)["hydra imported"] == "True"


@pytest.mark.parametrize(
    ("unsent", "hydra_before_the_run"),
    [
        (1, "True"),  # no answer at all: the run checks and composes itself
        (2, "True"),  # the check's answer only: the run composes itself
        (3, "False"),  # no texts of .hydra/: Hydra writes them here, after the run
    ],
)
def test_a_child_that_ends_early_leaves_the_rest_to_the_run(tmp_path, unsent, hydra_before_the_run):
    probed = run_both(tmp_path, FAIL_AT.format(n=unsent, failure="raise OSError('ended')"))
    assert probed["hydra before the run"] == hydra_before_the_run
    assert probed["hydra imported"] == "True"


def test_a_silent_child_is_killed_and_the_run_composes_itself(tmp_path):
    patch = "ahead.ANSWER_TIMEOUT_S = 1.0\n" + FAIL_AT.format(
        n=2, failure="__import__('time').sleep(60)"
    )
    probed = run_both(tmp_path, patch)
    assert probed["hydra before the run"] == "True"
    assert float(probed["seconds"]) < 30  # killed after a second, not waited for


def test_the_check_refusal_comes_between_two_imports(tmp_path):
    # each import ahead of the run made slow: the refusal must not wait for all of them
    slow = (
        "import time\n"
        "import sim.startup\n"
        "imported = sim.startup.imported\n"
        "def slowly(module):\n"
        "    time.sleep(1.0)\n"
        "    return imported(module)\n"
        "sim.startup.imported = slowly\n"
    )
    status, out, err = command(tmp_path, [*TINY, "fleet=no_such_option"], ahead=True, patch=slow)
    assert status == 2 and err.startswith("error: fleet='no_such_option'")
    found = report(out)
    assert found["refused with sim.run imported"] == "False"  # sim.run is 6th of the 8
    assert float(found["seconds"]) < 1.0 * len(sim.startup.RUN_MODULES)


def test_a_caller_that_ignores_sigchld_still_gets_its_run(tmp_path):
    # the system reaps the child itself; waiting for it must not fail the run
    probed = run_both(tmp_path, "import signal; signal.signal(signal.SIGCHLD, signal.SIG_IGN)")
    assert probed["hydra imported"] == "False"


def test_no_child_where_it_is_turned_off_or_threads_run(monkeypatch):
    probe = "from sim.startup.compose_ahead import _worth_forking; print(_worth_forking())"
    env = dict(os.environ, FLEETCAST_COMPOSE_AHEAD="1")
    fresh = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert fresh.stdout.strip() == str(len(os.sched_getaffinity(0)) >= 2)
    monkeypatch.setenv("FLEETCAST_COMPOSE_AHEAD", "0")
    assert not _worth_forking()
    monkeypatch.setenv("FLEETCAST_COMPOSE_AHEAD", "1")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not _worth_forking()  # a fork would copy a lock another thread may hold
    finally:
        stop.set()
        thread.join()


def test_the_command_called_in_process_never_forks(tmp_path, monkeypatch):
    # main(argv), from a notebook or a test, is not the process's own command line
    import sim.startup.compose_ahead as compose_ahead
    from sim.cli import main

    def refuse(_cache):
        raise AssertionError("forked")

    monkeypatch.setattr(compose_ahead.ComposeAhead, "start", refuse)
    monkeypatch.chdir(tmp_path)
    main([*TINY, "output_dir=out"])
    assert (tmp_path / "out" / "summary.json").is_file()
