"""A step time calibrated from measurements, with the shape of the physics.

    t = c0
        + split(gemm, P + D)                    the layers' GEMMs (measured curve)
        + split(lm_head, D + [P > 0])           the vocabulary projection, last tokens only
        + c_token·(P + D) / s                   per-token element-wise work (norms, SiLU, adds)
        + [P > 0]·c_prefill_step + (c_prefill_token·P + c_prefill_attn·Ap) / s
        + [D > 0]·c_decode_step + c_decode_seq·D / s + c_decode_attn·Ad / tp
        + all-reduce(P + D)                     2 per layer when tp > 1 (ring, as the roofline),
                                                each paying c_allreduce_latency (or, when the
                                                profile has none, the catalog's latency)
        + c_expert_weights·touched(P + D) / tp  a mixture of experts: the routed experts' weights
                                                the step's tokens touch, read once

    touched(n) = 1 - (1 - k/E)**n               the expected share of the E routed experts that n
                                                tokens choosing k each touch (uniform routing,
                                                ``ModelSpec.expected_experts_touched``)

    split(f, n) = f(1) / tp + (f(n) - f(1)) / s  the curve's floor (every weight read once) split
                                                over the tp GPUs, the work above it sped up by s
    s = tp ** tp_compute_exponent               the speed-up of per-token work on tp GPUs

(``f(1)`` is the curve's first point: one token for the shipped profiles.)

``gemm`` and ``lm_head`` are piecewise-linear curves of step time against tokens, taken from
measured GEMM kernels: flat while a step is memory-bound (every weight read once whatever the
batch), then linear once it is compute-bound. The attention terms come from measured prefill
and decode attention kernels; ``c0`` is the engine's fixed per-step cost. Every coefficient is
non-negative and both curves never decrease, so more work is never faster.

Tensor parallelism. Reading the weights and the KV cache splits evenly over ``tp`` GPUs (each
holds 1/tp of them), so those terms divide by ``tp``. Per-token work does not speed up as
well: each GPU multiplies matrices ``tp`` times narrower, which run below the efficiency of the
measured TP-1 shapes. ``tp_compute_exponent`` (1 = ideal, the default when a profile has none)
says how much: per-token work on ``tp`` GPUs takes 1/tp**exponent of its TP-1 time.

Mixture of experts. A small step reads only the routed experts its tokens chose; a large one
reads them all (then its cost grows with tokens, as a dense model's). ``c_expert_weights`` is
that read for all experts, fitted by ``fleetcast calibrate --steps`` for a MoE model (a column
of touched(P + D) beside the linear contract's); the rest of a MoE step (attention, shared
experts, the router, the chosen experts' FLOPs) is in the other terms, as for a dense model.
Each GPU of a TP group holds a slice of every expert, so the read splits by ``tp``. Expert
parallelism (``fleet.ep``) is refused: its all-to-all is not in a one-GPU measurement.

A profile (JSON, ``Profile``) holds the curves and coefficients for one (model, GPU, weight
precision, KV precision, backend), with its provenance and held-out error. Profiles are measured
at TP 1; tensor parallelism splits the work as above and adds the all-reduces from the GPU's
interconnect (modelled, not measured). ``step_time=calibrated`` picks the shipped profile
matching the deployment, or takes ``step_time.profile=PATH``.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import cast

from sim.catalog.deployment import Deployment
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import StepTimeModel
from sim.engine.step_time.profile import (
    COEFFICIENTS,
    OPTIONAL_COEFFICIENTS,
    TP_EXPONENT,
    Profile,
    profile_file_name,
    shipped_profile_dir,
)
from sim.errors import ConfigError, require
from sim.resources import resolve_path


def _curve(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear interpolation; linear extrapolation past the last point (compute-bound
    growth), the first value below the first point (the memory-bound floor)."""
    if not xs:
        return 0.0
    if x <= xs[0]:
        return ys[0]
    i = bisect_right(xs, x) - 1
    if i >= len(xs) - 1:
        i = len(xs) - 2
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class _SplitCurve:
    """A measured TP-1 curve of time against tokens, run on ``tp`` GPUs: its floor (every
    weight read once) divides by ``tp``, the work above the floor by ``speedup``."""

    __slots__ = ("floor", "floor_per_gpu", "speedup", "xs", "ys")

    def __init__(self, xs: list[float], ys: list[float], tp: int, speedup: float) -> None:
        self.xs, self.ys = list(xs), list(ys)
        self.floor = ys[0] if ys else 0.0
        self.floor_per_gpu = self.floor / tp
        self.speedup = speedup

    def __call__(self, tokens: float) -> float:
        return self.floor_per_gpu + (_curve(self.xs, self.ys, tokens) - self.floor) / self.speedup


