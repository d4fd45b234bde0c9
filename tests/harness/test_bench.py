"""fleetcast bench and its client (workload=bench): warm-ups first, a cap on requests in flight,
sends spaced as vllm bench serve spaces them, and the harness's own report."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from sim.config.compose import compose_config
from sim.errors import ConfigError
from sim.harness.bench import named_by_flag, overrides_from, parser, report
from sim.harness.simulated import read_run
from sim.rng import stream
from sim.run import simulate
from sim.workload.source import build_workload
from tests.support import REPO_ROOT, columns, fleetcast

# one replica, 0.1 s a step, 8-token prompts and 3 output tokens: a request alone or with
# others takes 3 steps (prefill with its first token, 2 decodes); the client sends the requests
# due at one instant at that instant (no time per send)
TINY = [
    "fleet.replicas=1",
    "step_time=constant",
    "step_time.seconds=0.1",
    "workload=bench",
    "workload.prompt_tokens=8",
    "workload.output_tokens=3",
    "workload.client_send_s=0",
    "sim.progress=false",
]


def test_warmups_go_first_and_the_cap_holds_requests_back(tmp_path):
    cfg = compose_config(
        [*TINY, "workload.num_requests=4", "workload.num_warmups=1", "workload.max_concurrency=2"]
    )
    result = simulate(cfg)
    c = columns(result.requests)
    order = np.argsort(c["request_id"])
    # the warm-up alone 0 -> 0.3; then the 4 prompts, due at once, 2 at a time: 0.3 and 0.6
    assert c["arrival_time_s"][order] == pytest.approx([0.0, 0.3, 0.3, 0.6, 0.6])
    assert c["first_token_time_s"][order] == pytest.approx([0.1, 0.4, 0.4, 0.7, 0.7])
    assert c["completion_time_s"][order] == pytest.approx([0.3, 0.6, 0.6, 0.9, 0.9])
    assert result.summary["warmup_requests"] == 1 and result.summary["num_requests"] == 5


def test_the_report_leaves_the_warmups_out_in_the_harness_definitions(tmp_path):
    cfg = compose_config(
        [*TINY, "workload.num_requests=4", "workload.num_warmups=1", "workload.max_concurrency=2"]
    )
    simulate(cfg, tmp_path / "run")
    run = read_run(tmp_path / "run")
    assert run.completed == 4
    assert run.duration_s == pytest.approx(0.6)  # first measured send 0.3, last completion 0.9
    text = report(run, "vllm")
    assert "Successful requests:                             4" in text
    assert "Mean TTFT (ms):                             100.00" in text
    assert "Mean TPOT (ms):                             100.00" in text  # (0.3 - 0.1) / 2
    assert "Request throughput (req/s):                   6.67" in text  # 4 / 0.6
    guide = report(run, "guidellm")
    # GuideLLM's time per output token counts the first: (0.3 - 0.1) / 3
    assert "Mean time_per_output_token_ms:               66.67" in guide
    assert "(last - first) / output_tokens per request, weighted by output_tokens" in guide


def test_sends_are_spaced_as_vllm_bench_serve_spaces_them():
    cfg = compose_config(
        [
            "workload=bench",
            "workload.num_requests=5",
            "workload.num_warmups=2",
            "workload.request_rate=4",
            "workload.burstiness=0.5",
            "seed=7",
        ]
    )
    workload = build_workload(cfg["workload"], 7)
    # warm-ups at 0; request i sent after d_0 + ... + d_i, d ~ Gamma(burstiness,
    # 1 / (rate x burstiness)), rescaled so the last is at num_requests / rate = 1.25 s
    sends = np.cumsum(stream(7, "workload.arrivals").gamma(0.5, np.full(5, 1 / (4 * 0.5))))
    assert workload.arrival_time_s == pytest.approx([0, 0, *(sends * 1.25 / sends[-1])])
    assert workload.arrival_time_s[-1] == pytest.approx(5 / 4)
    assert workload.warmup_requests == 2 and workload.concurrency is None
    at_once = build_workload(compose_config(["workload=bench"])["workload"], 0)
    assert not at_once.arrival_time_s.any()  # no rate: every request at once


def test_unnormalised_sends_start_at_once_and_keep_the_gaps_as_drawn():
    # the older vLLM and SGLang clients: yield a request, then sleep a gap
    cfg = compose_config(
        [
            "workload=bench",
            "workload.num_requests=5",
            "workload.request_rate=4",
            "workload.normalise_sends=false",
            "seed=7",
        ]
    )
    workload = build_workload(cfg["workload"], 7)
    gaps = stream(7, "workload.arrivals").gamma(1.0, np.full(5, 1 / 4))
    assert workload.arrival_time_s == pytest.approx([0, *np.cumsum(gaps[:4])])


@pytest.mark.parametrize(
    ("strategy", "rates"),
    [("linear", [1.0, 2.0, 3.0, 4.0, 5.0]), ("exponential", [1.0, 5**0.25, 5**0.5, 5**0.75, 5.0])],
)
def test_a_ramp_raises_the_rate_request_by_request(strategy, rates):
    ramp = [
        "workload=bench",
        "workload.num_requests=5",
        f"workload.ramp_up_strategy={strategy}",
        "workload.ramp_up_start_rps=1",
        "workload.ramp_up_end_rps=5",
        "workload.burstiness=2",
        "seed=3",
    ]
    workload = build_workload(compose_config(ramp)["workload"], 3)
    # rate_i from start to end in i / (n - 1); no rescaling with a ramp (vLLM's rule)
    gaps = stream(3, "workload.arrivals").gamma(2.0, 1 / (np.array(rates) * 2.0))
    assert workload.arrival_time_s == pytest.approx(np.cumsum(gaps))


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["workload.request_rate=4"], "request_rate=4.0 with ramp_up_strategy"),
        (["workload.ramp_up_end_rps=null"], "needs ramp_up_start_rps and ramp_up_end_rps"),
        (["workload.ramp_up_start_rps=9"], "ramp_up_start_rps=9.0 above ramp_up_end_rps=5.0"),
    ],
)
def test_a_ramp_is_checked_as_vllm_bench_serve_checks_it(extra, says, tmp_path):
    ramp = [
        "workload=bench",
        "workload.ramp_up_strategy=linear",
        "workload.ramp_up_start_rps=1",
        "workload.ramp_up_end_rps=5",
        *extra,
    ]
    done = fleetcast(*ramp, "fleet.replicas=1", f"output_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0


def test_a_rejected_request_frees_its_slot():
    # prompts of 8-40 tokens against a 20-token context: the long ones are refused at once, and
    # with one slot each refusal must let the next request go
    cfg = compose_config(
        [
            *TINY,
            "workload.num_requests=20",
            "workload.max_concurrency=1",
            "workload.prompt_tokens={dist: uniform, low: 8, high: 40}",
            "model.max_context_tokens=20",
        ]
    )
    summary = simulate(cfg).summary
    assert summary["rejected"] >= 1 and summary["completed"] >= 1
    assert summary["completed"] + summary["rejected"] == 20 and summary["unfinished"] == 0


def test_flags_map_onto_the_bench_workload():
    args, rest = parser().parse_known_args(
        ["--request-rate", "inf", "--max-concurrency", "8", "--num-warmups", "2", "model=x"]
    )
    assert rest == ["model=x"]
    assert overrides_from(args) == [
        "workload=bench",
        "workload.request_rate=null",
        "workload.max_concurrency=8",
        "workload.num_warmups=2",
    ]
    ramp, _ = parser().parse_known_args(
        ["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "9"]
    )
    assert overrides_from(ramp)[1:] == [
        "workload.ramp_up_strategy=exponential",
        "workload.ramp_up_start_rps=1",
        "workload.ramp_up_end_rps=9",
    ]


def test_the_command_prints_the_harness_report_and_bad_flags_are_one_line(tmp_path):
    done = fleetcast(
        "bench",
        "--harness",
        "aiperf",
        "--num-prompts",
        "6",
        "--max-concurrency",
        "3",
        "--num-warmups",
        "1",
        *TINY[:3],
        f"output_dir={tmp_path / 'run'}",
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "Mean inter_token_latency (ms):" in done.stdout
    assert (tmp_path / "run" / "summary.json").exists()
    bad = fleetcast("bench", "--num-prompts", "0", "fleet.replicas=1", cwd=REPO_ROOT)
    assert bad.returncode == 2
    assert bad.stderr == "error: --num-prompts=0: must be >= 1\n"  # the flag given, named


def test_an_output_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("")
    done = fleetcast(
        "bench", "--num-prompts", "2", "fleet.replicas=1", "output_dir=taken", cwd=tmp_path
    )
    assert done.returncode == 2 and done.stderr.startswith("error: output_dir='taken'")
    assert done.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("per_client, arrivals", [(None, [0, 0, 0.1, 0.3]), (2, [0, 0, 0.1, 0.6])])
def test_clients_with_their_own_request_counts_wait_for_their_own_requests(
    tmp_path, per_client, arrivals
):
    # outputs 1, 6, 1, 1 in sending order; two slots. Request 0 (1 token) ends at 0.1, request
    # 2 takes its slot, misses the step that starts then (request 1's decode: a request a
    # step's end released reaches the engine after it), prefills at 0.2 and ends at 0.3;
    # request 1 (6 tokens) ends at 0.6. A shared pool sends
    # request 3 when request 2 ends; with 2 requests per client, client 0 has sent both of
    # its own, so request 3 is client 1's second and waits for request 1.
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n8,1\n8,6\n8,1\n8,1\n")
    replay = f"{{dist: empirical, path: '{lengths}', in_order: true, column: output_tokens}}"
    overrides = [
        *TINY,
        "workload.num_requests=4",
        "workload.max_concurrency=2",
        f"workload.output_tokens={replay}",
    ]
    if per_client is not None:
        overrides.append(f"workload.requests_per_client={per_client}")
    result = simulate(compose_config(overrides))
    c = columns(result.requests)
    order = np.argsort(c["request_id"])
    assert c["arrival_time_s"][order] == pytest.approx(arrivals)
    assert (c["status"][order] == "completed").all()


@pytest.mark.parametrize(
    "extra, says",
    [
        (["workload.num_requests=5"], "must be 4 (clients x requests each)"),
        (["workload.max_concurrency=null", "workload.num_requests=2"], "needs max_concurrency"),
        (["workload.request_rate=2"], "leave request_rate and the ramp null"),
    ],
)
def test_requests_per_client_is_checked_against_the_client_settings(extra, says):
    overrides = [
        *TINY,
        "workload.num_requests=4",
        "workload.max_concurrency=2",
        "workload.requests_per_client=2",
        *extra,
    ]
    with pytest.raises(ConfigError, match="^workload") as err:
        simulate(compose_config(overrides))
    assert says in str(err.value)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--num-prompts", "1,2"], "--num-prompts='1,2': must be a whole number, one value"),
        (["--num-prompts", "abc"], "--num-prompts='abc': must be a whole number, one value"),
        (["--num-prompts", "2.5"], "--num-prompts='2.5': must be a whole number"),
        (["--num-prompts", "${x}"], "--num-prompts='${x}': must be a whole number, one value"),
        (["--max-concurrency", "[1,2]"], "--max-concurrency='[1,2]': must be a whole number"),
        (["--random-input-len", "10,20"], "--random-input-len='10,20': must be a whole number"),
        (["--num-warmups", "1e999"], "--num-warmups='1e999': must be a finite number"),
        (["--request-rate", "1,2"], "--request-rate='1,2': must be a number (or inf: all at"),
        (["--request-rate", "nan"], "--request-rate='nan': must be a finite number"),
        (["--burstiness", "x"], "--burstiness='x': must be a number, one value"),
        (["--ramp-up-end-rps", "1;2"], "--ramp-up-end-rps='1;2': must be a number, one value"),
        (["--ramp-up-strategy", "a,b"], "--ramp-up-strategy='a,b': must be one of linear, expo"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_flag_given_a_list_or_text_is_named_with_its_value(flags, says):
    # a comma would be a Hydra sweep, a bracket a list, ${...} an interpolation: the flag's
    # value is parsed as the harness parses it, and written back as that one number
    args, _ = parser().parse_known_args(flags)
    with pytest.raises(ConfigError) as err:
        overrides_from(args)
    assert str(err.value).startswith(says), str(err.value)


def test_numbers_are_written_back_as_one_value():
    args, _ = parser().parse_known_args(
        ["--num-prompts", " 12 ", "--request-rate", "2.50", "--burstiness", "1e-1"]
    )
    assert overrides_from(args)[1:] == [
        "workload.num_requests=12",
        "workload.request_rate=2.5",
        "workload.burstiness=0.1",
    ]


def test_the_command_names_a_listed_flag_in_one_line(tmp_path):
    bad = fleetcast("bench", "--num-prompts", "1,2", *TINY[:3], cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "error: --num-prompts='1,2': must be a whole number, one value\n"


@pytest.mark.parametrize(
    "flags, field, value, says",
    [
        (["--num-prompts", "-3"], "workload.num_requests", -3, "--num-prompts=-3"),
        (["--random-input-len", "0"], "workload.prompt_tokens", 0, "--random-input-len=0"),
        (["--request-rate", "-1"], "workload.request_rate", -1, "--request-rate=-1"),
        ([], "workload.num_requests", -3, "workload.num_requests=-3"),  # an override's key
        (["--num-prompts", "5"], "workload.burstiness", 0, "workload.burstiness=0"),  # not a flag
    ],
)
def test_a_range_error_names_the_flag_that_set_the_key(flags, field, value, says):
    args, _ = parser().parse_known_args(flags)
    err = named_by_flag(ConfigError(field, value, "must be >= 1"), args)
    assert str(err) == f"{says}: must be >= 1"


def test_the_bench_workloads_keys_are_accepted_as_overrides(tmp_path):
    # checked with the workload=bench the command adds, not against the default workload
    done = fleetcast(
        "bench",
        "--num-prompts",
        "3",
        *TINY[:3],
        "workload.normalise_sends=false",
        f"output_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["workload"]["kind"] == "bench"
    assert config["workload"]["normalise_sends"] is False
