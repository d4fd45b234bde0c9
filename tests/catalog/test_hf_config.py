"""Catalog entries from a Hugging Face config.json: every shipped entry equals its file, exact
dense counts, MoE and MLA counts against the published figures, KV bytes by hand, bad files
refused in one line, ``model=hf`` end to end, and ``fleetcast model import`` round trips.

The config dicts below hold the keys of each model's published config.json that the counts
read (values from huggingface.co/<model>/blob/main/config.json, as vendored in
ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs/, read 2026-12, where
noted).
"""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from sim.catalog.hf_config import model_fields
from sim.catalog.model import ModelSpec
from sim.catalog.model_import import catalog_yaml
from sim.config.schema import ModelConfig
from sim.errors import ConfigError
from sim.resources import config_dir, data_dir
from tests.scenarios import TINY
from tests.support import REPO_ROOT, fleetcast

ENTRIES = sorted(p.stem for p in (config_dir() / "model").glob("*.yaml") if p.stem != "hf")

# deepseek-ai/DeepSeek-V3 config.json (aiconfigurator's copy)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
}
# deepseek-ai/DeepSeek-V2-Lite config.json: no q_lora_rank, 2 shared experts, 1 dense layer
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "topk_method": "greedy",
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
}
# Qwen/Qwen1.5-MoE-A2.7B config.json: 60 experts of 1408 and one shared expert of 5632
QWEN15_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 1,
    "vocab_size": 151936,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
# Qwen/Qwen3-30B-A3B config.json (aiconfigurator's copy): q/k norms, head_dim 128 != 2048/32
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "attention_bias": False,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}
MIXTRAL = "shipped:models/mixtral_8x7b/config.json"


def spec(source: object) -> ModelSpec:
    return ModelSpec.from_config(model_fields(source, name="test/model"))


# ---- the shipped catalog -----------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_catalog_entry_equals_what_its_config_json_gives(entry):
    listed = OmegaConf.to_container(OmegaConf.load(config_dir() / "model" / f"{entry}.yaml"))
    assert listed["sources"]["config_json"] == f"shipped:models/{entry}/config.json"
    derived = model_fields(listed["sources"]["config_json"])
    # the name (organisation/model) and the sources are the catalog's own words
    derived.update(name=listed["name"], sources=listed["sources"])
    assert ModelConfig.from_config(derived) == ModelConfig.from_config(listed)


def test_every_shipped_config_json_has_its_licence_and_source():
    shipped = sorted(p.name for p in (data_dir() / "models").iterdir() if p.is_dir())
    assert shipped == ENTRIES
    readme = (data_dir() / "models" / "README.md").read_text()
    for entry in shipped:
        folder = data_dir() / "models" / entry
        assert json.loads((folder / "config.json").read_text())["vocab_size"] > 0
        licence = (folder / "LICENSE").read_text()
        assert ("COMMUNITY LICENSE" if entry.startswith("llama") else "Apache License") in licence
        assert f"`{entry}/`" in readme


@pytest.mark.parametrize(
    "entry, exact",
    [
        # keras-team/keras-hub keras_hub/src/models/llama/llama_presets.py ("params", read
        # 2026-12); the Llama 2 paper rounds it to 6.7B
        ("llama2_7b", 6_738_415_616),
        # keras-hub keras_hub/src/models/llama3/llama3_presets.py, Llama-3-8B: the same shapes
        ("llama31_8b", 8_030_261_248),
    ],
)
def test_dense_llama_counts_equal_the_published_exact_counts(entry, exact):
    model = spec(f"shipped:models/{entry}/config.json")
    assert model.num_params == model.num_active_params == exact


def test_llama31_8b_count_by_hand():
    h, kv, ffn, vocab = 4096, 8 * 128, 14336, 128256
    layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h  # q and o, k and v, SwiGLU, 2 norms
    assert spec("shipped:models/llama31_8b/config.json").num_params == (
        32 * layer + 2 * vocab * h + h  # untied embeddings and LM head, final norm
    )


