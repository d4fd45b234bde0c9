"""Every option of every config group composes and runs; every experiment composes and runs.

Options are discovered from ``configs/<group>/*.yaml``, so a new YAML file is tested the day it
lands. Each run is tiny (20 requests, one replica). Model and hardware options are paired with
a tensor-parallel degree that fits (a 70B model's BF16 weights, 131 GiB, need tp >= 2 on 80 GB
GPUs).
"""

import numpy as np
import pytest
from omegaconf import OmegaConf

from sim.config.compose import group_options
from sim.resources import config_dir
from sim.run import simulate
from tests.scenarios import TINY
from tests.support import compose

# Options that need more than the defaults to fit or to run briefly.
EXTRA = {
    ("model", "llama31_70b"): ["fleet.tp=4"],
    ("model", "llama2_70b"): ["fleet.tp=4"],
    ("model", "mixtral_8x7b"): ["fleet.tp=2"],
    ("model", "qwen25_32b"): ["fleet.tp=2"],
    ("workload", "trace"): ["workload.path=shipped:traces/azure_llm_2023_conv.parquet"],
    ("workload", "daily"): ["workload.qps=5", "workload.duration_s=60"],
    ("placement", "dedicated"): ["fleet.replicas=2"],  # one replica per model
    ("placement", "disaggregated"): ["fleet.replicas=2"],  # a prefill and a decode replica
    ("router", "prefix_affinity"): [
        "kv.prefix_caching=true",
        "workload=mooncake_conv",  # a workload whose prompts share prefixes
        "workload.num_requests=20",
    ],
    # conversations, each pinned to a replica, with their turns' prefixes cached
    ("router", "session"): [
        "kv.prefix_caching=true",
        "workload=sessions",
        "workload.num_sessions=5",
    ],
    # a GPU given entirely on the command line (an H100's figures)
    ("hardware", "custom"): [
        "hardware.name=custom-H100",
        "hardware.memory_gib=79.6474609375",
        "hardware.hbm_bandwidth_gb_per_s=3350",
        "hardware.dense_tflops.bf16=989",
        "hardware.interconnect_gb_per_s=450",
        "hardware.interconnect_latency_us=6",
        "hardware.usd_per_gpu_hour=2.99",
        "hardware.power_w=700",
    ],
}
NOT_A_GROUP = {
    "experiment",
    "hydra",
    "plan",
}  # overlays (tested below), Hydra's groups, fleetcast plan's settings


def group_cases():
    cases = []
    for folder in sorted(p for p in config_dir().iterdir() if p.is_dir()):
        if folder.name in NOT_A_GROUP:
            continue
        for option in group_options(folder.name):
            cases.append(pytest.param(folder.name, option, id=f"{folder.name}={option}"))
    return cases


def test_every_group_has_options():
    groups = {p.name for p in config_dir().iterdir() if p.is_dir()}
    assert {"model", "hardware", "scheduler", "router", "step_time", "workload"} <= groups
    for group in groups - NOT_A_GROUP:
        assert group_options(group), group


