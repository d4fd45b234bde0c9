"""Folders the report tests read: a small simulated run, a day plan built from copies of it, a
real tiny day plan, a tiny plan and a collected sweep of four tiny runs; each made once per
session."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from sim.output.scaling import ScalingLog
from sim.run import simulate
from sim.sweeps.collect import collect
from tests.scenarios import QUICK_DAY_PLAN
from tests.support import compose


def keep_drawings(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list:
    """The ``Drawing``s ``module`` draws from now on (its figures' axes, to inspect)."""
    drawn: list = []
    real = module.drawing

    @contextmanager
    def keeping(*args: object, **kwargs: object) -> Iterator[object]:
        with real(*args, **kwargs) as d:
            drawn.append(d)
            yield d

    monkeypatch.setattr(module, "drawing", keeping)
    return drawn


# ~8 s of Poisson arrivals with lengths on both sides of the patterns' 1,024/256 split
RUN = [
    "fleet.replicas=2",
    "workload=poisson",
    "workload.num_requests=160",
    "workload.qps=20",
    "workload.prompt_tokens={dist:uniform,low:1,high:3000}",
    "workload.output_tokens={dist:uniform,low:1,high:600}",
    "sim.progress=false",
]


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run with the overrides its command recorded (as ``fleetcast`` keeps them)."""
    folder = tmp_path_factory.mktemp("run") / "r"
    simulate(compose(*RUN), folder)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([*RUN, f"output_dir={folder}"])
    )
    return folder


# 1 replica, a second asked for at 2 s (ready at 4 s), drained at 6 s and released at 7 s
SCALING_ROWS = [
    (0.0, 1, 0, 0, 1, 2.99, "start", None),
    (2.0, 1, 1, 0, 2, 5.98, "scale_up", None),
    (4.0, 2, 0, 0, 2, 5.98, "ready", 1),
    (6.0, 1, 0, 1, 2, 5.98, "drain", 0),
    (7.0, 1, 0, 0, 1, 2.99, "released", 0),
]


def scaling_table(rows: list[tuple] = SCALING_ROWS) -> pa.Table:
    """``scaling.parquet`` as the autoscaler writes it (``sim.output.scaling``)."""
    log = ScalingLog()
    for time_s, ready, provisioning, draining, gpus, usd, event, replica in rows:
        log.record(
            time_s,
            event,
            ready=ready,
            provisioning=provisioning,
            draining=draining,
            gpus=gpus,
            usd_per_hour=usd,
            replica_id=replica,
        )
    return log.table()


def hourly(level: float, missed: tuple[int, ...] = ()) -> list[dict]:
    """24 hours at ``level``, plan.slo missed in the hours ``missed``."""
    return [
        {
            "hour": h,
            "requests": 100,
            "attainment": level,
            "low": level - 0.02,
            "high": min(1.0, level + 0.01),
            "plan_slo": {"ttft_s.p99 <= 1": 1.4 if h in missed else 0.6},
            "plan_slo_met": h not in missed,
        }
        for h in range(24)
    ]


DAY_PLAN = {
    "periods": [
        {
            "start_hour": 22,
            "end_hour": 7,
            "rate_rps": 1.5,
            "candidate": ["hardware=h100_sxm"],
            "replicas": 1,
            "usd_per_hour": 2.99,
        },
        {
            "start_hour": 7,
            "end_hour": 22,
            "rate_rps": 6.0,
            "candidate": ["hardware=h100_sxm"],
            "replicas": 2,
            "usd_per_hour": 5.98,
        },
    ],
    "answers": {
        "peak": {
            "run": "answers/peak",
            "usd_per_day": 143.52,
            "gpu_hours": 48.0,
            "slo_attainment": 0.999,
            "hourly": hourly(0.99),
        },
        "seasonal": {
            "run": "answers/seasonal",
            "usd_per_day": 116.61,
            "gpu_hours": 39.0,
            "slo_attainment": 0.995,
            "hourly": hourly(0.97, missed=(8,)),
            "hours_plan_slo_met": 23,
            "hours_with_requests": 24,
        },
        "autoscaled": {
            "run": "answers/autoscaled",
            "usd_per_day": 98.67,
            "gpu_hours": 33.0,
            "slo_attainment": 0.992,
            "hourly": hourly(0.95, missed=(8, 9)),
            "hours_plan_slo_met": 22,
            "hours_with_requests": 24,
            # what the day planner writes besides the brief's shape
            "slo_attainment_low": 0.99,
            "slo_attainment_high": 0.994,
            "replicas_max": 2,
        },
    },
    "saving_vs_peak": {"seasonal": 0.1875, "autoscaled": 0.3125},
    "plan_slo": ["ttft_s.p99 <= 1"],
    "command": "fleetcast plan-day workload=azure_day",
    "hourly_rates_rps": [1.5] * 7 + [6.0] * 15 + [1.5] * 2,
    "start_hour": 0,
    "time_compression": 10800,  # the runs' 8 s stand for the day
    "note": "made by hand",
    "a key this reader does not know": [1, 2],
}


@pytest.fixture(scope="session")
def day_folder(tmp_path_factory: pytest.TempPathFactory, run_folder: Path) -> Path:
    """A hand-written day plan in the shape the day planner writes, each answer a copy of the
    run with a scaling.parquet and the summary's autoscale block."""
    folder = tmp_path_factory.mktemp("day") / "d"
    for name in DAY_PLAN["answers"]:
        answer = folder / "answers" / name
        shutil.copytree(run_folder, answer)
        pq.write_table(scaling_table(), answer / "scaling.parquet")
        summary = json.loads((answer / "summary.json").read_text())
        summary["autoscale"] = {
            "gpu_hours": 0.0039,
            "usd_total": 0.0117,
            "replicas_mean": 1.4,
            "replicas_min": 1,
            "replicas_max": 2,
            "scale_ups": 1,
            "scale_downs": 1,
        }
        (answer / "summary.json").write_text(json.dumps(summary))
    (folder / "day_plan.json").write_text(json.dumps(DAY_PLAN))
    return folder


# A real day plan (``sim.plan.day``), as tests/plan/test_day.py's two engines but smaller and
# starting at 09:30: an M/D/1 queue per replica (one 16-token prompt and one output token at
# a time, random routing) at 30 req/s at night and 90 by day, TTFT mean <= 50 ms; a fast, dear
# engine (5-ms steps, $2.5/h) by day and a slow, cheap one (20 ms, $1/h) at night, so the
# seasonal fleet switches engines (autoscale.engines). The day is compressed 720 times (an
# hour of day is 5 simulated seconds, 09:30 is at 0 s and 20:00 at 52.5 s).
DAY = [
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "router=random",
    "workload=daily",
    "workload.qps=60",
    f"workload.profile=[{', '.join(['1'] * 8 + ['3'] * 12 + ['1'] * 4)}]",
    "workload.time_compression=720",
    "workload.duration_s=120",
    "workload.start_hour=9.5",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
    "autoscale.provision_s=2",
    "plan.slo=[ttft_s.mean <= 0.05]",
    *QUICK_DAY_PLAN,
    "plan.day.period_s=30",
    "plan.candidates=[[step_time.seconds=0.005, hardware.usd_per_gpu_hour=2.5],"
    " [step_time.seconds=0.02, hardware.usd_per_gpu_hour=1.0]]",
    "plan.day.autoscale={provision_s: 0, interval_s: 1, tolerance: 0.15, scale_down_window_s: 2}",
]


@pytest.fixture(scope="session")
def real_day_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The day plan ``DAY``, planned and simulated by ``run_plan`` (~15 s)."""
    from sim.plan.planner import run_plan

    folder = tmp_path_factory.mktemp("real_day") / "d"
    run_plan([*DAY, f"plan.output_dir={folder}"], progress=False)
    return folder


PLAN = [
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "router=random",
    "workload=poisson",
    "workload.num_requests=60",
    "workload.qps=100",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
    "plan.slo=[ttft_s.mean <= 0.05]",
    "plan.max_replicas=4",
    "plan.jobs=1",
    "plan.step_time_scales=[]",
    "plan.rate_scales=[]",
    "plan.max_headroom=2",
    "plan.min_replications=2",
    "plan.max_replications=2",
]


def planned(factory: pytest.TempPathFactory, name: str, overrides: list[str]) -> Path:
    """The plan of ``overrides`` (``run_plan``) in a new folder: the folder."""
    from sim.plan.planner import run_plan

    folder = factory.mktemp(name) / "p"
    run_plan([*overrides, f"plan.output_dir={folder}"], progress=False)
    return folder


@pytest.fixture(scope="session")
def plan_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny plan: one M/D/1-like candidate searched over 1, 2 replicas, with its headroom."""
    return planned(tmp_path_factory, "plan", PLAN)


@pytest.fixture(scope="session")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four tiny runs (1 or 2 replicas at 10 or 40 req/s) collected as ``fleetcast collect``
    does."""
    folder = tmp_path_factory.mktemp("sweep") / "s"
    for job, (replicas, qps) in enumerate([(1, 10), (1, 40), (2, 10), (2, 40)]):
        simulate(
            compose(
                f"fleet.replicas={replicas}",
                "workload=poisson",
                "workload.num_requests=40",
                f"workload.qps={qps}",
                "workload.prompt_tokens=128",
                "workload.output_tokens=32",
                "sim.progress=false",
            ),
            folder / str(job),
        )
    collect(folder)
    return folder
