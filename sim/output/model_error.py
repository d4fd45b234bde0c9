"""The step-time model's own error, measured on validation data: a band per class of deployment.

A band is the distribution of ``r = measured / predicted`` mean time per output token (TPOT)
over validation runs of one class of deployment: step-time model (``roofline``,
``calibrated``, ``bench_profile``, ...), engine, GPU family, TP degree and weight precision.
TPOT is the quantity because, in decode, it *is* the time of a step as a request sees it (one
token per running request per step): ``r`` is the multiple of every step time
(``sim.step_time_scale``) that brings the simulated TPOT to the measured one. TTFT is not used:
it adds queueing, which magnifies a step-time error non-linearly near saturation, and harness
effects (clients sent in waves) that are no error of the step-time model. A source that
reports throughput at a fixed latency bound instead (MLPerf Server,
``data/mlperf/server_predictions.csv``) gives the same ratio as ``predicted / measured``
throughput, a capacity being, to first order, inversely proportional to the step time
(``ratio_from_throughput``): both are > 1 where the simulated engine is too fast, the side on
which a plan is short of replicas.

The shipped table (``data/model_error/bands.csv``) is built by
``benchmarks/model_error_bands.py`` from per-run rows (``data/model_error/rows.csv``): for every
class with at least ``MIN_ROWS`` held-out rows, at every level of ``LEVELS`` (a level replaces
the columns it drops by ``*``), the count and the 10th, 50th and 90th percentiles of ``r``.
``lookup`` answers a deployment's class from the most specific level that has a row, and says
which level answered. A bench profile (``fleetcast calibrate --bench``) carries the ratio of
its own held-out runs instead (``band_of_bench_profile``).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import require
from sim.resources import data_dir, resolve_path

CLASS_KEYS = ("step_time_model", "engine", "gpu_family", "tp", "precision")
ANY = "*"
# the fallback order: each level keeps these class columns, the rest are ANY
LEVELS: tuple[tuple[str, ...], ...] = (
    ("step_time_model", "engine", "gpu_family", "tp", "precision"),
    ("step_time_model", "engine", "gpu_family", "precision"),  # any TP
    ("step_time_model", "engine", "gpu_family"),  # any TP or precision
    ("step_time_model", "gpu_family"),  # any engine on the family
    ("step_time_model", "engine"),  # any GPU
    ("step_time_model",),  # every validation row of the model
)
MIN_ROWS = 10  # a class's band needs this many rows (a p10 and a p90 of fewer say little)
QUANTILES = (0.1, 0.5, 0.9)
# both kinds of row measure the same multiple on step time (module docstring)
QUANTITY = "step-time multiple: measured / predicted TPOT, or predicted / measured throughput"
BANDS_FILE = "bands.csv"
MODEL_ERROR_PREFIX = "model error "  # a plan's scenario at a band's quantile
BAND_COLUMNS = (*CLASS_KEYS, "n", "p10", "p50", "p90", "source")


def shipped_bands_path() -> Path:
    return data_dir() / "model_error" / BANDS_FILE


@dataclass(frozen=True)
class Band:
    """A step-time error band: ``p50`` and ``p90`` of ``r``, the multiple on step time
    (measured / predicted TPOT, or predicted / measured throughput at the SLO)."""

    n: int
    p10: float
    p50: float
    p90: float
    source: str  # where the rows came from
    klass: dict[str, str]  # the class asked for
    answered_by: dict[str, str]  # the table row that answered (ANY where it is coarser)
    quantity: str = QUANTITY
    rows: str = "validation rows"  # what the rows are, in words

    def level(self) -> str:
        """The columns the answering row left open, in words: ``exact class``, ``any tp``."""
        loose = [k for k in CLASS_KEYS if self.answered_by.get(k) == ANY]
        return "exact class" if not loose else "any " + ", any ".join(loose)

    @classmethod
    def from_json(cls, given: Mapping[str, Any], klass: dict[str, str]) -> Band:
        """The band ``json`` wrote, for ``klass``."""
        fields = {k: v for k, v in given.items() if k != "level"}
        return cls(**fields, klass=klass)

    def json(self) -> dict[str, Any]:
        """The band for summary.json, plan.json and a bench profile (the class asked for sits
        beside it there)."""
        out = asdict(self)
        del out["klass"]
        out["level"] = self.level()
        return out

    def label(self, quantile: str) -> str:
        """The scenario of the plan's search at one quantile: ``model error p90 x1.21``."""
        return f"{MODEL_ERROR_PREFIX}{quantile} x{getattr(self, quantile):.4g}"


