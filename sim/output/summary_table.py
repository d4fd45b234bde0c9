"""The run summary as a table people can read at a glance (printed by ``fleetcast run``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sim.engine.step_time.bench_profile import BenchProfile
from sim.engine.step_time.profile import Profile, profile_file_name, shipped_profile_dir
from sim.errors import ConfigError
from sim.output.cost import split_by_pool
from sim.output.model_error import band_text
from sim.resources import resolve_path


def _num(x: float | None, digits: int = 3) -> str:
    """``digits`` significant digits; thousands with separators; "-" for a missing value."""
    if x is None:
        return "-"
    # decided on the rounded value: 999.7 rounds to 1000 and is printed as 1,000, not 1e+03
    if abs(float(f"{x:.{digits}g}")) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _placement(node: Mapping) -> str:
    mode = node.get("mode", "single")
    if mode == "single":
        return ""
    if mode == "disaggregated":
        return ", disaggregated prefill/decode"
    return f", {node['mode']} with {node['second_model']} ({node['traffic_share']:.0%} of requests)"


def _model_error_lines(block: Mapping | None) -> list[str]:
    """``output.model_error=true``: the step-time model's error band, and where it came
    from."""
    if not block:
        return []
    band = block.get("band")
    if band is None:
        return [f"model error: {block.get('note')}"]
    return [
        f"model error: {band['quantity']} p50 x{band['p50']:.3g}, p90 x{band['p90']:.3g}; "
        f"{band_text(band)}"
    ]


def format_summary(
    summary: Mapping,
    cfg: Mapping,
    output_dir: str | None = None,
    choices: Mapping | None = None,
    rejection_texts: Mapping[str, str] | None = None,
) -> str:
    """The summary table; ``choices`` are Hydra's group choices (names the policies);
    ``rejection_texts`` says what each rejection reason means for this fleet (one line each
    when requests were rejected)."""
    model = cfg["model"]["name"]
    gpu = cfg["hardware"]["name"]
    fleet = cfg["fleet"]
    prec = cfg["precision"]
    choices = choices or {}
    sched = choices.get("scheduler") or cfg["scheduler"]["_target_"].rsplit(".", 1)[-1]
    router = choices.get("router") or cfg["router"]["_target_"].rsplit(".", 1)[-1]
    step_time = choices.get("step_time") or cfg["step_time"]["_target_"].rsplit(".", 1)[-1]
    gpus = f"{summary['num_gpus']} GPU{'s' if summary['num_gpus'] != 1 else ''}"
    per_replica = f"{fleet['tp']}"
    if (fleet.get("pp") or 1) > 1:  # TP x PP, as deployments are named
        per_replica = f"({fleet['tp']} TP x {fleet['pp']} PP)"
    replicas = f"{fleet['replicas']} replica(s)"
    scaled = summary.get("autoscale")
    if scaled is not None:  # the fleet changed: its range, and the peak's GPUs
        replicas = (
            f"{scaled['replicas_min']}-{scaled['replicas_max']} autoscaled replica(s) "
            f"(mean {scaled['replicas_mean']:.2f})"
        )
        gpus = f"peak {gpus}"
    source = _step_time_source(cfg)
    lines = [
        f"Fleetcast: {model} on {replicas} x {per_replica} {gpu} "
        f"({gpus}), weights {prec['weights']}, KV {prec['kv']}, "
        f"scheduler {sched}, router {router}, step time {step_time}"
        + _placement(cfg.get("placement") or {}),
        *([f"step time:  {source}"] if source else []),
        *_model_error_lines(summary.get("model_error")),
        f"requests: {summary['num_requests']:,} ({summary['completed']:,} completed, "
        f"{summary['rejected']:,} rejected, {summary['unfinished']:,} unfinished"
        + (f", {summary['failed']:,} failed" if "failed" in summary else "")
        + "), "
        f"{summary['num_preemptions']:,} preemptions, {summary['duration_s']:.1f} s simulated",
        *(
            f"rejected:   {count:,} {reason}: {(rejection_texts or {}).get(reason, '')}".rstrip(
                ": "
            )
            for reason, count in (summary.get("rejected_by_reason") or {}).items()
        ),
        *_faults_lines(summary.get("faults")),
        *_stability_lines(summary.get("stability")),
        "",
        f"{'latency (s)':<28}{'mean':>9}{'p50':>9}{'p90':>9}{'p95':>9}{'p99':>9}"
        + (
            "   (unstable: these grow with the run's length)"
            if (summary.get("stability") or {}).get("verdict") == "unstable"
            else ""
        ),
    ]
    rows = (
        ("TTFT", "ttft_s"),
        ("TPOT (vLLM)", "tpot_s"),
        ("ITL (LLMPerf, e2e/out)", "itl_s"),
        ("E2E", "e2e_s"),
        ("queueing delay", "queueing_delay_s"),
    )
    for label, key in rows:
        d = summary[key]
        lines.append(
            f"{label:<28}"
            + "".join(f"{_num(d[k]):>9}" for k in ("mean", "p50", "p90", "p95", "p99"))
        )
    t = summary["throughput"]
    slo = summary["slo"]
    bounds = (
        ", ".join(f"{k.removesuffix('_s')} <= {v:g} s" for k, v in slo.items() if v is not None)
        or "none"
    )
    good = summary["goodput_requests_per_s"]
    share = (
        f" ({good / t['requests_per_s']:.0%} of completed)"
        if good is not None and t["requests_per_s"]
        else ""
    )
    kv = summary["kv_utilization"]
    cost = summary["cost"]
    pools = summary.get("disaggregation")
    lines += [
        "",
        f"throughput: {_num(t['requests_per_s'])} req/s, {_num(t['output_tokens_per_s'])} "
        f"output tok/s, {_num(t['total_tokens_per_s'])} total tok/s",
        f"goodput:    {_num(good)} req/s meeting SLO ({bounds}){share}",
        f"KV cache:   {summary['kv_capacity_tokens']:,} tokens per "
        f"{'decode replica' if pools else 'replica'}, "
        f"mean use {_percent(kv['mean'])}%, peak {_percent(kv['max'])}%",
        *_prefix_cache_lines(summary.get("prefix_cache")),
        f"cost:       ${cost['usd_per_hour']:,.2f}/hour, "
        + (
            _pool_cost(pools, t)
            if pools
            else f"${_num(cost['usd_per_million_output_tokens'])} per million output tokens"
        ),
        *(
            [
                "            (all of the bill over the output tokens, as a fleet without pools "
                f"is quoted: ${_num(cost['usd_per_million_output_tokens'])} per million)"
            ]
            if pools
            else []
        ),
        *_tier_lines(cost.get("per_tier")),
    ]
    if scaled is not None:
        engines = scaled.get("engines") or {}
        if set(engines) - {"base"}:  # seasonal engines: say what each one was
            lines.append(
                "engines:    "
                + "; ".join(
                    f"{name}: {e['gpus_per_replica']} x {e['gpu']}, weights {e['weights']}, "
                    f"KV {e['kv']}, {e['kv_capacity_tokens']:,} KV tokens"
                    for name, e in engines.items()
                )
            )
        lines.append(
            f"autoscale:  {scaled['policy']}, {scaled['gpu_hours']:,.2f} GPU-hours, "
            f"${scaled['usd_total']:,.2f} in all, {scaled['scale_ups']} replica(s) added, "
            f"{scaled['scale_downs']} removed ({scaled['provision_s']:g} s to provision)"
        )
    lines += _pool_lines(pools, cfg.get("placement") or {}, sched)
    lines += _spec_decode_lines(summary.get("spec_decode"))
    if output_dir:
        lines.append(f"files:      {output_dir}")
    return "\n".join(lines)


def _spec_decode_lines(spec: Mapping | None) -> list[str]:
    """Speculative decoding in one line (``sim.deploy.speculation``), none when it was off."""
    if not spec:
        return []
    drafter = spec["draft_model"] or spec["method"]
    rate = spec["acceptance_rate"]
    rate = "/".join(f"{a:g}" for a in rate) if isinstance(rate, list) else f"{rate:g}"
    share = spec["drafter_time_share"]
    return [
        f"speculative: {spec['num_draft_tokens']} drafts ({drafter}, acceptance {rate}), "
        f"{_num(spec['tokens_per_decode_step'])} tokens per decode step "
        f"(expected {_num(spec['expected_tokens_per_decode_step'])}), "
        f"drafter {_num(share and 100 * share)}% of step time"
        + (
            " (the draft model priced like the target: the step-time model's figures are"
            " given, not per model; set spec_decode.draft_cost)"
            if spec.get("draft_model_priced_like_target")
            else ""
        )
    ]


def _percent(share: float | None) -> str:
    """A share as a percentage, 3 significant digits (``_num``); "-" for a missing one."""
    return _num(share and 100 * share)


def _prefix_cache_lines(cache: Mapping | None) -> list[str]:
    """The prefix cache's hits (``sim.output.results.prefix_cache_summary``), none when it was
    off: the share of the prompt tokens looked up that were found cached, and the evictions."""
    if not cache:
        return []
    line = (
        f"prefix cache: {_percent(cache['hit_rate_tokens'])}% of prompt tokens found cached "
        f"({cache['hit_tokens']:,} of {cache['looked_up_tokens']:,} looked up), "
        f"{cache['evicted_blocks']:,} blocks evicted"
    )
    if "host_hit_tokens" in cache:  # a host-memory tier: its part of the hits
        line += (
            f"; host tier: {cache['host_hit_tokens']:,} of the hit tokens, "
            f"{cache['host_stored_blocks']:,} blocks stored, {cache['host_loaded_blocks']:,} loaded"
        )
    return [line]


def _faults_lines(faults: Mapping | None) -> list[str]:
    """A fleet with faults: availability, the events, the requests retried and failed, and
    the TTFT p99 while degraded (none without faults)."""
    if faults is None:
        return []
    failed = faults["failed_by_reason"]
    ttft = faults["degraded"]["ttft_s"]["p99"]
    return [
        f"faults:     availability {_percent(faults['availability'])}%, "
        f"{faults['failures']} failure(s), {faults['maintenance']} maintenance drain(s), "
        f"{faults['spot_reclaims']} spot reclaim(s); {faults['requests_retried']:,} request(s) "
        f"retried ({faults['retry_lost_s']:,.1f} s lost), {faults['failed']:,} failed"
        + (" (" + ", ".join(f"{n:,} {r}" for r, n in failed.items()) + ")" if failed else "")
        + f"; degraded {faults['degraded_s']:,.1f} s, TTFT p99 then {_num(ttft)} s"
    ]


def _tier_lines(per_tier: Mapping | None) -> list[str]:
    """A fleet bought at price tiers: each tier's replicas, price and bill (none without)."""
    if not per_tier:
        return []
    return [
        "tiers:      "
        + "; ".join(
            f"{tier} {row['replicas']} replica(s), {row['gpus']} GPU(s) x "
            f"${row['usd_per_gpu_hour']:,.2f}/GPU-hour = ${row['usd_per_hour']:,.2f}/hour"
            for tier, row in per_tier.items()
        )
    ]