def test_gemma_7b_ties_its_embeddings_and_takes_head_dim_from_the_file():
    gemma = {
        "architectures": ["GemmaForCausalLM"],
        "model_type": "gemma",
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "num_hidden_layers": 28,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
    }
    model = spec(gemma)
    # Gemma Team, "Gemma: Open Models Based on Gemini Research and Technology" (2024), Table 2:
    # 786,432,000 embedding and 7,751,248,896 non-embedding parameters
    assert model.num_params == 786_432_000 + 7_751_248_896
    assert model.head_dim == 256 and model.head_dim * model.num_attention_heads != 3072
    untied = spec({**gemma, "tie_word_embeddings": False})
    assert untied.num_params - model.num_params == 256000 * 3072


def test_qwen2_counts_its_qkv_biases():
    qwen = spec("shipped:models/qwen25_32b/config.json")
    data = json.loads((data_dir() / "models" / "qwen25_32b" / "config.json").read_text())
    as_llama = spec({**data, "model_type": "llama"})  # Llama: no biases by default
    assert qwen.num_params - as_llama.num_params == 64 * (5120 + 2 * 8 * 128)


def test_qwen3_8b_counts_its_qk_norms():
    # Qwen/Qwen3-8B config.json (aiconfigurator's copy); the model card says 8.2B
    qwen3 = {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "head_dim": 128,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    }
    model = spec(qwen3)
    assert model.num_params == pytest.approx(8.2e9, rel=0.01)
    assert model.num_params - spec({**qwen3, "model_type": "llama"}).num_params == 36 * 2 * 128


# ---- mixtures of experts and MLA -------------------------------------------------------------


@pytest.mark.parametrize(
    "config, total, active, active_rel",
    [
        # Mistral AI, "Mixtral of experts" blog (2023-12-11): 46.7B total, 12.9B per token
        pytest.param(MIXTRAL, 46.7e9, 12.9e9, 0.01, id="Mixtral-8x7B"),
        # Qwen team, "Qwen1.5-MoE: Matching 7B Model Performance with 1/3 Activated
        # Parameters" (2024-03-28): 14.3B total, 2.7B activated
        pytest.param(QWEN15_MOE, 14.3e9, 2.7e9, 0.01, id="Qwen1.5-MoE-A2.7B"),
        # Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated. Counted: 3.353B; the card
        # truncates to two digits, so the figure itself is only good to 0.1B (3%)
        pytest.param(QWEN3_30B_A3B, 30.5e9, 3.3e9, 0.02, id="Qwen3-30B-A3B"),
        # DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024): 671B total, 37B activated, the
        # multi-token-prediction module left out. Counted: 37.55B; "37B" is two digits (1.4%)
        pytest.param(DEEPSEEK_V3, 671e9, 37e9, 0.02, id="DeepSeek-V3"),
    ],
)
def test_moe_counts_match_the_published_figures(config, total, active, active_rel):
    model = spec(config)
    assert model.num_params == pytest.approx(total, rel=0.01)
    assert model.num_active_params == pytest.approx(active, rel=active_rel)
    # the active count is the non-expert weights plus the chosen experts, exactly
    chosen = model.non_expert_params() + model.experts_per_token * model.expert_params()
    assert model.num_active_params == chosen == model.active_weight_bytes_per_step(1.0, 1)


def test_deepseek_v2_lite_counts():
    model = spec(DEEPSEEK_V2_LITE)
    # DeepSeek-AI, "DeepSeek-V2" (2024), section 7: V2-Lite has 15.7B parameters, 2.4B activated
    assert model.num_params == pytest.approx(15.7e9, rel=0.01)
    # 2.66B counted; DeepSeek's 2.4B leaves out the input embedding (a lookup, no GEMM):
    # 2.45B, which two digits give as 2.4B
    without_embedding = model.num_active_params - 102400 * 2048
    assert 2.4e9 <= without_embedding < 2.5e9


