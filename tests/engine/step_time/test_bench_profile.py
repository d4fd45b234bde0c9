"""Roofline terms from ``fleetcast calibrate --bench`` (sim.engine.step_time.bench_profile):
the file's round trip and its one-line errors, the roofline with a profile equal to the roofline
with the same terms as keywords, the refusals (another deployment, a fitted key the run sets),
and the per-token overhead, stepped and in decode stretches."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from sim.config.compose import compose_config
from sim.engine.step_shape import StepShape
from sim.engine.step_time.base import VECTOR_MIN_STEPS
from sim.engine.step_time.bench_profile import (
    KIND,
    SCHEMA_VERSION,
    TERMS,
    BenchProfile,
    deployment_key,
)
from sim.engine.step_time.roofline import RooflineStepTime
from sim.errors import ConfigError
from sim.run import simulate
from tests.support import deployment

TERMS_GIVEN = {
    "step_overhead_s": 0.0043,
    "token_overhead_s": 2.5e-5,
    "request_overhead_s": 0.031,
    "compute_efficiency": 0.71,
    "quantized_compute_efficiency": 0.55,
    "attention_compute_efficiency": 0.63,
    "bandwidth_efficiency": 0.74,
    "attention_bandwidth_efficiency": 0.88,
}
SHAPES = [
    StepShape(0, 1, 0, 128),
    StepShape(0, 37, 0, 40_000),
    StepShape(512, 0, 512 * 512, 0),
    StepShape(2048, 24, 2048 * 3000, 60_000),
    StepShape(1, 0, 1, 0),
]


def _profile(**changes) -> BenchProfile:
    fields = {"terms": dict(TERMS_GIVEN), "fitted_for": [deployment_key(deployment())]}
    return BenchProfile(**{**fields, **changes})


def _write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _doc(**changes) -> dict:
    return {**asdict(_profile()), **changes}


def test_save_and_load_round_trip(tmp_path):
    profile = _profile(
        fitted=sorted(TERMS_GIVEN),
        runs=[{"file": "a.json", "index": 0, "held_out": False}],
        error={"fit": {"default": {}, "calibrated": {}}},
        provenance={"seed": 0},
    )
    path = profile.save(tmp_path / "deep" / "p.json")
    assert path == tmp_path / "deep" / "p.json"
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no partial file left
    again = BenchProfile.load(path)
    assert again == profile
    assert again.kind == KIND and again.schema_version == SCHEMA_VERSION
    assert again.terms == TERMS_GIVEN  # floats exactly as written
    # saving again over it replaces it
    profile.terms["step_overhead_s"] = 0.005
    profile.save(path)
    assert BenchProfile.load(path).terms["step_overhead_s"] == 0.005


def test_overrides_are_the_terms_as_step_time_keys():
    assert _profile(terms={"step_overhead_s": 0.004, "token_overhead_s": 2e-5}).overrides() == [
        "step_time.step_overhead_s=0.004",
        "step_time.token_overhead_s=2e-05",
    ]


@pytest.mark.parametrize(
    "doc, reason",
    [
        ("{not json", "not a bench profile: not JSON (Expecting property name"),
        ([1, 2], "not a bench profile: holds a JSON list, not an object"),
        ({"terms": {}}, "not a bench profile (fleetcast calibrate --bench)"),
        (
            {"coefficients": {"c0": 0.001}, "model": "m"},
            "not a bench profile (fleetcast calibrate --bench): a kernel profile (fleetcast "
            "calibrate --steps/--kernels) goes with step_time=calibrated: add "
            "step_time=calibrated to use it",
        ),
        (_doc(schema_version=2), "schema version 2, this Fleetcast reads 1"),
        (_doc(terms={"step_overhead_s": 0.002, "gemm_half_n": 3.0}), "unknown term 'gemm_half_n'"),
        (
            _doc(terms={"step_overhead_s": 1.5}),
            "term step_overhead_s=1.5 must be a number in [0, 1]",
        ),
        (_doc(terms={"token_overhead_s": -1e-6}), "term token_overhead_s=-1e-06 must be a number"),
        (_doc(terms={"compute_efficiency": 0.0}), "term compute_efficiency=0.0 must be a number"),
        (_doc(terms={"bandwidth_efficiency": "0.8"}), "term bandwidth_efficiency='0.8' must be"),
        (_doc(terms={"step_overhead_s": True}), "term step_overhead_s=True must be a number"),
        (_doc(terms={}), "holds no terms"),
        (_doc(fitted_for=[]), "fitted_for must list the deployments (model, hardware, "),
        (_doc(fitted_for=[{"model": "m", "hardware": "g"}]), "fitted_for must list"),
        (_doc(extra=1), "not a bench profile: has unknown key(s) 'extra'"),
    ],
    ids=[
        "not_json",
        "not_object",
        "no_kind",
        "kernel_profile",
        "schema",
        "unknown_term",
        "too_large",
        "negative",
        "zero_efficiency",
        "string",
        "bool",
        "no_terms",
        "empty_fitted_for",
        "partial_deployment",
        "unknown_key",
    ],
)
def test_load_errors_name_the_field_and_the_path(tmp_path, doc, reason):
    path = tmp_path / "bad.json"
    if isinstance(doc, str):
        path.write_text(doc)
    else:
        _write(path, doc)
    with pytest.raises(ConfigError) as err:
        BenchProfile.load(path)
    assert err.value.field == "step_time.profile"
    assert err.value.value == str(path)
    assert str(err.value).startswith(f"step_time.profile={str(path)!r}: ")
    assert reason in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        BenchProfile.load(tmp_path / "nope.json")
    assert str(err.value) == f"step_time.profile={str(tmp_path / 'nope.json')!r}: file not found"
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        BenchProfile.load(tmp_path)  # a folder is no profile file


def test_every_term_accepts_its_range_ends(tmp_path):
    for name, (low, high) in TERMS.items():
        for value in (low, high):
            path = _write(tmp_path / "p.json", _doc(terms={name: value}))
            assert BenchProfile.load(path).terms == {name: value}


def test_roofline_with_a_profile_equals_the_roofline_with_its_terms(tmp_path):
    path = str(_profile().save(tmp_path / "p.json"))
    for dep in (deployment(), deployment(tp=2)):  # TP is not part of what a profile is for
        with_profile = RooflineStepTime(dep, profile=path)
        with_keys = RooflineStepTime(dep, **TERMS_GIVEN)
        assert with_profile.request_overhead_s == with_keys.request_overhead_s == 0.031
        for shape in SHAPES:
            assert with_profile.step_time_s(shape) == with_keys.step_time_s(shape), shape
        for steps in (3, 40):
            assert np.array_equal(
                with_profile.decode_stretch_s(SHAPES[1], 37, steps),
                with_keys.decode_stretch_s(SHAPES[1], 37, steps),
            )
        # and not the defaults': the profile moved something
        default = RooflineStepTime(dep)
        assert with_profile.step_time_s(SHAPES[0]) != default.step_time_s(SHAPES[0])
        assert default.request_overhead_s == 0.0


def test_a_profile_of_a_few_terms_leaves_the_others_at_their_defaults(tmp_path):
    path = str(_profile(terms={"step_overhead_s": 0.005}).save(tmp_path / "p.json"))
    with_profile = RooflineStepTime(deployment(), profile=path)
    with_keys = RooflineStepTime(deployment(), step_overhead_s=0.005)
    for shape in SHAPES:
        assert with_profile.step_time_s(shape) == with_keys.step_time_s(shape)
    assert with_profile.request_overhead_s == 0.0


def test_a_profile_for_another_deployment_is_refused_with_the_overrides_to_use(tmp_path):
    path = str(_profile().save(tmp_path / "p.json"))
    for other in (deployment(hardware="h200"), deployment(model="llama2_7b"), deployment(kv="fp8")):
        with pytest.raises(ConfigError) as err:
            RooflineStepTime(other, profile=path)
        message = str(err.value)
        assert err.value.field == "step_time.profile" and err.value.value == path
        assert "fitted for meta-llama/Llama-3.1-8B, H100-SXM, bf16, bf16; this run is " in message
        assert f"this run is {', '.join(deployment_key(other).values())} " in message
        # the overrides named give the same terms (to the six digits they are printed with)
        given = message.split("give them as overrides: ", 1)[1].rstrip(")").split()
        assert [g.split("=")[0] for g in given] == [f"step_time.{n}" for n in TERMS_GIVEN]
        for item in given:
            key, value = item.split("=")
            assert float(value) == pytest.approx(TERMS_GIVEN[key[len("step_time.") :]], rel=1e-6)


def test_a_profile_for_several_deployments_serves_each(tmp_path):
    fitted_for = [deployment_key(deployment()), deployment_key(deployment(hardware="h200"))]
    path = str(_profile(fitted_for=fitted_for).save(tmp_path / "p.json"))
    h200 = RooflineStepTime(deployment(hardware="h200"), profile=path)
    assert h200.request_overhead_s == TERMS_GIVEN["request_overhead_s"]
    with pytest.raises(ConfigError, match="fitted for .*H100-SXM.*; .*H200.*; this run is"):
        RooflineStepTime(deployment(hardware="b200"), profile=path)


def test_a_fitted_key_set_by_the_run_is_refused_unless_at_its_default(tmp_path):
    path = str(_profile().save(tmp_path / "p.json"))
    with pytest.raises(ConfigError) as err:
        RooflineStepTime(deployment(), profile=path, compute_efficiency=0.5)
    assert err.value.field == "step_time.compute_efficiency" and err.value.value == 0.5
    assert f"the profile {path} fits this term (0.71)" in str(err.value)
    with pytest.raises(ConfigError, match="^step_time.request_overhead_s=0.01: "):
        RooflineStepTime(deployment(), profile=path, request_overhead_s=0.01)
    # the default value, given outright, is no conflict: the profile's term wins
    kept = RooflineStepTime(
        deployment(), profile=path, compute_efficiency=0.82, step_overhead_s=0.002
    )
    assert kept.step_time_s(SHAPES[2]) == RooflineStepTime(deployment(), **TERMS_GIVEN).step_time_s(
        SHAPES[2]
    )
    # a key the profile does not fit may be set
    floor = RooflineStepTime(deployment(), profile=path, gemm_floor_s=1e-5)
    assert floor.step_time_s(SHAPES[0]) == RooflineStepTime(
        deployment(), gemm_floor_s=1e-5, **TERMS_GIVEN
    ).step_time_s(SHAPES[0])


def test_a_config_run_with_a_profile_equals_one_with_its_terms_as_overrides(tmp_path):
    path = _profile().save(tmp_path / "p.json")
    run = [
        "fleet.replicas=1",
        "workload=poisson",
        "workload.qps=20",
        "workload.num_requests=40",
        "workload.prompt_tokens={dist:uniform,low:16,high:600}",
        "workload.output_tokens={dist:uniform,low:1,high:80}",
        "sim.progress=false",
    ]
    with_profile = simulate(compose_config([*run, f"step_time.profile={path}"]))
    terms = [f"step_time.{name}={value!r}" for name, value in TERMS_GIVEN.items()]
    with_terms = simulate(compose_config([*run, *terms]))
    assert with_profile.requests.equals(with_terms.requests)
    assert with_profile.steps.equals(with_terms.steps)
    with pytest.raises(ConfigError, match="^step_time.step_overhead_s=0.003: the profile "):
        simulate(
            compose_config([*run, f"step_time.profile={path}", "step_time.step_overhead_s=0.003"])
        )
    with pytest.raises(ConfigError, match="^step_time.profile=.*this run is .*H200"):
        simulate(compose_config([*run, f"step_time.profile={path}", "hardware=h200"]))


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_token_overhead_adds_per_sequence_producing_a_token(shape, pp):
    token = 3.7e-5
    base = RooflineStepTime(deployment(pp=pp))
    more = RooflineStepTime(deployment(pp=pp), token_overhead_s=token)
    producing = shape.num_decode_seqs + (1 if shape.num_prefill_tokens else 0)
    grown = more.step_time_s(shape) - base.step_time_s(shape)
    assert grown == pytest.approx(token * producing, rel=1e-9, abs=1e-15)
    assert more.request_overhead_s == 0.0  # a step cost, not a request's


def test_token_overhead_must_not_be_negative():
    with pytest.raises(ConfigError, match="token_overhead_s"):
        RooflineStepTime(deployment(), token_overhead_s=-1e-6)
    with pytest.raises(ConfigError, match="request_overhead_s"):
        RooflineStepTime(deployment(), request_overhead_s=-0.01)


@pytest.mark.parametrize(
    "steps", [1, 5, VECTOR_MIN_STEPS - 1, VECTOR_MIN_STEPS, VECTOR_MIN_STEPS + 1, 400]
)
@pytest.mark.parametrize("d, ctx", [(1, 17), (7, 3001), (64, 123_457)])
@pytest.mark.parametrize("tp", [1, 4])
def test_decode_stretch_with_token_overhead_equals_stepping_bit_for_bit(steps, d, ctx, tp):
    model = RooflineStepTime(
        deployment(tp=tp), token_overhead_s=2.9e-5, step_overhead_s=0.0031, request_overhead_s=0.2
    )
    stretch = np.asarray(
        model.decode_stretch_s(StepShape(0, d, 0, ctx), d, steps), dtype=np.float64
    ).tolist()
    stepped = [model.step_time_s(StepShape(0, d, 0, ctx + i * d)) for i in range(steps)]
    assert stretch == stepped  # bit for bit
    # and the overhead is in there: d sequences' worth over the same stretch without it
    plain = RooflineStepTime(deployment(tp=tp), step_overhead_s=0.0031)
    first = plain.step_time_s(StepShape(0, d, 0, ctx))
    assert stretch[0] - first == pytest.approx(2.9e-5 * d, rel=1e-9)


def test_the_roofline_yaml_holds_the_python_defaults():
    # a profile may replace a key only while the run leaves it at its default; the check
    # compares with the Python defaults, so the YAML a run starts from must hold the same
    from omegaconf import OmegaConf

    from sim.engine.step_time.roofline import _DEFAULTS
    from sim.resources import config_dir

    yaml = OmegaConf.to_container(OmegaConf.load(config_dir() / "step_time" / "roofline.yaml"))
    assert isinstance(yaml, dict)
    keys = set(yaml) - {"_target_"}
    assert keys == set(_DEFAULTS) - {"deployment"}
    for key in keys:
        assert yaml[key] == _DEFAULTS[key], key
