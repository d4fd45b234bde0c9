"""The GPU catalog: every hardware YAML loads in SI units, and bad fields are refused by name."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sim.catalog.hardware import GPU
from sim.errors import ConfigError
from sim.resources import config_dir

HARDWARE_FILES = sorted((config_dir() / "hardware").glob("*.yaml"))
MODEL_FILES = sorted((config_dir() / "model").glob("*.yaml"))


def load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path))


def test_catalogs_are_complete():
    assert [p.stem for p in HARDWARE_FILES] == [
        "a100_80g",
        "b200",
        "h100_sxm",
        "h200",
        "l40s",
        "mi300x",
    ]
    assert [p.stem for p in MODEL_FILES] == [
        "llama2_7b",
        "llama31_70b",
        "llama31_8b",
        "mixtral_8x7b",
        "qwen25_32b",
    ]


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.stem)
def test_every_hardware_yaml_loads(path):
    gpu = GPU.from_config(load(path))
    assert gpu.memory_bytes >= 48e9
    assert set(gpu.dense_flops_per_s) == {"bf16", "fp16", "fp8", "fp4"}
    assert gpu.dense_flops_per_s["fp16"] == gpu.dense_flops_per_s["bf16"]
    assert gpu.interconnect_latency_s < 1e-4
    assert gpu.sources  # every figure says where it came from


def test_h100_figures_in_si_units():
    gpu = GPU.from_config(load(config_dir() / "hardware" / "h100_sxm.yaml"))
    assert gpu.name == "H100-SXM"
    assert gpu.memory_bytes == 80e9
    assert gpu.hbm_bandwidth_bytes_per_s == 3350e9
    assert gpu.flops_per_s("bf16") == 989e12
    assert gpu.flops_per_s("fp8") == 1979e12
    assert gpu.interconnect_bytes_per_s == 450e9
    assert gpu.interconnect_latency_s == pytest.approx(6e-6)


def test_fp4_on_h100_raises_and_b200_has_it():
    h100 = GPU.from_config(load(config_dir() / "hardware" / "h100_sxm.yaml"))
    with pytest.raises(ConfigError) as err:
        h100.flops_per_s("fp4")
    assert (
        str(err.value)
        == "precision.weights='fp4': H100-SXM has no fp4 tensor cores; use bf16 or fp8"
    )
    b200 = GPU.from_config(load(config_dir() / "hardware" / "b200.yaml"))
    assert b200.flops_per_s("fp4") == 9000e12


def test_fp8_on_a100_raises():
    a100 = GPU.from_config(load(config_dir() / "hardware" / "a100_80g.yaml"))
    with pytest.raises(ConfigError, match="use bf16$"):
        a100.flops_per_s("fp8")


def test_negative_bandwidth_is_refused_by_name():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    cfg["hbm_bandwidth_gb_per_s"] = -1
    with pytest.raises(ConfigError) as err:
        GPU.from_config(cfg)
    assert err.value.field == "hardware.hbm_bandwidth_gb_per_s"
    assert str(err.value) == "hardware.hbm_bandwidth_gb_per_s=-1: must be > 0"


@pytest.mark.parametrize("missing", ["memory_gb", "power_w", "dense_tflops", "name"])
def test_missing_hardware_field_is_refused(missing):
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    del cfg[missing]
    with pytest.raises(ConfigError) as err:
        GPU.from_config(cfg)
    assert err.value.field == f"hardware.{missing}"


def test_unknown_hardware_field_is_refused():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    cfg["memory_gib"] = 80
    with pytest.raises(
        ConfigError, match=r"^hardware\.memory_gib=80: unknown key; known: dense_tflops, "
    ):
        GPU.from_config(cfg)
