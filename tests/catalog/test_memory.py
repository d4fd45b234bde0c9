"""The memory plan: exact numbers for Llama-3.1-8B on an 80 GB GPU, and clear refusals."""

import pytest

from sim.catalog.deployment import build_deployment
from sim.catalog.hardware import GPU
from sim.catalog.memory import format_plan, plan_memory
from sim.catalog.model import ModelSpec
from sim.errors import ConfigError
from tests.support import option

H100 = GPU.from_config(option("hardware", "h100_sxm"))
LLAMA8B = ModelSpec.from_config(option("model", "llama31_8b"))
LLAMA70B = ModelSpec.from_config(option("model", "llama31_70b"))
DEFAULTS = dict(gpu_memory_utilization=0.9, activation_reserve_gib=2.0, block_size=16)
RESERVE = 2 * 2**30


def plan(model=LLAMA8B, gpu=H100, weights="bf16", kv="bf16", tp=1, **overrides):
    kwargs = {**DEFAULTS, **overrides}
    return plan_memory(model, gpu, weights_precision=weights, kv_precision=kv, tp=tp, **kwargs)


def test_llama31_8b_bf16_on_h100():
    p = plan()
    assert p.gpu_memory_bytes == 80e9
    assert p.usable_bytes == 72e9
    assert p.weight_bytes_per_gpu == 16.06e9
    assert p.reserve_bytes_per_gpu == RESERVE
    assert p.kv_free_bytes_per_gpu == 72e9 - 16.06e9 - RESERVE == 53_792_516_352
    assert p.kv_bytes_per_token_per_gpu == 131_072  # 128 KiB
    assert p.num_blocks == 25_650  # floor(53_792_516_352 / (16 * 131_072))
    assert p.kv_capacity_tokens == 25_650 * 16 == 410_400
    assert p.requests_that_fit(1024) == 25_650 // 64 == 400
    assert p.requests_that_fit(1025) == 25_650 // 65 == 394  # a partial block is a whole block
    assert p.requests_that_fit(1) == 25_650


def test_fp8_kv_halves_bytes_per_token_and_doubles_blocks():
    p = plan(kv="fp8")
    assert p.kv_bytes_per_token_per_gpu == 65_536
    assert p.num_blocks == 51_300


def test_tp2_halves_weights_and_kv_per_gpu():
    p = plan(tp=2)
    assert p.weight_bytes_per_gpu == 8.03e9
    assert p.kv_bytes_per_token_per_gpu == 65_536
    assert p.num_blocks == 58_958  # floor((72e9 - 8.03e9 - 2 GiB) / (16 * 65_536))


def test_fp8_weights_halve_weight_bytes_and_give_more_kv_tokens():
    bf16, fp8 = plan(), plan(weights="fp8")
    assert fp8.weight_bytes_per_gpu == bf16.weight_bytes_per_gpu / 2 == 8.03e9
    assert fp8.num_blocks == 29_479
    assert fp8.kv_capacity_tokens > bf16.kv_capacity_tokens


def test_num_blocks_override_is_honoured():
    p = plan(num_blocks=100)
    assert p.num_blocks == 100
    assert p.kv_capacity_tokens == 1600
    assert p.kv_free_bytes_per_gpu == 53_792_516_352  # still reported from the plan


def deploy(**changes):
    """A deployment from plain config data (checked as a run's would be), Llama-3.1-8B on an
    H100 with the default memory settings and ``changes`` (``fleet.tp=2`` as tp=2, ...)."""
    sections = {
        "tp": "fleet",
        "gpu_memory_utilization": "memory",
        "activation_reserve_gib": "memory",
        "block_size": "kv",
        "num_blocks": "kv",
        "weights": "precision",
        "kv": "precision",
    }
    cfg = {
        "model": option("model", "llama31_8b"),
        "hardware": option("hardware", "h100_sxm"),
        "precision": {"weights": "bf16", "kv": "bf16"},
        "memory": {**DEFAULTS},
        "kv": {"block_size": 16},
        "fleet": {"replicas": 1, "tp": 1},
    }
    cfg["memory"].pop("block_size")
    for key, value in changes.items():
        cfg[sections[key]][key] = value
    return build_deployment(cfg).memory


