"""Resuming a sweep: does a job's folder already hold exactly the run this job would make?

Running a sweep command again completes only the missing jobs: a job whose folder holds a
finished run (``summary.json``, written last) of the same config is skipped. Configs are compared
without their presentation keys (where the files go, whether a progress bar shows) and after
``sim.config.legacy`` has made older spellings current, so a sweep started by an older Fleetcast
is still recognised; a ``model=hf`` run's model fields read from its config.json count as asked.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.config.legacy import canonical_run_config
from sim.output.run_files import CONFIG_FILE, SUMMARY_FILE

# Keys that say where a run's files go or how it reports progress, not what it simulates: a
# resumed sweep may spell the folder differently (relative, absolute, trailing slash).
PRESENTATION_KEYS = ("output_dir", "sim.progress")


def simulated_config(config: dict) -> dict:
    """``config`` without its presentation keys."""
    config = {**config, "sim": dict(config.get("sim") or {})}
    for key in PRESENTATION_KEYS:
        node, _, leaf = key.rpartition(".")
        (config[node] if node else config).pop(leaf, None)
    return config


def job_status(job_dir: Path, resolved_config: dict) -> str:
    """``complete`` when ``job_dir`` already holds a finished run of this config (its
    presentation keys aside), else ``todo``. A run is finished once its summary.json exists
    (it is written last)."""
    summary, config = job_dir / SUMMARY_FILE, job_dir / CONFIG_FILE
    if not summary.exists() or not config.exists():
        return "todo"
    try:
        done = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError):
        return "todo"
    if not isinstance(done, dict):
        return "todo"
    asked = _with_derived_model(resolved_config, done)
    same = canonical_run_config(simulated_config(done)) == canonical_run_config(
        simulated_config(asked)
    )
    return "complete" if same else "todo"


def _with_derived_model(asked: dict, done: dict) -> dict:
    """``asked`` with the model fields it leaves to a config.json (``model=hf``: null) taken
    from ``done``: a run records the values it read from the file in its config.yaml. (The
    file's content is not compared, as a trace's is not.)"""
    model, done_model = asked.get("model"), done.get("model")
    if not isinstance(model, dict) or model.get("config_path") is None:
        return asked
    if not isinstance(done_model, dict):
        return asked
    filled = {k: done_model.get(k) if v is None else v for k, v in model.items()}
    return {**asked, "model": filled}
