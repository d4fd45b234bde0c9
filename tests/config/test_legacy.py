"""Older spellings in run folders made current (``sim.config.legacy``), so that comparing an old
run's config with a new one sees only real differences."""

from sim.config.legacy import canonical_config, canonical_target


def test_targets_from_before_the_package_split_map_to_their_new_modules():
    assert canonical_target("sim.scheduler.sarathi.SarathiScheduler") == (
        "sim.engine.scheduler.sarathi.SarathiScheduler"
    )
    assert canonical_target("sim.step_time.roofline.RooflineStepTime") == (
        "sim.engine.step_time.roofline.RooflineStepTime"
    )
    assert canonical_target("sim.router.LeastTokensRouter") == "sim.fleet.router.LeastTokensRouter"
    # current names, and names that merely start alike, are left alone
    for name in (
        "sim.engine.scheduler.vllm.VLLMScheduler",
        "sim.sweeps.monitor.SweepMonitor",
        "sim.routers.Custom",
        "mypackage.router.Router",
    ):
        assert canonical_target(name) == name


def test_a_config_is_copied_with_targets_and_shipped_paths_made_current():
    old = {
        "scheduler": {"_target_": "sim.scheduler.vllm.VLLMScheduler", "max_num_seqs": 8},
        "workload": {
            "kind": "trace",
            "path": "data/traces/azure_llm_2023_conv.parquet",
            "prompt_tokens": {
                "dist": "empirical",
                "path": "data/traces/mooncake_fast25_conversation.parquet",
            },
        },
        "step_time": {
            "_target_": "sim.step_time.calibrated.CalibratedStepTime",
            "profile": "data/profiles/mine.json",
        },
        "tags": [{"_target_": "sim.router.RandomRouter"}],
        "seed": 3,
    }
    new = canonical_config(old)
    assert new == {
        "scheduler": {"_target_": "sim.engine.scheduler.vllm.VLLMScheduler", "max_num_seqs": 8},
        "workload": {
            "kind": "trace",
            "path": "shipped:traces/azure_llm_2023_conv.parquet",
            "prompt_tokens": {
                "dist": "empirical",
                "path": "shipped:traces/mooncake_fast25_conversation.parquet",
            },
        },
        "step_time": {
            "_target_": "sim.engine.step_time.calibrated.CalibratedStepTime",
            "profile": "data/profiles/mine.json",
        },
        "tags": [{"_target_": "sim.fleet.router.RandomRouter"}],
        "seed": 3,
    }
    assert old["scheduler"]["_target_"] == "sim.scheduler.vllm.VLLMScheduler"  # not modified
    assert canonical_config(new) == new  # current spellings stay as they are


def test_only_files_fleetcast_ships_become_shipped_names():
    shipped = "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json"
    old = {
        "step_time": {"profile": f"data/profiles/{shipped}"},
        "workload": {"path": "data/traces/mine.parquet"},
    }
    assert canonical_config(old) == {
        "step_time": {"profile": f"shipped:profiles/{shipped}"},  # a shipped profile
        "workload": {"path": "data/traces/mine.parquet"},  # the user's own file: left alone
    }