@pytest.mark.parametrize("group, option", group_cases())
def test_every_option_composes_and_runs(group, option):
    overrides = [*TINY, f"{group}={option}", *EXTRA.get((group, option), [])]
    if any(o.startswith("workload=") for o in EXTRA.get((group, option), [])):
        # an option that needs its own workload: TINY's workload settings would not apply
        tiny_workload = [o for o in TINY if o.startswith("workload")]
        overrides = [o for o in overrides if o not in tiny_workload]
    if group == "workload":
        # keep the workload's own kind; only make it small
        overrides = [o for o in overrides if not o.startswith("workload")]
        kind = OmegaConf.load(config_dir() / "workload" / f"{option}.yaml")["kind"]
        overrides += [
            f"workload={option}",
            # conversations count sessions, not requests
            "workload.num_sessions=5" if kind == "sessions" else "workload.num_requests=20",
            *EXTRA.get((group, option), []),
        ]
    result = simulate(compose(*overrides))
    s = result.summary
    assert s["num_requests"] == result.requests.num_rows >= 1
    assert s["completed"] + s["rejected"] + s["unfinished"] == s["num_requests"]
    assert s["completed"] >= 1
    assert result.steps.num_rows >= 1
    assert np.all(np.asarray(result.steps.column("duration_s")) > 0)
    # the run used the option's own values, except those the test overrode
    option_values = OmegaConf.to_container(OmegaConf.load(config_dir() / group / f"{option}.yaml"))
    # (a nested override, hardware.dense_tflops.bf16, counts for its top key, dense_tflops)
    overridden = {o.split("=")[0].split(".")[1] for o in overrides if o.startswith(f"{group}.")}
    from_file = None
    if group == "model" and option_values.get("config_path") is not None:
        from sim.catalog.model import ModelSpec

        from_file = ModelSpec.from_config(option_values)
    for key, value in option_values.items():
        if key in overridden or key == "defaults":
            continue
        if from_file and value is None:  # model=hf: the config.json's value is recorded
            assert result.config[group][key] == getattr(from_file, key), (group, option, key)
        else:
            assert result.config[group][key] == value, (group, option, key)


@pytest.mark.parametrize(
    "overrides",
    [
        ["hardware=b200", "precision.weights=fp4"],
        ["hardware=h100_sxm", "precision.weights=fp8", "precision.kv=fp8"],
        ["hardware=l40s", "fleet.tp=2"],
        ["model=llama31_70b", "hardware=h200", "fleet.tp=2", "precision.weights=fp8"],
        ["model=llama31_70b", "hardware=mi300x"],
    ],
    ids=lambda o: " ".join(o),
)
def test_precision_and_tp_combinations_run(overrides):
    result = simulate(compose(*TINY, *overrides))
    assert result.summary["completed"] == 20


EXPERIMENTS = group_options("experiment") if (config_dir() / "experiment").is_dir() else []


@pytest.mark.parametrize(
    "name",
    EXPERIMENTS
    or [
        pytest.param(
            None, marks=pytest.mark.skip(reason="configs/experiment/ has no experiments yet")
        )
    ],
)
def test_every_experiment_composes_and_runs(name):
    # (conversations count sessions, not requests)
    sessions = "workload: sessions" in (config_dir() / "experiment" / f"{name}.yaml").read_text()
    size = "workload.num_sessions=20" if sessions else "workload.num_requests=50"
    cfg = compose(f"+experiment={name}", "sim.horizon_s=30", size, "sim.progress=false")
    result = simulate(cfg)
    s = result.summary
    assert s["completed"] >= 1 and s["num_steps"] >= 1 and result.steps.num_rows >= 1
    if cfg["output"]["steps"] == "full":  # (bucketed: a row per replica and minute)
        assert s["num_steps"] == result.steps.num_rows
    assert s["completed"] + s["rejected"] + s["unfinished"] == s["num_requests"] >= 1


def test_check_overrides_reads_keys_from_the_options_the_command_line_selects():
    from sim.config.compose import check_overrides
    from sim.errors import ConfigError

    check_overrides(["scheduler.max_num_seqs=8", "seed=3", "output_dir=x"])
    check_overrides(["workload=daily", "workload.profile.3=0.5"])  # an item of a list
    # an experiment selects other options (closed_loop) and adds keys
    check_overrides(["+experiment=speculative_decoding", "workload.concurrency=16"])
    refused = {
        "scheduler.bogus=1": "scheduler.bogus='1': unknown key in scheduler=vllm; known: ",
        "workload.profile.99=1": "unknown key in workload=azure_conv",
        "bogus=1": "bogus='1': unknown key in config.yaml; known: autoscale, cost,",
    }
    for override, message in refused.items():
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            check_overrides([override])
    with pytest.raises(ConfigError, match="workload.profile.99='1': unknown key in workload=daily"):
        check_overrides(["workload=daily", "workload.profile.99=1"])
    with pytest.raises(ConfigError, match="would be merged into the preset's mapping"):
        check_overrides(["workload=agent_sessions", "workload.user_tokens={dist:uniform,low:1}"])
