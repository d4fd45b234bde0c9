"""What a report's numbers assume, as one table: the deployment (model, GPU, precisions,
parallelism, scheduler, router), the workload and SLO, the step-time model with its measured
error, the GPU price with its source and date, the Fleetcast versions, and the commands that
produced the inputs and the report.

Everything comes from the inputs' files (``config.yaml``, ``summary.json``), except what a run
folder does not record: a calibrated step time's error is read from its profile (the shipped
one in ``data/profiles/`` matching the deployment, or the file ``step_time.profile`` names),
and the roofline's from docs/explanation/fidelity.md's measurement, quoted below. A value the
files do not give is said to be unknown, never guessed. Policies (scheduler, router) are named
by their config options (``vllm``, ``least_outstanding``), as a user chooses them, not by their
classes.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Mapping
from typing import Any

import sim
from sim.errors import ConfigError
from sim.output.summary_table import _num
from sim.report.document import Table
from sim.resources import config_dir, config_file, data_dir, resolve_path

# docs/explanation/fidelity.md, "How close the roofline alone is": the roofline with its defaults
# against 177 measured TensorRT-LLM serving runs of Llama-3.1-8B on H100-SXM (benchmarks/fidelity.py
# --roofline). Another model or GPU has no measured figure.
ROOFLINE_MEASURED_ERROR = (
    "TTFT 22.3%, TPOT 11.5%, throughput 11.9% mean absolute error on 177 measured TRT-LLM runs "
    "of Llama-3.1-8B on H100-SXM (docs/explanation/fidelity.md); not measured for "
    "other models or GPUs"
)
# a profile's fields and the config keys that must match them (calibrated.py picks it so)
PROFILE_MATCH = {
    "model": ("model", "name"),
    "hardware": ("hardware", "name"),
    "weights_precision": ("precision", "weights"),
    "kv_precision": ("precision", "kv"),
    "backend": ("step_time", "backend"),
}


# A policy is named by the config option a user chooses it by (``scheduler=vllm``), not the
# class it built (``VLLMScheduler``): config.yaml holds the resolved ``_target_``, a plan's
# run folders keep no ``.hydra/`` record of the choice, and a disaggregated run's summary names
# each pool's scheduler by class. Each shipped option of a policy group builds its own class,
# so the option is found again from the class: the file in ``configs/GROUP/`` whose
# ``_target_`` it is. A class no shipped option builds (a user's own) keeps its class name.
@functools.cache
def _options(group: str) -> dict[str, str]:
    """The shipped options of ``group``: each ``_target_`` (and its bare class name) -> the
    option's name; the first file in name order wins should two build one class."""
    found: dict[str, str] = {}
    for path in sorted((config_dir() / group).glob("*.yaml")):
        node = config_file(f"{group}/{path.name}")
        target = node.get("_target_") if isinstance(node, dict) else None
        if isinstance(target, str):
            found.setdefault(target, path.stem)
            found.setdefault(target.rsplit(".", 1)[-1], path.stem)
    return found


def option_name(group: str, target: object) -> str:
    """``vllm`` for ``group`` scheduler and ``target`` ``sim.engine.scheduler.vllm.VLLMScheduler``
    (or ``VLLMScheduler``, as a summary names a pool's scheduler); the class name when no
    shipped option builds it; ``-`` when ``target`` is missing."""
    if not isinstance(target, str) or not target:
        return "-"
    bare = target.rsplit(".", 1)[-1]  # an older module path builds the same class
    options = _options(group)
    return options.get(target) or options.get(bare) or bare


def pools_text(pools: Mapping, name: str) -> str:
    """``1 prefill replica of 1 x H100-SXM (TP 1, weights bf16, scheduler vllm)``: one pool
    of a disaggregated run's summary block (which names its scheduler by class)."""
    pool = pools.get(name) or {}
    return (
        f"{pool.get('replicas', '?')} {name} replica(s) of {pool.get('gpus_per_replica', '?')} x "
        f"{pool.get('gpu', '?')} (TP {pool.get('tp', '?')}, weights {pool.get('weights', '?')}, "
        f"scheduler {option_name('scheduler', pool.get('scheduler'))})"
    )


def _get(config: Mapping, *keys: str) -> Any:
    node: Any = config
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _option(group: str, node: Any) -> str:
    """The config option of ``group`` that built ``node`` (``sim.fleet.router.
    LeastOutstandingRouter`` -> ``least_outstanding``, ``sim.report.choices``)."""
    return option_name(group, _get(node, "_target_") if isinstance(node, Mapping) else None)


