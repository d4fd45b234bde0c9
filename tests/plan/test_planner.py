"""fleetcast plan (sim/plan): the search, the replications' decision, the SLO grammar, and the
planner against queueing theory."""

from __future__ import annotations

import json
import math

import pytest

from sim.cli import run_hydra
from sim.errors import ConfigError
from sim.plan.candidates import candidates
from sim.plan.planner import load_plan, run_plan
from sim.plan.planner import main as plan_main
from sim.plan.replications import evaluate, t_quantile
from sim.plan.search import smallest_meeting
from sim.plan.slo import Constraint, parse
from tests.support import NO_WHATIFS


@pytest.mark.parametrize("answer", [1, 2, 3, 7, 8, 9, 33, 64])
def test_the_search_finds_the_smallest_count_in_few_evaluations(answer):
    asked = []

    def point(count):
        asked.append(count)
        return count >= answer

    found, points = smallest_meeting(point, bool, 64)
    assert found == answer
    assert len(asked) == len(set(asked))  # each count once
    # bracketing (log2 of the answer, +1) then bisecting the gap (log2 of half the answer)
    assert len(asked) <= 2 * math.ceil(math.log2(answer)) + 2
    assert len(asked) <= 64 // 3


@pytest.mark.parametrize("answer, guess, most", [(5, 5, 2), (4, 5, 4), (6, 5, 2), (1, 9, 5)])
def test_a_search_from_a_guess_gallops_away_from_it(answer, guess, most):
    asked = []

    def point(count):
        asked.append(count)
        return count >= answer

    found, _ = smallest_meeting(point, bool, 64, start=guess)
    assert found == answer and asked[0] == guess
    assert len(asked) <= most


def main(argv: list[str]) -> int:
    """``fleetcast plan ARGV``'s exit status."""
    return plan_main(argv, run_hydra)


def test_the_search_says_infeasible_after_trying_the_maximum():
    found, points = smallest_meeting(lambda c: False, bool, 10)
    assert found is None and sorted(points) == [1, 2, 4, 8, 10]


def test_slo_grammar_and_values():
    c = parse("ttft_s.p99 <= 2")
    assert c == Constraint("ttft_s.p99", "<=", 2.0)
    assert c.value({"ttft_s": {"p99": 1.5}}) == 1.5 and c.met_by(1.5) and not c.met_by(2.5)
    assert c.value({"ttft_s": {"p99": None}}) is None and not c.met_by(None)
    share = parse("slo_attainment >= 0.99")
    summary = {"goodput_requests_per_s": 9.9, "duration_s": 10.0, "num_requests": 100}
    assert share.value(summary) == pytest.approx(0.99) and share.met_by(0.995)
    for bad in ("ttft_s.p99 < 2", "ttft < two", 3):
        with pytest.raises(ConfigError, match="^plan.slo="):
            parse(bad)
    with pytest.raises(ConfigError, match="not a number of summary.json"):
        parse("ttft_s.p42 <= 1", {"ttft_s": {"p99": 1.0}})


def _runs(values, verdict="stable", share=1.0):
    """A run function giving summaries whose ttft_s.mean follows ``values``."""
    return lambda r: {
        "ttft_s": {"mean": values[r]},
        "stability": {
            "verdict": verdict if isinstance(verdict, str) else verdict[r],
            "served_share": share,
        },
    }


def test_replications_decide_as_soon_as_the_interval_is_clear():
    c = [parse("ttft_s.mean <= 1")]
    clear = evaluate(
        4,
        _runs([0.5, 0.51, 0.49, 0.5]),
        c,
        min_replications=3,
        max_replications=10,
        confidence=0.95,
    )
    assert clear.decision == "meets" and clear.replications == 3
    assert clear.miss_probability == 0.0
    # straddling the bound: more replications, then the means decide at the cap
    values = [0.9, 1.1, 0.95, 1.05, 0.97, 1.04]
    unsure = evaluate(4, _runs(values), c, min_replications=3, max_replications=6, confidence=0.95)
    assert unsure.replications == 6 and "by the means" in unsure.reason
    assert unsure.decision == ("meets" if sum(values) / 6 <= 1 else "misses")
    assert unsure.miss_probability == pytest.approx(3 / 6)
    # the interval: t quantile x s / sqrt(n)
    stat = unsure.statistics[0]
    mean, low, high = stat.interval(0.95)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 5)
    assert high - mean == pytest.approx(t_quantile(0.975, 5) * sd / math.sqrt(6))


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 29, 100])
def test_t_quantiles_match_scipy(df):
    from scipy.stats import t

    for p in (0.9, 0.95, 0.975):
        assert t_quantile(p, df) == pytest.approx(t.ppf(p, df), rel=2e-3)