@pytest.mark.parametrize("bad", [0, -3])
def test_num_blocks_override_must_be_positive(bad):
    with pytest.raises(ConfigError, match=rf"^kv\.num_blocks={bad}: must be >= 1$"):
        deploy(num_blocks=bad)


def test_70b_bf16_on_one_80gb_gpu_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        plan(model=LLAMA70B)
    message = str(err.value)
    assert "\n" not in message
    assert err.value.field == "hardware"
    assert "H100-SXM" in message
    # how short it is, and the nearest settings that fit (checked with the same arithmetic)
    assert message == (
        "hardware='H100-SXM': Llama-3.1-70B weights at bf16 need 141.2 GB per GPU with tp=1, "
        "69.2 GB more than the 72.0 GB usable (memory.gpu_memory_utilization=0.9 of 80 GB); "
        "it fits with fleet.tp=4"  # fp8 at tp=1 is still short; an H100 has no fp4
    )
    assert plan(model=LLAMA70B, tp=4).num_blocks >= 1
    with pytest.raises(ConfigError):
        plan(model=LLAMA70B, weights="fp8")
    with pytest.raises(ConfigError):
        plan(model=LLAMA70B, tp=2)  # the nearest tp is 4: 2 is still short


def test_70b_at_tp2_leaves_no_kv_room_and_tp4_fits():
    with pytest.raises(ConfigError) as err:
        plan(model=LLAMA70B, tp=2)
    assert str(err.value) == (
        "hardware='H100-SXM': Llama-3.1-70B weights, reserve and one KV block at bf16 need 72.8 GB"
        " per GPU with tp=2, 0.8 GB more than the 72.0 GB usable (memory.gpu_memory_utilization"
        "=0.9 of 80 GB); it fits with fleet.tp=4 or precision.weights=fp8 or"
        " memory.gpu_memory_utilization=0.95 or a smaller memory.activation_reserve_gib"
    )
    for fix in (dict(weights="fp8"), dict(gpu_memory_utilization=0.95)):
        assert plan(model=LLAMA70B, tp=2, **fix).num_blocks >= 1
    p = plan(model=LLAMA70B, tp=4)
    assert p.weight_bytes_per_gpu == 35.3e9
    assert p.kv_bytes_per_token_per_gpu == 2 * 80 * 2 * 128 * 2 == 81_920
    assert p.num_blocks == 26_361


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(tp=0), "fleet.tp"),
        (dict(tp=3), "fleet.tp"),  # does not divide 32 heads
        (dict(gpu_memory_utilization=0.0), "memory.gpu_memory_utilization"),
        (dict(gpu_memory_utilization=1.2), "memory.gpu_memory_utilization"),
        (dict(activation_reserve_gib=-1.0), "memory.activation_reserve_gib"),
        (dict(block_size=0), "kv.block_size"),
        (dict(weights="int4"), "precision.weights"),
        (dict(kv="fp4"), "precision.kv"),
    ],
)
def test_bad_inputs_name_their_field(overrides, field):
    assert deploy().num_blocks == plan().num_blocks  # the helper plans what plan() plans
    with pytest.raises(ConfigError) as err:
        deploy(**overrides)
    assert err.value.field == field


def test_kv_heads_replicate_past_their_count():
    # 32 attention heads allow tp=16, but 8 KV heads cannot split further: 1 head per GPU.
    p = plan(tp=16)
    assert p.kv_bytes_per_token_per_gpu == 2 * 32 * 1 * 128 * 2


def test_format_plan_is_labelled():
    p = plan()
    text = format_plan(p, LLAMA8B, H100, "bf16", "bf16", [1024, 8192])
    assert "Llama-3.1-8B on H100-SXM" in text
    assert "GB = 1e9 bytes" in text and "KiB = 1024 bytes" in text
    assert "16.06 GB" in text
    assert "128.0 KiB" in text
    assert "25,650" in text and "410,400" in text
    assert "requests of 1,024 tokens that fit at once" in text
    line = next(row for row in text.splitlines() if "requests of 8,192" in row)
    assert line.split()[-1] == "50"
