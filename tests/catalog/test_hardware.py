"""The GPU catalog: every hardware YAML loads in SI units with memory as the device reports it,
every figure says where it came from and when, a GPU can be given entirely on the command line,
and bad fields are refused by name."""

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sim.catalog.hardware import GPU
from sim.cli import main
from sim.errors import ConfigError
from sim.resources import config_dir

HARDWARE_FILES = sorted((config_dir() / "hardware").glob("*.yaml"))
CATALOG = [p for p in HARDWARE_FILES if p.stem != "custom"]
MODEL_FILES = sorted((config_dir() / "model").glob("*.yaml"))
NUMERIC_FIELDS = (
    "memory_gib",
    "hbm_bandwidth_gb_per_s",
    "dense_tflops",
    "interconnect_gb_per_s",
    "interconnect_latency_us",
    "usd_per_gpu_hour",
    "power_w",
)
A_YEAR = re.compile(r"\b(19|20)\d\d\b")
MIB = 2**20


def load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path))


def gpu(stem: str) -> GPU:
    return GPU.from_config(load(config_dir() / "hardware" / f"{stem}.yaml"))


def test_catalogs_are_complete():
    assert [p.stem for p in HARDWARE_FILES] == [
        "a100_40g",
        "a100_80g",
        "b200",
        "b300",
        "custom",
        "gb200",
        "h100_pcie",
        "h100_sxm",
        "h200",
        "l4",
        "l40s",
        "mi300x",
        "mi325x",
        "rtx4090",
    ]
    assert [p.stem for p in MODEL_FILES] == [
        "hf",
        "llama2_70b",
        "llama2_7b",
        "llama31_70b",
        "llama31_8b",
        "mixtral_8x7b",
        "qwen25_32b",
    ]


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
def test_every_hardware_yaml_loads_in_si_units(path):
    cfg = load(path)
    g = GPU.from_config(cfg)
    assert g.memory_bytes == cfg["memory_gib"] * 2**30
    assert g.hbm_bandwidth_bytes_per_s == cfg["hbm_bandwidth_gb_per_s"] * 1e9
    assert g.flops_per_s("bf16") == cfg["dense_tflops"]["bf16"] * 1e12
    assert set(g.dense_flops_per_s) == {"bf16", "fp16", "fp8", "fp4"}
    assert g.dense_flops_per_s["fp16"] == g.dense_flops_per_s["bf16"]
    assert g.interconnect_bytes_per_s == cfg["interconnect_gb_per_s"] * 1e9
    assert g.interconnect_latency_s == pytest.approx(cfg["interconnect_latency_us"] * 1e-6)
    assert g.interconnect_latency_s < 1e-4
    assert (g.usd_per_gpu_hour, g.power_w) == (cfg["usd_per_gpu_hour"], cfg["power_w"])


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
def test_memory_is_as_the_device_reports_it(path):
    cfg = load(path)
    assert cfg["memory_gb"] is None  # the catalog gives memory_gib only
    # nvidia-smi and rocm-smi count whole MiB: the catalog's GiB are a whole number of them
    assert (cfg["memory_gib"] * 1024).is_integer()
    assert "reported" in cfg["sources"]["memory_gib"] or "binary" in cfg["sources"]["memory_gib"]


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
def test_every_figure_has_a_dated_source(path):
    sources = load(path)["sources"]
    for field in NUMERIC_FIELDS:
        assert A_YEAR.search(sources.get(field, "")), f"{path.stem}: {field} needs a dated source"


def test_device_reported_totals():
    # nvidia-smi's totals in MiB, rocm-smi's in bytes (sources in each YAML)
    assert gpu("h100_sxm").memory_bytes == 81_559 * MIB == 85_520_809_984
    assert gpu("h100_pcie").memory_bytes == 81_559 * MIB
    assert gpu("a100_80g").memory_bytes == 81_920 * MIB
    assert gpu("a100_40g").memory_bytes == 40_960 * MIB
    assert gpu("h200").memory_bytes == 143_771 * MIB
    assert gpu("b200").memory_bytes == 183_359 * MIB
    assert gpu("b300").memory_bytes == 275_040 * MIB
    assert gpu("gb200").memory_bytes == 189_471 * MIB
    assert gpu("l40s").memory_bytes == 46_068 * MIB
    assert gpu("l4").memory_bytes == 23_034 * MIB
    assert gpu("rtx4090").memory_bytes == 24_564 * MIB
    assert gpu("mi300x").memory_bytes == 206_141_652_992
    assert gpu("mi325x").memory_bytes == 256 * 2**30  # no device report found: 256 GB as GiB


def test_new_gpus_key_figures():
    a100 = gpu("a100_40g")
    assert (a100.name, a100.hbm_bandwidth_bytes_per_s) == ("A100-40G-SXM", 1555e9)
    assert not a100.supports("fp8")
    pcie = gpu("h100_pcie")
    assert (pcie.flops_per_s("bf16"), pcie.flops_per_s("fp8")) == (756e12, 1513e12)
    assert pcie.interconnect_bytes_per_s == 64e9  # PCIe Gen5, not NVLink
    l4 = gpu("l4")
    assert (l4.hbm_bandwidth_bytes_per_s, l4.flops_per_s("fp8"), l4.power_w) == (
        300e9,
        242.5e12,
        72,
    )
    rtx = gpu("rtx4090")
    assert (rtx.hbm_bandwidth_bytes_per_s, rtx.flops_per_s("bf16")) == (1008e9, 165.2e12)
    assert not rtx.supports("fp4")
    mi325x = gpu("mi325x")
    assert (mi325x.hbm_bandwidth_bytes_per_s, mi325x.flops_per_s("fp8")) == (6000e9, 2614.9e12)
    b300 = gpu("b300")
    assert (b300.flops_per_s("fp4"), b300.flops_per_s("bf16")) == (13_500e12, 2250e12)
    assert b300.flops_per_s("fp4") == 1.5 * gpu("b200").flops_per_s("fp4")
    gb200 = gpu("gb200")
    assert (gb200.flops_per_s("bf16"), gb200.interconnect_bytes_per_s) == (2500e12, 900e9)
    assert gb200.power_w == 1200


