"""The compose cache: the same command composes its config once, and reads it back unchanged.

What a run reads back must be exactly what Hydra composed (same files, same run), and any change
to what Hydra reads must miss.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import sim.config.compose
import sim.startup.compose_cache as compose_cache
from sim.cli import main
from sim.resources import config_dir
from sim.startup.compose_cache import ComposeCache, ComposedRun, ComposeFailed, cache_folder

TINY = [
    "sim.progress=false",
    "fleet.replicas=1",
    "workload=poisson",
    "workload.num_requests=20",
    "workload.prompt_tokens=64",
    "workload.output_tokens=16",
]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of this test's own."""
    monkeypatch.setenv("FLEETCAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLEETCAST_COMPOSE_CACHE", raising=False)
    return tmp_path / "cache" / "compose"


def composed_and_kept(overrides: list[str]) -> ComposedRun:
    """Composed by Hydra and kept, as a run of the command does (keeping after the run)."""
    cache = ComposeCache(overrides)
    composed = cache.compose()
    cache.keep(composed)
    return composed


def run_files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_a_repeated_command_reads_its_config_back_and_writes_the_same_run(
    cache, tmp_path, monkeypatch
):
    first, second, uncached = tmp_path / "first", tmp_path / "second", tmp_path / "uncached"
    monkeypatch.chdir(tmp_path)
    main([*TINY, "output_dir=out"])
    assert len(list(cache.glob("*.json"))) == 1
    shutil.move(tmp_path / "out", first)

    # the second run needs neither Hydra nor the override check: both would fail here
    def refuse(*_args, **_kwargs):
        raise AssertionError("composed again")

    with monkeypatch.context() as patched:
        patched.setattr(compose_cache, "_compose_with_hydra", refuse)
        patched.setattr(sim.config.compose, "check_overrides", refuse)
        main([*TINY, "output_dir=out"])
    shutil.move(tmp_path / "out", second)

    monkeypatch.setenv("FLEETCAST_COMPOSE_CACHE", "0")
    main([*TINY, "output_dir=out"])
    shutil.move(tmp_path / "out", uncached)

    files = run_files(first)
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", "summary.json"} <= set(files)
    assert run_files(second) == files
    assert run_files(uncached) == files
    assert json.loads(files["summary.json"])["completed"] == 20