def test_a_count_whose_replications_miss_too_often_misses():
    # the interval says it meets, but one replication in three missed: above a 0.2 allowance,
    # so more replications; still above at the cap, so it misses
    def point(values: list[float]):
        return evaluate(
            2,
            _runs(values),
            [parse("ttft_s.mean <= 1")],
            min_replications=3,
            max_replications=6,
            confidence=0.5,
            max_miss_probability=0.2,
        )

    missing = point([0.5, 1.02, 0.55, 1.05, 0.52, 0.51])
    assert missing.replications == 6
    assert missing.decision == "misses"
    assert "above plan.max_miss_probability=0.2" in missing.reason
    # one miss in five is within the allowance: met after five
    met = point([0.5, 0.55, 1.02, 0.52, 0.51, 0.5])
    assert met.decision == "meets" and met.replications == 5


def test_identical_replications_are_a_run_with_nothing_random():
    point = evaluate(
        3,
        _runs([0.9] * 5),
        [parse("ttft_s.mean <= 1")],
        min_replications=3,
        max_replications=5,
        confidence=0.95,
    )
    assert point.decision == "meets" and point.replications == 2
    assert "nothing random" in point.reason
    assert point.statistics[0].interval(0.95) == (0.9, 0.9, 0.9)


def test_a_grossly_unstable_replication_misses_at_once():
    point = evaluate(
        2,
        _runs([0.1] * 5, verdict="unstable", share=0.3),
        [parse("ttft_s.mean <= 1")],
        min_replications=3,
        max_replications=5,
        confidence=0.95,
    )
    assert point.decision == "misses" and point.reason == "unstable"
    assert point.replications == 1


@pytest.mark.parametrize(
    "verdicts, decision",
    [
        (["unstable", "stable", "stable"], "meets"),  # one by chance does not decide
        (["near_saturation", "undetermined", "stable"], "misses"),  # most are not stable
    ],
)
def test_a_count_needs_most_replications_stable(verdicts, decision):
    point = evaluate(
        2,
        _runs([0.5, 0.52, 0.48], verdict=verdicts, share=0.95),
        [parse("ttft_s.mean <= 1")],
        min_replications=3,
        max_replications=5,
        confidence=0.95,
    )
    assert point.decision == decision and point.replications == 3


def test_the_grid_is_every_combination_and_plan_keys_are_checked():
    assert candidates({}) == [[]]
    assert candidates({"hardware": ["h100_sxm", "h200"], "fleet.tp": [1, 2]}) == [
        ["hardware=h100_sxm", "fleet.tp=1"],
        ["hardware=h100_sxm", "fleet.tp=2"],
        ["hardware=h200", "fleet.tp=1"],
        ["hardware=h200", "fleet.tp=2"],
    ]
    with pytest.raises(ConfigError, match="^plan.grid.hardware=\\[\\]"):
        candidates({"hardware": []})
    plan, rest = load_plan(["plan.max_replicas=8", "workload=poisson"])
    assert plan.max_replicas == 8 and rest == ["workload=poisson"]
    with pytest.raises(ConfigError, match="^plan.bogus"):
        load_plan(["plan.bogus=1"])
    with pytest.raises(ConfigError, match="^plan.confidence"):
        load_plan(["plan.confidence=1.5"])


def md1_mean_ttft(rate: float, step_s: float, replicas: int) -> float:
    """Each replica an M/D/1 queue at rate/replicas: mean wait rho D / (2 (1 - rho)), plus
    the one step of service."""
    rho = rate * step_s / replicas
    return math.inf if rho >= 1 else rho * step_s / (2 * (1 - rho)) + step_s


