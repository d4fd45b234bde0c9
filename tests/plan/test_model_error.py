"""The model's own error in a plan (plan.model_error=measured): each answer searched again at
its band's p50 and p90 step-time multiples, against the M/D/1 formula, and carried into
plan.json and the ranked table."""

from __future__ import annotations

import json

import pytest

from sim.errors import ConfigError
from sim.output.model_error import BAND_COLUMNS
from sim.plan.answer import ranked_table
from sim.plan.planner import run_plan
from sim.report.answer import plan_answer
from sim.report.inputs import PlanInput
from tests.scenarios import MD1
from tests.support import NO_WHATIFS

RATE, STEP, BOUND = 100.0, 0.01, 0.04


def md1_count(scale: float) -> int:
    """The fewest M/D/1 replicas (rate / c each, one step of STEP x scale) whose mean TTFT
    (wait rho D / (2 (1 - rho)) plus the step) is within BOUND."""
    step = STEP * scale
    for c in range(1, 50):
        rho = RATE * step / c
        if rho < 1 and rho * step / (2 * (1 - rho)) + step <= BOUND:
            return c
    raise AssertionError("no count")


def bands_table(path, p50: float, p90: float) -> str:
    """A bands table with one row: every constant-step-time deployment."""
    row = ["constant", "*", "*", "*", "*", "12", f"{p50 * 0.9:g}", f"{p50:g}", f"{p90:g}", "test"]
    path.write_text("# a test table\n" + ",".join(BAND_COLUMNS) + "\n" + ",".join(row) + "\n")
    return str(path)


def plan(folder, table: str, *extra: str) -> dict:
    _, plan_json = run_plan(
        [
            *MD1,
            f"step_time.seconds={STEP}",
            f"workload.qps={RATE}",
            "workload.num_requests=3000",
            "router=random",
            f"plan.slo=[ttft_s.mean <= {BOUND}]",
            "plan.max_replicas=12",
            "plan.jobs=1",
            f"plan.output_dir={folder}",
            "plan.rate_scales=[]",
            "plan.max_headroom=null",
            "plan.model_error=measured",
            f"plan.model_error_table={table}",
            *extra,
        ],
        progress=False,
    )
    return plan_json


def test_a_wider_band_never_answers_fewer_replicas_and_each_count_is_the_formula(tmp_path):
    # formula counts: x1 and x1.25 -> 2 (mean TTFT at 38% and 57% of the bound), x1.9 -> 3
    # (89%; 2 replicas would be at rho 0.95), x0.8 -> 1 (60%)
    bands = [(1.0, 1.0), (1.0, 1.25), (1.25, 1.9)]
    at_p90 = []
    for i, (p50, p90) in enumerate(bands):
        table = bands_table(tmp_path / f"bands{i}.csv", p50, p90)
        # one folder: the simulations of a scale already seen are reused, not rerun
        (answer,) = plan(tmp_path / "plan", table, "plan.step_time_scales=[0.8]")["candidates"]
        block = answer["model_error"]
        assert answer["replicas"] == md1_count(1.0) == 2
        assert answer["whatifs"]["step_time x0.8"]["replicas"] == md1_count(0.8) == 1
        assert block["replicas_at_p50"] == md1_count(p50)
        assert block["replicas_at_p90"] == md1_count(p90)
        assert (
            block["replicas_at_p90"]
            >= block["replicas_at_p50"]
            >= answer["whatifs"]["step_time x0.8"]["replicas"]
        )
        assert block["band"]["p50"] == p50 and block["band"]["p90"] == p90
        assert block["band"]["n"] == 12 and block["band"]["source"] == "test"
        assert block["band"]["level"] == "any engine, any gpu_family, any tp, any precision"
        assert block["class"]["step_time_model"] == "constant"
        at_p90.append(block["replicas_at_p90"])
    assert at_p90 == sorted(at_p90) == [2, 2, 3]