def test_fp4_on_h100_raises_and_b200_has_it():
    h100 = gpu("h100_sxm")
    with pytest.raises(ConfigError) as err:
        h100.flops_per_s("fp4")
    assert (
        str(err.value)
        == "precision.weights='fp4': H100-SXM has no fp4 tensor cores; use bf16 or fp8"
    )
    assert gpu("b200").flops_per_s("fp4") == 9000e12


def test_fp8_on_a100_raises():
    with pytest.raises(ConfigError, match="use bf16$"):
        gpu("a100_80g").flops_per_s("fp8")


def test_memory_gb_override_wins_and_is_decimal():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    assert GPU.from_config({**cfg, "memory_gb": 80}).memory_bytes == 80e9
    assert GPU.from_config({**cfg, "memory_gb": 80, "memory_gib": None}).memory_bytes == 80e9
    # an older config with memory_gb and no memory_gib still loads
    older = {k: v for k, v in cfg.items() if k != "memory_gib"}
    assert GPU.from_config({**older, "memory_gb": 94}).memory_bytes == 94e9


def test_memory_gib_or_memory_gb_is_required():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    with pytest.raises(ConfigError) as err:
        GPU.from_config({**cfg, "memory_gib": None, "memory_gb": None})
    assert str(err.value) == "hardware.memory_gib=None: required"


@pytest.mark.parametrize("field", ["memory_gb", "memory_gib"])
def test_negative_memory_is_refused_by_name(field):
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    with pytest.raises(ConfigError) as err:
        GPU.from_config({**cfg, field: -1})
    assert str(err.value) == f"hardware.{field}=-1: must be > 0"


def test_negative_bandwidth_is_refused_by_name():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    cfg["hbm_bandwidth_gb_per_s"] = -1
    with pytest.raises(ConfigError) as err:
        GPU.from_config(cfg)
    assert err.value.field == "hardware.hbm_bandwidth_gb_per_s"
    assert str(err.value) == "hardware.hbm_bandwidth_gb_per_s=-1: must be > 0"


@pytest.mark.parametrize("missing", ["memory_gib", "power_w", "dense_tflops", "name"])
def test_missing_hardware_field_is_refused(missing):
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    del cfg[missing]
    with pytest.raises(ConfigError) as err:
        GPU.from_config(cfg)
    assert err.value.field == f"hardware.{missing}"


def test_unknown_hardware_field_is_refused():
    cfg = load(config_dir() / "hardware" / "h100_sxm.yaml")
    cfg["memory_tb"] = 80
    with pytest.raises(
        ConfigError,
        match=r"^hardware\.memory_tb=80: unknown key; known: attention_floor_us, dense_tflops, ",
    ):
        GPU.from_config(cfg)


CUSTOM = [
    "hardware=custom",
    "hardware.name=MyGPU",
    "hardware.memory_gib=94",
    "hardware.hbm_bandwidth_gb_per_s=3900",
    "hardware.dense_tflops.bf16=835",
    "hardware.dense_tflops.fp8=1670",
    "hardware.interconnect_gb_per_s=300",
    "hardware.interconnect_latency_us=8",
    "hardware.usd_per_gpu_hour=2",
    "hardware.power_w=400",
]


def _memory_command(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["memory", *argv])
    captured = capsys.readouterr()
    return int(stopped.value.code or 0), captured.out, captured.err


def test_custom_gpu_given_entirely_by_overrides(capsys):
    # every field null in custom.yaml: nothing comes from a catalog entry
    assert all(
        v in (None, {})
        for k, v in load(config_dir() / "hardware" / "custom.yaml").items()
        if k != "dense_tflops"
    )
    main(["memory", *CUSTOM, "memory.request_tokens=1000"])
    out = capsys.readouterr().out
    assert "Llama-3.1-8B on MyGPU" in out
    assert "94.00 GiB" in out
    # KV = 0.9 x 94 GiB - Llama-3.1-8B's 8,030,261,248 BF16 weights - 2 GiB, in 2 MiB blocks
    blocks = int((0.9 * 94 * 2**30 - 8_030_261_248 * 2 - 2 * 2**30) // (16 * 131_072))
    assert f"{blocks:,}" in out


@pytest.mark.parametrize(
    "left_out, says",
    [
        ("hardware.power_w=400", "error: hardware.power_w=None: required"),
        ("hardware.memory_gib=94", "error: hardware.memory_gib=None: required"),
        ("hardware.name=MyGPU", "error: hardware.name=None: required"),
        ("hardware.dense_tflops.bf16=835", "error: hardware.dense_tflops="),
    ],
)
def test_custom_gpu_missing_a_field_is_one_line(left_out, says, capsys):
    code, out, err = _memory_command([a for a in CUSTOM if a != left_out], capsys)
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith(says), err
    assert "Traceback" not in err and out == ""
