"""Step-time profiles: a profile round-trips through its file, the shipped ones are monotone with a
small held-out error, and bad coefficients are refused."""

from __future__ import annotations

import json

import pytest

from sim.calibration.step_fit import calibrate_steps
from sim.catalog.deployment import build_deployment
from sim.engine.step_shape import StepShape
from sim.engine.step_time.calibrated import CalibratedStepTime
from sim.engine.step_time.profile import Profile, shipped_profile_dir
from sim.errors import ConfigError
from tests.calibration.synthetic import synthetic_steps
from tests.support import compose, deployment, fleetcast

SHIPPED = "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json"


def test_profile_round_trips_through_its_file(tmp_path):
    profile = calibrate_steps(
        synthetic_steps(tmp_path / "s.csv"),
        model="m",
        hardware="g",
        weights="fp8",
        kv="bf16",
        backend="trtllm",
    )
    loaded = Profile.load(profile.save(tmp_path / "p.json"))
    assert loaded == profile
    assert loaded.provenance["sources"][0]["sha256"]


@pytest.mark.parametrize("path", sorted(shipped_profile_dir().glob("*.json")), ids=lambda p: p.stem)
def test_shipped_profiles_are_monotone_and_held_out_error_is_under_5_percent(path):
    profile = Profile.load(path)
    assert profile.holdout_error["step_time"]["mape"] < 0.05
    weights = "fp8" if "_wfp8_" in path.name else "bf16"
    hardware = "h200" if "h200" in path.name else "h100_sxm"
    for tp in (1, 2, 8):
        cfg = compose(
            f"hardware={hardware}",
            f"precision.weights={weights}",
            f"precision.kv={weights}",
            f"fleet.tp={tp}",
            "step_time=calibrated",
            f"step_time.profile={path}",
        )
        step = CalibratedStepTime(build_deployment(cfg), profile=str(path))
        grid = [0, 1, 7, 64, 500, 4096, 20000, 40000]
        for base in grid:
            t = [step.step_time_s(StepShape(base + x, 0, (base + x) ** 2, 0)) for x in grid]
            assert t == sorted(t), "more prefill tokens must never be faster"
            t = [step.step_time_s(StepShape(0, d, 0, d * 1000)) for d in grid[1:]]
            assert t == sorted(t), "more decoding sequences must never be faster"
            t = [step.step_time_s(StepShape(0, 8, 0, 8 * c)) for c in grid[1:]]
            assert t == sorted(t), "more context must never be faster"


@pytest.mark.parametrize("exponent", [0.0, 1.5, "fast"])
def test_a_tp_exponent_outside_0_1_is_refused(tmp_path, exponent):
    profile = Profile.load(
        shipped_profile_dir() / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_vllm.json"
    )
    profile.coefficients["tp_compute_exponent"] = exponent
    path = profile.save(tmp_path / "bad.json")
    with pytest.raises(
        ConfigError, match=r"^step_time.profile=.*tp_compute_exponent=.* must be in \(0, 1\]"
    ):
        Profile.load(path)