class CalibratedStepTime(StepTimeModel):
    def __init__(
        self,
        deployment: Deployment,
        backend: str = "vllm",
        profile: str | None = None,
        allreduce_bytes_per_element: float = 2.0,
    ) -> None:
        require(
            backend in ("vllm", "trtllm"), "step_time.backend", backend, "choose vllm or trtllm"
        )
        require(
            allreduce_bytes_per_element > 0,
            "step_time.allreduce_bytes_per_element",
            allreduce_bytes_per_element,
            "must be > 0",
        )
        for field_name, value in (("fleet.pp", deployment.pp), ("fleet.ep", deployment.ep)):
            require(
                value == 1,
                field_name,
                value,
                "a calibrated profile is measured on one GPU and models tensor parallelism"
                " only; use step_time=roofline for pipeline or expert parallelism",
            )
        if profile is None:
            name = profile_file_name(
                deployment.model.name,
                deployment.gpu.name,
                deployment.weights_precision,
                deployment.kv_precision,
                backend,
            )
            path = shipped_profile_dir() / name
            if not path.exists():
                shipped = sorted(p.name for p in shipped_profile_dir().glob("*.json"))
                raise ConfigError(
                    "step_time",
                    "calibrated",
                    f"no shipped profile for {deployment.model.name} on "
                    f"{deployment.gpu.name} ({deployment.weights_precision} "
                    f"weights, {deployment.kv_precision} KV, {backend}); shipped: "
                    f"{', '.join(shipped)}; or give step_time.profile=PATH",
                )
        else:
            path = resolve_path(profile, "step_time.profile")
        prof = Profile.load(path)
        for field_name, want, got in (
            ("model", deployment.model.name, prof.model),
            ("hardware", deployment.gpu.name, prof.hardware),
            ("precision.weights", deployment.weights_precision, prof.weights_precision),
            ("precision.kv", deployment.kv_precision, prof.kv_precision),
        ):
            require(
                want == got,
                "step_time.profile",
                str(path),
                f"profile is for {field_name} {got}, this run uses {want}",
            )
        self.profile = prof
        c = {
            # only c_allreduce_latency may be null (Profile.load checks), and it is left out
            name: float(cast(float, prof.coefficients.get(name, 0.0)))
            for name in COEFFICIENTS
            if name not in OPTIONAL_COEFFICIENTS
        }
        tp = deployment.tp
        speedup = tp ** float(cast(float, prof.coefficients.get(TP_EXPONENT, 1.0)))
        self._c0 = c["c0"]
        self._c_token = c["c_token"] / speedup
        self._c_prefill_step = c["c_prefill_step"]
        self._c_prefill_token = c["c_prefill_token"] / speedup
        self._c_prefill_attn = c["c_prefill_attn"] / speedup
        self._c_decode_step = c["c_decode_step"]
        self._c_decode_seq = c["c_decode_seq"] / speedup
        self._c_decode_attn = c["c_decode_attn"] / tp
        require(
            deployment.model.is_moe or not c["c_expert_weights"],
            "step_time.profile",
            str(path),
            f"c_expert_weights is a mixture of experts' term; {deployment.model.name} is dense",
        )
        self._expert_weights = c["c_expert_weights"] / tp
        self._model = deployment.model
        self._gemm = _SplitCurve(prof.gemm_tokens, prof.gemm_s, tp, speedup)
        self._lm_head = _SplitCurve(prof.lm_head_tokens, prof.lm_head_s, tp, speedup)
        if tp > 1:
            ring = 2.0 * (tp - 1) / tp
            model, gpu = deployment.model, deployment.gpu
            self._allreduce_per_token = (
                2
                * model.num_layers
                * ring
                * model.hidden_size
                * allreduce_bytes_per_element
                / gpu.interconnect_bytes_per_s
            )
            latency = prof.coefficients.get("c_allreduce_latency")
            if latency is None:  # not fitted: the catalog's figure
                latency = gpu.interconnect_latency_s
            self._allreduce_fixed = 2 * model.num_layers * latency
        else:
            self._allreduce_per_token = self._allreduce_fixed = 0.0

    def host_overhead_s(self, shape: StepShape) -> float:
        # c0 is the engine's fixed per-step cost where the weights' reads are in the GEMM
        # curve; a profile without one (``calibrate --steps``) folds them into c0: no share
        return self._c0 if self._gemm.xs else 0.0

    def step_time_s(self, shape: StepShape) -> float:
        num_prefill_tokens = shape.num_prefill_tokens
        num_decode_seqs = shape.num_decode_seqs
        tokens = num_prefill_tokens + num_decode_seqs
        t = (
            self._c0
            + self._gemm(tokens)
            + self._c_token * tokens
            + self._allreduce_per_token * tokens
            + self._allreduce_fixed
        )
        if self._expert_weights:
            model = self._model
            touched = model.expected_experts_touched(tokens) / model.num_experts
            t += self._expert_weights * touched
        if num_prefill_tokens:
            t += (
                self._c_prefill_step
                + self._c_prefill_token * num_prefill_tokens
                + self._c_prefill_attn * shape.prefill_attn
                + self._lm_head(num_decode_seqs + 1)
            )
        elif num_decode_seqs:
            t += self._lm_head(num_decode_seqs)
        if num_decode_seqs:
            t += (
                self._c_decode_step
                + self._c_decode_seq * num_decode_seqs
                + self._c_decode_attn * shape.decode_context
            )
        return t
