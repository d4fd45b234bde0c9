"""Names older Fleetcast versions wrote into a run's config.yaml, and what they are called now.

A run folder's ``config.yaml`` is the resolved config of its run, and two things in it name code
or files by location: every policy's ``_target_`` (``sim.scheduler.vllm.VLLMScheduler`` before
the package was split into ``sim/engine``, ``sim/fleet``, ...), and the shipped traces (``path:
data/traces/...`` before they became package data, ``shipped:traces/...``). Groups added later
(``output``) are missing from older configs; they ran as the group's defaults say, and so are
keys added to a group since (``ADDED_KEYS``). Run folders written then must keep working: a
resumed sweep must recognise its finished jobs, ``fleetcast collect`` must not see a changed
``_target_`` as a swept key, and an old config must still build. So every comparison of configs
and every ``_target_`` lookup goes through ``canonical_run_config`` / ``canonical_config`` /
``canonical_target`` first. Nothing here rewrites files on disk.
"""

from __future__ import annotations

from typing import Any

from sim.resources import legacy_shipped

# Old module prefix -> new one (the class names did not change).
TARGET_PREFIXES = {
    "sim.scheduler.": "sim.engine.scheduler.",
    "sim.step_time.": "sim.engine.step_time.",
    "sim.router.": "sim.fleet.router.",
}
# Config keys that name a data file (a trace, an empirical length distribution, a profile).
PATH_KEYS = ("path", "profile")


def canonical_target(target: str) -> str:
    """The current ``_target_`` for a (possibly older) one."""
    for old, new in TARGET_PREFIXES.items():
        if target.startswith(old):
            return new + target.removeprefix(old)
    return target


# Groups added since, with the settings that reproduce what runs did before them.
ADDED_GROUPS: dict[str, dict[str, Any]] = {
    "output": {"steps": "full", "step_bucket_s": 60.0},
    # configs/autoscale/default.yaml: off, a fixed fleet as every run before it
    "autoscale": {
        "policy": "none",
        "target": None,
        "tolerance": 0.1,
        "interval_s": 15,
        "scale_down_window_s": 300,
        "provision_s": 240,
        "min_replicas": 1,
        "max_replicas": 64,
        "schedule": None,
        "engines": {},
    },
    # configs/spec_decode/default.yaml: off, every decode one token as before it
    "spec_decode": {
        "num_draft_tokens": 0,
        "acceptance_rate": 0.8,
        "method": "mtp",
        "draft_model": None,
        "draft_cost": None,
    },
    # configs/faults/default.yaml: off, every replica serving the whole run
    "faults": {
        "gpu_mtbf_h": None,
        "repair": "exponential",
        "repair_h": 4.0,
        "on_failure": "retry",
        "schedule": [],
        "maintenance": [],
        "spot": [],
    },
}
# Keys added to a group since, likewise (a trace workload's keys only where kind is trace).
ADDED_KEYS: dict[tuple[str, str], Any] = {
    ("kv", "prefix_caching"): False,
    ("kv", "cpu_offload_gib"): 0.0,
    # configs/faults/default.yaml: no random spot reclaims, as before them
    ("faults", "spot_reclaims_per_h"): None,
    ("faults", "spot_notice_s"): 120.0,
    ("faults", "spot_replace_s"): None,
}
# Keys read only while an option is on, left out of the comparison while it is off (a run from
# before such a key, or with its option off, ran the same whatever the key's value).
OPTION_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("hardware", "host_link_gbps"): ("kv", "cpu_offload_gib"),
}
ADDED_TRACE_KEYS: dict[str, Any] = {"hash_block_tokens": None}
# a daily workload's keys added since (sim.workload.day), as runs before them had them
ADDED_DAILY_KEYS: dict[str, Any] = {"profile_trace": None, "periods": None, "lengths_trace": None}


def canonical_run_config(config: dict[str, Any]) -> dict[str, Any]:
    """A whole run's config made current: older spellings, and the groups it predates filled
    in as it ran (``ADDED_GROUPS``)."""
    current = canonical_config(config)
    for group, settings in ADDED_GROUPS.items():
        current.setdefault(group, dict(settings))
    for (group, key), value in ADDED_KEYS.items():
        if isinstance(current.get(group), dict):
            current[group].setdefault(key, value)
    for (group, key), (option_group, option) in OPTION_KEYS.items():
        settings = current.get(option_group)
        if isinstance(current.get(group), dict) and not (
            isinstance(settings, dict) and settings.get(option)
        ):
            current[group].pop(key, None)
    workload = current.get("workload")
    if isinstance(workload, dict) and workload.get("kind") in ("trace", "daily"):
        added = ADDED_TRACE_KEYS if workload["kind"] == "trace" else ADDED_DAILY_KEYS
        for key, value in added.items():
            workload.setdefault(key, value)
    return current


def canonical_config(node: Any) -> Any:
    """A copy of a plain config (dicts, lists, scalars) with older spellings made current."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                out[key] = canonical_target(value)
            elif key in PATH_KEYS and isinstance(value, str):
                out[key] = legacy_shipped(value) or value
            else:
                out[key] = canonical_config(value)
        return out
    if isinstance(node, list):
        return [canonical_config(v) for v in node]
    return node