def test_a_version_1_profile_reads_its_zero_allreduce_latency_as_unset(tmp_path):
    """Version 1 wrote c_allreduce_latency = 0 for "use the GPU catalog's latency"; version 2
    writes null, since 0 is a latency. An old file keeps its meaning."""
    data = json.loads((shipped_profile_dir() / SHIPPED).read_text())
    data["schema_version"] = 1
    data["coefficients"]["c_allreduce_latency"] = 0.0
    (tmp_path / "v1.json").write_text(json.dumps(data))
    assert Profile.load(tmp_path / "v1.json").coefficients["c_allreduce_latency"] is None
    data["schema_version"] = 2
    (tmp_path / "v2.json").write_text(json.dumps(data))
    assert Profile.load(tmp_path / "v2.json").coefficients["c_allreduce_latency"] == 0.0
    data["schema_version"] = 3
    (tmp_path / "v3.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="schema version 3, this Fleetcast reads 1, 2"):
        Profile.load(tmp_path / "v3.json")


def test_an_unset_allreduce_latency_prices_the_catalogs(tmp_path):
    data = json.loads((shipped_profile_dir() / SHIPPED).read_text())
    dep = deployment(tp=2)
    times = {}
    for latency in (None, 0.0, dep.gpu.interconnect_latency_s):
        data["coefficients"]["c_allreduce_latency"] = latency
        path = tmp_path / f"{latency}.json"
        path.write_text(json.dumps(data))
        model = CalibratedStepTime(dep, backend="trtllm", profile=str(path))
        times[latency] = model.step_time_s(StepShape(0, 8, 0, 8000))
    assert times[None] == times[dep.gpu.interconnect_latency_s] > times[0.0]


def test_the_host_share_of_a_calibrated_step_is_c0_only_beside_a_gemm_curve(tmp_path):
    """A drafter's pass leaves out ``host_overhead_s`` (sim.engine.speculation): c0 where the
    weights' reads are in the GEMM curve; a profile without one folds them into c0."""
    path = shipped_profile_dir() / "meta_llama_llama_3_1_8b_h100_sxm_wbf16_kvbf16_trtllm.json"
    dep = build_deployment(compose("hardware=h100_sxm", "step_time=calibrated"))
    shape = StepShape(0, 8, 0, 8000)
    measured = CalibratedStepTime(dep, backend="trtllm", profile=str(path))
    c0 = Profile.load(path).coefficients["c0"]
    assert c0 > 0 and measured.host_overhead_s(shape) == c0
    profile = Profile.load(path)
    profile.gemm_tokens, profile.gemm_s = [], []
    steps_only = CalibratedStepTime(dep, profile=str(profile.save(tmp_path / "steps.json")))
    assert steps_only.host_overhead_s(shape) == 0.0


def _shipped_doc(**changes) -> dict:
    doc = json.loads((shipped_profile_dir() / SHIPPED).read_text())
    doc.update(changes)
    return doc


BENCH_PROFILE = {
    "terms": {"step_overhead_s": 0.003},
    "fitted_for": [],
    "kind": "roofline_bench_terms",
}

# (file text, what the one line says after "step_time.profile='<path>': ")
BAD_PROFILES = [
    (
        json.dumps(BENCH_PROFILE),
        "a bench profile (fleetcast calibrate --bench) sets the roofline's terms: give it "
        "without step_time=calibrated (the default step_time=roofline)",
    ),
    ("{oops", "not a Fleetcast profile: not JSON (Expecting property name"),
    ("[1, 2]", "not a Fleetcast profile: holds a JSON list, not an object"),
    ('{"model": "m"}', "not a Fleetcast profile: lacks 'hardware', 'weights_precision', "),
    (json.dumps(_shipped_doc(extra=1)), "not a Fleetcast profile: has unknown key(s) 'extra'"),
    (
        json.dumps({"mean_ttft_ms": 3, **{f"k{i}": i for i in range(9)}}),
        "not a Fleetcast profile: lacks 'model', 'hardware', 'weights_precision', "
        "'kv_precision', 'backend' and 1 more; has unknown key(s) 'k0', 'k1', 'k2', 'k3', 'k4' "
        "and 5 more",
    ),
    (json.dumps(_shipped_doc(coefficients=[1])), "coefficients must be an object"),
    (json.dumps(_shipped_doc(model=3)), "model=3 must be text"),
    (json.dumps(_shipped_doc(gemm_s="fast")), "gemm_s must be a list of numbers >= 0"),
    (
        json.dumps(_shipped_doc(coefficients={"c0": 1e999})).replace("Infinity", "1e999"),
        "coefficient c0=inf must be a number >= 0",
    ),
]


@pytest.mark.parametrize("text, says", BAD_PROFILES, ids=lambda v: v[:30])
def test_a_bad_profile_file_says_what_it_is_and_what_to_do(tmp_path, text, says):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        Profile.load(path)
    assert str(err.value).startswith(f"step_time.profile={str(path)!r}: {says}"), str(err.value)


def test_a_folder_is_no_profile(tmp_path):
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        Profile.load(tmp_path)


def test_a_bench_profile_with_step_time_calibrated_is_one_line_saying_what_to_do(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(BENCH_PROFILE))
    proc = fleetcast(
        "step_time=calibrated",
        f"step_time.profile={path}",
        f"output_dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "give it without step_time=calibrated" in proc.stderr
