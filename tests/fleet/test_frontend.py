"""The frontend (sim/fleet/frontend.py): the host queue that streams tokens and takes in requests.

Exact small scenarios with a constant 10 ms step: two requests (4-token prompts, 3 output
tokens) arrive together, so every step makes two tokens, r0's first.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.config.compose import compose_config
from sim.engine.request import COMPLETED, Request
from sim.errors import ConfigError
from sim.fleet.frontend import Frontend
from sim.run import simulate

STEP = 0.01


def run(token_s: float, num_requests: int = 2, concurrency: int = 2):
    return simulate(
        compose_config(
            [
                "fleet.replicas=1",
                "step_time=constant",
                f"step_time.seconds={STEP}",
                "workload=closed_loop",
                f"workload.concurrency={concurrency}",
                f"workload.num_requests={num_requests}",
                "workload.prompt_tokens=4",
                "workload.output_tokens=3",
                "workload.client_send_s=0",  # every wave sent at one instant, as worked by hand
                f"frontend.token_s={token_s}",
                "sim.progress=false",
            ]
        )
    )


def column(result, name):
    return result.requests.column(name).to_pylist()


def test_without_a_frontend_clients_see_tokens_at_the_step_end():
    result = run(0.0)
    assert column(result, "first_token_time_s") == pytest.approx([0.01, 0.01])
    assert column(result, "completion_time_s") == pytest.approx([0.03, 0.03])


def test_a_frontend_that_keeps_up_streams_each_step_in_order():
    # 4 ms per token: a step's two tokens take 8 ms, less than a step, so no backlog
    result = run(0.004)
    assert column(result, "first_token_time_s") == pytest.approx([0.014, 0.018])
    assert column(result, "completion_time_s") == pytest.approx([0.034, 0.038])
    assert column(result, "ttft_s") == pytest.approx([0.014, 0.018])
    # TPOT: (completion - first token) / 2 tokens after the first
    assert column(result, "tpot_s") == pytest.approx([0.01, 0.01])


def test_a_frontend_that_falls_behind_builds_a_backlog():
    # 8 ms per token: 16 ms of streaming per 10 ms step; each step starts streaming when the
    # previous one's tokens are out: at 10, 26 and 42 ms
    result = run(0.008)
    assert column(result, "first_token_time_s") == pytest.approx([0.018, 0.026])
    assert column(result, "completion_time_s") == pytest.approx([0.050, 0.058])
    assert column(result, "tpot_s") == pytest.approx([0.016, 0.016])
    # the engine itself still took three 10 ms steps
    assert result.steps.column("start_time_s").to_pylist() == pytest.approx([0, 0.01, 0.02])


def test_a_new_request_waits_for_the_backlog_before_the_engine_sees_it():
    # Three requests, two at a time: r2 is sent when r0's last token reaches its client
    # (50 ms), but the frontend is busy streaming r1's last token until 58 ms.
    result = run(0.008, num_requests=3)
    arrival = column(result, "arrival_time_s")
    assert arrival == pytest.approx([0.0, 0.0, 0.050])
    queueing = column(result, "queueing_delay_s")
    assert queueing[2] == pytest.approx(0.008)  # reaches the idle engine at 58 ms
    # its prefill step ends at 68 ms; streaming its token takes 8 ms
    assert column(result, "first_token_time_s")[2] == pytest.approx(0.076)
    starts = result.steps.column("start_time_s").to_pylist()
    assert starts == pytest.approx([0, 0.01, 0.02, 0.058, 0.068, 0.078])


def test_the_horizon_keeps_only_what_clients_saw_before_it():
    # The engine finishes requests whose last tokens are still queued at the horizon: their
    # clients never saw them, so they are unfinished, and so is a first token streamed late.
    horizon = 3.0
    result = simulate(
        compose_config(
            [
                "fleet.replicas=1",
                "workload=poisson",
                "workload.num_requests=200",
                "workload.qps=30",
                "workload.prompt_tokens=64",
                "workload.output_tokens=64",
                "frontend.token_s=0.001",
                f"sim.horizon_s={horizon}",
                "sim.progress=false",
            ]
        )
    )
    status = np.array(column(result, "status"))
    done = np.array(column(result, "completion_time_s"), dtype=float)
    first = np.array(column(result, "first_token_time_s"), dtype=float)
    assert (status == "completed").sum() == result.summary["completed"] > 0
    assert np.all(done[status == "completed"] < horizon)
    assert np.all(np.isnan(done[status != "completed"]))
    assert np.all(first[~np.isnan(first)] < horizon)
    assert (status == "unfinished").sum() > 0
    # every request was routed, even those still waiting in the frontend
    assert set(column(result, "replica_id")) == {0}


def test_completed_requests_get_their_last_token_time():
    frontend = Frontend(0.002)
    done, running = Request(0, 0.0, 4, 6), Request(1, 0.0, 4, 9)
    done.num_generated, done.status = 6, COMPLETED
    running.num_generated = 2
    frontend.stream_step(1.0, [done, running])
    assert done.completion_time_s == pytest.approx(1.002)
    assert running.completion_time_s is None and running.first_token_time_s is None


def test_a_negative_token_time_is_refused():
    with pytest.raises(ConfigError, match=r"^frontend.token_s=-0.001: "):
        run(-0.001)


def test_a_saturated_frontend_caps_throughput_at_one_token_per_token_s():
    # The GPU makes 32 tokens per 1 ms step (32k/s); the host streams 10k/s. In steady state
    # clients receive tokens at the host's rate, and the engine idles while the host catches up.
    result = simulate(
        compose_config(
            [
                "fleet.replicas=1",
                "step_time=constant",
                "step_time.seconds=0.001",
                "workload=closed_loop",
                "workload.concurrency=32",
                "workload.num_requests=640",
                "workload.prompt_tokens=8",
                "workload.output_tokens=50",
                "frontend.token_s=0.0001",
                "sim.progress=false",
            ]
        )
    )
    done = np.array(column(result, "completion_time_s"))
    assert len(done) == 640 and result.summary["completed"] == 640
    # every token streamed, over the whole run (the host idles only during the first step)
    assert 640 * 50 / done.max() == pytest.approx(10_000, rel=0.01)
    # the summary's throughput counts until the last token reaches its client
    assert result.summary["throughput"]["output_tokens_per_s"] == pytest.approx(
        640 * 50 / done.max()
    )
    # without the frontend the same loop runs at the GPU's pace, more than twice as fast
    free = simulate(
        compose_config(
            [
                "fleet.replicas=1",
                "step_time=constant",
                "step_time.seconds=0.001",
                "workload=closed_loop",
                "workload.concurrency=32",
                "workload.num_requests=640",
                "workload.prompt_tokens=8",
                "workload.output_tokens=50",
                "sim.progress=false",
            ]
        )
    )
    assert max(column(free, "completion_time_s")) < 0.5 * done.max()
