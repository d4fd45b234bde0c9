"""Composing in a forked child while the run imports (``sim.config.compose_ahead``).

Whether the child composes or the run's own process does, a command must give the same files,
the same summary and the same refusals in the same order; a child that fails in any way must
leave the run to compose in-process, as without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sim.config.compose_ahead import _worth_forking
from tests.config.test_compose_cache import TINY, run_files

CAN_FORK = sys.platform.startswith("linux") and len(os.sched_getaffinity(0)) >= 2
needs_a_second_core = pytest.mark.skipif(not CAN_FORK, reason="the child needs Linux, two cores")

# The command as its own process (sim.cli.main() reads sys.argv: the only caller that forks),
# with a line saying whether the run's process imported Hydra. PATCH may break the child.
PROBE = """
import sys
import sim.cli
import sim.config.compose_ahead as ahead
{patch}
sys.argv = ["sim", *sys.argv[1:]]
try:
    sim.cli.main()
finally:
    print("hydra imported:", "hydra" in sys.modules)
"""


def command(folder: Path, args: list[str], *, ahead: bool, patch: str = "") -> tuple[int, str, str]:
    """Exit status, stdout and stderr of the command ``args`` run in ``folder`` with an empty
    compose cache of its own, composing in a child (``ahead``) or in its own process."""
    env = dict(
        os.environ,
        FLEETCAST_CACHE_DIR=str(folder / f"cache-{ahead}-{len(list(folder.iterdir()))}"),
        FLEETCAST_COMPOSE_AHEAD="1" if ahead else "0",
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(patch=patch), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_both(tmp_path: Path, patch: str = "") -> tuple[list[str], dict[str, bytes]]:
    """The tiny run composed in a child (with ``patch`` applied) and in-process, into the same
    folder: the child's stdout lines, and its files (asserted equal to the in-process run's)."""
    outputs = {}
    for ahead in (True, False):
        status, out, err = command(tmp_path, [*TINY, "output_dir=out"], ahead=ahead, patch=patch)
        assert status == 0, err
        outputs[ahead] = out.splitlines(), run_files(tmp_path / "out")
        (tmp_path / "out").rename(tmp_path / f"out-{ahead}")
    (lines, files), (lines_in_process, files_in_process) = outputs[True], outputs[False]
    assert lines[:-1] == lines_in_process[:-1]  # the summary, word for word
    assert files == files_in_process
    assert lines_in_process[-1] == "hydra imported: True"
    return lines, files


@needs_a_second_core
def test_the_child_composes_the_same_run_and_the_run_never_imports_hydra(tmp_path):
    lines, files = run_both(tmp_path)
    assert lines[-1] == "hydra imported: False"  # Hydra ran in the child only
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", "summary.json", "config.yaml"} <= set(files)
    # and it is kept for the next run, as a composed config is
    assert len(list(tmp_path.glob("cache-True-*/compose/*.json"))) == 1


@needs_a_second_core
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
    assert out.splitlines()[:-1] == out_in_process.splitlines()[:-1] == []
    assert status == 2 and err.startswith("error: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "summary.json").exists()


@needs_a_second_core
def test_a_child_that_fails_leaves_the_run_to_compose_in_process(tmp_path):
    # the child cannot send its outcome: the run checks and composes itself
    lines, _ = run_both(
        tmp_path, patch="ahead.pickle.dumps = lambda *a: (_ for _ in ()).throw(OSError())"
    )
    assert lines[-1] == "hydra imported: True"


@needs_a_second_core
def test_a_child_that_ends_before_its_texts_leaves_them_to_hydra_here(tmp_path):
    # the outcome arrives, the texts of .hydra/ do not: Hydra writes them in the run's process
    patch = (
        "sent = []\n"
        "dumps = ahead.pickle.dumps\n"
        "def once(obj):\n"
        "    if sent:\n"
        "        raise OSError('killed')\n"
        "    sent.append(obj)\n"
        "    return dumps(obj)\n"
        "ahead.pickle.dumps = once\n"
    )
    lines, _ = run_both(tmp_path, patch=patch)
    assert lines[-1] == "hydra imported: True"


def test_no_child_where_it_is_turned_off_or_threads_run(monkeypatch):
    monkeypatch.setenv("FLEETCAST_COMPOSE_AHEAD", "0")
    assert not _worth_forking()
    monkeypatch.setenv("FLEETCAST_COMPOSE_AHEAD", "1")
    assert _worth_forking() == (CAN_FORK and threading.active_count() == 1)
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
    import sim.config.compose_ahead as compose_ahead
    from sim.cli import main

    def refuse(_cache):
        raise AssertionError("forked")

    monkeypatch.setattr(compose_ahead.ComposeAhead, "start", refuse)
    monkeypatch.chdir(tmp_path)
    main([*TINY, "output_dir=out"])
    assert (tmp_path / "out" / "summary.json").is_file()