def test_experts_that_differ_from_the_dense_ffn_are_counted_as_experts():
    v3 = spec(DEEPSEEK_V3)
    assert v3.num_moe_layers == 61 - 3 and v3.num_dense_layers == 3
    assert v3.expert_ffn_size == 2048 and v3.ffn_size == 18432 and v3.num_shared_experts == 1
    assert v3.expert_params() == 3 * 7168 * 2048 * 58  # one routed expert over the MoE layers
    # a token reads the shared expert and the 3 dense layers whatever it is routed to
    assert v3.active_weight_bytes_per_step(1.0, 1) == v3.num_active_params
    assert v3.active_weight_bytes_per_step(1.0, 10**6) == pytest.approx(v3.num_params)
    qwen = spec(QWEN15_MOE)
    assert (qwen.num_shared_experts, qwen.shared_expert_ffn_size, qwen.moe_ffn_size) == (
        1,
        5632,
        1408,
    )
    # a token uses 4 of 60 experts of 3*2048*1408 in each of the 24 layers
    assert qwen.num_params - qwen.num_active_params == 56 * 3 * 2048 * 1408 * 24


def test_qwen_moe_dense_layers_come_from_mlp_only_layers_and_the_sparse_step():
    every_other = spec({**QWEN15_MOE, "decoder_sparse_step": 2})
    assert every_other.num_dense_layers == 12 and every_other.num_moe_layers == 12
    some_dense = spec({**QWEN3_30B_A3B, "mlp_only_layers": [0, 47]})
    assert some_dense.num_moe_layers == 46
    all_moe = spec(QWEN3_30B_A3B)
    # two expert layers become dense FFNs of intermediate_size 6144
    assert some_dense.num_params - all_moe.num_params == 2 * (
        3 * 2048 * 6144 - (2048 * 128 + 128 * 3 * 2048 * 768)
    )


def test_mla_kv_bytes_per_token_are_the_latent_and_the_rope_key_on_every_gpu():
    v3 = spec(DEEPSEEK_V3)
    # 61 layers x (512 latent + 64 RoPE key) x 2 bytes, not split by tensor parallelism
    assert [v3.kv_bytes_per_token(2.0, tp) for tp in (1, 8, 16)] == [61 * 576 * 2] * 3
    assert v3.kv_bytes_per_token(2.0) == 70_272
    assert v3.kv_bytes_per_token(1.0, 4) == 35_136  # FP8 KV
    assert spec(DEEPSEEK_V2_LITE).kv_bytes_per_token(2.0) == 27 * 576 * 2 == 31_104
    # attention per head: QK^T over 128 + 64 dims, AV over v_head_dim 128
    assert v3.head_dim == 192 and v3.v_head_dim == 128
    assert v3.attention_flops_per_token_pair() == 2 * 61 * 128 * (192 + 128)


def test_gqa_kv_bytes_per_token_split_over_tp_until_one_head_per_gpu():
    qwen3 = spec(QWEN3_30B_A3B)  # 4 KV heads of 128
    assert qwen3.kv_bytes_per_token(2.0) == 2 * 48 * 4 * 128 * 2 == 98_304
    assert qwen3.kv_bytes_per_token(2.0, 2) == 49_152
    assert qwen3.kv_bytes_per_token(2.0, 8) == qwen3.kv_bytes_per_token(2.0, 4) == 24_576


# ---- bad files ---------------------------------------------------------------------------------


