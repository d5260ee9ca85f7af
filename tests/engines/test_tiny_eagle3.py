"""The EAGLE-3 head built with the demo's pair: vLLM 0.32's layout, byte-identical for a
seed, and the construction's claim checked in numpy: its first layer writes each token's
own embedding into the residual stream, so its second layer (the draft's) sees what the
draft sees. The real engine's acceptance of it: the demo's cpu-eagle3 arm
(tests/run/test_demo_cpu.py) and benchmarks/tiny_eagle3_acceptance.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from harness.engines.tiny.tiny_eagle3 import AUX_LAYER_IDS, HEAD_LAYERS
from harness.engines.tiny.tiny_pair import EAGLE3_DIR, PAIR_SHAPE, build_tiny_pair

H, HEADS, KV, D = (
    PAIR_SHAPE[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
)


def bf16_tensors(path: Path) -> dict[str, np.ndarray]:
    """A bfloat16 safetensors file as float32 arrays (numpy has no bfloat16)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    body = data[8 + size :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "BF16", name
        lo, hi = meta["data_offsets"]
        bits = np.frombuffer(body[lo:hi], dtype=np.uint16).astype(np.uint32) << 16
        out[name] = bits.view(np.float32).reshape(meta["shape"])
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pair")
    build_tiny_pair(out, seed=0, extra_layers=1)
    return out


def rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """vLLM's Llama rotary embedding (neox style, theta 10000) on [tokens, heads, D]."""
    inv = 1.0 / 10000 ** (np.arange(0, D, 2) / D)
    f = pos[:, None] * inv[None]
    cos, sin = np.cos(f)[:, None], np.sin(f)[:, None]
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def layer0(w: dict[str, np.ndarray], embed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The head's first layer over a sequence, as llama_eagle3.py runs it with the
    hidden-state input (whatever it is) switched off: the residual stream after it."""
    p = "layers.0."
    hidden = rms(np.ones((len(ids), H), np.float32), w[p + "hidden_norm.weight"])
    assert not hidden.any()  # norm_before_residual with a zero hidden_norm: nothing passes
    x = np.concatenate([rms(embed[ids], w[p + "input_layernorm.weight"]), hidden], -1)
    pos = np.arange(len(ids), dtype=np.float64)
    q = rope((x @ w[p + "self_attn.q_proj.weight"].T).reshape(-1, HEADS, D), pos)
    k = rope((x @ w[p + "self_attn.k_proj.weight"].T).reshape(-1, KV, D), pos)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(-1, KV, D)
    k, v = np.repeat(k, HEADS // KV, 1), np.repeat(v, HEADS // KV, 1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(D)
    scores = np.where(np.tril(np.ones((len(ids), len(ids)), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    attn = np.einsum("hts,shd->thd", weights, v).reshape(len(ids), HEADS * D)
    residual = hidden + attn @ w[p + "self_attn.o_proj.weight"].T
    y = rms(residual, w[p + "post_attention_layernorm.weight"])
    gate = y @ w[p + "mlp.gate_proj.weight"].T + w[p + "mlp.gate_proj.bias"]
    up = y @ w[p + "mlp.up_proj.weight"].T + w[p + "mlp.up_proj.bias"]
    mlp = (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    return residual + mlp + w[p + "mlp.down_proj.bias"]


def test_head_has_the_layout_vllm_loads_and_the_same_bytes_for_a_seed(pair, tmp_path) -> None:
    head = pair / EAGLE3_DIR
    config = json.loads((head / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]  # vLLM's registry name
    assert config["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
        "use_aux_hidden_state": True,
    }
    target = json.loads((pair / "target" / "config.json").read_text())
    assert config["draft_vocab_size"] == config["vocab_size"] == target["vocab_size"]
    assert config["num_hidden_layers"] == HEAD_LAYERS and config["norm_before_residual"]
    for key in (
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rope_theta",
        "rms_norm_eps",
    ):
        assert config[key] == target[key], key  # the target's shape: one KV cache group
    w = bf16_tensors(head / "model.safetensors")
    assert w["fc.weight"].shape == (H, len(AUX_LAYER_IDS) * H)
    assert w["layers.0.self_attn.q_proj.weight"].shape == (HEADS * D, 2 * H)  # [embed, hidden]
    assert w["layers.1.self_attn.q_proj.weight"].shape == (HEADS * D, H)
    assert not any("embed_tokens" in n or "lm_head" in n for n in w)  # vLLM shares the target's
    # The second layer is the draft's own, bit for bit.
    draft = bf16_tensors(pair / "draft" / "model.safetensors")
    for name, t in draft.items():
        if name.startswith("model.layers.0."):
            np.testing.assert_array_equal(w[name.replace("model.layers.0.", "layers.1.")], t)
    np.testing.assert_array_equal(w["norm.weight"], draft["model.norm.weight"])

    build_tiny_pair(tmp_path / "again", seed=0, extra_layers=1)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "again" / EAGLE3_DIR / name).read_bytes() == (head / name).read_bytes()


def test_first_layer_writes_each_tokens_own_embedding(pair) -> None:
    """Every vocabulary entry in a sequence where tokens repeat: after layer 0 the
    residual stream at each position holds that position's token embedding, as the
    draft's stream does before its layer (to bfloat16 rounding of the lookup)."""
    w = bf16_tensors(pair / EAGLE3_DIR / "model.safetensors")
    embed = bf16_tensors(pair / "draft" / "model.safetensors")["model.embed_tokens.weight"]
    vocab = embed.shape[0]
    rng = np.random.default_rng(5)
    for ids in (
        np.arange(vocab)[:300],
        rng.integers(0, vocab, 300),
        rng.permutation(vocab)[300:600],
    ):
        out = layer0(w, embed, ids)
        err = np.abs(out - embed[ids]).max(axis=1) / np.abs(embed[ids]).max(axis=1)
        assert err.max() < 0.01, (int(ids[err.argmax()]), float(err.max()))
    # Without the lookup (its MLP zeroed) the stream holds only the attention's code.
    broken = dict(w, **{"layers.0.mlp.up_proj.bias": np.zeros_like(w["layers.0.mlp.up_proj.bias"])})
    assert np.abs(layer0(broken, embed, np.arange(50)) - embed[:50]).max() > 0.02
