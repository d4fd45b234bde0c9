"""When a decode stretch is computed with numpy rather than a Python loop.

Per-step work in a decode stretch (step durations, end times, KV blocks in use) is a few float
operations; a Python loop does a short stretch faster than numpy's fixed per-call overhead
allows, numpy a long one. Both paths give identical numbers. 32 steps is where they cross on the
speed benchmark (benchmarks/bench_speed.py) on a 2-core machine.
"""

VECTOR_MIN_STEPS = 32
