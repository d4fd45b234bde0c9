"""The simulations of a plan, each run once: composed from the plan's overrides and cached in
the plan folder's ``runs/`` under a hash of its resolved config and the Fleetcast version, so
a rerun into the same folder resumes and a changed config default or catalog entry is
simulated anew (a trace file's content is not in the hash)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import sim


class Simulations:
    """Runs one point's replication (composing its config), cached in the plan folder."""

    def __init__(self, base: list[str], folder: Path, seed: int) -> None:
        self.base = base
        self.folder = folder / "runs"
        self.seed = seed

    def overrides(self, candidate: list[str], replicas: int, replication: int) -> list[str]:
        return [
            *self.base,
            *candidate,
            f"fleet.replicas={replicas}",
            f"seed={self.seed + replication}",
            "sim.progress=false",
            "output_dir=null",
        ]

    def summary(self, candidate: list[str], replicas: int, replication: int) -> dict[str, Any]:
        from sim.config.compose import compose_config
        from sim.run import simulate

        overrides = self.overrides(candidate, replicas, replication)
        cfg = compose_config(overrides)
        # the resolved config and this Fleetcast: a changed catalog entry, config default or
        # version is a new simulation, never a stale one (a trace file's content is not hashed)
        identity = json.dumps([cfg, sim.__version__], sort_keys=True, default=str)
        key = hashlib.sha256(identity.encode()).hexdigest()[:24]
        path = self.folder / f"{key}.json"
        if path.is_file():
            return json.loads(path.read_text())["summary"]
        summary = simulate(cfg).summary
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        tmp.write_text(json.dumps({"overrides": overrides, "summary": summary}))
        tmp.replace(path)
        return summary
