"""A fleet that changes size during the run (``autoscale``, ``sim.fleet.autoscaler``): a
schedule worked by hand, the bill as GPUs x time, nothing lost or sent twice across scale-up
and scale-down, a draining replica taking nothing new, HPA's rule and window, and identical
files whether decode steps are stretched or not."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from sim.config.autoscale import AutoscaleConfig
from sim.errors import ConfigError
from sim.fleet.autoscaler import Autoscaler, Variant
from sim.output.scaling import ScalingLog
from sim.run import simulate
from tests.support import assert_good_run, columns, compose

PRICE = 3.6  # $/GPU-hour: a GPU-second costs $0.001

EXACT = [
    "workload=constant",
    "workload.qps=1",
    "workload.num_requests=200",
    "workload.prompt_tokens=10",
    "workload.output_tokens=5",
    "step_time=constant",
    "step_time.seconds=0.01",
    "router=round_robin",
    f"cost.usd_per_gpu_hour={PRICE}",
    "fleet.replicas=1",
    "autoscale.policy=schedule",
    "autoscale.provision_s=30",
    "autoscale.schedule=[{at_s: 0, replicas: 1}, {at_s: 50.5, replicas: 2},"
    " {at_s: 120.5, replicas: 1}]",
]


def scaling_rows(result) -> list[tuple]:
    c = columns(result.scaling)
    return list(
        zip(
            c["time_s"].tolist(),
            c["event"].tolist(),
            c["replicas_ready"].tolist(),
            c["replicas_provisioning"].tolist(),
            c["replicas_draining"].tolist(),
            c["gpus_billed"].tolist(),
            strict=True,
        )
    )


def test_a_schedule_worked_by_hand():
    """Requests at 1, 2, ..., 200 s each take 5 steps of 10 ms (done 50 ms after arriving).
    The second replica is asked for 30 s before 50.5 s, serves from 50.5 s (round robin: every
    other request), and drains at 120.5 s, when both are idle: replica 1 (the highest id on a
    tie) goes at once. The bill is 1 GPU over [1, 20.5], 2 over [20.5, 120.5], 1 over
    [120.5, 200.05]: 299.05 GPU-seconds."""
    result = simulate(compose(*EXACT))
    assert scaling_rows(result) == [
        (0.0, "start", 1, 0, 0, 1),
        (20.5, "scale_up", 1, 1, 0, 2),
        (50.5, "ready", 2, 0, 0, 2),
        (120.5, "drain", 1, 0, 1, 2),
        (120.5, "released", 1, 0, 0, 1),
    ]
    req = columns(result.requests)
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    assert set(replica[arrival < 50.5].tolist()) == {0}
    served = replica[(arrival > 50.5) & (arrival < 120.5)]
    assert served.tolist() == [1, 0] * 35  # round robin from 51 s to 120 s, new one first
    assert set(replica[arrival > 120.5].tolist()) == {0}
    summary = result.summary
    assert summary["completed"] == 200
    auto = summary["autoscale"]
    gpu_seconds = 19.5 + 2 * 100.0 + 79.55
    assert auto["gpu_hours"] == pytest.approx(gpu_seconds / 3600)
    assert auto["usd_total"] == pytest.approx(gpu_seconds * PRICE / 3600)
    assert (auto["replicas_min"], auto["replicas_max"]) == (1, 2)
    assert (auto["scale_ups"], auto["scale_downs"]) == (1, 1)
    assert summary["num_gpus"] == 2  # the peak
    span_h = summary["duration_s"] / 3600
    assert summary["cost"]["usd_per_hour"] == pytest.approx(auto["usd_total"] / span_h)
    assert_good_run(result)


def test_a_switch_of_engine_runs_both_fleets_until_the_new_one_is_ready():
    """Seasonal engines: at 100 s the fleet becomes two H200s at FP8, asked for 40 s ahead;
    the H100 serves until they are ready, then drains. Each GPU is billed at its own price."""
    overrides = [
        *EXACT[:-3],
        "autoscale.policy=schedule",
        "autoscale.provision_s=40",
        "autoscale.schedule=[{at_s: 0, replicas: 1}, {at_s: 100.5, replicas: 2, engine: fast}]",
        "+autoscale.engines={fast: {hardware: h200, precision.weights: fp8}}",
        "~cost.usd_per_gpu_hour",
        "+cost.usd_per_gpu_hour=null",
    ]
    result = simulate(compose(*overrides))
    assert scaling_rows(result) == [
        (0.0, "start", 1, 0, 0, 1),
        (60.5, "scale_up", 1, 1, 0, 2),
        (60.5, "scale_up", 1, 2, 0, 3),
        (100.5, "ready", 2, 1, 0, 3),
        (100.5, "ready", 3, 0, 0, 3),
        (100.5, "drain", 2, 0, 1, 3),
        (100.5, "released", 2, 0, 0, 2),
    ]
    req = columns(result.requests)
    late = req["arrival_time_s"] > 100.5
    assert set(req["replica_id"][late].tolist()) == {1, 2}
    assert set(req["replica_id"][~late].tolist()) == {0}
    usd = columns(result.scaling)["usd_per_hour"].tolist()
    h100, h200 = compose("hardware=h100_sxm"), compose("hardware=h200")
    p100 = h100["hardware"]["usd_per_gpu_hour"]
    p200 = h200["hardware"]["usd_per_gpu_hour"]
    assert usd == pytest.approx(
        [
            p100,
            p100 + p200,
            p100 + 2 * p200,
            p100 + 2 * p200,
            p100 + 2 * p200,
            p100 + 2 * p200,
            2 * p200,
        ]
    )
    assert result.summary["completed"] == 200
    engines = result.summary["autoscale"]["engines"]
    assert (engines["base"]["gpu"], engines["fast"]["gpu"]) == ("H100-SXM", "H200")
    assert (engines["base"]["weights"], engines["fast"]["weights"]) == ("bf16", "fp8")


DAY = [
    "workload=daily",
    "workload.qps=6",
    "workload.duration_s=1800",
    "workload.time_compression=48",
    "workload.prompt_tokens={dist: lognormal, median: 600, sigma: 0.8, max: 4000}",
    "workload.output_tokens={dist: lognormal, median: 150, sigma: 0.8, max: 1000}",
    "step_time=linear",
    "fleet.replicas=1",
    "autoscale.policy=concurrency",
    "autoscale.target=3",
    "autoscale.provision_s=60",
    "autoscale.scale_down_window_s=60",
]


@pytest.fixture(scope="module")
def day_run():
    return simulate(compose(*DAY))


def test_nothing_is_lost_or_sent_twice_across_scaling(day_run):
    result = day_run
    auto = result.summary["autoscale"]
    assert auto["scale_ups"] >= 2 and auto["scale_downs"] >= 2, auto
    assert_good_run(result)
    req = columns(result.requests)
    assert len(np.unique(req["request_id"])) == len(req["request_id"])
    assert result.summary["completed"] == result.summary["num_requests"]
    # each replica that ran a step is one the autoscaler made ready
    ready = int((columns(result.scaling)["event"] == "ready").sum())
    steps = columns(result.steps)
    assert set(np.unique(steps["replica_id"]).tolist()) <= set(range(1 + ready))


def test_a_draining_replica_takes_nothing_new_and_is_released_when_empty(day_run):
    """Requests are routed when they arrive (no request overhead here): none reaches a replica
    after its drain began, and its bill stops exactly when its last request ended (at once if
    it held none)."""
    req = columns(day_run.requests)
    sc = columns(day_run.scaling)
    rows = list(
        zip(sc["time_s"].tolist(), sc["event"].tolist(), sc["replica_id"].tolist(), strict=True)
    )
    drains = [(t, int(r)) for t, e, r in rows if e == "drain"]
    released = {int(r): t for t, e, r in rows if e == "released"}
    assert len(drains) >= 2 and set(released) == {r for _, r in drains}
    for drain_s, replica in drains:
        mine = req["replica_id"] == replica
        assert mine.any()
        assert not (mine & (req["arrival_time_s"] > drain_s)).any(), replica
        last_end = req["completion_time_s"][mine].max()
        assert released[replica] == max(drain_s, last_end)
    # the counts each row carries never go below zero, and one replica always serves
    assert (sc["replicas_ready"] >= 1).all() and (sc["replicas_draining"] >= 0).all()


def test_files_are_identical_with_decode_steps_stretched_or_not(day_run):
    stepped = simulate(compose(*DAY, "sim.fast_forward_decode=false"))
    assert stepped.requests.equals(day_run.requests)
    assert stepped.steps.equals(day_run.steps)
    assert stepped.scaling.equals(day_run.scaling)


def test_queue_policy_scales_and_its_files_do_not_depend_on_decode_stretches():
    """Requests waiting for admission (a vLLM fleet at its batch cap of 8 builds a queue): the
    count is read between events and stays put through a decode stretch."""
    overrides = [
        *DAY[:-4],
        "scheduler.max_num_seqs=8",
        "autoscale.policy=queue",
        "autoscale.target=1",
        "workload.duration_s=600",
        "workload.time_compression=144",
    ]
    result = simulate(compose(*overrides))
    assert_good_run(result)
    assert result.summary["autoscale"]["replicas_max"] > 1
    stepped = simulate(compose(*overrides, "sim.fast_forward_decode=false"))
    assert stepped.requests.equals(result.requests) and stepped.scaling.equals(result.scaling)


def test_utilization_policy_runs_and_bills_what_it_held():
    result = simulate(compose(*DAY[:-4], "autoscale.policy=utilization", "autoscale.target=0.5"))
    assert_good_run(result)
    auto = result.summary["autoscale"]
    assert auto["replicas_max"] > 1
    assert auto["replicas_min"] <= auto["replicas_mean"] <= auto["replicas_max"]
    span_h = result.summary["duration_s"] / 3600
    assert auto["gpu_hours"] <= auto["replicas_max"] * span_h + 1e-9


# -- the rule, on a fleet of stand-ins ---------------------------------------------------------


class StandIn:
    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.num_outstanding = 0
        self.engines: list = []

    def busy_time_s(self) -> float:
        return 0.0

    def load_s(self) -> float:
        return 0.0


class StandInFleet:
    def __init__(self, env: simpy.Environment, replicas: int) -> None:
        self.env = env
        self.replicas = [StandIn(i) for i in range(replicas)]
        self.serving = list(self.replicas)
        self.drained: list[int] = []

    def add_replica(self, engines):
        replica = StandIn(len(self.replicas))
        self.replicas.append(replica)
        self.serving.append(replica)
        return replica

    def drain(self, replica, on_released):
        self.serving.remove(replica)
        self.drained.append(replica.replica_id)
        on_released(replica)

    def finished(self) -> bool:
        return True  # no watching: the tests call the rule themselves


def autoscaler(env, replicas=4, **config):
    fleet = StandInFleet(env, replicas)
    variant = Variant("base", lambda: [], gpus=2, usd_per_gpu_hour=1.0)
    log = ScalingLog()
    config = AutoscaleConfig(policy="concurrency", target=10.0, provision_s=30, **config)
    return Autoscaler(fleet, config, {"base": variant}, variant, log), fleet, log


def test_hpa_rule_scales_up_at_once_and_counts_replicas_being_provisioned():
    env = simpy.Environment()
    scaler, fleet, log = autoscaler(env)
    scaler._decide(4, 20.0)  # twice the target: 8 wanted
    assert [row[6] for row in log.rows].count("scale_up") == 4
    scaler._decide(4, 20.0)  # the 4 asked for count: nothing more
    assert [row[6] for row in log.rows].count("scale_up") == 4
    scaler._decide(4, 10.5)  # within the 10% tolerance: no change, and the 8 stay
    assert len(scaler._pending) == 4
    env.run(until=31)
    assert len(fleet.serving) == 8 and log.rows[-1][4] == 16  # 8 replicas x 2 GPUs


def test_hpa_rule_scales_down_to_the_highest_count_of_its_window():
    env = simpy.Environment()
    scaler, fleet, log = autoscaler(env, replicas=8, scale_down_window_s=100)
    scaler._decide(8, 10.0)  # 8 recommended at t=0
    env.run(until=50)
    scaler._decide(8, 2.5)  # 2 recommended, but 8 was within the window
    assert fleet.drained == []
    env.run(until=101)
    scaler._decide(8, 5.0)  # now the window holds 2 (t=50) and 4: down to 4
    assert len(fleet.serving) == 4 and fleet.drained == [7, 6, 5, 4]  # ties: highest id


def test_a_scale_down_cancels_replicas_still_being_provisioned_first():
    env = simpy.Environment()
    scaler, fleet, log = autoscaler(env, replicas=2, scale_down_window_s=0)
    scaler._decide(2, 30.0)  # 6 wanted: 4 asked for
    env.run(until=10)
    scaler._decide(2, 15.0)  # 3 wanted: 3 of the 4 being provisioned are cancelled
    assert [row[6] for row in log.rows].count("cancelled") == 3
    assert fleet.drained == [] and len(scaler._pending) == 1
    assert log.rows[-1][4] == 6  # 2 serving + 1 provisioning, 2 GPUs each
    env.run(until=40)
    assert len(fleet.serving) == 3
    totals = log.totals(0.0, 40.0)
    # 2 GPUs x 4 replicas over [0, 10] (8 GPUs + 4 of the initial 2) ...
    assert totals.gpu_hours == pytest.approx((12 * 10 + 6 * 30) / 3600)


def test_the_scaling_log_integrates_over_the_runs_span_only():
    log = ScalingLog()
    for time_s, gpus in ((0.0, 1), (10.0, 3), (20.0, 2)):
        log.record(
            time_s, "x", ready=gpus, provisioning=0, draining=0, gpus=gpus, usd_per_hour=2.0 * gpus
        )
    totals = log.totals(5.0, 30.0)
    assert totals.gpu_hours == pytest.approx((1 * 5 + 3 * 10 + 2 * 10) / 3600)
    assert totals.usd_total == pytest.approx(2 * (1 * 5 + 3 * 10 + 2 * 10) / 3600)
    assert totals.replicas_mean == pytest.approx(55 / 25)
    assert (totals.replicas_min, totals.replicas_max) == (1, 3)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (
            [
                "autoscale.policy=concurrency",
                "autoscale.min_replicas=5",
                "autoscale.max_replicas=2",
            ],
            "autoscale.min_replicas",
        ),
        (["autoscale.policy=schedule"], "autoscale.schedule"),
        (
            ["autoscale.policy=schedule", "autoscale.schedule=[{at_s: 5, replicas: 1}]"],
            "autoscale.schedule",
        ),
        (
            [
                "autoscale.policy=schedule",
                "autoscale.schedule=[{at_s: 0, replicas: 1, engine: fast}]",
            ],
            "fast",
        ),
        (
            [
                "autoscale.policy=schedule",
                "autoscale.schedule=[{at_s: 0, replicas: 1, engine: x}]",
                "+autoscale.engines={x: {model: llama2_7b}}",
            ],
            "autoscale.engines.x.model",
        ),
        (
            [
                "autoscale.policy=schedule",
                "autoscale.schedule=[{at_s: 0, replicas: 1, engine: x}]",
                "+autoscale.engines={x: {precision.bogus: 1}}",
            ],
            "autoscale.engines.x.precision.bogus",
        ),
        (["autoscale.policy=concurrency", "fleet.replicas=100"], "fleet.replicas"),
        (["autoscale.schedule=[{at_s: 0, replicas: 1}]"], "autoscale.schedule"),
        (
            [
                "autoscale.policy=schedule",
                "autoscale.schedule=[{at_s: 0, replicas: 1, engine: x}]",
                "+autoscale.engines={x: {kv.prefix_caching: true}}",
            ],
            "autoscale.engines.x.kv.prefix_caching",
        ),
        (  # an engine that could never hold a request (15 tokens in 5 one-token blocks)
            [
                "autoscale.policy=schedule",
                "autoscale.schedule=[{at_s: 0, replicas: 1}, {at_s: 9, replicas: 1, engine: x}]",
                "+autoscale.engines={x: {kv.block_size: 1, kv.num_blocks: 5}}",
            ],
            "autoscale.engines.x",
        ),
    ],
)
def test_bad_autoscale_settings_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        simulate(compose(*EXACT[:9], *overrides))
    assert field in str(err.value)
    assert "\n" not in str(err.value)


def test_kv_policy_steps_one_by_one_and_scales():
    result = simulate(compose(*DAY[:-4], "autoscale.policy=kv", "autoscale.target=0.05"))
    assert_good_run(result)
    assert result.summary["autoscale"]["replicas_max"] > 1
    assert math.isfinite(result.summary["cost"]["usd_per_hour"])
