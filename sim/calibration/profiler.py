"""``fleetcast profile``: measure step times of a catalog model's shape with PyTorch.

    fleetcast profile model=llama31_8b --out steps.csv [--device cuda|cpu] [--dtype bf16|fp16|fp32]
                      [--layers N] [--grid small|default] [--warmup N] [--repeats N] [--seed N]
                      [--no-cuda-graphs]

It builds a decoder-only transformer of the model's shape (``configs/model/NAME.yaml``) with random
weights (nothing is downloaded), on the local device, and times three kinds of engine step over a
grid of batch sizes and context lengths:

- ``prefill``: a batch of ``b`` prompts of ``L`` tokens each, no KV cached before the step;
- ``decode``: ``b`` sequences with ``c`` tokens each already in the KV cache, one new token each;
- ``mixed``: one prefill chunk of ``n`` tokens (after ``k`` tokens of its own already cached) and
  ``d`` decodes at context ``c``, all in one forward pass (chunked prefill, as Sarathi and vLLM do).

Each grid point is run ``--warmup`` times untimed, then ``--repeats`` times timed; the median is
written. On a GPU each run is bracketed by CUDA events after a synchronize, and by default the
step is captured once as a CUDA graph and replayed (serving engines replay graphs for decode;
without them a small decode measures Python's kernel launches, not the GPU). Everything runs
under ``torch.inference_mode()``.

The model, per layer: RMSNorm, a fused QKV projection with ``num_kv_heads`` grouped KV heads, KV
written into a preallocated cache ``[batch, kv_heads, context, head_dim]``, attention with
``torch.nn.functional.scaled_dot_product_attention`` over the cached context (causal within a
prefill chunk), output projection, RMSNorm and a SwiGLU FFN (fused gate/up, down) of ``ffn_size``;
then a final norm and the LM head on the last token of each sequence only. Left out: rotary
position embedding (cheap elementwise work on Q and K), sampling, and the engine's own scheduling,
so the per-step constant measured here is lower than an engine's. Mixture-of-experts models are
refused. ``--layers N`` builds N layers instead of the catalog's count and measures that model
as built; the CSV records the layer count, it does not scale the times.

The per-step CSV (what ``fleetcast calibrate`` reads; produce it from your own engine's step
logs too). One row per measured step; the first five columns are the ``linear`` step-time
contract (docs/reference/config.md), the rest describe where the row came from:

    num_prefill_tokens  P: prompt tokens computed in the step (all prefill chunks)
    num_decode_seqs     D: sequences that each decode one token in the step
    prefill_attn        Ap: sum over prefill chunks of chunk * (context_before + chunk), chunk
                        being the chunk's tokens and context_before the sequence's tokens
                        already in the KV cache
    decode_context      Ad: sum over decoding sequences of their context length including the
                        token being decoded (tokens already in the KV cache + 1)
    step_time_s         the step's wall time in seconds (here: the median of the repeats)
    kind                prefill | decode | mixed (engine logs: whichever fits; calibrate
                        uses the five columns above)
    batch_size          sequences in the step (mixed: 1 prefill chunk + d decodes)
    context_tokens      prefill: prompt length L; decode and mixed: the decodes' cached context c
    model               the model's name (Hugging Face id)
    num_layers          layers of the model as run
    device              e.g. "NVIDIA H200" or "cpu"
    dtype               bf16 | fp16 | fp32 (weights, activations and KV cache)
    tp                  tensor-parallel degree (1 here)

Worked example: a prefill of 2 prompts x 8 tokens is P=16, D=0, Ap=2*8*(0+8)=128, Ad=0; a decode
of 3 sequences with 10 cached tokens each is P=0, D=3, Ap=0, Ad=3*11=33.

PyTorch is an optional extra (``pip install 'fleetcast[profile]'``); this module imports it
only inside functions.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sim.calibration.profiler_model import (
    _DTYPE_BYTES,
    DTYPES,
    Decoder,
    Group,
    TorchMissing,
    _torch,
)
from sim.catalog.model import ModelSpec
from sim.config.compose import load_option
from sim.engine.step_shape import STEP_SHAPE_COLUMNS, StepShape
from sim.errors import ConfigError, require

CSV_COLUMNS = (
    *STEP_SHAPE_COLUMNS,
    "step_time_s",
    "kind",
    "batch_size",
    "context_tokens",
    "model",
    "num_layers",
    "device",
    "dtype",
    "tp",
)

# ---- the grid ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GridPoint:
    """One engine step to time: ``prefill_batch`` chunks of ``prefill_tokens`` tokens, each after
    ``prefill_context`` cached tokens of its own, plus ``decode_batch`` decodes whose sequences
    have ``decode_context`` tokens in the KV cache before the step."""

    kind: str
    prefill_batch: int = 0
    prefill_tokens: int = 0
    prefill_context: int = 0
    decode_batch: int = 0
    decode_context: int = 0

    @property
    def shape(self) -> StepShape:
        """The step's shape, as the simulator's step-time models see it."""
        return StepShape(
            num_prefill_tokens=self.prefill_batch * self.prefill_tokens,
            num_decode_seqs=self.decode_batch,
            prefill_attn=self.prefill_batch
            * self.prefill_tokens
            * (self.prefill_context + self.prefill_tokens),
            # every decoding sequence attends its cached tokens plus the one it decodes
            decode_context=self.decode_batch * (self.decode_context + 1),
        )

    @property
    def batch_size(self) -> int:
        return self.prefill_batch + self.decode_batch

    @property
    def context_tokens(self) -> int:
        return self.prefill_tokens if self.kind == "prefill" else self.decode_context

    def kv_tokens(self) -> int:
        """KV-cache slots the step needs (prefill and decode caches together)."""
        return self.prefill_batch * (
            self.prefill_context + self.prefill_tokens
        ) + self.decode_batch * (self.decode_context + 1)

    def label(self) -> str:
        parts = []
        if self.prefill_batch:
            ctx = f" after {self.prefill_context}" if self.prefill_context else ""
            parts.append(f"{self.prefill_batch}x{self.prefill_tokens} prefill{ctx}")
        if self.decode_batch:
            parts.append(f"{self.decode_batch} decodes at context {self.decode_context}")
        return f"{self.kind:7s} " + " + ".join(parts)


def make_grid(name: str) -> list[GridPoint]:
    """The grid of step shapes: ``default`` is sized for a datacenter GPU and an 8B model (grid
    points whose KV cache does not fit are skipped at run time), ``small`` for a CPU test."""
    require(name in ("small", "default"), "grid", name, "choose small or default")
    if name == "small":
        prefill = [(1, 8), (2, 8), (1, 32), (2, 32)]
        decode = [(1, 16), (4, 16), (1, 64), (4, 64)]
        mixed = [(16, 0, 2, 16), (8, 8, 4, 32)]
    else:
        prefill = (
            [(1, n) for n in (128, 256, 512, 1024, 2048, 4096, 8192)]
            + [(4, n) for n in (256, 1024, 2048)]
            + [(16, 128), (16, 512)]
        )
        decode = [
            (b, c)
            for b in (1, 4, 16, 32, 64, 128, 256)
            for c in (128, 1024, 4096, 16384)
            if b * c <= 1 << 20
        ]
        mixed = [(n, 0, d, 1024) for n in (256, 512, 2048) for d in (8, 32, 128)]
        mixed += [(512, 2048, 32, 1024), (512, 8192, 32, 1024), (2048, 8192, 64, 4096)]
    return (
        [GridPoint("prefill", prefill_batch=b, prefill_tokens=n) for b, n in prefill]
        + [GridPoint("decode", decode_batch=b, decode_context=c) for b, c in decode]
        + [
            GridPoint(
                "mixed",
                prefill_batch=1,
                prefill_tokens=n,
                prefill_context=k,
                decode_batch=d,
                decode_context=c,
            )
            for n, k, d, c in mixed
        ]
    )


# ---- timing -----------------------------------------------------------------------------------


def _groups_for(model: Decoder, point: GridPoint) -> list[Group]:
    groups = []
    if point.prefill_batch:
        groups.append(
            model.new_group(point.prefill_batch, point.prefill_tokens, point.prefill_context)
        )
    if point.decode_batch:
        groups.append(model.new_group(point.decode_batch, 1, point.decode_context))
    return groups


def _median_time(step: Callable[[], object], cuda: bool, warmup: int, repeats: int) -> float:
    torch = _torch()
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _capture(step: Callable[[], object]) -> Callable[[], object]:
    """``step`` captured as a CUDA graph; returns its replay."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as capture requires
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def profile_shape(
    spec: ModelSpec,
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    grid: str | Sequence[GridPoint] = "small",
    warmup: int = 1,
    repeats: int = 3,
    seed: int = 0,
    cuda_graphs: bool = True,
    progress: Callable[[str], None] | None = print,
) -> list[dict]:
    """Build ``spec`` (as given: its ``num_layers``) and time every step of ``grid``; one CSV row
    (a dict keyed by ``CSV_COLUMNS``) per step that fits in memory."""
    torch = _torch()
    require(warmup >= 0, "warmup", warmup, "must be >= 0")
    require(repeats >= 1, "repeats", repeats, "must be >= 1")
    require(device in ("cpu", "cuda"), "device", device, "choose cuda or cpu")
    require(dtype in DTYPES, "dtype", dtype, "choose bf16, fp16 or fp32")
    cuda = device == "cuda"
    require(
        not cuda or torch.cuda.is_available(),
        "device",
        device,
        "no CUDA GPU visible to PyTorch (use --device cpu)",
    )
    points = make_grid(grid) if isinstance(grid, str) else list(grid)
    say = progress or (lambda _line: None)
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    kv_bytes_per_token = (
        2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * _DTYPE_BYTES[dtype]
    )

    rows: list[dict] = []
    with torch.inference_mode():
        model = Decoder(spec, device, dtype, seed)
        for i, point in enumerate(points, 1):
            where = f"[{i}/{len(points)}] {point.label()}"
            if cuda:
                free, _total = torch.cuda.mem_get_info()
                need = point.kv_tokens() * kv_bytes_per_token
                if need > 0.7 * free:
                    say(
                        f"{where}: skipped (KV cache {need / 2**30:.1f} GiB, "
                        f"{free / 2**30:.1f} GiB free)"
                    )
                    continue
            groups: list[Group] | None
            step: Callable[[], object] | None
            try:
                groups = _groups_for(model, point)
                step = partial(model.forward, groups)
                how = "eager"
                if cuda and cuda_graphs:
                    try:
                        step, how = _capture(step), "graph"
                    except RuntimeError as err:  # keep going eagerly; say why once per point
                        torch.cuda.synchronize()
                        why = " ".join(str(err).split())[:120]
                        say(f"{where}: CUDA graph capture failed ({why}), timing eagerly")
                seconds = _median_time(step, cuda, warmup, repeats)
            except torch.cuda.OutOfMemoryError:
                say(f"{where}: skipped (out of GPU memory)")
                continue
            finally:
                groups = step = None
                if cuda:
                    torch.cuda.empty_cache()
            assert math.isfinite(seconds) and seconds > 0, f"{where}: bad time {seconds}"
            rows.append(
                {
                    **dataclasses.asdict(point.shape),
                    "step_time_s": seconds,
                    "kind": point.kind,
                    "batch_size": point.batch_size,
                    "context_tokens": point.context_tokens,
                    "model": spec.name,
                    "num_layers": spec.num_layers,
                    "device": device_name,
                    "dtype": dtype,
                    "tp": 1,
                }
            )
            tokens = point.shape.num_tokens
            say(f"{where}: {seconds * 1e3:.3f} ms ({how}, {tokens / seconds:,.0f} tokens/s)")
    return rows


