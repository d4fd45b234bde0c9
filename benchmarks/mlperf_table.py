"""Rebuild ``data/mlperf/server_results.csv`` from MLPerf Inference results repositories.

    python benchmarks/mlperf_table.py v4.1=/work/.mirror/mlcommons+inference_results_v4.1/repo
    python benchmarks/mlperf_table.py v4.1=GITDIR --check   # compare with the shipped table

Each argument is ``ROUND=GIT_DIR``: a bare clone (or any git directory) of
``github.com/mlcommons/inference_results_<ROUND>``; the table is read from its ``HEAD`` commit,
whose hash every row records. Nothing is fetched here, and no round after v5.0 may be given:
later rounds are the held-out judging set (``sim.harness.mlperf.LAST_ROUND``).

A row is one VALID closed-division Server result of an LLM benchmark with TTFT/TPOT bounds
(``sim.harness.mlperf.BENCHMARKS``; GPT-J is left out: its Server bound is on the whole query's
latency, not on TTFT and TPOT) on a GPU system (an NVIDIA or AMD Instinct accelerator; Gaudi,
TPU and CPU-only systems are counted and left out). Its figures come from three files of the
submission, all read as text:

- ``closed/<submitter>/results/<system>/<benchmark>/<scenario>/performance/run_1/
  mlperf_log_summary.txt``: the LoadGen summary (validity, completed tokens and samples per
  second, scheduled samples per second, p99 first-token latency and p99 time per output token,
  the target QPS and the TTFT/TPOT bounds the run was checked against, all in ns);
- ``closed/<submitter>/systems/<system>.json``: system name, accelerator, accelerators per node,
  nodes, framework, availability;
- ``closed/<submitter>/measurements/<system>/<benchmark>/<scenario>/*.json``:
  ``weight_data_types`` (the precision the submitter declared), and, where that says only
  "fp16" with a quantization transform (TensorRT-LLM submissions built from NVIDIA's code), the
  format the submitter's own code README for the benchmark quantizes to (its quantization
  command's ``--qformat``, or the "FP8 quantized model" it ships), unless the system is a
  "preview" one (built from private code the README does not describe); otherwise the
  precision is "unstated".
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sim.errors import ConfigError  # noqa: E402  (the checkout's own package, after the path)
from sim.harness.mlperf import (  # noqa: E402
    BENCHMARKS,
    COLUMNS,
    LAST_ROUND,
    load_results,
    round_key,
)

OUT = REPO / "data" / "mlperf" / "server_results.csv"
SUMMARY = re.compile(
    r"^closed/(?P<submitter>[^/]+)/results/(?P<system>[^/]+)/(?P<benchmark>[^/]+)/"
    r"(?P<scenario>Server|Interactive)/performance/run_1/mlperf_log_summary\.txt$"
)
# accelerators counted as GPUs (NVIDIA data-centre and workstation parts, AMD Instinct)
GPU_NAME = re.compile(r"NVIDIA|\b[HBALG]\d{2,3}\b|GB200|GH200|L40S?|MI\d{3}X?|Instinct", re.I)
# sub-16-bit formats a measurements file or a quantization command may name
LOW_PRECISION = re.compile(r"\b(fp8|fp4|nvfp4|mxfp4|fp6|int8|int4|w8a8|w4a16)\b", re.I)
# how a TensorRT-LLM code README states the weights' format: the quantization command's
# --qformat (llama2-70b), or the quantized checkpoint it ships (mixtral-8x7b)
QFORMAT = re.compile(r"--qformat[= ](\w+)|\b(FP8|FP4) quantized model\b")

# the summary's lines, as LoadGen writes them (mlperf_log_summary.txt, v4.0-v5.0)
FIELDS = {
    "result": r"Result is : (\w+)",
    "completed_samples_per_s": r"Completed samples per second\s*: ([\d.]+)",
    "completed_tokens_per_s": r"Completed tokens per second\s*: ([\d.]+)",
    "scheduled_samples_per_s": r"Scheduled samples per second\s*: ([\d.]+)",
    "p99_ttft_ns": r"99\.00 percentile first token latency \(ns\)\s*: (\d+)",
    "p99_tpot_ns": r"99\.00 percentile time to output token \(ns\)\s*: (\d+)",
    "target_qps": r"target_qps : ([\d.]+)",
    "ttft_bound_ns": r"ttft_latency \(ns\): (\d+)",
    "tpot_bound_ns": r"tpot_latency \(ns\): (\d+)",
}


@dataclass
class Tree:
    """One results repository at its HEAD commit, read through git (a bare clone works)."""

    git_dir: Path
    commit: str
    paths: list[str]
    names: frozenset[str]

    @classmethod
    def open(cls, git_dir: Path) -> Tree:
        commit = _git(git_dir, "rev-parse", "HEAD").strip()
        names = _git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines()
        return cls(git_dir, commit, names, frozenset(names))

    def text(self, path: str) -> str | None:
        try:
            return _git(self.git_dir, "show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None  # listed but absent (a snapshot leaves out files of 4 MiB and more)


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


def parse_summary(text: str) -> dict[str, str]:
    """The summary's fields (first occurrence each); a field missing from the log is absent."""
    out = {}
    for name, pattern in FIELDS.items():
        found = re.search(pattern, text, re.M)
        if found:
            out[name] = found.group(1)
    return out