def _settings(node: Any, leave_out: tuple[str, ...] = ("_target_",)) -> str:
    """``key=value`` for each setting given (not null), compact JSON for nested values."""
    if not isinstance(node, Mapping):
        return ""
    shown = [
        f"{k}={json.dumps(v, separators=(', ', ': ')) if isinstance(v, (dict, list)) else v}"
        for k, v in node.items()
        if v is not None and k not in leave_out
    ]
    return ", ".join(shown)


def _percent(error: Mapping, key: str = "mape") -> str:
    value = error.get(key)
    return "-" if not isinstance(value, (int, float)) else f"{100 * value:.3g}%"


def calibrated_profile(config: Mapping) -> tuple[str, dict[str, Any] | None]:
    """(where the profile is, its contents or None) for a calibrated step time."""
    given = _get(config, "step_time", "profile")
    if given:
        try:
            path = resolve_path(given, "step_time.profile")
        except ConfigError:
            return str(given), None
        return str(given), json.loads(path.read_text())
    for path in sorted((data_dir() / "profiles").glob("*.json")):
        profile = json.loads(path.read_text())
        if all(profile.get(field) == _get(config, *keys) for field, keys in PROFILE_MATCH.items()):
            return f"shipped:profiles/{path.name}", profile
    return "no shipped profile matches", None


def step_time_text(config: Mapping) -> str:
    """The step-time model and how far off it was measured to be."""
    kind = str(_get(config, "step_time", "_target_") or "").rsplit(".", 2)[-2:-1]
    model = kind[0] if kind else "unknown"
    if model == "calibrated":
        where, profile = calibrated_profile(config)
        if profile is None:
            return f"calibrated, profile {where}: not found here, its error unknown"
        provenance = profile.get("provenance") or {}
        held_out = (profile.get("holdout_error") or {}).get("step_time") or {}
        return (
            f"calibrated, profile {where} ({provenance.get('method', 'method not recorded')}, "
            f"created {provenance.get('created', 'date not recorded')}): held-out step-time "
            f"error {_percent(held_out)} mean, {_percent(held_out, 'max_ape')} at most over "
            f"{held_out.get('rows', '?')} steps"
        )
    if model == "roofline":
        given = _get(config, "step_time", "profile")
        if not given:
            return f"roofline, uncalibrated: {ROOFLINE_MEASURED_ERROR}"
        try:
            terms = json.loads(resolve_path(given, "step_time.profile").read_text())
        except (ConfigError, OSError, ValueError):
            return (
                f"roofline with the terms of {given} (calibrate --bench): not found, error unknown"
            )
        error = terms.get("error") or {}
        part = "held_out" if "held_out" in error else "fit"
        measured = (error.get(part) or {}).get("calibrated") or {}
        figures = ", ".join(f"{m} {_percent(e)}" for m, e in measured.items()) or "none recorded"
        which = "held-out runs" if part == "held_out" else "the fitted runs (none held out)"
        return (
            f"roofline with the terms of {given} (calibrate --bench): error on {which}: {figures}"
        )
    if model in ("linear", "constant"):
        return f"{model} ({_settings(_get(config, 'step_time'))}): given, no measured error"
    return f"{model}: no measured error known"


def price_text(config: Mapping, summary: Mapping) -> str:
    """The $/GPU-hour the run paid, where it came from, and the date of that price."""
    cost = summary.get("cost") or {}
    price, source = cost.get("usd_per_gpu_hour"), cost.get("price_source") or ""
    gpu = _get(config, "hardware", "name")
    listed = _get(config, "cost", "prices", gpu) or {}
    head = f"${price:,.2f}/GPU-hour" if isinstance(price, (int, float)) else "unknown"
    tiers = cost.get("per_tier")
    if isinstance(tiers, Mapping) and tiers:  # a fleet bought at price tiers
        where = listed.get("source", "source not given")
        mix = "; ".join(
            f"{tier}: {row.get('replicas')} replica(s) at ${row.get('usd_per_gpu_hour', 0):,.2f}"
            for tier, row in tiers.items()
            if isinstance(row, Mapping)
        )
        return f"{head} on average ({source}): {mix}; {where}, {listed.get('date', 'undated')}"
    if source.startswith("cost.prices."):
        where = listed.get("source", "source not given")
        return f"{head} ({source}): {where}, {listed.get('date', 'undated')}"
    if source == "cost.usd_per_gpu_hour":
        return f"{head}: given as cost.usd_per_gpu_hour"
    catalog = _get(config, "hardware", "sources", "usd_per_gpu_hour") or "source not given"
    date = str(listed.get("date", "")) if listed.get("on_demand") == price else ""
    dated = f", {date}" if date and date not in catalog else ""
    return f"{head} (hardware.usd_per_gpu_hour): {catalog}{dated}"