def write_csv(rows: Sequence[dict], path: str | os.PathLike) -> Path:
    """Write ``rows`` with ``CSV_COLUMNS`` to ``path`` atomically (a temp file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "step_time_s": repr(float(row["step_time_s"]))})
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def load_model_spec(name: str) -> ModelSpec:
    """The catalog model ``configs/model/NAME.yaml``; ConfigError listing the choices if none."""
    return ModelSpec.from_config(load_option("model", name, "model"))


def _summary(rows: Sequence[dict], out: Path, elapsed: float) -> str:
    lines = [f"wrote {len(rows)} steps to {out} in {elapsed:.1f} s"]
    for kind in ("prefill", "decode", "mixed"):
        times = [r["step_time_s"] for r in rows if r["kind"] == kind]
        if times:
            lines.append(
                f"  {kind:7s} {len(times):3d} steps, {min(times) * 1e3:.3f} to "
                f"{max(times) * 1e3:.3f} ms"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``fleetcast profile model=NAME --out PATH [...]``; 0 on success, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="fleetcast profile",
        description="Time prefill, decode and mixed steps of a catalog model's shape (random "
        "weights) with PyTorch and write the per-step CSV that fleetcast calibrate "
        "reads.",
    )
    parser.add_argument(
        "override",
        nargs="?",
        metavar="model=NAME",
        help="the catalog model (configs/model/NAME.yaml)",
    )
    parser.add_argument("--model", metavar="NAME", help="the same as model=NAME")
    parser.add_argument("--out", metavar="PATH", required=True, help="the CSV to write")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="default: cuda if PyTorch sees a GPU, else cpu",
    )
    parser.add_argument(
        "--dtype", choices=DTYPES, default=None, help="default: bf16 on cuda, fp32 on cpu"
    )
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        metavar="N",
        help="build N layers instead of the model's own count",
    )
    parser.add_argument(
        "--grid",
        choices=("small", "default"),
        default=None,
        help="default: 'default' on cuda (sized for a datacenter GPU), 'small' on cpu",
    )
    parser.add_argument(
        "--warmup", type=int, default=3, metavar="N", help="untimed runs per step (default 3)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=10,
        metavar="N",
        help="timed runs per step; the median is written (default 10)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="launch kernels eagerly instead of replaying a CUDA graph",
    )
    args = parser.parse_args(argv)
    try:
        name = args.model
        if args.override is not None:
            key, sep, value = args.override.partition("=")
            require(
                sep == "=" and key == "model",
                "override",
                args.override,
                "fleetcast profile takes model=NAME and options (see --help)",
            )
            require(name in (None, value), "model", value, f"given twice (also --model {name})")
            name = value
        require(name is not None, "model", None, "missing: give model=NAME")
        # model=hf reads its shape from model.config_path, which this command does not take:
        # it would profile the option's default file, not the model the user means
        require(
            name != "hf",
            "model",
            name,
            "fleetcast profile takes a catalog model: import the config.json first "
            "(fleetcast model import CONFIG_JSON --output configs/model/NAME.yaml)",
        )
        spec = load_model_spec(name)
        require(
            not spec.is_moe,
            "model",
            name,
            f"{spec.short_name} is a mixture of experts; fleetcast profile measures dense "
            "models only",
        )
        if args.layers is not None:
            require(args.layers >= 1, "layers", args.layers, "must be >= 1")
            spec = dataclasses.replace(spec, num_layers=args.layers)
        out = Path(args.out)
        require(not out.is_dir(), "out", args.out, "is a directory; give a file name")
        out.parent.mkdir(parents=True, exist_ok=True)  # fail now, not after the measurements
        torch = _torch()
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = args.dtype or ("bf16" if device == "cuda" else "fp32")
        grid = args.grid or ("default" if device == "cuda" else "small")
        layers = f"{spec.num_layers} layer{'s' * (spec.num_layers != 1)}"
        print(
            f"profiling {spec.short_name} ({layers}) on {device} at {dtype}, "
            f"grid {grid}, {args.warmup} warm-up + {args.repeats} timed runs per step"
        )
        started = time.perf_counter()
        rows = profile_shape(
            spec,
            device=device,
            dtype=dtype,
            grid=grid,
            warmup=args.warmup,
            repeats=args.repeats,
            seed=args.seed,
            cuda_graphs=not args.no_cuda_graphs,
        )
        require(len(rows) > 0, "grid", grid, "no step fitted in memory; nothing measured")
        out = write_csv(rows, args.out)
    except (ConfigError, TorchMissing, OSError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(_summary(rows, out, time.perf_counter() - started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
