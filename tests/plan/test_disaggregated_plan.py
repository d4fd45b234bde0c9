"""fleetcast plan over disaggregated fleets (``placement=disaggregated``): the xPyD ratio and each
pool's GPU searched for the cheapest fleet that meets the SLO, worked out by hand.

The fleet: every step takes 10 ms whatever it holds (``step_time=constant``), evenly spaced
arrivals (``workload=constant``) of 16-token prompts and 11-token outputs, a KV link too fast
to matter. A prefill replica takes one prompt per step (``max_num_seqs: 1``): 100 requests/s.
A decode replica holds 10 requests, each for its 10 decode steps plus the step it waits to join
the batch (about 0.11 s): about 91 requests/s. At 150 requests/s:

- one prefill replica never keeps up (TTFT grows), whatever the decode pool: infeasible;
- two prefill replicas (200/s) need two decode replicas (182/s): 2P2D, 4 replicas;
- at half the rate (75/s, the what-if), 2P1D (3 replicas) is enough.

With a constant step time an H200 decodes no faster than an H100 and costs more ($3.80
against $2.99 an hour), so the cheapest answer is 2P2D on H100s ($11.96/hour), and 2P2D with
H200 decode ($5.98 + $7.60 = $13.58) comes second: the ranking prices each pool at its own GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError
from sim.plan.answer import ranked_table
from sim.plan.candidates import fewest_replicas
from sim.plan.planner import run_plan
from sim.plan.search import smallest_meeting
from tests.support import NO_WHATIFS

H100, H200 = 2.99, 3.80  # $/GPU-hour, the hardware catalog's on-demand prices
FLEET = (
    "placement=disaggregated",
    "step_time=constant",
    "step_time.seconds=0.01",
    "workload=constant",
    "workload.qps=150",
    "workload.num_requests=300",
    "workload.prompt_tokens=16",
    "workload.output_tokens=11",
    "placement.kv_link={gb_per_s: 1000, latency_us: 0}",
    "placement.prefill.settings={scheduler.max_num_seqs: 1}",
    "placement.decode.settings={scheduler.max_num_seqs: 10}",
)


@pytest.fixture(scope="module")
def xpyd_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xpyd")
    _, plan_json = run_plan(
        [
            *FLEET,
            "plan.grid={placement.prefill.replicas: [1, 2], placement.decode.hardware: "
            "[h100_sxm, h200]}",
            "plan.slo=[ttft_s.p99 <= 0.05, tpot_s.p99 <= 0.02]",
            "plan.max_replicas=4",
            "plan.min_replications=2",
            "plan.max_replications=2",
            "plan.step_time_scales=[]",
            "plan.rate_scales=[0.5]",
            "plan.max_headroom=null",
            "plan.jobs=2",
            f"plan.output_dir={folder}",
        ],
        progress=False,
    )
    return folder, plan_json


def _by_candidate(plan_json):
    return {tuple(c["overrides"]): c for c in plan_json["candidates"]}


def test_the_plan_picks_the_cheapest_xpyd_fleet_worked_out_by_hand(xpyd_plan):
    _, plan_json = xpyd_plan
    answers = _by_candidate(plan_json)
    for hardware in ("h100_sxm", "h200"):
        one = answers[("placement.prefill.replicas=1", f"placement.decode.hardware={hardware}")]
        assert not one["feasible"] and "misses at 4 replicas" in one["reason"]
        two = answers[("placement.prefill.replicas=2", f"placement.decode.hardware={hardware}")]
        assert two["feasible"] and two["replicas"] == 4
        assert two["pools"]["prefill"]["replicas"] == 2 and two["pools"]["decode"]["replicas"] == 2
        # the count below misses: its one decode replica cannot keep up
        assert [(p["replicas"], p["decision"]) for p in two["evaluated"]] == [
            (3, "misses"),
            (4, "meets"),
        ]
        # at half the rate the search gallops down to 2P1D and stops there: 2 would leave no
        # decode replica
        assert two["whatifs"]["rate x0.5"]["replicas"] == 3
    cheap = answers[("placement.prefill.replicas=2", "placement.decode.hardware=h100_sxm")]
    dear = answers[("placement.prefill.replicas=2", "placement.decode.hardware=h200")]
    assert cheap["usd_per_hour"] == pytest.approx(4 * H100)
    assert dear["usd_per_hour"] == pytest.approx(2 * H100 + 2 * H200)
    assert dear["pools"]["decode"] == {
        "replicas": 2,
        "gpu": "H200",
        "gpus_per_replica": 1,
        "usd_per_hour": pytest.approx(2 * H200),
    }
    table = ranked_table(plan_json).splitlines()
    assert table[0].startswith("2 of 4 candidate(s) meet every SLO")
    assert table[1].startswith(
        "  1. placement.prefill.replicas=2 placement.decode.hardware=h100_sxm: 4 replica(s) = "
        "2P2D: prefill 2 x H100-SXM $5.98/h, decode 2 x H100-SXM $5.98/h, $11.96/hour"
    )
    assert table[2] == "       what-if: rate x0.5: 3 (2P1D)"
    assert table[3].startswith(
        "  2. placement.prefill.replicas=2 placement.decode.hardware=h200: 4 replica(s) = "
        "2P2D: prefill 2 x H100-SXM $5.98/h, decode 2 x H200 $7.60/h, $13.58/hour"
    )


def test_no_total_below_the_prefill_pool_plus_one_is_ever_simulated(xpyd_plan):
    folder, plan_json = xpyd_plan
    for c in plan_json["candidates"]:
        prefill = int(c["overrides"][0].split("=")[1])
        counts = [p["replicas"] for p in c["evaluated"]]
        counts += [p["replicas"] for w in c.get("whatifs", {}).values() for p in w["evaluated"]]
        assert min(counts) == prefill + 1, c["candidate"]
    runs = sorted(Path(folder, "runs").glob("*/config.yaml"))
    assert runs
    for path in runs:
        cfg = yaml.safe_load(path.read_text())
        assert cfg["fleet"]["replicas"] >= cfg["placement"]["prefill"]["replicas"] + 1, path


@pytest.mark.parametrize("answer", [3, 4, 5, 9, 20])
@pytest.mark.parametrize("start", [3, 4, 11])
def test_the_search_never_asks_below_the_fewest_count(answer, start):
    asked = []

    def point(count):
        asked.append(count)
        return count >= answer

    found, _ = smallest_meeting(point, bool, 32, start=start, lowest=3)
    assert found == answer and min(asked) >= 3
    assert len(asked) == len(set(asked))


def test_a_fewest_count_above_the_maximum_is_infeasible_without_a_simulation():
    found, points = smallest_meeting(lambda c: pytest.fail("evaluated"), bool, 2, lowest=3)
    assert found is None and points == {}


def test_fewest_replicas_and_a_decode_pool_of_fixed_size_refused():
    assert fewest_replicas({"placement": {"mode": "single"}}) == 1
    disaggregated = {"mode": "disaggregated", "prefill": {"replicas": 3}, "decode": {}}
    assert fewest_replicas({"placement": disaggregated}) == 4
    fixed = {**disaggregated, "decode": {"replicas": 2}}
    with pytest.raises(ConfigError, match="^placement.decode.replicas=2: fleetcast plan"):
        fewest_replicas({"placement": fixed})


def test_a_candidate_that_needs_more_than_the_maximum_is_infeasible_with_the_reason(tmp_path):
    _, plan_json = run_plan(
        [
            *FLEET,
            "plan.candidates=[[placement.prefill.replicas=4]]",
            "plan.slo=[ttft_s.p99 <= 0.05]",
            "plan.max_replicas=4",
            *NO_WHATIFS,
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    (c,) = plan_json["candidates"]
    assert not c["feasible"] and c["evaluated"] == []
    assert c["reason"].startswith("needs 5 replicas at least")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
