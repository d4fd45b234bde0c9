"""A plan with faults on (``sim.plan.searches``): the answer splits into the count the load
needs without faults (N) and the spare capacity the faults ask for (k)."""

from __future__ import annotations

from sim.plan.answer import ranked_table, spare_text
from sim.plan.planner import run_plan
from tests.scenarios import MD1_PLAN

STEP = 0.01


def test_a_replica_lost_at_the_start_asks_for_one_spare(tmp_path):
    """Each replica an M/D/1 queue (one request at a time, 10 ms each) at 120 requests/s
    split at random: its mean TTFT is the wait rho D / (2 (1 - rho)) plus D, 17.5 ms on 2
    replicas (rho 0.6) and 13.3 ms on 3 (rho 0.4), so a bound of 15 ms needs N = 3. Replica 0
    reclaimed at time 0 with no replacement leaves any fleet one short: 4 replicas with it,
    k = 1."""
    _, plan_json = run_plan(
        [
            *MD1_PLAN,
            "faults.spot=[{replica: 0, at_s: 0, notice_s: 0}]",
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    (answer,) = plan_json["candidates"]
    assert (answer["replicas"], answer["load_replicas"], answer["spare_replicas"]) == (4, 3, 1)
    assert answer["faults"] == {
        "gpu_mtbf_h": None,
        "repair": "exponential",
        "repair_h": 4.0,
        "on_failure": "retry",
        "spot_reclaims_per_h": None,
    }
    assert "N = 3 for the load, k = 1 for failures at these rates" in ranked_table(plan_json)


def test_without_faults_a_plan_has_no_split(tmp_path):
    _, plan_json = run_plan(
        [
            "step_time=constant",
            f"step_time.seconds={STEP}",
            "workload=poisson",
            "workload.num_requests=200",
            "workload.qps=20",
            "workload.prompt_tokens=16",
            "workload.output_tokens=4",
            "plan.slo=[ttft_s.mean <= 1]",
            "plan.max_replicas=4",
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
            "plan.step_time_scales=[]",
            "plan.rate_scales=[]",
            "plan.max_headroom=null",
        ],
        progress=False,
    )
    (answer,) = plan_json["candidates"]
    assert "spare_replicas" not in answer and "no faults" not in answer["whatifs"]


def test_the_split_names_every_rate_it_was_simulated_at():
    """A k simulated with GPU failures and spot reclaims names both rates; with neither, the
    scheduled events; a plan.json of before the reclaim rate (no key) reads as none."""
    entry = {"load_replicas": 6, "spare_replicas": 2, "replicas": 8}
    faults = {"gpu_mtbf_h": 50000.0, "repair": "fixed", "repair_h": 24.0, "on_failure": "fail"}
    text = spare_text({**entry, "faults": {**faults, "spot_reclaims_per_h": 0.0003}})
    assert text == (
        "N = 6 for the load, k = 2 for failures at these rates: a GPU failing every 50000 h, "
        "repaired in 24 h (fixed), each spot replica reclaimed 0.0003 times an hour, their "
        "requests failed"
    )
    assert spare_text({**entry, "faults": faults}).endswith("(fixed), their requests failed")
    none = {**faults, "gpu_mtbf_h": None, "spot_reclaims_per_h": None}
    assert "these rates: the scheduled events," in spare_text({**entry, "faults": none})
