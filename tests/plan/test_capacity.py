"""fleetcast plan plan.solve=max_rate (sim/plan/capacity.py, sim/plan/rate_search.py): the rate
search's bracket and bisection, the capacity of an M/D/1 server against the Pollaczek-Khinchine
formula, the command's answer and files, and its refusals."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pyarrow.parquet as pq
import pytest

from sim.cli import run_hydra
from sim.config.compose import compose_config
from sim.output.summary_table import _num
from sim.plan.capacity import capacity_json, fleet_capacity
from sim.plan.planner import load_plan, run_plan
from sim.plan.planner import main as plan_main
from sim.plan.rate_search import (
    FOUND,
    MEETS_AT_HIGHEST,
    MISSES_AT_LOWEST,
    canonical,
    highest_meeting,
)
from sim.plan.rounds import Rounds
from sim.plan.runs import RUNS_FOLDER, Simulations
from sim.plan.slo import parse
from sim.run import simulate
from tests.scenarios import MD1
from tests.support import NO_WHATIFS, REPO_ROOT


@pytest.mark.parametrize("threshold", [1.0, 1.3, 2.7, 7.99, 0.3, 0.07])
def test_the_rate_search_brackets_then_bisects_to_its_tolerance(threshold):
    asked: list[float] = []

    def ok(k: float) -> bool:
        asked.append(k)
        return k <= threshold

    bracket = highest_meeting(ok, most=16, least=1 / 16, tolerance=0.02)
    assert bracket.outcome == FOUND
    assert bracket.meets is not None and bracket.misses is not None
    assert bracket.meets <= threshold < bracket.misses <= bracket.meets * 1.02
    assert asked[0] == 1.0 and len(asked) == len(set(asked))  # each multiple asked once
    assert all(k == canonical(k) for k in asked)
    # a bracket of 2 (or 1/2) and at most ceil(log2(ln 2 / ln 1.02)) = 6 bisections of it
    doublings = abs(math.floor(math.log2(threshold))) + 1
    assert len(asked) <= 1 + doublings + 6


def test_the_rate_search_says_how_its_bracket_ended():
    high = highest_meeting(lambda k: True, most=5, least=0.5, tolerance=0.02)
    assert (high.meets, high.misses, high.outcome) == (5.0, None, MEETS_AT_HIGHEST)
    asked: list[float] = []
    low = highest_meeting(lambda k: asked.append(k) or False, most=5, least=0.3, tolerance=0.02)
    assert (low.meets, low.misses, low.outcome) == (None, 0.3, MISSES_AT_LOWEST)
    assert asked == [1.0, 0.5, 0.3]


def md1_capacity(step_s: float, mean_wait_s: float) -> float:
    """The highest Poisson rate at which one server of constant service time ``step_s`` keeps
    the mean wait in queue within ``mean_wait_s``: Pollaczek-Khinchine for M/D/1,
    W_q = rho D / (2 (1 - rho)), solved for rho = 2 W / (D + 2 W), over D."""
    return 2 * mean_wait_s / (step_s + 2 * mean_wait_s) / step_s


def test_the_capacity_of_an_md1_server_is_the_formulas_rate():
    """A mean-wait SLO of 5 ms on a 10 ms server: rho = 0.5, 50 requests/s. The search starts
    at 40 requests/s. Its bracket must straddle the formula's rate, to within the search's 2%
    and the simulation's error (10,000 requests a run: the mean wait within ~6%, the rate
    within ~1.5%, since W_q's log-slope in rho is 4 at rho = 0.5), and the replications' own
    capacities must cover it."""
    step, wait, qps = 0.01, 0.005, 40.0
    truth = md1_capacity(step, wait)
    assert truth == pytest.approx(50.0)
    cfg = compose_config(
        [*MD1, "fleet.replicas=1", "workload.num_requests=10000", f"workload.qps={qps}"]
    )

    def launch(jobs):  # each job the composed config at its seed and rate (no Hydra per job)
        out = []
        for job in jobs:
            given = dict(o.split("=", 1) for o in job.overrides)
            sim = {**cfg["sim"], "arrival_rate_scale": float(given["sim.arrival_rate_scale"])}
            out.append(
                {"summary": simulate({**cfg, "seed": int(given["seed"]), "sim": sim}).summary}
            )
        return out

    plan, _ = load_plan([f"plan.slo=[queueing_delay_s.mean <= {wait}]", "plan.max_replications=5"])
    rounds = Rounds(launch)
    sims = Simulations([], 0, rounds)
    (capacity,) = rounds.run([lambda: fleet_capacity(sims, [parse(plan.slo[0])], plan, 1)])
    found = capacity_json(capacity, plan)
    assert found["outcome"] == FOUND
    meets, misses = found["rate_x"] * qps, found["misses_at_rate_x"] * qps
    assert misses <= meets * (1 + plan.rate_tolerance)
    error = 0.03  # the simulation's: two standard errors of a run's capacity, and then some
    assert meets <= truth * (1 + error) and misses >= truth * (1 - error), (meets, misses)
    own = found["interval"]["rate_x"]
    assert own["ci_low"] * qps * (1 - plan.rate_tolerance) <= truth
    assert truth <= own["ci_high"] * qps * (1 + plan.rate_tolerance)
    # the answer is the plan's decision, at or below the replications' mean capacity
    assert found["rate_x"] <= own["mean"] * (1 + plan.rate_tolerance)
    # requests/s is what arrived: the multiple of the config's rate, within Poisson's noise
    assert found["requests_per_s"] == pytest.approx(meets, rel=0.03)


def main(argv: list[str]) -> int:
    """``fleetcast plan ARGV``'s exit status."""
    return plan_main(argv, run_hydra)