@pytest.mark.parametrize(
    "rate, bound, knee",
    [
        (250.0, 0.03, True),  # formula: 3 replicas 0.0517, 4 replicas 0.0183 -> 4
        (250.0, 0.0165, False),  # 4: 0.0183, 5: 0.0150 -> 5 (10% and 9% from the bound)
        (120.0, 0.02, False),  # 2: 0.025, 3: 0.0133 -> 3
    ],
)
def test_the_plan_of_an_md1_fleet_is_the_count_the_formula_gives(tmp_path, rate, bound, knee):
    step = 0.01
    expected = next(c for c in range(1, 50) if md1_mean_ttft(rate, step, c) <= bound)
    _, plan_json = run_plan(
        [
            "step_time=constant",
            f"step_time.seconds={step}",
            "scheduler.max_num_seqs=1",
            "router=random",
            "workload=poisson",
            "workload.num_requests=6000",
            f"workload.qps={rate}",
            "workload.prompt_tokens=16",
            "workload.output_tokens=1",
            f"plan.slo=[ttft_s.mean <= {bound}]",
            "plan.max_replicas=16",
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
            "plan.step_time_scales=[]",
            "plan.rate_scales=[]",
            f"plan.max_headroom={4 if knee else 'null'}",
        ],
        progress=False,
    )
    (answer,) = plan_json["candidates"]
    assert answer["replicas"] == expected
    assert answer["miss_probability"] <= plan_json["max_miss_probability"]
    stat = answer["slo"][f"ttft_s.mean <= {bound:g}"]
    assert stat["ci_low"] <= stat["mean"] <= stat["ci_high"] <= bound
    formula = md1_mean_ttft(rate, step, expected)
    assert stat["mean"] == pytest.approx(formula, rel=0.1)
    # the count below misses
    below = [p for p in answer["evaluated"] if p["replicas"] == expected - 1]
    assert not below or below[0]["decision"] == "misses"
    if knee:  # c servers of one request per D seconds: the queue grows past c / (rate D)
        room = answer["headroom"]
        capacity = expected / (rate * step)
        assert room["stable_up_to_rate_x"] < room["not_stable_at_rate_x"]
        assert room["not_stable_at_rate_x"] / room["stable_up_to_rate_x"] <= 1.06
        assert room["not_stable_at_rate_x"] == pytest.approx(capacity, rel=0.15)


def test_the_command_writes_the_plan_folder_and_a_rerun_resumes(tmp_path, capsys):
    argv = [
        "workload=poisson",
        "workload.num_requests=200",
        "workload.qps=10",
        "workload.prompt_tokens=128",
        "workload.output_tokens=32",
        "plan.slo=[ttft_s.p99 <= 1, tpot_s.p99 <= 0.1]",
        "plan.grid={hardware: [h100_sxm, a100_80g]}",
        "plan.max_replicas=4",
        "plan.jobs=1",
        f"plan.output_dir={tmp_path}",
        "plan.max_headroom=2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 of 2 candidate(s) meet every SLO")
    assert out.count("what-if: step_time x0.9: ") == 2 and "rate x1.2: " in out
    plan_json = json.loads((tmp_path / "plan.json").read_text())
    assert [c["candidate"] for c in plan_json["candidates"]] == [
        "hardware=h100_sxm",
        "hardware=a100_80g",
    ]
    runs = sorted((tmp_path / "runs").iterdir())
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "plan.parquet")
    assert table.num_rows == len(runs)
    assert {"candidate", "scenario", "hardware", "replicas", "replication", "seed"} <= set(
        table.column_names
    )
    assert {"base", "step_time x1.1", "rate x1.2"} <= set(table.column("scenario").to_pylist())
    for c in plan_json["candidates"]:
        assert set(c["whatifs"]) == {"step_time x0.9", "step_time x1.1", "rate x1.2"}
        # slower steps or more traffic never need fewer replicas, faster steps never more
        assert c["whatifs"]["step_time x1.1"]["replicas"] >= c["replicas"]
        assert c["whatifs"]["rate x1.2"]["replicas"] >= c["replicas"]
        assert c["whatifs"]["step_time x0.9"]["replicas"] <= c["replicas"]
    stamps = [p.stat().st_mtime_ns for p in runs]
    assert main(argv) == 0  # resumes: every simulation read back, none run again
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "runs").iterdir())] == stamps
    assert json.loads((tmp_path / "plan.json").read_text()) == plan_json