def _pool_cost(pools: Mapping, throughput: Mapping) -> str:
    """A disaggregated fleet's unit costs, its bill split by pool (``sim.output.cost``)."""
    out_per_s = throughput["output_tokens_per_s"]
    in_per_s = (
        throughput["total_tokens_per_s"] - out_per_s
        if throughput["total_tokens_per_s"] is not None and out_per_s is not None
        else None
    )
    prefill, decode = pools["prefill"]["usd_per_hour"], pools["decode"]["usd_per_hour"]
    per_input, per_output = split_by_pool(prefill, decode, in_per_s, out_per_s)
    return (
        f"${_num(per_input)} per million input tokens (the prefill pool's "
        f"${prefill:,.2f}/hour over them), ${_num(per_output)} per million output tokens "
        f"(the decode pool's ${decode:,.2f}/hour over them)"
    )


def _pool_lines(pools: Mapping | None, placement: Mapping, scheduler: str) -> list[str]:
    """A disaggregated fleet's pools, one line each, and its KV transfers; each pool's
    scheduler by its config name (``placement.POOL.scheduler``, else the run's ``scheduler``)."""
    if not pools:
        return []
    lines = [
        f"{name + ' pool:':<14}{p['replicas']} x {p['gpus_per_replica']} {p['gpu']}, "
        f"weights {p['weights']}, "
        f"scheduler {(placement.get(name) or {}).get('scheduler') or scheduler}, "
        f"busy {_percent(p['gpu_busy_fraction'])}%, KV use mean "
        f"{_percent(p['kv_utilization']['mean'])}% peak {_percent(p['kv_utilization']['max'])}%"
        f", ${p['usd_per_hour']:,.2f}/hour"
        for name, p in ((n, pools[n]) for n in ("prefill", "decode"))
    ]
    link, moved, wait = pools["kv_link"], pools["transfer_s"], pools["transfer_wait_s"]
    lines.append(
        f"KV transfer: {pools['transfers']:,} over {link['name']} "
        f"({_num(link['gb_per_s'])} GB/s x {link['parallel_links']}"
        f"{', overlapped' if link['overlap'] else ''}): p50 {_num(moved['p50'])} s, "
        f"p99 {_num(moved['p99'])} s; first token to transfer start p50 {_num(wait['p50'])} s, "
        f"p99 {_num(wait['p99'])} s"
    )
    return lines