def measurements(tree: Tree, found: dict[str, str]) -> dict:
    """The submission's measurements JSON for one result (``{}`` where there is none)."""
    folder = (
        f"closed/{found['submitter']}/measurements/{found['system']}/"
        f"{found['benchmark']}/{found['scenario']}/"
    )
    for path in tree.paths:
        if path.startswith(folder) and path.endswith(".json"):
            try:
                data = json.loads(tree.text(path) or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and "weight_data_types" in data:
                return data
    return {}


def precision_of(tree: Tree, found: dict[str, str], system: dict) -> tuple[str, str, str]:
    """(precision, where it is stated, weight_data_types as declared) for one result."""
    declared_data = measurements(tree, found)
    declared = str(declared_data.get("weight_data_types", "")).strip()
    transforms = str(declared_data.get("weight_transformations", "")).lower()
    low = LOW_PRECISION.search(declared)
    if low:
        return low.group(1).lower(), "measurements weight_data_types", declared
    if "quantiz" not in transforms and re.fullmatch(r"(?i)fp16|bf16", declared):
        return declared.lower(), "measurements weight_data_types", declared
    # "fp16" quantized: the released code's quantization command, where the system ran it
    if "quantiz" in transforms and str(system.get("status", "")).lower() != "preview":
        base = re.sub(r"-99(\.9)?$", "", found["benchmark"])
        for folder in dict.fromkeys((found["benchmark"], base)):
            readme = f"closed/{found['submitter']}/code/{folder}/tensorrt/README.md"
            qformat = QFORMAT.search(tree.text(readme) or "") if readme in tree.names else None
            if qformat:
                return (qformat.group(1) or qformat.group(2)).lower(), readme, declared
    return "unstated", "", declared


def rows_of(round_name: str, tree: Tree, skipped: Counter) -> list[dict[str, str]]:
    rows = []
    for path in tree.paths:
        match = SUMMARY.match(path)
        if not match:
            continue
        found = match.groupdict()
        if found["benchmark"] not in BENCHMARKS:
            continue
        summary = parse_summary(tree.text(path) or "")
        if summary.get("result") != "VALID":
            skipped["not VALID"] += 1
            continue
        system_text = tree.text(f"closed/{found['submitter']}/systems/{found['system']}.json")
        if system_text is None:
            skipped["no systems json"] += 1
            continue
        system = json.loads(system_text)
        accelerator = str(system.get("accelerator_model_name", "")).strip()
        per_node = int(system.get("accelerators_per_node") or 0)
        if per_node == 0 or not GPU_NAME.search(accelerator):
            skipped[f"not a GPU: {accelerator or 'none'}"] += 1
            continue
        nodes = int(system.get("number_of_nodes") or 1)
        precision, precision_source, declared = precision_of(tree, found, system)
        missing = [k for k in FIELDS if k not in summary]
        if missing:
            raise SystemExit(f"{round_name} {path}: the summary lacks {', '.join(missing)}")
        rows.append(
            {
                "round": round_name,
                "submitter": found["submitter"],
                "system": found["system"],
                "system_name": str(system.get("system_name", "")).strip(),
                "status": str(system.get("status", "")).strip().lower(),
                "accelerator": accelerator,
                "accelerators_per_node": str(per_node),
                "nodes": str(nodes),
                "accelerators_total": str(per_node * nodes),
                "framework": str(system.get("framework", "")).strip(),
                "benchmark": BENCHMARKS[found["benchmark"]],
                "scenario": found["scenario"],
                "weight_data_types": declared,
                "precision": precision,
                "precision_source": precision_source,
                **{k: summary[k] for k in FIELDS if k != "result"},
                "result": summary["result"],
                "source_path": path,
                "commit": tree.commit,
            }
        )
    return rows


def render(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    key = ("round", "benchmark", "submitter", "system", "scenario")
    for row in sorted(rows, key=lambda r: (round_key(r["round"]), *(r[k] for k in key[1:]))):
        writer.writerow(row)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", metavar="ROUND=GIT_DIR")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = parser.parse_args(argv)
    rows: list[dict[str, str]] = []
    for spec in args.trees:
        round_name, _, git_dir = spec.partition("=")
        try:
            held_out = round_key(round_name) > round_key(LAST_ROUND)
        except ConfigError as err:
            parser.error(str(err))
        if held_out:
            parser.error(f"{round_name}: rounds after {LAST_ROUND} are held out")
        if not (Path(git_dir) / "HEAD").is_file():
            parser.error(f"{git_dir!r} is not a git directory (a bare clone or a .git folder)")
        skipped: Counter = Counter()
        tree = Tree.open(Path(git_dir))
        found = rows_of(round_name, tree, skipped)
        print(f"{round_name} @ {tree.commit}: {len(found)} rows; left out: {dict(skipped)}")
        print(
            "  "
            + ", ".join(
                f"{b} {n}" for b, n in sorted(Counter(r["benchmark"] for r in found).items())
            )
        )
        rows += found
    text = render(rows)
    if args.check:
        same = args.out.read_text() == text
        print("the shipped table matches" if same else f"{args.out} differs from the rebuilt table")
        return 0 if same else 1
    args.out.write_text(text)
    load_results(args.out)  # every cell as the loader checks it
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
