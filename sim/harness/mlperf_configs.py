"""Which Fleetcast configs an MLPerf Server result maps to, or why it cannot be expressed.

A row of ``sim.harness.mlperf`` names its GPU, benchmark, serving software and precision the
way its submitter wrote them. ``map_result`` turns them into config names (``hardware=``,
``model=``, ``scheduler=``, ``precision.weights=``) and the number of GPUs, and says what keeps
a row out (``reasons``: no such GPU or model in the catalog, software Fleetcast has no scheduler
for, an unstated or unsupported precision) and what it approximates (``notes``). Each name is
checked against the shipped ``configs/``, so a renamed config file turns into a reason here
rather than a failed composition later.

Left out on purpose: tensor parallelism and the number of replicas. The results do not state
them (they live in the submitters' code, per system); whoever simulates a row chooses them and
says so. The KV cache's precision is not stated either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.harness.mlperf import ServerResult
from sim.resources import config_dir

# accelerator_model_name patterns -> configs/hardware name (None: not in the catalog, why);
# the first match wins, so the more specific names come first
HARDWARE: tuple[tuple[re.Pattern[str], str | None, str], ...] = (
    (re.compile(r"GH200", re.I), None, "GH200 (Grace Hopper superchip) is not in configs/hardware"),
    (re.compile(r"GB200", re.I), "gb200", ""),
    (re.compile(r"B200", re.I), "b200", ""),
    (re.compile(r"H200", re.I), "h200", ""),
    (re.compile(r"H100.?NVL", re.I), None, "H100 NVL (94 GB) is not in configs/hardware"),
    (re.compile(r"H100.?PCIe", re.I), "h100_pcie", ""),
    (re.compile(r"H100", re.I), "h100_sxm", ""),
    (re.compile(r"MI325X", re.I), "mi325x", ""),
    (re.compile(r"MI300X", re.I), "mi300x", ""),
    (re.compile(r"L40S", re.I), "l40s", ""),
    (re.compile(r"A100.*40\s?GB", re.I), "a100_40g", ""),
    (re.compile(r"A100", re.I), "a100_80g", ""),
)
# an H200 run at a 1,000 W TGP (NVIDIA's "-CTS" systems, their systems json hw_notes)
CTS = re.compile(r"H200.*CTS", re.I)

# benchmark -> configs/model name (None: not in the catalog, why); the benchmarks run the chat
# and instruct fine-tunes of these checkpoints, which have the same shapes
MODELS: dict[str, tuple[str | None, str]] = {
    "llama2-70b-99": ("llama2_70b", ""),
    "llama2-70b-99.9": ("llama2_70b", ""),
    "llama2-70b-interactive-99": ("llama2_70b", ""),
    "llama2-70b-interactive-99.9": ("llama2_70b", ""),
    "mixtral-8x7b": ("mixtral_8x7b", ""),
    "llama3.1-405b": (None, "Llama-3.1-405B is not in configs/model"),
    "llama3.1-8b": ("llama31_8b", ""),
}

# the serving software, as named in a systems json's "framework" or its system name -> scheduler
SCHEDULERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"TensorRT|TRT", re.I), "trtllm"),
    (re.compile(r"vLLM", re.I), "vllm"),
    (re.compile(r"SGLang", re.I), "sglang"),
)

# a row's precision -> precision.weights (configs/precision: bf16, fp16, fp8, fp4)
WEIGHTS = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}
# GPUs with FP4 tensor cores (Blackwell): the only ones configs/precision lets run fp4 weights
FP4_HARDWARE = ("b200", "gb200")


@dataclass(frozen=True, slots=True)
class ConfigMapping:
    """A row as Fleetcast config names; ``reasons`` is empty exactly when it can be simulated.

    A name is ``None`` where the row's value has no config (its reason says which).
    """

    hardware: str | None
    model: str | None
    scheduler: str | None
    weights: str | None
    gpus: int
    reasons: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def expressible(self) -> bool:
        return not self.reasons


def _shipped(group: str, name: str) -> bool:
    return (config_dir() / group / f"{name}.yaml").is_file()


def _hardware(row: ServerResult, reasons: list[str], notes: list[str]) -> str | None:
    for pattern, name, why in HARDWARE:
        if pattern.search(row.accelerator):
            if name is None:
                reasons.append(why)
            elif not _shipped("hardware", name):
                reasons.append(f"configs/hardware/{name}.yaml is missing")
                return None
            if name == "h200" and CTS.search(row.accelerator):
                notes.append(
                    "H200-CTS runs at a 1,000 W TGP; configs/hardware/h200 is the 700 W part"
                )
            return name
    reasons.append(f"no GPU in configs/hardware matches {row.accelerator!r}")
    return None


def _scheduler(row: ServerResult, reasons: list[str]) -> str | None:
    # the framework first: a system name may keep an engine's name its software no longer runs
    for named in (row.framework, row.system_name):
        for pattern, name in SCHEDULERS:
            if pattern.search(named):
                return name
    reasons.append(
        f"the software ({row.framework!r}) is none Fleetcast schedules (trtllm, vllm, sglang)"
    )
    return None


def _weights(row: ServerResult, hardware: str | None, reasons: list[str]) -> str | None:
    if row.precision == "unstated":
        reasons.append("the precision is unstated in the submission")
        return None
    weights = WEIGHTS.get(row.precision)
    if weights is None:
        reasons.append(f"{row.precision} weights: configs/precision has bf16, fp16, fp8, fp4")
    elif weights == "fp4" and hardware is not None and hardware not in FP4_HARDWARE:
        reasons.append(f"fp4 weights need a Blackwell GPU, not {hardware}")
    return weights


def map_result(row: ServerResult) -> ConfigMapping:
    """The configs ``row`` maps to, the reasons it cannot be simulated, and its approximations."""
    reasons: list[str] = []
    notes: list[str] = []
    hardware = _hardware(row, reasons, notes)
    model, why = MODELS[row.benchmark]
    if model is None:
        reasons.append(why)
    elif not _shipped("model", model):
        reasons.append(f"configs/model/{model}.yaml is missing")
        model = None
    scheduler = _scheduler(row, reasons)
    weights = _weights(row, hardware, reasons)
    if row.nodes > 1:
        notes.append(
            f"{row.nodes} nodes: replicas spread over nodes (no network between them is modelled)"
        )
    return ConfigMapping(
        hardware=hardware,
        model=model,
        scheduler=scheduler,
        weights=weights,
        gpus=row.accelerators_total,
        reasons=tuple(reasons),
        notes=tuple(notes),
    )
