"""The tiny offline model: deterministic bytes, a working tokenizer and chat template."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from safetensors.numpy import load_file
from tokenizers import Tokenizer

from harness.engines.tiny.tiny_model import CHATML_TEMPLATE, FILES, SHAPE, build_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=7)
    b = build_tiny_model(tmp_path / "b", seed=7)
    c = build_tiny_model(tmp_path / "c", seed=8)
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()


def test_model_files_are_a_llama_checkpoint(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["head_dim"] == 64 and config["vocab_size"] % 64 == 0
    weights = load_file(str(tiny_model_dir / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].shape == (
        config["vocab_size"],
        SHAPE["hidden_size"],
    )
    assert weights["lm_head.weight"].shape == (config["vocab_size"], SHAPE["hidden_size"])
    layers = {k.split(".")[2] for k in weights if k.startswith("model.layers.")}
    assert layers == {str(i) for i in range(SHAPE["num_hidden_layers"])}
    total = sum((tiny_model_dir / f).stat().st_size for f in FILES)
    assert total < 10_000_000


def test_tokenizer_and_chat_template(tiny_model_dir: Path) -> None:
    tok = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert tok.get_vocab_size() <= config["vocab_size"]
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert tok.token_to_id(special) is not None
    assert config["eos_token_id"] == tok.token_to_id("<|im_end|>")
    text = "Speculative decoding: 12 × ünïcödé tokens!"
    assert tok.decode(tok.encode(text).ids) == text  # byte-level: any text round-trips
    encoded = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert encoded.ids[0] == tok.token_to_id("<|im_start|>")
    tcfg = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tcfg["chat_template"] == CHATML_TEMPLATE and tcfg["eos_token"] == "<|im_end|>"


def test_cli_writes_the_model(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "tiny-model", str(tmp_path / "m"), "--seed", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "tiny model written to" in out.stdout
    direct = build_tiny_model(tmp_path / "direct", seed=3)
    for name in FILES:
        assert (tmp_path / "m" / name).read_bytes() == (direct / name).read_bytes()
    (tmp_path / "file").write_text("x")
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "tiny-model", str(tmp_path / "file")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "exists and is not a folder" in bad.stderr


def _bf16_tensors(path: Path) -> dict[str, bytes]:
    """Raw bytes per tensor of a safetensors file (numpy cannot load bfloat16)."""
    import struct

    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    body = data[8 + size :]
    return {
        name: body[meta["data_offsets"][0] : meta["data_offsets"][1]]
        for name, meta in header.items()
        if name != "__metadata__"
    }


def test_pair_target_is_the_draft_plus_layers_that_add_nothing(tmp_path: Path) -> None:
    from harness.engines.tiny.tiny_pair import DRAFT_LAYERS, build_tiny_pair

    target, draft = build_tiny_pair(tmp_path / "a", seed=3, extra_layers=1)
    again, _ = build_tiny_pair(tmp_path / "b", seed=3, extra_layers=1)
    for name in FILES:
        assert (target / name).read_bytes() == (again / name).read_bytes(), name
    t, d = _bf16_tensors(target / "model.safetensors"), _bf16_tensors(draft / "model.safetensors")
    assert all(t[name] == d[name] for name in d)  # every draft tensor, bit for bit
    extra = f"model.layers.{DRAFT_LAYERS}."
    for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
        assert set(t[extra + name]) == {0}  # the residual stream is left as it was
    assert len(set(t[extra + "mlp.up_proj.weight"])) > 2  # ...but the layer has real weights
    configs = [json.loads((m / "config.json").read_text()) for m in (target, draft)]
    assert [c["num_hidden_layers"] for c in configs] == [DRAFT_LAYERS + 1, DRAFT_LAYERS]
    assert configs[0]["torch_dtype"] == "bfloat16"
    assert (target / "tokenizer.json").read_bytes() == (draft / "tokenizer.json").read_bytes()