def _stability_lines(stability: dict | None) -> list[str]:
    """The verdict and its evidence (``sim.output.stability``), after a blank line; none for
    a summary written before runs had one."""
    if not stability:
        return []
    capacity = stability.get("service_capacity_requests_per_s")
    offered = stability.get("offered_requests_per_s")
    load = (
        f"; offered {_num(offered)} req/s against a capacity of {_num(capacity)} req/s"
        if capacity and offered
        else ""
    )
    return ["", f"stability:  {stability['verdict']} ({stability['reason']}){load}"]


def _step_time_source(cfg: Mapping) -> str | None:
    """Where the step-time model's figures come from, where a file gives them: the roofline's
    terms fitted to benchmarks (``step_time.profile``, ``fleetcast calibrate --bench``), or a
    calibrated model's profile (given, or the shipped one for the deployment). None for a model
    whose figures are its config's (the roofline's defaults, a linear or constant model)."""
    node = cfg.get("step_time") or {}
    target, given = str(node.get("_target_", "")), node.get("profile")
    if target.endswith(".RooflineStepTime") and given:
        return f"roofline with the terms fitted in {given}{_bench_provenance(given)}"
    if not target.endswith(".CalibratedStepTime"):
        return None
    if given:
        return f"calibrated, the profile {given}{_profile_provenance(given)}"
    prec = cfg["precision"]
    name = profile_file_name(
        cfg["model"]["name"],
        cfg["hardware"]["name"],
        prec["weights"],
        prec["kv"],
        node.get("backend", "vllm"),
    )
    return f"calibrated, the shipped profile {name}" + _profile_provenance(
        shipped_profile_dir() / name
    )