def test_a_repeated_command_does_not_import_hydra(cache, tmp_path):
    probe = (
        "import sys, sim.cli\n"
        "try:\n"
        f"    sim.cli.main({[*TINY, 'output_dir=out']!r})\n"
        "finally:\n"
        "    print('hydra' in sys.modules, 'hydra.core.override_parser' in sys.modules)\n"
    )
    env = dict(os.environ, FLEETCAST_CACHE_DIR=str(cache.parent))
    imported = [
        subprocess.run(
            [sys.executable, "-c", probe],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()[-1]
        for _ in range(2)
    ]
    assert imported == ["True True", "False False"]


def test_the_cache_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setenv("FLEETCAST_COMPOSE_CACHE", "0")
    assert cache_folder() is None
    composed = composed_and_kept(TINY)
    assert composed.config["fleet"]["replicas"] == 1
    assert ComposeCache(TINY).read() is None
    assert not cache.exists()


def test_the_default_folder_follows_xdg_and_relative_folders_are_ignored(monkeypatch, tmp_path):
    monkeypatch.delenv("FLEETCAST_CACHE_DIR", raising=False)
    monkeypatch.delenv("FLEETCAST_COMPOSE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "fleetcast" / "compose"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for relative in ("", "cache"):  # unset, or relative: the current folder's would move
        monkeypatch.setenv("XDG_CACHE_HOME", relative)
        monkeypatch.setenv("FLEETCAST_CACHE_DIR", relative)
        assert cache_folder() == tmp_path / "home" / ".cache" / "fleetcast" / "compose"
    monkeypatch.setenv("HOME", "home")  # no absolute folder anywhere: off
    assert cache_folder() is None


def test_a_changed_config_file_or_folder_is_composed_again(cache, tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(config_dir(), configs, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(compose_cache, "config_dir", lambda: configs)
    monkeypatch.chdir(tmp_path)
    assert composed_and_kept(TINY).config["sim"]["progress"] is False
    kept = ComposeCache(TINY).read()
    assert kept is not None and kept.config["fleet"]["replicas"] == 1

    # one value in one group file: a new key, and Hydra's new result
    scheduler = configs / "scheduler" / "vllm.yaml"
    text = scheduler.read_text()
    assert "max_num_seqs: null" in text
    scheduler.write_text(text.replace("max_num_seqs: null", "max_num_seqs: 7"))
    assert ComposeCache(TINY).read() is None
    assert composed_and_kept(TINY).config["scheduler"]["max_num_seqs"] == 7

    # a new folder among the configs: a group to the override check, though it holds no YAML
    (configs / "newgroup").mkdir()
    assert ComposeCache(TINY).read() is None
    composed_and_kept(TINY)

    # another working folder: hydra.runtime.cwd differs
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert ComposeCache(TINY).read() is None
    assert f"cwd: {elsewhere}" in composed_and_kept(TINY).texts["hydra.yaml"]

    # the command line, in order
    assert ComposeCache(list(reversed(TINY))).read() is None
    assert len(list(cache.glob("*.json"))) == 4


def test_a_damaged_entry_is_composed_again(cache):
    composed_and_kept(TINY)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"config": {')  # a write cut short
    assert ComposeCache(TINY).read() is None
    composed_and_kept(TINY)
    kept = ComposeCache(TINY).read()
    assert kept is not None and kept.config["workload"]["num_requests"] == 20
    entry.write_text(json.dumps({"config": {}}))  # another layout
    assert ComposeCache(TINY).read() is None


def test_a_folder_that_cannot_be_written_is_left_alone(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FLEETCAST_CACHE_DIR", str(blocker))
    monkeypatch.delenv("FLEETCAST_COMPOSE_CACHE", raising=False)
    composed = composed_and_kept(TINY)
    assert composed.config["fleet"]["replicas"] == 1
    assert ComposeCache(TINY).read() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_only_results_that_need_no_resolving_are_kept(cache):
    # an interpolation given on the command line is resolved by the run, not by the cache
    with_interpolation = [*TINY, "output_dir=${oc.env:HOME}/runs"]
    composed = composed_and_kept(with_interpolation)
    assert composed.config["output_dir"] == f"{os.environ['HOME']}/runs"
    assert ComposeCache(with_interpolation).read() is None
    assert not cache.exists() or not list(cache.glob("*.json"))
    assert composed_and_kept(TINY).run_dir == "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    assert ComposeCache(TINY).read() is not None


def test_hydra_refusals_are_one_line_and_not_kept(cache):
    with pytest.raises(ComposeFailed) as refused:
        ComposeCache(["fleet=no_such_option"]).compose()
    assert "no_such_option" in str(refused.value) and "\n" not in str(refused.value)
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_the_run_folder_is_filled_with_the_time_as_hydra_does():
    composed = ComposedRun({}, {}, "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}/x", texts={})
    before = datetime.now().replace(microsecond=0)
    folder = composed.run_folder()
    after = datetime.now()
    day, clock, leaf = folder.removeprefix("outputs/").split("/")
    stamped = datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H-%M-%S")
    assert before <= stamped <= after and leaf == "x"


def test_the_least_recently_used_entries_are_removed(cache, monkeypatch):
    monkeypatch.setattr(compose_cache, "MAX_ENTRIES", 2)
    commands = [[*TINY, f"seed={seed}"] for seed in range(3)]
    for stamp, command in enumerate(commands[:2]):
        composed_and_kept(command)
        (entry,) = (p for p in cache.glob("*.json") if os.stat(p).st_mtime_ns > 10**9 * 10)
        os.utime(entry, ns=(stamp * 10**9, stamp * 10**9))  # 0 s, then 1 s
    assert ComposeCache(commands[0]).read() is not None  # used now: the newest
    composed_and_kept(commands[2])  # a third: the least recently used goes
    assert ComposeCache(commands[0]).read() is not None
    assert ComposeCache(commands[1]).read() is None
    assert ComposeCache(commands[2]).read() is not None
    assert not list(cache.glob("*.tmp"))


def test_edited_checking_code_or_plugins_are_a_new_key(cache, tmp_path, monkeypatch):
    composed_and_kept(TINY)
    assert ComposeCache(TINY).read() is not None
    # a checkout whose override check changed: what the old code let through is checked again
    edited = tmp_path / "compose.py"
    edited.write_text(Path(sim.config.compose.__file__).read_text() + "\n# a new check\n")
    sources = compose_cache._checking_sources()
    with monkeypatch.context() as patched:
        patched.setattr(compose_cache, "_checking_sources", lambda: [str(edited), *sources[1:]])
        assert ComposeCache(TINY).read() is None
    assert ComposeCache(TINY).read() is not None
    # Fleetcast's sweeper plugin is a dataclass in the run's Hydra config: editing a plugin is
    # a new key (by its files' sizes and times)
    folders = compose_cache._plugin_folders()
    assert any((Path(f) / "fleetcast_sweeper").is_dir() for f in folders)
    plugins = tmp_path / "hydra_plugins"
    (plugins / "mine").mkdir(parents=True)
    sweeper = plugins / "mine" / "sweeper.py"
    sweeper.write_text("FIELDS = 1\n")
    monkeypatch.setattr(compose_cache, "_plugin_folders", lambda: [*folders, str(plugins)])
    composed_and_kept(TINY)
    assert ComposeCache(TINY).read() is not None
    sweeper.write_text("FIELDS = 12\n")
    assert ComposeCache(TINY).read() is None


def test_a_run_folder_hydra_resolves_is_used_and_not_kept(cache):
    # a run folder naming more than the time: as Hydra resolves it, and composed every time
    command = [*TINY, "hydra.run.dir=runs/${hydra.job.name}/${now:%Y}"]
    composed = composed_and_kept(command)
    assert composed.run_folder() == f"runs/cli/{datetime.now():%Y}"
    assert ComposeCache(command).read() is None
    # the default one is kept, and filled in when read back
    default = composed_and_kept(TINY)
    assert default.run_folder() == default.resolved_run_dir
    kept = ComposeCache(TINY).read()
    assert kept is not None and kept.resolved_run_dir is None
    assert kept.run_folder().startswith(f"outputs/{datetime.now():%Y-%m-%d}/")


def test_what_is_kept_is_the_config_as_composed(cache):
    cache_entry = ComposeCache(TINY)
    composed = cache_entry.compose()
    composed.config["fleet"]["replicas"] = 99  # a run changing its copy
    cache_entry.keep(composed)
    kept = ComposeCache(TINY).read()
    assert kept is not None and kept.config["fleet"]["replicas"] == 1


def test_temporary_files_of_killed_runs_are_removed(cache):
    composed_and_kept(TINY)
    old, fresh = cache / "tmpold.tmp", cache / "tmpfresh.tmp"
    for path in (old, fresh):
        path.write_text("{")
    os.utime(old, (1, 1))
    composed_and_kept([*TINY, "seed=1"])  # a write trims the folder
    assert not old.exists() and fresh.exists()  # a fresh one may be another run's, writing


def test_a_refused_run_keeps_nothing(cache, tmp_path, monkeypatch, capsys):
    # the schema refuses the value after Hydra composed it: the next run checks it again
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        with pytest.raises(SystemExit) as exited:
            main([*TINY, "workload.qps=-1", "output_dir=out"])
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith("error: workload.qps=-1")
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_fleetcast_and_python_m_sim_share_an_entry(cache, tmp_path, monkeypatch):
    # the two spellings of the command start with different sys.path[0]
    key = compose_cache._key(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert compose_cache._key(TINY) == key
