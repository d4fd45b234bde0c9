"""The model catalog: every model YAML loads, per-token numbers by hand, MoE weight reads, and
bad fields refused by name."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sim.catalog.model import PRECISION_BYTES, ModelSpec, bytes_per_element
from sim.errors import ConfigError
from sim.resources import config_dir

MODEL_FILES = sorted((config_dir() / "model").glob("*.yaml"))


def load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path))


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_model_yaml_loads(path):
    model = ModelSpec.from_config(load(path))
    assert model.head_dim * model.num_attention_heads == model.hidden_size
    assert model.sources


def test_missing_num_layers_is_refused_by_name():
    cfg = load(config_dir() / "model" / "llama31_8b.yaml")
    del cfg["num_layers"]
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config(cfg)
    assert err.value.field == "model.num_layers"
    assert str(err.value) == "model.num_layers=None: required"


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_layers", 0),
        ("head_dim", 12.5),
        ("num_params", -1.0),
        ("num_kv_heads", 5),
        ("experts_per_token", 2),
        ("num_active_params", 9e9),
    ],
)
def test_bad_model_field_is_refused_by_name(field, value):
    cfg = load(config_dir() / "model" / "llama31_8b.yaml")
    cfg[field] = value
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config(cfg)
    assert err.value.field == f"model.{field}"


def test_precision_bytes():
    assert PRECISION_BYTES == {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
    assert bytes_per_element("fp8", "precision.kv") == 1.0
    with pytest.raises(ConfigError, match=r"^precision\.kv='int3': unknown precision"):
        bytes_per_element("int3", "precision.kv")


def test_llama31_8b_per_token_numbers():
    model = ModelSpec.from_config(load(config_dir() / "model" / "llama31_8b.yaml"))
    assert model.kv_bytes_per_token(2.0) == 131072  # 2 * 32 layers * 8 heads * 128 * 2 bytes
    assert model.kv_bytes_per_token(2.0, tp=16) == 131072 / 8  # 8 KV heads: replicated past tp=8
    assert model.flops_per_token() == 2 * 8_030_261_248
    assert model.attention_flops_per_token_pair() == 4 * 32 * 32 * 128
    assert model.active_weight_bytes_per_step(2.0, 1) == model.weight_bytes(2.0) == 16_060_522_496
    assert model.num_moe_layers == 0 and model.expert_params() == 0


def test_llama2_7b_has_four_times_the_kv_of_llama31_8b():
    l2 = ModelSpec.from_config(load(config_dir() / "model" / "llama2_7b.yaml"))
    l3 = ModelSpec.from_config(load(config_dir() / "model" / "llama31_8b.yaml"))
    assert l2.kv_bytes_per_token(2.0) == 4 * l3.kv_bytes_per_token(2.0) == 524288


def test_moe_active_weight_bytes_lie_between_active_and_total_and_grow():
    mixtral = ModelSpec.from_config(load(config_dir() / "model" / "mixtral_8x7b.yaml"))
    total, active = 46_702_792_704, 12_879_925_248  # counted from its config.json
    expert = 3 * 4096 * 14336 * 32
    assert mixtral.num_moe_layers == 32 and mixtral.expert_ffn_size == 14336
    assert mixtral.expert_params() == expert
    # embeddings and LM head 2*32000*4096, per layer attention 2*4096*4096 + 2*4096*1024,
    # router 4096*8 and two norms 2*4096, the final norm 4096
    by_hand = 2 * 32000 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096)
    assert mixtral.non_expert_params() == total - 8 * expert == by_hand + 4096
    # One token touches exactly its 2 experts: the active parameters.
    one = mixtral.active_weight_bytes_per_step(1.0, 1)
    assert one == total - 6 * expert == mixtral.num_active_params == active
    assert mixtral.expected_experts_touched(2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    sizes = [mixtral.active_weight_bytes_per_step(1.0, n) for n in (1, 2, 4, 16, 64, 256)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert all(active <= s <= total for s in sizes)
    assert sizes[-2] < total  # 64 tokens still miss an expert now and then
    assert sizes[-1] == pytest.approx(total, rel=1e-9)  # large batches read nearly every expert
    assert mixtral.flops_per_token() == 2 * active


def test_moe_fields_that_do_not_fit_are_refused_by_name():
    cfg = load(config_dir() / "model" / "mixtral_8x7b.yaml")
    with pytest.raises(ConfigError, match=r"^model\.num_dense_layers=32: must leave a MoE layer"):
        ModelSpec.from_config({**cfg, "num_dense_layers": 32})
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config({**cfg, "kv_lora_rank": 512})
    assert err.value.field == "model.qk_rope_head_dim"
    # experts three times as wide as the config's would outweigh the whole model
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config({**cfg, "moe_ffn_size": 3 * 14336})
    assert err.value.field == "model.num_params"
