"""The run summary as a table people can read at a glance (printed by ``fleetcast run``)."""

from __future__ import annotations

from collections.abc import Mapping


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
    lines = [
        f"Fleetcast: {model} on {replicas} x {per_replica} {gpu} "
        f"({gpus}), weights {prec['weights']}, KV {prec['kv']}, "
        f"scheduler {sched}, router {router}, step time {step_time}"
        + _placement(cfg.get("placement") or {}),
        f"requests: {summary['num_requests']:,} ({summary['completed']:,} completed, "
        f"{summary['rejected']:,} rejected, {summary['unfinished']:,} unfinished), "
        f"{summary['num_preemptions']:,} preemptions, {summary['duration_s']:.1f} s simulated",
        *(
            f"rejected:   {count:,} {reason}: {(rejection_texts or {}).get(reason, '')}".rstrip(
                ": "
            )
            for reason, count in (summary.get("rejected_by_reason") or {}).items()
        ),
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
    lines += [
        "",
        f"throughput: {_num(t['requests_per_s'])} req/s, {_num(t['output_tokens_per_s'])} "
        f"output tok/s, {_num(t['total_tokens_per_s'])} total tok/s",
        f"goodput:    {_num(good)} req/s meeting SLO ({bounds}){share}",
        f"KV cache:   {summary['kv_capacity_tokens']:,} tokens per "
        f"{'decode replica' if summary.get('disaggregation') else 'replica'}, "
        f"mean use {_num(kv['mean'] and 100 * kv['mean'])}%, "
        f"peak {_num(kv['max'] and 100 * kv['max'])}%",
        f"cost:       ${cost['usd_per_hour']:,.2f}/hour, "
        f"${_num(cost['usd_per_million_output_tokens'])} per million output tokens",
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
    lines += _pool_lines(summary.get("disaggregation"))
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


def _pool_lines(pools: Mapping | None) -> list[str]:
    """A disaggregated fleet's pools, one line each, and its KV transfers."""
    if not pools:
        return []
    lines = [
        f"{name + ' pool:':<14}{p['replicas']} x {p['gpus_per_replica']} {p['gpu']}, "
        f"weights {p['weights']}, {p['scheduler']}, busy {_num(p['gpu_busy_fraction'])}, "
        f"KV use mean {_num(p['kv_utilization']['mean'])} peak {_num(p['kv_utilization']['max'])}"
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