def _pools_rows(
    pools: Mapping, placement: Mapping, config: Mapping, summary: Mapping
) -> tuple[str, str, str]:
    """A disaggregated run's fleet, placement and GPU price rows, from its summary block."""
    names = ("prefill", "decode")
    link = pools.get("kv_link") or {}
    fleet = "; ".join(pools_text(pools, name) for name in names)
    placement_text = (
        f"disaggregated prefill/decode; KV over {link.get('name', '?')} "
        f"({_num(link.get('gb_per_s'))} GB/s x {link.get('parallel_links', '?')} link(s), "
        f"{_num(link.get('latency_us'))} us"
        f"{', overlapped layer by layer' if link.get('overlap') else ''}); decode router "
        f"{placement.get('decode_router', '?')}"
    )
    prices = "; ".join(
        f"{name} ${(pools.get(name) or {}).get('usd_per_gpu_hour', 0):,.2f}/GPU-hour "
        f"({(pools.get(name) or {}).get('gpu', '?')})"
        for name in names
    )
    return (
        f"{fleet}; {summary.get('num_gpus', '?')} GPU(s)",
        placement_text,
        f"{prices}; the fleet's mean {price_text(config, summary)}",
    )


def command_text(program: str, overrides: list[str] | None) -> str | None:
    return None if overrides is None else shlex.join([*program.split(), *overrides])


def assumptions_table(
    config: Mapping,
    summary: Mapping,
    produced_by: str | None,
    report_command: str,
    input_version: str | None = None,
    source: str = "",
) -> Table:
    """The table; ``source`` ends its caption: whose config it is."""
    fleet = _get(config, "fleet") or {}
    pp = f" x PP {fleet['pp']}" if (fleet.get("pp") or 1) > 1 else ""
    placement = _get(config, "placement") or {}
    memory = _get(config, "hardware", "memory_gib")
    gpu = f"{_get(config, 'hardware', 'name') or '-'} ({_num(memory)} GiB)"
    precision = _get(config, "precision") or {}
    scheduler = _get(config, "scheduler")
    rows = [
        ["model", str(_get(config, "model", "name") or "-")],
        ["GPU", gpu],
        ["precision", f"weights {precision.get('weights')}, KV {precision.get('kv')}"],
        [
            "fleet",
            f"{fleet.get('replicas', '?')} replica(s), TP {fleet.get('tp', 1)}{pp}, "
            f"{summary.get('num_gpus', '?')} GPU(s)"
            if not summary.get("autoscale")
            else f"{fleet.get('replicas', '?')} replica(s) at the start, TP "
            f"{fleet.get('tp', 1)}{pp}, up to {summary.get('num_gpus', '?')} GPU(s) "
            f"({summary['autoscale'].get('policy', '?')} autoscaling)",
        ],
        ["scheduler", f"{_option('scheduler', scheduler)} ({_settings(scheduler) or 'defaults'})"],
        ["router", _option("router", _get(config, "router"))],
        [
            "KV cache and memory",
            f"{_settings(_get(config, 'kv'))}; {_settings(_get(config, 'memory'))}",
        ],
        ["workload", _settings(_get(config, "workload")) or "-"],
        ["SLO (per request)", _settings(_get(config, "slo")) or "none"],
        ["step-time model", step_time_text(config)],
        ["GPU price", price_text(config, summary)],
        [
            "Fleetcast",
            f"{sim.__version__} (this report)"
            + (f"; inputs by {input_version}" if input_version else ""),
        ],
        [
            "inputs produced by",
            produced_by or "not recorded (config.yaml holds the resolved config)",
        ],
        ["this report", report_command],
    ]
    pools = summary.get("disaggregation")
    if pools:  # the pools as they ran (their GPUs, prices, use), not the config's nulls
        fleet_text, placement_text, prices = _pools_rows(pools, placement, config, summary)
        for row in rows:
            row[1] = {"fleet": fleet_text, "GPU price": prices}.get(row[0], row[1])
        rows.insert(4, ["placement", placement_text])
    elif placement.get("mode", "single") != "single":
        rows.insert(4, ["placement", _settings(placement)])
    if (_get(config, "frontend", "token_s") or 0) > 0:
        rows.insert(5, ["frontend", _settings(_get(config, "frontend"))])
    return Table(["assumption", "value"], rows, f"What the figures assume{source}.")
