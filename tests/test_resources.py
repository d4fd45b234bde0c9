"""Where shipped configs and data are found (``sim.resources``): through the package, from any
directory, never shadowed by the current directory; a user's relative path is relative to the
current directory."""

import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.errors import ConfigError
from sim.resources import config_dir, data_dir, resolve_path
from sim.workload.traces import load_trace
from tests.support import REPO_ROOT

AZURE_CONV = "shipped:traces/azure_llm_2023_conv.parquet"


def _tiny_trace(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "arrival_time_s": [0.0, 1.0, 2.0],
                "prompt_tokens": [5, 6, 7],
                "output_tokens": [1, 2, 3],
            }
        ),
        path,
    )


def test_configs_and_data_are_the_checkouts_in_an_editable_install():
    assert config_dir() == REPO_ROOT / "configs"
    assert data_dir() == REPO_ROOT / "data"
    assert (config_dir() / "config.yaml").is_file()


def test_a_shipped_trace_is_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_trace(AZURE_CONV).num_requests == 19_366


def test_a_file_in_the_current_directory_never_shadows_a_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny_trace(tmp_path / "traces" / "azure_llm_2023_conv.parquet")
    _tiny_trace(tmp_path / "shipped:traces" / "azure_llm_2023_conv.parquet")
    assert load_trace(AZURE_CONV).num_requests == 19_366


def test_a_relative_path_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    _tiny_trace(tmp_path / "mine" / "t.parquet")
    monkeypatch.chdir(tmp_path)
    assert load_trace("mine/t.parquet").num_requests == 3
    assert resolve_path("mine/t.parquet", "workload.path") == tmp_path / "mine" / "t.parquet"
    monkeypatch.chdir(tmp_path / "mine")
    assert load_trace("t.parquet").num_requests == 3
    with pytest.raises(ConfigError, match=r"^workload\.path='mine/t\.parquet': file not found"):
        load_trace("mine/t.parquet")


def test_the_old_repository_relative_spelling_still_finds_a_shipped_file(tmp_path, monkeypatch):
    """``data/traces/...`` was how configs named shipped traces: an old run's config.yaml still
    runs from anywhere. It stays an ordinary relative path first: a file of the user's at that
    path wins, and a name Fleetcast does not ship is not found, with a hint."""
    monkeypatch.chdir(tmp_path)
    assert load_trace("data/traces/azure_llm_2023_conv.parquet").num_requests == 19_366
    _tiny_trace(tmp_path / "data" / "traces" / "azure_llm_2023_conv.parquet")
    assert load_trace("data/traces/azure_llm_2023_conv.parquet").num_requests == 3
    with pytest.raises(ConfigError) as err:
        load_trace("data/traces/mine.parquet")
    message = str(err.value)
    assert message.startswith("workload.path='data/traces/mine.parquet': file not found")
    assert "shipped:<path>" in message and "\n" not in message


def test_an_unknown_shipped_name_lists_what_is_shipped():
    with pytest.raises(ConfigError) as err:
        resolve_path("shipped:traces/nope.parquet", "workload.path")
    message = str(err.value)
    assert message.startswith("workload.path='shipped:traces/nope.parquet': no such shipped file")
    assert AZURE_CONV in message and "\n" not in message


def test_a_folder_is_asked_for_as_a_folder(tmp_path):
    assert (
        resolve_path("shipped:calibration", "calibrate.kernels", kind="folder")
        == (data_dir() / "calibration").resolve()
    )
    with pytest.raises(ConfigError, match="folder not found"):
        resolve_path(str(tmp_path / "none"), "calibrate.kernels", kind="folder")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "file")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        resolve_path(str(tmp_path / "file"), "calibrate.kernels", kind="folder")


def _folders_seen(checkout, cwd, *, without_install=False):
    """What config_dir() and data_dir() answer in a fresh interpreter importing ``sim`` from
    ``checkout`` in ``cwd``; ``without_install`` removes the editable install's import hook."""
    hide = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
        "if 'editable' not in str(getattr(f, '__module__', '')).lower()]; "
        "import importlib.util; assert importlib.util.find_spec('sim.configs') is None; "
        if without_install
        else ""
    )
    code = hide + "from sim.resources import config_dir, data_dir; print(config_dir(), data_dir())"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_checkout_that_was_never_installed_finds_its_folders_beside_the_package(tmp_path):
    # sim.configs cannot be imported at all: the folders beside sim/ are used, not the cwd's
    seen = _folders_seen(REPO_ROOT, tmp_path, without_install=True)
    assert seen == [str(REPO_ROOT / "configs"), str(REPO_ROOT / "data")]


def test_another_checkout_uses_its_own_configs_and_data(source_copy, tmp_path):
    # This environment has Fleetcast installed from REPO_ROOT (editable); code imported from
    # another checkout (a worktree, a branch) must not mix with REPO_ROOT's configs and data.
    seen = _folders_seen(source_copy, tmp_path)
    assert seen == [str(source_copy / "configs"), str(source_copy / "data")]
