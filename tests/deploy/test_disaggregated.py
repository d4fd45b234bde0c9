"""A disaggregated fleet built from its config (``sim.deploy.disaggregated``): each pool at its
own price and size in the summary, the printed lines, and one-line refusals of what is not
modelled or does not add up."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.run import simulate
from tests.fleet.test_disaggregation import ONE_REQUEST, _run
from tests.support import compose, fleetcast


def test_each_pool_at_its_own_price():
    result, _, _ = _run(
        "placement=disaggregated",
        "fleet.replicas=3",
        "placement.decode.hardware=h200",
        "placement.decode.tp=2",
        "workload=poisson",
        "workload.num_requests=20",
        "sim.progress=false",
    )
    summary, pools = result.summary, result.summary["disaggregation"]
    h100, h200 = compose()["hardware"], compose("hardware=h200")["hardware"]
    assert summary["num_gpus"] == 1 + 2 * 2
    expected = h100["usd_per_gpu_hour"] + 4 * h200["usd_per_gpu_hour"]
    assert summary["cost"]["usd_per_hour"] == pytest.approx(expected)
    assert pools["prefill"]["gpu"] == "H100-SXM" and pools["decode"]["gpu"] == "H200"
    assert pools["decode"]["replicas"] == 2 and pools["decode"]["tp"] == 2
    assert pools["decode"]["usd_per_hour"] == pytest.approx(4 * h200["usd_per_gpu_hour"])
    assert summary["cost"]["price_source"].startswith("each pool's GPUs at their own price")
    # one prefill GPU sends its whole KV over its one link
    assert pools["kv_link"]["parallel_links"] == 1
    for pool in ("prefill", "decode"):
        assert 0 < pools[pool]["gpu_busy_fraction"] <= 1


def test_the_printed_summary_names_the_pools(tmp_path):
    done = fleetcast(*ONE_REQUEST, f"output_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "prefill pool: 1 x 1 H100-SXM" in done.stdout
    assert "decode pool:  1 x 1 H100-SXM" in done.stdout
    assert "KV transfer: 1 over custom" in done.stdout


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["fleet.replicas=1"], "placement.prefill.replicas"),
        (["placement.decode.replicas=2"], "placement.decode.replicas"),
        (["placement.prefill.scheduler=static"], "placement.prefill.scheduler"),
        (["placement.decode.kv_precision=fp8"], "placement.decode.kv_precision"),
        (["frontend.token_s=0.001"], "frontend.token_s"),
        (["placement.decode_router=nope"], "placement.decode_router"),
        (["placement.decode.hardware=nope"], "placement.decode.hardware"),
        (["placement.decode.tp=3"], "placement.decode.tp"),
        (["placement.prefill.weights=fp4"], "placement.prefill.weights"),
        (["placement.decode.settings={fleet.tp: 3}"], "placement.decode.settings.fleet.tp"),
        (
            ["placement.prefill.settings={scheduler.max_num_batched_tokens: 0}"],
            "placement.prefill.settings.scheduler.max_num_batched_tokens",
        ),
        (
            ["placement.decode.settings={scheduler.max_num_seqs: 0}"],
            "placement.decode.settings.scheduler.max_num_seqs",
        ),
        (["fleet.tp=3"], "fleet.tp"),  # (both pools inherit it)
        # a key under settings wins over the pool's own, and the error names the one that won
        (
            ["placement.decode.tp=2", "placement.decode.settings={fleet.tp: 3}"],
            "placement.decode.settings.fleet.tp",
        ),
        (["placement.prefill.kv_precision=fp8"], "placement.prefill.kv_precision"),
        (["placement.prefill.settings={fleet.replicas: 2}"], "placement.prefill.settings"),
        (["placement.kv_link=pigeon"], "placement.kv_link"),
        (["autoscale.policy=rate"], "autoscale.policy"),
    ],
)
def test_refusals_name_the_field(overrides, field):
    refused = _refused(*overrides)
    assert refused.field.startswith(field), str(refused)


def _refused(*overrides: str) -> ConfigError:
    """The error a two-replica disaggregated run of ``overrides`` stops with."""
    with pytest.raises(ConfigError) as refused:
        simulate(compose("placement=disaggregated", "fleet.replicas=2", *overrides))
    return refused.value


def test_a_pools_memory_refusal_suggests_the_pools_own_keys():
    refused = _refused("model=llama31_70b", "fleet.tp=2", "placement.decode.tp=1")
    assert refused.field == "hardware"  # (the GPU the pool inherits is short)
    assert refused.reason.startswith("in the decode pool: Llama-3.1-70B weights")
    assert "it fits with placement.decode.tp=2" in refused.reason
    assert "fleet.tp=" not in refused.reason


def test_a_pool_that_inherits_a_field_is_told_the_runs_key():
    refused = _refused(
        "model=llama31_70b",
        "placement.decode.tp=2",  # (the prefill pool takes fleet.tp=1)
    )
    assert refused.reason.startswith("in the prefill pool: Llama-3.1-70B weights")
    assert "it fits with fleet.tp=2 or precision.weights=fp8" in refused.reason


def test_a_prefill_budget_refusal_names_only_the_pool_that_does_not_chunk():
    refused = _refused(
        "placement.prefill.settings={scheduler.enable_chunked_prefill: false,"
        " scheduler.max_num_batched_tokens: 2048}",
        "workload=poisson",
        "workload.num_requests=3",
        "workload.prompt_tokens=3000",
    )
    reason = refused.reason
    assert "the prefill pool's (2,048; raise it in placement.prefill.settings), or chunk" in reason
    assert "decode pool" not in reason


def test_a_request_the_decode_pool_cannot_hold_is_explained_with_both_pools_limits():
    refused = _refused(
        "placement.decode.settings={kv.num_blocks: 100}",
        "workload=poisson",
        "workload.num_requests=3",
        "workload.prompt_tokens=1000",
        "workload.output_tokens=1000",
    )
    reason = refused.reason
    # 99 blocks of 16 above the watermark
    assert "or prompt + output tokens in a decode replica's (1,584)" in reason, reason
    assert "placement.decode.tp" in reason


def test_the_report_describes_each_pool(tmp_path):
    run = tmp_path / "run"
    done = fleetcast(
        *ONE_REQUEST, "placement.decode.hardware=h200", f"output_dir={run}", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    done = fleetcast("report", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (run / "report.md").read_text()
    assert "1 prefill replica(s) of 1 x H100-SXM" in text
    assert "1 decode replica(s) of 1 x H200" in text
    assert "| placement | disaggregated prefill/decode; KV over custom (1 GB/s" in text
    assert "decode $" in text and "/GPU-hour (H200)" in text