def _bench_provenance(given: str) -> str:
    """What a bench profile was fitted on, and its error on the runs it held out (or, with none
    held out, on those it fitted), in parentheses; "" where the file cannot be read now."""
    try:
        profile = BenchProfile.load(resolve_path(given, "step_time.profile"))
    except (ConfigError, OSError):
        return ""
    files = list(dict.fromkeys(Path(str(run.get("file", "?"))).name for run in profile.runs))
    held_out = sum(bool(run.get("held_out")) for run in profile.runs)
    said = [
        f"fleetcast calibrate --bench on {len(profile.runs)} benchmark run(s), "
        f"{held_out} held out: {', '.join(files)}"
    ]
    part = "held_out" if "held_out" in profile.error else "fit"
    errors = (profile.error.get(part) or {}).get("calibrated") or {}
    shown = [
        f"{label} {100 * errors[metric]['mape']:.1f}%"
        for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"))
        if metric in errors
    ]
    if shown:
        where = "held-out" if part == "held_out" else "fitted"
        said.append(f"error on the {where} runs {', '.join(shown)}")
    if profile.provenance.get("created"):
        said.append(f"created {profile.provenance['created']}")
    return f" ({'; '.join(said)})"


def _profile_provenance(path: str | Path) -> str:
    """How a calibrated profile was made and from which files, in parentheses; "" where the file
    cannot be read now."""
    try:
        provenance = Profile.load(resolve_path(str(path), "step_time.profile")).provenance
    except (ConfigError, OSError):
        return ""
    sources = [str(s.get("path", "?")) for s in provenance.get("sources") or []]
    said = [f"{provenance.get('method', 'fitted')}: {', '.join(sources)}" if sources else ""]
    if provenance.get("created"):
        said.append(f"created {provenance['created']}")
    return f" ({'; '.join(x for x in said if x)})" if any(said) else ""
