"""An MLPerf Server result as Fleetcast config names, or the reasons it cannot be simulated."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from sim.config.compose import compose_config
from sim.harness.mlperf import ServerResult, load_results
from sim.harness.mlperf_configs import map_result


@pytest.fixture(scope="module")
def rows() -> list[ServerResult]:
    return load_results()


def _one(rows, submitter: str, system: str, benchmark: str) -> ServerResult:
    (row,) = [
        r for r in rows if (r.submitter, r.system, r.benchmark) == (submitter, system, benchmark)
    ]
    return row


def test_an_h100_trtllm_mixtral_row_maps_to_configs_that_compose(rows):
    mapping = map_result(_one(rows, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "mixtral-8x7b"))
    assert mapping.expressible and mapping.reasons == ()
    assert (mapping.hardware, mapping.model, mapping.scheduler, mapping.weights, mapping.gpus) == (
        "h100_sxm",
        "mixtral_8x7b",
        "trtllm",
        "fp8",
        8,
    )
    cfg = compose_config(
        [
            f"hardware={mapping.hardware}",
            f"model={mapping.model}",
            f"scheduler={mapping.scheduler}",
            f"precision.weights={mapping.weights}",
        ]
    )
    assert cfg["hardware"]["name"] == "H100-SXM"
    assert cfg["model"]["name"] == "mistralai/Mixtral-8x7B-v0.1"
    assert cfg["scheduler"]["_target_"].endswith("TRTLLMScheduler")
    assert cfg["precision"]["weights"] == "fp8"


def _reasons(rows) -> Counter:
    reasons = Counter(reason for row in rows for reason in map_result(row).reasons)
    by_start: Counter = Counter()
    for reason, n in reasons.items():
        by_start[reason.split(" (")[0].split(":")[0]] += n
    return by_start


def test_every_reason_a_v41_row_cannot_be_expressed(rows):
    rows = [row for row in rows if row.round == "v4.1"]
    assert _reasons(rows) == {
        "H100 NVL": 6,
        "GH200": 7,
        "the precision is unstated in the submission": 5,  # preview systems (private code)
        "the software": 1,  # Red Hat's L40S system: framework "CUDA 12.2", no engine named
    }
    expressible = [row for row in rows if map_result(row).expressible]
    assert len(expressible) == 73
    groups = Counter(
        (r.benchmark.removesuffix(".9").removesuffix("-99"), *_names(map_result(r)))
        for r in expressible
    )
    assert groups == {
        ("llama2-70b", "h100_sxm", "trtllm", "fp8"): 30,
        ("llama2-70b", "h200", "trtllm", "fp8"): 18,
        ("llama2-70b", "mi300x", "vllm", "fp8"): 8,
        ("llama2-70b", "h100_pcie", "trtllm", "fp8"): 2,
        ("llama2-70b", "l40s", "trtllm", "fp8"): 2,
        ("mixtral-8x7b", "h100_sxm", "trtllm", "fp8"): 10,
        ("mixtral-8x7b", "h200", "trtllm", "fp8"): 3,
    }


def _names(mapping):
    return mapping.hardware, mapping.scheduler, mapping.weights


def test_the_held_out_v40_rows_map_or_say_why_not(rows):
    v40 = [row for row in rows if row.round == "v4.0"]
    assert _reasons(v40) == {
        "the precision is unstated in the submission": 4,  # preview: 3 H200, 1 GH200
        "H100 NVL": 2,  # NVIDIA's 8x and Azure's 2x
        "GH200": 1,
    }
    expressible = [row for row in v40 if map_result(row).expressible]
    assert len(expressible) == 15
    groups = Counter((*_names(map_result(r)), map_result(r).gpus) for r in expressible)
    assert groups == {
        ("h100_sxm", "trtllm", "fp8", 8): 9,
        ("h100_sxm", "trtllm", "fp8", 4): 3,
        ("h100_sxm", "trtllm", "fp8", 2): 1,
        ("h100_pcie", "trtllm", "fp8", 4): 2,
    }
    assert {map_result(r).model for r in expressible} == {"llama2_70b"}


def test_gpus_map_to_the_catalog_or_say_why_not(rows):
    pairs = {(r.accelerator, map_result(r).hardware) for r in rows}
    assert ("NVIDIA H100-PCIe-80GB", "h100_pcie") in pairs
    assert ("NVIDIA H200-SXM-141GB-CTS", "h200") in pairs
    assert ("AMD Instinct MI300X-NPS1-SPX-192GB-750W", "mi300x") in pairs
    assert ("AMD MI300X-NPS1-SPX-192GB-750W", "mi300x") in pairs
    assert ("NVIDIA B200-SXM-180GB", "b200") in pairs
    assert ("NVIDIA L40S", "l40s") in pairs
    assert ("NVIDIA H100-NVL-94GB", None) in pairs
    cts = _one(rows, "NVIDIA", "H200-SXM-141GB-CTSx8_TRT", "llama2-70b-99")
    assert any("1,000 W" in note for note in map_result(cts).notes)


def test_amd_vllm_and_multi_node_rows(rows):
    amd = map_result(_one(rows, "AMD", "8xMI300X_2xEPYC-9374F", "llama2-70b-99"))
    assert (amd.hardware, amd.scheduler, amd.weights, amd.gpus) == ("mi300x", "vllm", "fp8", 8)
    assert (amd.model, amd.expressible) == ("llama2_70b", True)
    juniper = map_result(
        _one(rows, "JuniperNetworks", "DGX-H100_H100-SXM-80GBx32_TRT", "llama2-70b-99")
    )
    assert juniper.gpus == 32 and any("4 nodes" in note for note in juniper.notes)


def _edited(row: ServerResult, **changes) -> ServerResult:
    return dataclasses.replace(row, **changes)


def test_constructed_rows_give_each_reason(rows):
    base = _one(rows, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "mixtral-8x7b")
    assert map_result(_edited(base, accelerator="Intel Gaudi 2")).reasons == (
        "no GPU in configs/hardware matches 'Intel Gaudi 2'",
    )
    assert map_result(_edited(base, precision="int4")).reasons == (
        "int4 weights: configs/precision has bf16, fp16, fp8, fp4",
    )
    assert map_result(_edited(base, precision="fp4")).reasons == (
        "fp4 weights need a Blackwell GPU, not h100_sxm",
    )
    blackwell = _edited(base, accelerator="NVIDIA B200-SXM-180GB", precision="fp4")
    assert map_result(blackwell).expressible and map_result(blackwell).weights == "fp4"
    assert map_result(_edited(base, benchmark="llama3.1-405b")).reasons == (
        "Llama-3.1-405B is not in configs/model",
    )
    eight_b = map_result(_edited(base, benchmark="llama3.1-8b", framework="SGLang 0.4"))
    assert (eight_b.model, eight_b.scheduler, eight_b.expressible) == ("llama31_8b", "sglang", True)