def test_the_ranked_table_says_the_count_at_the_band_and_where_it_came_from(tmp_path):
    table = bands_table(tmp_path / "bands.csv", 1.25, 1.9)
    plan_json = plan(tmp_path / "plan", table, "plan.step_time_scales=[]")
    text = ranked_table(plan_json)
    line = next(li for li in text.splitlines() if "model error:" in li)
    assert line.strip() == (
        "model error: 2 at the measured model error (p50 x1.25); 3 if step times are as slow "
        "as the worst 10% of validation rows (p90 x1.9); band of n 12 (test), class constant "
        "(any engine, any gpu_family, any tp, any precision)"
    )
    assert "what-if" not in text  # the model-error searches are not repeated as what-ifs
    # fleetcast report's answer says the same
    report = plan_answer(PlanInput(tmp_path / "plan", plan_json, None, None), None)
    assert report.endswith(
        "The model's own error: 2 at the measured model error (p50 x1.25); 3 if step times "
        "are as slow as the worst 10% of validation rows (p90 x1.9); band of n 12 (test), "
        "class constant (any engine, any gpu_family, any tp, any precision)."
    )


def test_a_model_without_validation_rows_says_so(tmp_path):
    table = tmp_path / "bands.csv"
    table.write_text(",".join(BAND_COLUMNS) + "\n")  # no rows at all
    (answer,) = plan(tmp_path / "plan", str(table), "plan.step_time_scales=[]")["candidates"]
    assert answer["model_error"]["band"] is None
    assert answer["model_error"]["note"] == (
        "no validation rows for step_time_model constant: no measured error band"
    )
    assert answer["whatifs"] == {}


def test_off_by_default_adds_nothing(tmp_path):
    _, plan_json = run_plan(
        [
            *MD1,
            f"workload.qps={RATE}",
            "workload.num_requests=300",
            f"plan.slo=[ttft_s.mean <= {BOUND}]",
            "plan.jobs=1",
            f"plan.output_dir={tmp_path}",
            "plan.step_time_scales=[]",
            "plan.rate_scales=[]",
            "plan.max_headroom=null",
        ],
        progress=False,
    )
    assert "model_error" not in plan_json["candidates"][0]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("a,b\n1,2\n", "not a bands table: no column"),
        (
            ",".join(BAND_COLUMNS) + "\nconstant,*,*,*,*,12,0.9,0,1.2,x\n",
            "p50 '0' of class ['constant', '*', '*', '*', '*'] must be > 0",
        ),
    ],
)
def test_a_bad_bands_table_is_one_line_naming_the_field(tmp_path, text, reason):
    table = tmp_path / "bands.csv"
    table.write_text(text)
    with pytest.raises(ConfigError, match="plan.model_error_table") as err:
        plan(tmp_path / "plan", str(table), "plan.step_time_scales=[]")
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_the_command_answers_with_the_band_and_plan_parquet_has_its_scenarios(tmp_path, capsys):
    """Through ``fleetcast plan`` (Hydra's sweeper runs the searches: the bands are looked up
    before it starts) with the shipped table and its roofline bands."""
    import pyarrow.parquet as pq

    from sim.cli import run_hydra
    from sim.plan.planner import main

    argv = [
        "workload=poisson",
        "workload.num_requests=100",
        "workload.qps=5",
        "workload.prompt_tokens=128",
        "workload.output_tokens=16",
        "plan.slo=[ttft_s.p99 <= 1]",
        "plan.max_replicas=2",
        "plan.min_replications=2",
        "plan.max_replications=2",
        "plan.jobs=1",
        f"plan.output_dir={tmp_path}",
        *NO_WHATIFS,
        "plan.model_error=measured",
    ]
    assert main(argv, run_hydra) == 0
    out = capsys.readouterr().out
    block = json.loads((tmp_path / "plan.json").read_text())["candidates"][0]["model_error"]
    band = block["band"]
    assert block["class"] == {
        "step_time_model": "roofline",
        "engine": "vllm",
        "gpu_family": "H100",
        "tp": "1",
        "precision": "bf16",
    }
    assert band["rows"] == "validation rows" and band["n"] >= 10
    assert band["p10"] <= band["p50"] <= band["p90"]
    assert f"1 at the measured model error (p50 x{band['p50']:.3g}); 1 if step times" in out
    scenarios = set(pq.read_table(tmp_path / "plan.parquet").column("scenario").to_pylist())
    assert scenarios == {
        "base",
        f"model error p50 x{band['p50']:.4g}",
        f"model error p90 x{band['p90']:.4g}",
    }