def gpu_family(name: str) -> str:
    """``H100-SXM`` -> ``H100``; ``A100-40G-SXM`` -> ``A100``; ``H200`` -> ``H200``."""
    return name.split("-")[0].split("_")[0].upper()


def quantiles(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(p10, p50, p90) of the ratios, linear between order statistics, rounded to 4 digits so
    that a rebuild compares equal as text."""
    values = np.quantile(np.asarray(ratios, dtype=float), QUANTILES)
    return tuple(float(f"{v:.4g}") for v in values)  # type: ignore[return-value]


def ratio_from_throughput(measured: float, predicted: float) -> float:
    """A throughput-at-SLO row's step-time ratio: capacity ~ 1 / step time, so ``r`` is
    predicted / measured throughput."""
    return predicted / measured


def build_bands(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The bands table from validation rows (each with the class columns, ``ratio`` and
    ``source``): one row per class per level with at least ``MIN_ROWS`` rows, sorted."""
    rows = list(rows)
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for level in LEVELS:
        groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
        for row in rows:
            key = tuple(str(row[k]) if k in level else ANY for k in CLASS_KEYS)
            groups.setdefault(key, []).append(row)
        for key, members in groups.items():
            if len(members) < MIN_ROWS or key in out:
                continue
            p10, p50, p90 = quantiles([float(m["ratio"]) for m in members])
            sources = "; ".join(sorted({str(m["source"]) for m in members}))
            out[key] = {
                **dict(zip(CLASS_KEYS, key, strict=True)),
                "n": len(members),
                "p10": p10,
                "p50": p50,
                "p90": p90,
                "source": sources,
            }
    return [out[key] for key in sorted(out)]


def write_bands(table: list[dict[str, Any]], path: Path, header: str) -> None:
    """The table as CSV under ``#`` comment lines (``header``: how it was built)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        for line in header.splitlines():
            f.write(f"# {line}\n")
        writer = csv.DictWriter(f, fieldnames=BAND_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in table:
            writer.writerow(
                {k: f"{row[k]:g}" if isinstance(row[k], float) else row[k] for k in BAND_COLUMNS}
            )


def read_bands(path: Path, field: str = "plan.model_error_table") -> list[dict[str, str]]:
    """A bands table's rows; ConfigError naming ``field`` if it is not one."""
    path = resolve_path(str(path), field)
    with path.open(newline="") as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        missing = [c for c in BAND_COLUMNS if c not in (reader.fieldnames or [])]
        require(not missing, field, str(path), f"not a bands table: no column {missing}")
        rows = list(reader)
    for row in rows:
        for quantile in ("p10", "p50", "p90"):
            value = row[quantile]
            require(
                _positive(value),
                field,
                str(path),
                f"{quantile} {value!r} of class {[row[k] for k in CLASS_KEYS]} must be > 0",
            )
    return rows


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def lookup(klass: Mapping[str, str], table: Sequence[Mapping[str, str]]) -> Band | None:
    """The band of ``klass`` from the most specific level of ``LEVELS`` that has a row, or
    None when not even the step-time model has validation rows."""
    index = {tuple(str(row[k]) for k in CLASS_KEYS): row for row in table}
    for level in LEVELS:
        key = tuple(str(klass[k]) if k in level else ANY for k in CLASS_KEYS)
        row = index.get(key)
        if row is not None:
            return Band(
                n=int(row["n"]),
                p10=float(row["p10"]),
                p50=float(row["p50"]),
                p90=float(row["p90"]),
                source=str(row["source"]),
                klass={k: str(klass[k]) for k in CLASS_KEYS},
                answered_by=dict(zip(CLASS_KEYS, key, strict=True)),
            )
    return None


def _module_name(target: str) -> str:
    """``sim.engine.scheduler.vllm.VLLMScheduler`` -> ``vllm``."""
    parts = target.split(".")
    return parts[-2] if len(parts) >= 2 else target


def deployment_class(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The class of a composed run config: its step-time model (a roofline with a bench
    profile is ``bench_profile``), engine (the scheduler's), GPU family, TP and weight
    precision. A disaggregated fleet is classed by its base deployment."""
    step_time = cfg["step_time"]
    model = _module_name(str(step_time.get("_target_", "")))
    if model == "roofline" and step_time.get("profile"):
        model = "bench_profile"
    return {
        "step_time_model": model,
        "engine": _module_name(str(cfg["scheduler"].get("_target_", ""))),
        "gpu_family": gpu_family(str(cfg["hardware"]["name"])),
        "tp": str(cfg["fleet"].get("tp", 1)),
        "precision": str(cfg["precision"]["weights"]),
    }


BENCH_ROWS = "the profile's held-out runs"


def held_out_band(
    records: Sequence[Mapping[str, Any]], source: str, klass: dict[str, str]
) -> Band | None:
    """A bench profile's own band (``BenchProfile.runs`` records): measured / calibrated TPOT
    of the runs its fit held out, however few (``n`` says how many); None: none held out."""
    ratios = []
    for record in records:
        measured = (record.get("measured") or {}).get("tpot")
        predicted = (record.get("calibrated") or {}).get("tpot")
        if record.get("held_out") and measured and predicted:
            ratios.append(measured / predicted)
    if not ratios:
        return None
    p10, p50, p90 = quantiles(ratios)
    return Band(len(ratios), p10, p50, p90, source, klass, dict(klass), rows=BENCH_ROWS)


def band_for(
    cfg: Mapping[str, Any], table: Sequence[Mapping[str, str]] | None = None
) -> tuple[dict[str, str], Band | None]:
    """(the class of a composed config, its band): a bench profile's own held-out band, else
    the table's (``read_bands``; None: the shipped one)."""
    klass = deployment_class(cfg)
    if klass["step_time_model"] == "bench_profile":
        from sim.engine.step_time.bench_profile import BenchProfile

        path = str(cfg["step_time"]["profile"])
        profile = BenchProfile.load(resolve_path(path, "step_time.profile"))
        source = f"{Path(path).name}, fleetcast calibrate --bench"
        return klass, held_out_band(profile.runs, source, klass)
    return klass, lookup(klass, read_bands(shipped_bands_path()) if table is None else table)


def model_error_text(block: Mapping[str, Any], count: Callable[[int | None], str]) -> str:
    """A plan answer's ``model_error`` block in words: ``3 at the measured model error (p50
    x1.02); 4 if step times are as slow as the worst 10% of validation rows (p90 x1.21); band
    of n 88 (...), class ...``; ``count`` writes a replica count (None: infeasible)."""
    band = block.get("band")
    if band is None:
        return str(block.get("note", "no band"))
    return (
        f"{count(block.get('replicas_at_p50'))} at the measured model error "
        f"(p50 x{band['p50']:.3g}); {count(block.get('replicas_at_p90'))} if step times are as "
        f"slow as the worst 10% of {band.get('rows', 'validation rows')} "
        f"(p90 x{band['p90']:.3g}); {band_text(band)}"
    )


def band_text(band: Mapping[str, Any]) -> str:
    """Where a band came from: ``band of n 88 (source), class roofline trtllm H100 (any
    tp)``."""
    shown = " ".join(str(v) for v in band["answered_by"].values() if v != ANY)
    return f"band of n {band['n']} ({band['source']}), class {shown or 'all'} ({band['level']})"


def model_error_block(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json's ``model_error`` (``output.model_error=true``): the run's class and the
    band of its step-time model for it (``band_for``); no band: a note says why."""
    klass, band = band_for(cfg)
    if band is None:
        return {"class": klass, "band": None, "note": no_band_note(klass)}
    return {"class": klass, "band": band.json(), "note": None}


def no_band_note(klass: Mapping[str, str]) -> str:
    model = klass["step_time_model"]
    if model == "bench_profile":
        return "the bench profile held out no run: no error band of its own"
    return f"no validation rows for step_time_model {model}: no measured error band"