# a small M/D/1 capacity plan: a mean TTFT of 30 ms is rho = 0.8 (80 requests/s)
SMALL = [
    *MD1,
    "fleet.replicas=1",
    "workload.num_requests=600",
    "workload.qps=50",
    "plan.solve=max_rate",
    "plan.slo=[ttft_s.mean <= 0.03]",
    "plan.rate_tolerance=0.1",
    "plan.max_replications=3",
    "plan.jobs=1",
]


@pytest.fixture(scope="module")
def capacity_plan(tmp_path_factory):
    """The small plan through the command: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("capacity") / "plan"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*SMALL, f"plan.output_dir={folder}"]) == 0
    return folder, printed.getvalue()


def test_the_command_prints_the_capacity_and_writes_its_plan(capacity_plan):
    folder, printed = capacity_plan
    plan_json = json.loads((folder / "plan.json").read_text())
    assert plan_json["solve"] == "max_rate" and plan_json["replicas"] == 1
    c = plan_json["capacity"]
    assert c["outcome"] == "found"
    assert c["misses_at_rate_x"] <= c["rate_x"] * 1.1
    assert 1.0 <= c["rate_x"] < 2.0  # 80 requests/s is x1.6 of 50
    assert c["output_tokens_per_s"] == pytest.approx(c["requests_per_s"], rel=0.05)  # 1 each
    assert c["input_tokens_per_s"] == pytest.approx(16 * c["requests_per_s"], rel=0.05)
    assert [e["rate_x"] for e in c["evaluated"]] == sorted(e["rate_x"] for e in c["evaluated"])
    assert printed.startswith("capacity of the fleet as given (1 replica(s)) at every SLO")
    assert f"  found: {_num(c['requests_per_s'])} requests/s, x{c['rate_x']:.4g} the " in printed
    # the output reference names every key of the capacity plan's plan.json
    page = (REPO_ROOT / "docs" / "reference" / "outputs.md").read_text().splitlines()
    row = next(line for line in page if line.startswith("| `plan.json` of a capacity plan"))
    assert [key for key in [*plan_json, *c] if f"`{key}`" not in row] == []
    table = pq.read_table(folder / "plan.parquet")
    assert table.num_rows == len(list((folder / RUNS_FOLDER).iterdir()))
    scenarios = set(table.column("scenario").to_pylist())
    assert {f"rate x{e['rate_x']:g}" for e in c["evaluated"]} <= scenarios
    assert set(table.column("replicas").to_pylist()) == {1}


def test_the_same_seed_gives_the_same_capacity(capacity_plan, tmp_path):
    folder, _ = capacity_plan
    _, again = run_plan([*SMALL, f"plan.output_dir={tmp_path}"], progress=False)
    assert again == json.loads((folder / "plan.json").read_text())
    assert pq.read_table(tmp_path / "plan.parquet").equals(pq.read_table(folder / "plan.parquet"))


@pytest.mark.parametrize(
    "extra, outcome, line",
    [
        (
            ["plan.slo=[ttft_s.mean <= 0.005]", "plan.min_rate_factor=0.5"],
            MISSES_AT_LOWEST,
            "  none found: the SLO fails at the lowest rate tried, x0.5",
        ),
        (
            ["plan.slo=[ttft_s.mean <= 1]", "plan.max_rate_factor=1.5"],
            MEETS_AT_HIGHEST,
            "  at least x1.5 the config's rate",
        ),
    ],
)
def test_a_bracket_that_does_not_close_says_how_it_ended(tmp_path, capsys, extra, outcome, line):
    assert main([*SMALL, *extra, f"plan.output_dir={tmp_path}"]) == 0
    assert json.loads((tmp_path / "plan.json").read_text())["capacity"]["outcome"] == outcome
    assert line in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, starts",
    [
        (["plan.solve=fastest"], "error: plan.solve='fastest': "),
        (["plan.solve=max_rate", "plan.grid={hardware: [h100_sxm, h200]}"], "error: plan.grid="),
        (["plan.solve=max_rate", "plan.candidates=[[hardware=h200]]"], "error: plan.candidates="),
        (["plan.solve=max_rate", "sim.arrival_rate_scale=2"], "error: sim.arrival_rate_scale="),
        (["plan.solve=max_rate", "plan.rate_tolerance=0"], "error: plan.rate_tolerance="),
        (["plan.solve=max_rate", "plan.max_rate_factor=1"], "error: plan.max_rate_factor="),
        (
            ["plan.solve=max_rate", "workload=closed_loop"],
            "error: plan.solve='max_rate': a closed-loop workload",
        ),
    ],
)
def test_bad_capacity_input_is_one_line(capsys, argv, starts):
    assert main(["workload=poisson", "workload.num_requests=20", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(starts) and err.count("\n") == 1, err


def test_the_headroom_to_the_slo_is_where_each_md1_replica_meets_it(tmp_path):
    """120 requests/s over random routing to replicas of one request per 10 ms step, mean TTFT
    within 20 ms (the wait within 10 ms): each replica an M/D/1 queue, 2 replicas (60
    requests/s each, rho = 0.6: TTFT 17.5 ms). Each meets the bound up to rho = 2/3: 133
    requests/s in all, x1.111 the rate."""
    _, plan_json = run_plan(
        [
            *MD1,
            "router=random",
            "workload.num_requests=4000",
            "workload.qps=120",
            "plan.slo=[ttft_s.mean <= 0.02]",
            "plan.max_replicas=8",
            "plan.max_replications=4",
            "plan.slo_headroom=true",
            "plan.rate_tolerance=0.05",
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
            *NO_WHATIFS,
        ],
        progress=False,
    )
    (answer,) = plan_json["candidates"]
    assert answer["replicas"] == 2
    room = answer["slo_headroom"]
    truth = md1_capacity(0.01, 0.01) * 2 / 120
    assert room["outcome"] == FOUND
    assert room["misses_at_rate_x"] <= room["meets_up_to_rate_x"] * 1.05
    error = 0.03  # the simulation's (test_the_capacity_of_an_md1_server_is_the_formulas_rate)
    assert room["meets_up_to_rate_x"] <= truth * (1 + error)
    assert room["misses_at_rate_x"] >= truth * (1 - error)
    scenarios = set(pq.read_table(tmp_path / "plan.parquet").column("scenario").to_pylist())
    assert {f"headroom to SLO rate x{k}" for k in room["evaluated"]} <= scenarios
