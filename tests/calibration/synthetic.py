"""A per-step CSV made from known linear coefficients, for fits that must recover them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

KNOWN = {
    "c0": 0.004,
    "c_token": 6e-5,
    "c_decode_seq": 2e-5,
    "c_prefill_attn": 3e-10,
    "c_decode_attn": 4e-8,
    "c_prefill_step": 5e-4,
}


def synthetic_steps(
    path: Path,
    n: int = 400,
    noise: float = 0.0,
    seed: int = 0,
    experts: tuple[int, int, float] | None = None,
) -> Path:
    """``n`` random steps whose times follow ``KNOWN`` (times ``1 + noise·N(0, 1)``). With
    ``experts`` = (E, k, seconds), a mixture of experts: each step also reads the share of its E
    routed experts that its P + D tokens, choosing k each, touch (``seconds`` for all of them);
    half the decode steps are then small batches (1-16), where that share varies."""
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 4096, n) * (rng.random(n) < 0.5)
    d = rng.integers(0, 256, n)
    if experts is not None:
        d = np.where(rng.random(n) < 0.5, rng.integers(1, 17, n), d)
    d[(p == 0) & (d == 0)] = 1
    ap = p * (p + rng.integers(0, 2048, n))
    ad = d * rng.integers(64, 8192, n)
    t = (
        KNOWN["c0"]
        + KNOWN["c_token"] * (p + d)
        + KNOWN["c_decode_seq"] * d
        + KNOWN["c_prefill_attn"] * ap
        + KNOWN["c_decode_attn"] * ad
        + KNOWN["c_prefill_step"] * (p > 0)
    )
    if experts is not None:
        num_experts, per_token, seconds = experts
        t = t + seconds * (1.0 - (1.0 - per_token / num_experts) ** (p + d))
    t = t * (1 + noise * rng.standard_normal(n))
    lines = ["num_prefill_tokens,num_decode_seqs,prefill_attn,decode_context,step_time_s"]
    lines += [
        f"{a},{b},{c},{e},{float(f)!r}" for a, b, c, e, f in zip(p, d, ap, ad, t, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
