"""``fleetcast profile``: the per-step CSV's columns and counts, the KV-cache attention against a
full recompute, and the command line. A tiny shape on CPU (fp32); needs the profile extra."""

import builtins
import csv
import math

import pytest

from sim.calibration import profiler
from sim.calibration.profiler import (
    CSV_COLUMNS,
    Decoder,
    GridPoint,
    profile_shape,
    write_csv,
)
from sim.catalog.model import ModelSpec
from sim.errors import ConfigError

torch = pytest.importorskip(
    "torch",
    reason="PyTorch is not installed: pip install 'fleetcast[profile]' (CPU-only Linux: "
    "add --extra-index-url https://download.pytorch.org/whl/cpu)",
)

TINY = ModelSpec(
    name="test/tiny",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    ffn_size=128,
    vocab_size=100,
    num_params=1e5,
    num_active_params=1e5,
    num_experts=1,
    experts_per_token=1,
    max_context_tokens=4096,
)

GRID = [
    GridPoint("prefill", prefill_batch=2, prefill_tokens=8),
    GridPoint("decode", decode_batch=3, decode_context=10),
    GridPoint(
        "mixed",
        prefill_batch=1,
        prefill_tokens=6,
        prefill_context=4,
        decode_batch=2,
        decode_context=5,
    ),
]


@pytest.fixture(scope="module")
def rows():
    return profile_shape(
        TINY, device="cpu", dtype="fp32", grid=GRID, warmup=1, repeats=3, progress=None
    )


def test_csv_has_the_contract_columns_and_counts(rows, tmp_path):
    path = write_csv(rows, tmp_path / "sub" / "steps.csv")
    assert not list(path.parent.glob(".*partial"))
    with path.open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        got = list(reader)
    counts = [tuple(int(r[c]) for c in CSV_COLUMNS[:4]) for r in got]
    assert counts == [
        (16, 0, 2 * 8 * 8, 0),  # 2 prompts x 8 tokens
        (0, 3, 0, 3 * 11),  # 3 decodes, 10 cached + the new token
        (6, 2, 6 * (4 + 6), 2 * (5 + 1)),
    ]  # chunk of 6 after 4, 2 decodes at 5
    assert [r["kind"] for r in got] == ["prefill", "decode", "mixed"]
    assert [int(r["batch_size"]) for r in got] == [2, 3, 3]
    assert [int(r["context_tokens"]) for r in got] == [8, 10, 5]
    for r in got:
        assert math.isfinite(float(r["step_time_s"])) and float(r["step_time_s"]) > 0
        assert (r["model"], r["num_layers"], r["device"], r["dtype"], r["tp"]) == (
            "test/tiny",
            "2",
            "cpu",
            "fp32",
            "1",
        )


def _logits(model, groups):
    with torch.inference_mode():
        return model.forward(groups)


def test_kv_cache_decode_and_chunks_match_a_full_recompute():
    model = Decoder(TINY, "cpu", "fp32", seed=1)
    prompt = torch.randint(0, TINY.vocab_size, (2, 13), generator=torch.Generator().manual_seed(2))
    full = _logits(model, [model.new_group(2, 13, tokens=prompt)])

    # prefill 12 tokens, then decode the 13th against the cache
    cached = model.new_group(2, 12, capacity=13, tokens=prompt[:, :12])
    _logits(model, [cached])
    decoded = _logits(model, [model.with_tokens(cached, prompt[:, 12:], context=12)])
    assert torch.allclose(decoded, full, atol=1e-4, rtol=0)

    # chunked prefill: 5 tokens, then a chunk of 8 after them (the causal mask over the cache)
    chunked = model.new_group(2, 5, capacity=13, tokens=prompt[:, :5])
    _logits(model, [chunked])
    chunk = _logits(model, [model.with_tokens(chunked, prompt[:, 5:], context=5)])
    assert torch.allclose(chunk, full, atol=1e-4, rtol=0)

    # a mixed step: sequence 0's last chunk and sequence 1's decode in one pass
    a = model.new_group(1, 9, capacity=13, tokens=prompt[:1, :9])
    b = model.new_group(1, 12, capacity=13, tokens=prompt[1:, :12])
    _logits(model, [a])
    _logits(model, [b])
    mixed = _logits(
        model,
        [
            model.with_tokens(a, prompt[:1, 9:], context=9),
            model.with_tokens(b, prompt[1:, 12:], context=12),
        ],
    )
    assert torch.allclose(mixed, full, atol=1e-4, rtol=0)


def test_moe_models_are_refused():
    spec = profiler.load_model_spec("mixtral_8x7b")
    with pytest.raises(ConfigError, match="Mixtral-8x7B"):
        Decoder(spec)


def test_main_writes_the_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(profiler, "load_model_spec", lambda name: TINY)
    monkeypatch.setattr(profiler, "make_grid", lambda name: GRID[:2])
    out = tmp_path / "steps.csv"
    assert (
        profiler.main(
            ["model=tiny", "--out", str(out), "--device", "cpu", "--repeats", "2", "--warmup", "0"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "[1/2] prefill" in printed and f"wrote 2 steps to {out}" in printed
    assert out.read_text().splitlines()[0] == ",".join(CSV_COLUMNS)


def test_main_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "steps.csv"
    assert profiler.main(["model=gpt5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model='gpt5': unknown model") and err.count("\n") == 1
    assert profiler.main(["hardware=h200", "--out", str(out)]) == 2
    assert profiler.main(["model=llama31_8b", "--layers", "0", "--out", str(out)]) == 2
    capsys.readouterr()
    # model=hf would profile its default config.json, not the user's: refused, saying how
    assert profiler.main(["model=hf", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model='hf': fleetcast profile takes a catalog model: import")
    assert err.count("\n") == 1
    assert not out.exists()


def test_missing_torch_gives_the_install_hint(tmp_path, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert profiler.main(["model=llama31_8b", "--out", str(tmp_path / "s.csv")]) == 2
    assert capsys.readouterr().err == (
        "error: fleetcast profile needs PyTorch: pip install 'fleetcast[profile]'\n"
    )