def test_a_config_dict_names_its_problem():
    with pytest.raises(ConfigError) as err:
        model_fields({"architectures": ["GPT2LMHeadModel"]})
    assert err.value.field == "model.config_path"
    assert "architectures 'GPT2LMHeadModel' is not supported; supported model_type: llama" in str(
        err.value
    )
    with pytest.raises(ConfigError, match=r"deepseek_v3 config.json has no 'kv_lora_rank'$"):
        model_fields({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"})
    with pytest.raises(ConfigError, match=r"hidden_size=4096.5 in config.json must be a whole"):
        model_fields({**QWEN15_MOE, "hidden_size": 4096.5})


LLAMA_8B = json.loads((data_dir() / "models" / "llama31_8b" / "config.json").read_text())
MIXTRAL_8X7B = json.loads((data_dir() / "models" / "mixtral_8x7b" / "config.json").read_text())

# (config, changed keys, the reason after "model.config_path='<config dict>': ")
ZERO_OR_WRONG_COUNTS = [
    # a count a layer cannot do without: 0 would divide by zero or drop a part of the model
    (
        LLAMA_8B,
        {"num_attention_heads": 0},
        "num_attention_heads=0 in config.json must be a whole number >= 1",
    ),
    (LLAMA_8B, {"num_hidden_layers": 0}, "num_hidden_layers=0 in config.json must be a whole"),
    (LLAMA_8B, {"hidden_size": 0}, "hidden_size=0 in config.json must be a whole number >= 1"),
    (LLAMA_8B, {"num_key_value_heads": 0}, "num_key_value_heads=0 in config.json must be a"),
    (LLAMA_8B, {"vocab_size": 0}, "vocab_size=0 in config.json must be a whole number >= 1"),
    (LLAMA_8B, {"intermediate_size": 0}, "intermediate_size=0 in config.json must be a whole"),
    (LLAMA_8B, {"max_position_embeddings": 0}, "max_position_embeddings=0 in config.json"),
    (LLAMA_8B, {"vocab_size": -5}, "vocab_size=-5 in config.json must be a whole number >= 1"),
    (LLAMA_8B, {"num_attention_heads": 32.0}, "num_attention_heads=32.0 in config.json must be"),
    (LLAMA_8B, {"num_attention_heads": "32"}, "num_attention_heads='32' in config.json must be"),
    (
        LLAMA_8B,
        {"num_key_value_heads": 5},
        "num_key_value_heads=5 in config.json must divide num_attention_heads=32",
    ),
    (
        LLAMA_8B,
        {"num_key_value_heads": 64},
        "num_key_value_heads=64 in config.json must divide num_attention_heads=32",
    ),
    # a mixture of experts with no experts would run as a dense model
    (MIXTRAL_8X7B, {"num_local_experts": 0}, "num_local_experts=0 in config.json must be a"),
    (MIXTRAL_8X7B, {"num_experts_per_tok": 0}, "num_experts_per_tok=0 in config.json must be"),
    (
        MIXTRAL_8X7B,
        {"num_experts_per_tok": 9},
        "num_experts_per_tok=9 in config.json is more than num_local_experts=8",
    ),
    (QWEN15_MOE, {"num_experts": 0}, "num_experts=0 in config.json must be a whole number >= 1"),
    (QWEN15_MOE, {"moe_intermediate_size": 0}, "moe_intermediate_size=0 in config.json must"),
    (QWEN15_MOE, {"decoder_sparse_step": 0}, "decoder_sparse_step=0 in config.json must be a"),
    (QWEN15_MOE, {"decoder_sparse_step": 99}, "a qwen2_moe config.json whose layer pattern leaves"),
    (
        QWEN15_MOE,
        {"mlp_only_layers": list(range(24))},
        "a qwen2_moe config.json whose layer pattern leaves",
    ),
    (QWEN15_MOE, {"mlp_only_layers": 3}, "mlp_only_layers=3 in config.json must be a list"),
    (DEEPSEEK_V3, {"n_routed_experts": 0}, "n_routed_experts=0 in config.json must be a whole"),
    (DEEPSEEK_V3, {"moe_layer_freq": 0}, "moe_layer_freq=0 in config.json must be a whole"),
    (DEEPSEEK_V3, {"first_k_dense_replace": 61}, "a deepseek_v3 config.json whose layer pattern"),
    (DEEPSEEK_V3, {"kv_lora_rank": 0}, "kv_lora_rank=0 in config.json must be a whole number"),
    (DEEPSEEK_V3, {"q_lora_rank": 0}, "q_lora_rank=0 in config.json must be a whole number"),
]


@pytest.mark.parametrize(
    "config, changes, says",
    ZERO_OR_WRONG_COUNTS,
    ids=[
        f"{c['model_type']}-{'-'.join(f'{k}={v}' for k, v in ch.items())}"[:60]
        for c, ch, _ in ZERO_OR_WRONG_COUNTS
    ],
)
def test_a_count_that_breaks_the_model_names_its_config_json_key(config, changes, says):
    with pytest.raises(ConfigError) as err:
        model_fields({**config, **changes})
    assert str(err.value).startswith(f"model.config_path='<config dict>': {says}"), str(err.value)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    (folder / "not_json.json").write_text("{not json")
    (folder / "gpt2.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 12}))
    missing = {k: v for k, v in QWEN15_MOE.items() if k != "moe_intermediate_size"}
    (folder / "missing.json").write_text(json.dumps(missing))
    (folder / "no_heads.json").write_text(json.dumps({**LLAMA_8B, "num_attention_heads": 0}))
    (folder / "no_experts.json").write_text(json.dumps({**MIXTRAL_8X7B, "num_local_experts": 0}))
    (folder / "a_list.json").write_text("[1, 2]")
    (folder / "a_folder.json").mkdir()
    return folder


@pytest.mark.parametrize(
    "name, says",
    [
        ("absent.json", "file not found"),
        ("not_json.json", "not JSON: Expecting property name enclosed in double quotes at line 1"),
        ("gpt2.json", "model_type 'gpt2' is not supported; supported model_type: llama, mistral"),
        ("missing.json", "qwen2_moe config.json has no 'moe_intermediate_size'"),
        ("no_heads.json", "num_attention_heads=0 in config.json must be a whole number >= 1"),
        ("no_experts.json", "num_local_experts=0 in config.json must be a whole number >= 1"),
        ("a_list.json", "config.json must hold a JSON object"),
        ("a_folder.json", "is a folder, not a file"),
    ],
)
def test_a_bad_config_json_is_one_line_and_exit_2(bad_files, tmp_path, name, says):
    path = bad_files / name
    proc = fleetcast(
        "model=hf", f"model.config_path={path}", f"output_dir={tmp_path}", cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: model.config_path={str(path)!r}: {says}")
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n") and proc.stdout == ""
    imported = fleetcast("model", "import", str(path), cwd=tmp_path)
    assert imported.returncode == 2 and imported.stderr.count("\n") == 1 and says in imported.stderr


# ---- the command line -------------------------------------------------------------------------


def test_model_hf_runs_a_moe_config_json_end_to_end(tmp_path):
    path = tmp_path / "Qwen3-30B-A3B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(QWEN3_30B_A3B))
    out = tmp_path / "run"
    proc = fleetcast(
        "model=hf",
        f"model.config_path={path}",
        "hardware=h200",  # 61 GB of BF16 weights on one 141 GB GPU
        *TINY,
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 20
    # the KV the memory plan found room for, in the bytes per token counted from the file
    model = spec(path)
    assert model.kv_bytes_per_token(2.0) == 98_304
    assert summary["kv_capacity_tokens"] > 0
    # the summary table and the run's config.yaml name the model and hold the file's numbers
    assert proc.stdout.startswith("Fleetcast: Qwen3-30B-A3B on 1 replica(s)")
    recorded = yaml.safe_load((out / "config.yaml").read_text())["model"]
    assert recorded["num_layers"] == QWEN3_30B_A3B["num_hidden_layers"]
    assert recorded["num_params"] == model.num_params
    check = REPO_ROOT.parent / "shared" / "tools" / "check_run.py"
    if check.is_file():
        import subprocess
        import sys

        verdict = subprocess.run([sys.executable, str(check), str(out)], capture_output=True)
        assert verdict.returncode == 0, verdict.stdout + verdict.stderr


def test_model_hf_with_a_catalog_file_runs_like_the_catalog_entry(tmp_path):
    runs = {}
    for model in ("model=llama31_8b", "model=hf"):  # hf.yaml's default file is llama31_8b's
        out = tmp_path / model.replace("=", "_")
        proc = fleetcast(model, *TINY, f"output_dir={out}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        runs[model] = json.loads((out / "summary.json").read_text())
    assert runs["model=hf"] == runs["model=llama31_8b"]


def test_model_import_writes_a_yaml_that_loads_back_as_the_direct_read(tmp_path):
    path = tmp_path / "DeepSeek-V3" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(DEEPSEEK_V3))
    out = tmp_path / "configs" / "deepseek_v3.yaml"
    name = ["--name", "deepseek-ai/DeepSeek-V3"]
    proc = fleetcast("model", "import", str(path), *name, "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = yaml.safe_load(out.read_text())
    direct = ModelSpec.from_config({"config_path": str(path), "name": "deepseek-ai/DeepSeek-V3"})
    imported = ModelSpec.from_config(written)
    # the same model, but for where it came from
    assert imported == dataclasses.replace(direct, config_path=None)
    assert imported.num_params == 671_026_419_200 and imported.kv_lora_rank == 512
    assert "num_params: 671026419200" in out.read_text()
    assert "# n_routed_experts" in out.read_text()
    # stdout without --output; an existing file is not overwritten
    assert fleetcast("model", "import", str(path), cwd=tmp_path).stdout == catalog_yaml(str(path))
    again = fleetcast("model", "import", str(path), "--output", str(out), cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr == f"error: output={str(out)!r}: exists; not overwritten\n"


def test_model_hf_explicit_fields_win_over_the_file():
    model = ModelSpec.from_config(
        {"config_path": MIXTRAL, "name": "mine", "max_context_tokens": 8192}
    )
    assert (model.name, model.max_context_tokens, model.num_experts) == ("mine", 8192, 8)
    default_name = ModelSpec.from_config({"config_path": MIXTRAL})
    assert default_name.name == "mixtral_8x7b"  # no _name_or_path: the folder's name
    llama2 = ModelSpec.from_config({"config_path": "shipped:models/llama2_7b/config.json"})
    assert llama2.name == "meta-llama/Llama-2-7b-hf"  # its _name_or_path
    assert llama2.sources == {"config_json": "shipped:models/llama2_7b/config.json"}


def test_without_config_path_every_shape_field_is_required():
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config({"name": "x", "num_layers": None})
    assert err.value.field == "model.num_layers" and err.value.reason == "required"
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_config({"config_path": str(Path("nowhere") / "config.json")})
    assert err.value.field == "model.config_path"


def test_a_shape_changed_beside_a_config_json_must_bring_its_own_counts():
    from sim.catalog.model import ModelSpec

    shipped = {"config_path": "shipped:models/llama31_8b/config.json"}
    with pytest.raises(ConfigError, match=r"^model\.num_layers=16: with model\.config_path"):
        ModelSpec.from_config({**shipped, "num_layers": 16})
    # with its counts it is the user's model; a field that moves no count needs none
    halved = ModelSpec.from_config(
        {**shipped, "num_layers": 16, "num_params": 4.5e9, "num_active_params": 4.5e9}
    )
    assert (halved.num_layers, halved.num_params) == (16, 4.5e9)
    assert ModelSpec.from_config({**shipped, "max_context_tokens": 8192}).max_context_tokens == 8192
    # the file's own value restated is no change
    assert ModelSpec.from_config({**shipped, "num_layers": 32}).num_params == 8_030_261_248
