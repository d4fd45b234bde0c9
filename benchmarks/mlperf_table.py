"""Rebuild ``data/mlperf/server_results.csv`` from MLPerf Inference results repositories.

    python benchmarks/mlperf_table.py v4.1=/work/.mirror/mlcommons+inference_results_v4.1/repo
    python benchmarks/mlperf_table.py v4.0=/work/v40tree@3c4a1cf196b70175cfe7c59e067cd1d923aa4f3f
    python benchmarks/mlperf_table.py v4.1=GITDIR v4.0=DIR@COMMIT --check   # compare, write nothing

Each argument is ``ROUND=GIT_DIR`` or ``ROUND=DIR@COMMIT``, a copy of
``github.com/mlcommons/inference_results_<ROUND>``: a bare clone (or any git directory), read at
its ``HEAD`` commit; or a plain directory holding the repository's files at the stated 40-digit
commit (a checkout, or the files copied out of it one by one). Both go through the same
extraction; every row records the summary's path and the commit. The rounds given replace their
rows in ``--out``; rows of other rounds already there are kept, so one round can be rebuilt
alone (``--check`` likewise compares only the rounds given). Nothing is fetched here, and no
round after v5.0 may be given: later rounds are the held-out judging set
(``sim.harness.mlperf.LAST_ROUND``).

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

A copy that leaves files out can lack a result's measurements JSON, which no submission lacks
(the submission checker requires one). The v4.0 rows were read from such a copy: the tool
library's index of the repository, which keeps one file of each set of byte-identical files,
and NVIDIA's generated measurements JSON and code README are the same in every submission that
reuses NVIDIA's code. Where the JSON is missing, a non-preview system whose framework names
TensorRT takes the format of the benchmark's TensorRT code README: the submitter's own where the
copy holds it, else the first copy of it the tree holds (in path order); ``weight_data_types``
stays empty, which marks such a row. The same index keeps one of a -99/-99.9 pair of
byte-identical summaries (the -99.9 one, first in git's order), so such a pair is one row.
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
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sim.errors import ConfigError  # noqa: E402  (the checkout's own package, after the path)
from sim.harness.mlperf import (  # noqa: E402
    BENCHMARKS,
    COLUMNS,
    COMMIT,
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
# a submitter's TensorRT code README for one benchmark folder
CODE_README = re.compile(r"^closed/[^/]+/code/(?P<folder>[^/]+)/tensorrt/README\.md$")
TENSORRT = re.compile(r"TensorRT", re.I)

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
    """A results repository's files at one commit: a git directory or a plain directory."""

    root: Path
    commit: str
    paths: list[str]
    names: frozenset[str]
    git: bool

    @classmethod
    def open(cls, git_dir: Path) -> Tree:
        """A git directory (a bare clone works), read at its ``HEAD`` commit."""
        commit = _git(git_dir, "rev-parse", "HEAD").strip()
        names = _git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines()
        return cls(git_dir, commit, names, frozenset(names), git=True)

    @classmethod
    def directory(cls, root: Path, commit: str) -> Tree:
        """A plain directory holding the repository's files at ``commit`` (as stated)."""
        files = (p.relative_to(root) for p in root.rglob("*") if p.is_file())
        # a checkout's own .git folder is not the repository's content
        names = sorted(f.as_posix() for f in files if f.parts[0] != ".git")
        return cls(root, commit, names, frozenset(names), git=False)

    def text(self, path: str) -> str | None:
        if not self.git:
            file = self.root / path
            return file.read_text(encoding="utf-8") if path in self.names else None
        try:
            return _git(self.root, "show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None  # listed but absent (a snapshot leaves out files of 4 MiB and more)


class Source(NamedTuple):
    """One ``ROUND=GIT_DIR`` or ``ROUND=DIR@COMMIT`` argument."""

    round: str
    path: Path
    commit: str | None  # None: a git directory, read at HEAD


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


def parse_source(spec: str) -> Source:
    """``ROUND=GIT_DIR`` or ``ROUND=DIR@COMMIT``; a bad one is a ValueError saying why."""
    round_name, _, location = spec.partition("=")
    try:
        held_out = round_key(round_name) > round_key(LAST_ROUND)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    if held_out:
        raise ValueError(f"{round_name}: rounds after {LAST_ROUND} are held out")
    folder, at, commit = location.rpartition("@")
    if at and COMMIT.fullmatch(commit):
        if not Path(folder).is_dir():
            raise ValueError(f"{folder!r} is not a directory")
        return Source(round_name, Path(folder), commit)
    if at and not (Path(location) / "HEAD").is_file():
        raise ValueError(f"{location!r}: the commit after @ is not a 40-digit git commit hash")
    if not (Path(location) / "HEAD").is_file():
        raise ValueError(
            f"{location!r} is not a git directory (a bare clone or a .git folder); "
            "a plain directory is given as DIR@COMMIT"
        )
    return Source(round_name, Path(location), None)


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


def _qformat(tree: Tree, readmes: list[str]) -> tuple[str, str] | None:
    """(format, README) from the first of ``readmes`` the tree holds that names one."""
    for readme in readmes:
        qformat = QFORMAT.search(tree.text(readme) or "") if readme in tree.names else None
        if qformat:
            return (qformat.group(1) or qformat.group(2)).lower(), readme
    return None


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
    if str(system.get("status", "")).lower() == "preview":
        return "unstated", "", declared  # private code no README describes
    base = re.sub(r"-99(\.9)?$", "", found["benchmark"])
    folders = tuple(dict.fromkeys((found["benchmark"], base)))
    own = [f"closed/{found['submitter']}/code/{folder}/tensorrt/README.md" for folder in folders]
    # "fp16" quantized: the released code's quantization command, where the system ran it
    if "quantiz" in transforms:
        stated = _qformat(tree, own)
        if stated:
            return stated[0], stated[1], declared
    # no measurements JSON at all: only a copy that leaves out files lacks one (see the
    # docstring); a TensorRT system then runs the round's TensorRT code, its README in the copy
    if not declared_data and TENSORRT.search(str(system.get("framework", ""))):
        copies = [
            path
            for path in tree.paths
            if (match := CODE_README.match(path)) and match.group("folder") in folders
        ]
        stated = _qformat(tree, [*own, *sorted(copies)])
        if stated:
            return stated[0], stated[1], declared
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


def _shipped_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the table at ``path`` as text, checked by the loader (none if no file)."""
    if not path.is_file():
        return []
    load_results(path)  # its columns and cells, as the loader checks them
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", metavar="ROUND=GIT_DIR|ROUND=DIR@COMMIT")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--check", action="store_true", help="compare the rounds given with --out, write nothing"
    )
    args = parser.parse_args(argv)
    sources = []
    for spec in args.trees:
        try:
            sources.append(parse_source(spec))
        except ValueError as err:
            parser.error(str(err))
    rounds = {source.round for source in sources}
    if len(rounds) < len(sources):
        parser.error("a round is given twice")
    rows: list[dict[str, str]] = []
    for source in sources:
        skipped: Counter = Counter()
        if source.commit is None:
            tree = Tree.open(source.path)
        else:
            tree = Tree.directory(source.path, source.commit)
        found = rows_of(source.round, tree, skipped)
        print(f"{source.round} @ {tree.commit}: {len(found)} rows; left out: {dict(skipped)}")
        print(
            "  "
            + ", ".join(
                f"{b} {n}" for b, n in sorted(Counter(r["benchmark"] for r in found).items())
            )
        )
        rows += found
    try:
        shipped = _shipped_rows(args.out)
    except ConfigError as err:
        parser.error(f"{err} (the rows of the rounds not given are kept from it)")
    kept = [row for row in shipped if row["round"] not in rounds]
    if args.check:
        compared = render([row for row in shipped if row["round"] in rounds])
        same = compared == render(rows)
        named = ", ".join(sorted(rounds, key=round_key))
        print(
            f"the shipped table's {named} rows match"
            if same
            else f"{args.out}'s {named} rows differ from the rebuilt ones"
        )
        return 0 if same else 1
    args.out.write_text(render(kept + rows))
    load_results(args.out)  # every cell as the loader checks it
    print(f"wrote {len(rows)} rows to {args.out}, kept {len(kept)} of other rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