@pytest.mark.parametrize(
    "argv, starts",
    [
        (["plan.slo=[ttft < 1]"], "error: plan.slo="),
        (["plan.grid=[1, 2]"], "error: plan="),
        (["plan.slo=[ttft_s.p99 <= 1"], "error: plan="),
        (["fleet.replicas=2"], "error: fleet.replicas='2': fleetcast plan sets it"),
        (["plan.grid={seed: [1, 2]}"], "error: plan.grid.seed="),
        (["plan.min_replications=5", "plan.max_replications=3"], "error: plan.min_replications"),
    ],
)
def test_bad_plan_input_is_one_line(capsys, argv, starts):
    assert main(["workload=poisson", "workload.num_requests=20", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(starts) and err.count("\n") == 1, err


def test_a_candidate_the_catalog_cannot_run_is_infeasible_with_the_reason(tmp_path):
    _, plan = run_plan(
        [
            "workload=poisson",
            "workload.num_requests=50",
            "plan.slo=[ttft_s.p99 <= 5]",
            "plan.candidates=[[hardware=a100_80g, precision.weights=fp8]]",
            *NO_WHATIFS,
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    (c,) = plan["candidates"]
    assert not c["feasible"] and "no fp8 tensor cores" in c["reason"]


def test_a_load_grid_composes_with_the_base_workload(tmp_path):
    _, plan = run_plan(
        [
            "workload=poisson",
            "workload.num_requests=60",
            "plan.grid={workload.qps: [2, 4]}",
            "plan.slo=[ttft_s.p99 <= 5]",
            *NO_WHATIFS,
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    assert [c["candidate"] for c in plan["candidates"]] == ["workload.qps=2", "workload.qps=4"]


def test_the_run_cache_is_keyed_by_the_overrides_and_version_and_checks_the_config(
    tmp_path, monkeypatch
):
    import sim
    from sim.plan.rounds import Rounds
    from sim.plan.runs import LocalLauncher, Simulations

    def summary(version: str = sim.__version__) -> dict:
        monkeypatch.setattr(sim, "__version__", version)
        with LocalLauncher(tmp_path, 1) as launch:
            sims = Simulations(["workload=poisson", "workload.num_requests=20"], 0, Rounds(launch))
            (found,) = sims.rounds.run([lambda: sims.summary([], 1, 0)])
        return found

    first = summary()
    (folder,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "summary.json"]
    stamp = (folder / "summary.json").stat().st_mtime_ns
    assert summary() == first  # read back, not simulated again
    assert (folder / "summary.json").stat().st_mtime_ns == stamp
    # a folder whose config is not this job's (a changed default) is simulated anew in place
    text = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(text.replace("num_requests: 20", "num_requests: 21"))
    assert summary() == first
    assert (folder / "summary.json").stat().st_mtime_ns != stamp
    # the same overrides under another Fleetcast are simulated anew, never read back stale
    summary("0.0.0-other")
    assert len(list((tmp_path / "runs").iterdir())) == 2


PLAN_ARGV = [
    "workload=poisson",
    "workload.num_requests=120",
    "workload.qps=30",
    "workload.prompt_tokens=512",
    "workload.output_tokens=64",
    "plan.slo=[ttft_s.p99 <= 0.5]",
    "plan.grid={hardware: [h100_sxm, a100_80g]}",
    "plan.max_replicas=6",
    "plan.step_time_scales=[1.5]",
    "plan.rate_scales=[]",
    "plan.max_headroom=null",
]


def _answers(plan_json: dict) -> list:
    return [
        (c["candidate"], c["replicas"], c["evaluated"], c["slo"], c["whatifs"])
        for c in plan_json["candidates"]
    ]


def test_the_plan_is_the_same_through_hydra_launchers_and_local_processes(tmp_path, capsys):
    # the command runs its simulations through Hydra's launcher, one job per simulation in
    # the plan folder's runs/; the Python API through local processes: the same answers
    _, local = run_plan([*PLAN_ARGV, "plan.jobs=2", f"plan.output_dir={tmp_path / 'local'}"])
    for launcher in ("hydra/launcher=basic", "hydra.launcher.n_jobs=2"):
        folder = tmp_path / launcher.replace("/", "_")
        assert main([*PLAN_ARGV, f"plan.output_dir={folder}", launcher]) == 0
        through_hydra = json.loads((folder / "plan.json").read_text())
        assert _answers(through_hydra) == _answers(local)
        runs = list((folder / "runs").iterdir())
        assert all((r / "summary.json").is_file() for r in runs)
        simulations = sum(
            e["replications"]
            for c in through_hydra["candidates"]
            for e in [*c["evaluated"], *(e for w in c["whatifs"].values() for e in w["evaluated"])]
        )
        assert len(runs) == simulations
    err = capsys.readouterr().err
    assert "[2/2] hardware=" in err and "HYDRA" not in err  # progress lines, no job log


@pytest.mark.parametrize(
    "extra, starts",
    [
        (["hydra.sweep.dir=/tmp/x"], "error: hydra.sweep.dir='/tmp/x': fleetcast plan sets it"),
        (["hydra/launcher=basic", "plan.jobs=2"], "error: plan.jobs=2: sets the joblib"),
    ],
)
def test_hydra_settings_the_plan_owns_are_refused_in_one_line(capsys, extra, starts):
    assert main([*PLAN_ARGV, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(starts) and err.count("\n") == 1, err


def test_the_intervals_cover_the_long_run_mean_at_their_nominal_rate():
    """40 independent plans' worth of replications (5 seeds each) of an M/D/1 queue at 50%
    load: the 95% interval on mean TTFT covers the queue's long-run mean (the formula) in 33 or
    more of 40 (a binomial(40, 0.95) falls below 34 with probability ~3%)."""
    from sim.config.compose import compose_config
    from sim.run import simulate

    step, rate = 0.01, 50.0
    base = compose_config(
        [
            "fleet.replicas=1",
            "step_time=constant",
            f"step_time.seconds={step}",
            "scheduler.max_num_seqs=1",
            "workload=poisson",
            "workload.num_requests=1000",
            f"workload.qps={rate}",
            "workload.prompt_tokens=16",
            "workload.output_tokens=1",
            "sim.progress=false",
        ]
    )
    truth = md1_mean_ttft(rate, step, 1)
    constraint = [parse("ttft_s.mean <= 1")]
    covered = 0
    for repetition in range(40):

        def run(r, repetition=repetition):
            return simulate({**base, "seed": 1000 * repetition + r}).summary

        point = evaluate(
            1, run, constraint, min_replications=5, max_replications=5, confidence=0.95
        )
        assert point.replications == 5  # every SLO met at once after the minimum
        _, low, high = point.statistics[0].interval(0.95)
        covered += low <= truth <= high
    assert covered >= 33, covered  # 35 of 40 when written


def test_help_prints_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "fleetcast plan [overrides]" in capsys.readouterr().out


def test_quoted_paths_reach_hydra_unchanged():
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from sim.plan.planner import _quoted

    parser = OverridesParser.create()
    for path in ["/a b", "/it's", "/d${x}", "/back\\", "/x\\'y", "/a\\b", "/a,b=c"]:
        override = parser.parse_override(f"hydra.sweep.dir={_quoted(path)}")
        value = OmegaConf.to_container(OmegaConf.create({"v": override.value()}), resolve=True)
        assert value["v"] == path


def test_a_what_if_a_candidate_cannot_run_is_left_out_not_fatal(tmp_path):
    # a closed-loop candidate has no arrival rate to scale: its rate what-if and headroom
    # are left out, the other candidate keeps its own
    _, plan = run_plan(
        [
            "workload=poisson",
            "workload.num_requests=40",
            "plan.slo=[ttft_s.p99 <= 5]",
            "plan.candidates=[[workload=closed_loop, workload.num_requests=40], []]",
            "plan.max_replicas=2",
            "plan.step_time_scales=[]",
            "plan.rate_scales=[1.2]",
            "plan.max_headroom=2",
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    closed, open_loop = plan["candidates"]
    assert closed["feasible"] and closed["whatifs"] == {} and "headroom" not in closed
    assert set(open_loop["whatifs"]) == {"rate x1.2"} and "headroom" in open_loop


def test_a_grid_key_that_is_also_a_summary_key_gets_a_column_of_its_own(tmp_path):
    # spec_decode.num_draft_tokens is a summary key too (an int, absent without speculation):
    # the grid's column, the override's text, is config.KEY beside the summary's
    argv = [
        "workload=poisson",
        "workload.num_requests=20",
        "workload.prompt_tokens=64",
        "workload.output_tokens=16",
        "plan.grid={spec_decode.num_draft_tokens: [0, 3]}",
        "plan.max_replicas=1",
        "plan.jobs=1",
        "plan.min_replications=2",
        "plan.max_replications=2",
        f"plan.output_dir={tmp_path}",
        *NO_WHATIFS,
    ]
    assert main(argv) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "plan.parquet")
    names = table.column_names
    assert names[:3] == ["candidate", "scenario", "config.spec_decode.num_draft_tokens"]
    assert names.count("spec_decode.num_draft_tokens") == 1
    assert table.column("config.spec_decode.num_draft_tokens").to_pylist() == ["0", "0", "3", "3"]
    assert table.column("spec_decode.num_draft_tokens").to_pylist() == [None, None, 3, 3]
