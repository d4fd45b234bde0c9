"""KV-cache use and running requests over a run, from ``steps.parquet``.

The KV cache bounds how many requests run at once, so its fill over time says whether a fleet
was memory-bound (near full, with preemptions) or had room to spare. A step row holds the
blocks in use and the sequences in the batch of one replica's step (``sim.output.step_log``);
the report bins them over the run:

- ``kv_mean``: the fleet's KV use averaged over time in the bin and over the replicas serving
  then, each replica's blocks in use over its pool, weighted by step duration (a replica idle
  for part of a bin holds nothing then);
- ``kv_peak``: the fullest any replica's pool was in the bin;
- ``running_mean``: the requests in a replica's batch, averaged over time in the bin and over
  the replicas serving then;
- ``running_peak``: the largest batch of any replica in the bin.

The replicas serving: a fixed fleet's ``num_replicas``; for a fleet that scaled, those ready
or draining (the ones that run steps) at each moment, from ``scaling.parquet``, averaged over
the bin (``serving_replicas``): the summary's ``num_replicas`` is then the peak, and dividing
by it would understate the use whenever the fleet was smaller. Without the table, the
replicas with a step in the bin stand for them.

A replica's pool is the summary's ``kv_capacity_tokens`` (per model) over ``kv.block_size``:
the run's own engine configuration. A run that switches engine configurations
(``autoscale.engines``) has replicas with other pools, which its files do not give per
replica, so its KV share is left out and only the running requests are drawn.

With ``output.steps=bucketed`` each row is already a bucket that keeps only the peaks of
``num_seqs`` and ``kv_blocks_used``: the means are not known, and only the peaks are drawn.
With ``output.steps=none`` there are no rows and no figure.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from sim.report.document import Figure
from sim.report.plotting import drawing, hours_or_seconds

COLUMNS = ["replica_id", "start_time_s", "duration_s", "num_seqs", "kv_blocks_used", "model_id"]
BINS = 400  # points per line: finer than a figure's pixels are wasted


def pool_blocks(summary: Mapping, config: Mapping) -> dict[int, float] | None:
    """KV blocks of one replica's pool per model id (``kv_capacity_tokens`` over
    ``kv.block_size``); None when the summary does not say."""
    block = (config.get("kv") or {}).get("block_size")
    per_model = summary.get("kv_capacity_tokens_per_model") or [summary.get("kv_capacity_tokens")]
    if not block or not per_model or any(not t for t in per_model):
        return None
    return {i: tokens / block for i, tokens in enumerate(per_model)}


def time_average(
    start: np.ndarray, end: np.ndarray, values: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """The sum over rows of ``values`` held from ``start`` to ``end``, averaged over each
    interval between consecutive ``edges``: exact, whatever the rows straddle.

    The integral of the sum is piecewise linear, its slope rising by a row's value at its start
    and falling at its end, so it is known exactly at every start and end and interpolating it
    at the edges loses nothing."""
    times = np.concatenate([start, end])
    order = np.argsort(times, kind="stable")
    times = times[order]
    slope = np.cumsum(np.concatenate([values, -values])[order])
    area = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(times))])
    return np.diff(np.interp(edges, times, area)) / np.diff(edges)


def serving_replicas(scaling: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """The replicas serving (ready or draining: those that run steps), averaged over time in
    each interval between consecutive ``edges``; each row of ``scaling.parquet`` holds until
    the next, the last one past the final edge."""
    rows = scaling.sort_values("time_s", kind="stable")
    times = rows["time_s"].to_numpy(float)
    count = (rows["replicas_ready"] + rows["replicas_draining"]).to_numpy(float)
    until = np.append(times[1:], max(float(edges[-1]), float(times[-1])))
    return time_average(times, until, count, edges)


def stepping_replicas(
    replica: np.ndarray, start: np.ndarray, end: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """The replicas with a step in each interval between consecutive ``edges`` (a step counts
    in every interval it overlaps)."""
    n = len(edges) - 1
    first = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, n - 1)
    last = np.clip(np.searchsorted(edges, end, side="left") - 1, first, n - 1)
    ids, which = np.unique(replica, return_inverse=True)
    covered = np.zeros((len(ids), n + 1), dtype=np.int64)
    np.add.at(covered, (which, first), 1)
    np.add.at(covered, (which, last + 1), -1)
    return (np.cumsum(covered, axis=1)[:, :n] > 0).sum(axis=0).astype(float)


def kv_timeline(
    steps: pd.DataFrame,
    blocks: Mapping[int, float] | None,
    replicas: int | pd.DataFrame | None,
    bucketed: bool = False,
    bin_s: float | None = None,
) -> pd.DataFrame | None:
    """The binned series of the module docstring (columns ``time_s`` (the bin's start),
    ``kv_mean``, ``kv_peak``, ``running_mean``, ``running_peak``, ``serving`` (the replicas
    the means are over); means NaN when ``bucketed``, KV NaN without ``blocks``); None
    without rows. ``replicas``: a fixed fleet's count, a scaled fleet's ``scaling.parquet``,
    or None for the replicas with a step in each bin. ``bin_s`` defaults to the run's span
    over ``BINS``; a step's peak counts in the bin it starts in."""
    if steps is None or len(steps) == 0:
        return None
    start = steps["start_time_s"].to_numpy(float)
    end = start + steps["duration_s"].to_numpy(float)
    t0 = float(start.min())
    span = float(end.max()) - t0
    width = bin_s or max(span / BINS, 1e-9)
    n = max(int(np.ceil(span / width)), 1)
    index = np.minimum(np.floor((start - t0) / width).astype(np.int64), n - 1)
    models = (
        steps["model_id"].to_numpy(np.int64)
        if "model_id" in steps
        else np.zeros(len(steps), np.int64)
    )
    if blocks is None:
        share = np.full(len(steps), np.nan)
    else:
        pools = np.array([blocks.get(m, np.nan) for m in range(int(models.max()) + 1)], float)
        share = steps["kv_blocks_used"].to_numpy(float) / pools[models]
    seqs = steps["num_seqs"].to_numpy(float)
    edges = t0 + width * np.arange(n + 1)
    if isinstance(replicas, pd.DataFrame):
        serving = serving_replicas(replicas, edges)
    elif replicas is None:
        serving = stepping_replicas(steps["replica_id"].to_numpy(), start, end, edges)
    else:
        serving = np.full(n, float(replicas))
    serving = np.where(serving > 0, serving, np.nan)  # no replica serving: no mean

    def peak(values: np.ndarray) -> np.ndarray:
        out = np.full(n, np.nan)
        np.fmax.at(out, index, values)
        return out

    if bucketed:
        kv_mean = running_mean = np.full(n, np.nan)
    else:
        kv_mean = time_average(start, end, share, edges) / serving
        running_mean = time_average(start, end, seqs, edges) / serving
    return pd.DataFrame(
        {
            "time_s": edges[:-1],
            "kv_mean": kv_mean,
            "kv_peak": peak(share),
            "running_mean": running_mean,
            "running_peak": peak(seqs),
            "serving": serving,
        }
    )


def switches_engines(config: Mapping) -> bool:
    """Whether the run's schedule runs replicas of an engine configuration other than its own
    (``autoscale.engines``), whose KV pools the summary does not give."""
    auto = config.get("autoscale") or {}
    if auto.get("policy") != "schedule" or not auto.get("engines"):
        return False
    return any(
        isinstance(entry, Mapping) and entry.get("engine", "base") != "base"
        for entry in auto.get("schedule") or []
    )


def kv_figure(
    steps: pd.DataFrame | None,
    summary: Mapping,
    config: Mapping,
    bucketed: bool,
    scaling: pd.DataFrame | None = None,
) -> Figure | None:
    """KV use (share of a replica's pool) and running requests over time (only the running
    requests for a run that switches engines); None when the run kept no steps or its summary
    gives no KV capacity. ``scaling``: the run's ``scaling.parquet``, when it has one."""
    blocks = pool_blocks(summary, config)
    other_pools = switches_engines(config)
    if steps is None or (blocks is None and not other_pools):
        return None
    scaled = isinstance(summary.get("autoscale"), Mapping)
    if scaled:
        replicas: int | pd.DataFrame | None = (
            scaling if scaling is not None and len(scaling) else None
        )
    else:
        replicas = int(
            summary.get("num_replicas") or (config.get("fleet") or {}).get("replicas") or 1
        )
    bucket_s = float((config.get("output") or {}).get("step_bucket_s") or 0.0)
    timeline = kv_timeline(
        steps,
        None if other_pools else blocks,
        replicas,
        bucketed,
        bucket_s if bucketed else None,
    )
    if timeline is None:
        return None
    scale, unit = hours_or_seconds(float(timeline["time_s"].max()))
    t = timeline["time_s"] / scale
    panels = 1 if other_pools else 2
    with drawing(panels, 1, size=(9.0, 3.0 * panels), sharex=True) as d:
        running = d.axes[-1][0]
        if not other_pools:
            kv = d.axes[0][0]
            if not bucketed:
                kv.plot(
                    t,
                    100 * timeline["kv_mean"],
                    label="mean per serving replica" if scaled else "fleet mean",
                    drawstyle="steps-post",
                )
            kv.plot(
                t,
                100 * timeline["kv_peak"],
                label="fullest replica",
                drawstyle="steps-post",
                alpha=0.7,
            )
            kv.set_ylabel("KV cache in use (%)")
            kv.set_ylim(0, 105)
            kv.legend(loc="best")
        if not bucketed:
            running.plot(
                t,
                timeline["running_mean"],
                label="mean per serving replica" if scaled else "mean per replica",
                drawstyle="steps-post",
            )
        running.plot(
            t,
            timeline["running_peak"],
            label="largest batch of one replica",
            drawstyle="steps-post",
            alpha=0.7,
        )
        running.set_ylabel("running requests")
        running.set_ylim(bottom=0)
        running.set_xlabel(f"simulated time ({unit})")
        running.legend(loc="best")
    kept = (
        f"{bucket_s:g}-s buckets that keep only each replica's peaks"
        if bucketed
        else f"binned into {len(timeline)} intervals"
    )
    return Figure(
        "kv_cache",
        ("Running requests" if other_pools else "KV-cache use and running requests")
        + f" over time ({kept}). "
        + _fleet_text(summary, scaled, replicas)
        + " "
        + (_other_pools_text() if other_pools else _capacity_text(summary, config, blocks))
        + f" {summary.get('num_preemptions', 0):,} preemptions.",
        d.png,
    )


def _fleet_text(summary: Mapping, scaled: bool, replicas: int | pd.DataFrame | None) -> str:
    """Which replicas the means are over."""
    if not scaled:
        return f"The fleet: {replicas} replica(s)."
    auto = summary["autoscale"]
    over = (
        "those ready or draining in each bin (scaling.parquet)"
        if isinstance(replicas, pd.DataFrame)
        else "those with a step in each bin (the run has no scaling.parquet)"
    )
    return (
        f"The fleet scaled between {auto.get('replicas_min', '?')} and "
        f"{auto.get('replicas_max', '?')} replicas: the means are over the replicas serving, "
        f"{over}."
    )


def _other_pools_text() -> str:
    return (
        "No KV-cache share: the run's schedule switches to other engine configurations "
        "(autoscale.engines), whose replicas have KV pools of their own that the run's files "
        "do not give per replica (the summary's kv_capacity_tokens is the pool of the run's own "
        "configuration only)."
    )


def _capacity_text(summary: Mapping, config: Mapping, blocks: Mapping[int, float] | None) -> str:
    tokens = summary.get("kv_capacity_tokens")
    block = (config.get("kv") or {}).get("block_size")
    use = summary.get("kv_utilization") or {}
    pool = f"{(blocks or {}).get(0, float('nan')):,.0f}"
    return (
        f"Capacity: {tokens:,} tokens a replica ({pool} blocks of {block}); over the run the "
        f"cache was {_percent(use.get('mean'))} full on average while busy, "
        f"{_percent(use.get('max'))} at the peak."
    )


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.3g}%"
