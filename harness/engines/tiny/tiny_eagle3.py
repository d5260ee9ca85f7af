"""An EAGLE-3 head for the demo's target, constructed (not trained) to predict it.

The layout is what vLLM 0.32 loads as `LlamaForCausalLMEagle3` (llama_eagle3.py): a config
with `eagle_config` (which target layers' hidden states it reads), `fc` over those states,
decoder layers of the target's shape whose first one takes [embedding, hidden] (2 x hidden
wide), and a final `norm`; `embed_tokens` and `lm_head` are left out, so vLLM shares the
target's.

What vLLM feeds the head (llm_base_proposer.py): at the slot of position t, the embedding
of token t + 1 and fc(the target's residual stream at t); from the second draft step on,
the head's own pre-norm output instead of fc(...). The demo's target computes its draft's
function (tiny_pair.py: one real layer, then layers that add nothing), so the head is built
to compute that function of the token sequence, which its own KV cache holds shifted by
one slot:
- layer 0 copies the slot's token embedding into the residual stream exactly: its
  attention attends to the slot itself (keys and queries match a token to itself, and
  every earlier copy of the same token carries the same value), writing a 256-wide code
  of the token; its MLP is a lookup table (one unit per vocabulary entry, gated on the
  code) that adds embedding - code. The hidden-state input is switched off
  (`norm_before_residual` with a zero `hidden_norm`, `fc` zero): the target's state at t
  holds nothing about token t + 1 that the head cannot read from its own cache.
- layer 1 is the draft's layer, weight for weight, and the final norm is the draft's.
So the head's greedy draft is the draft model's, but for one key: EAGLE feeds token t + 1
at slot t, so the first token of a sequence (`<|im_start|>`) never enters the head's
cache, and its term is missing from every attention sum. On the demo's chat prompts that
alone changes the draft's next token at ~13 % of positions (docs/benchmarks/eagle3-head.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.atomic import write_text
from harness.engines.tiny.bf16_safetensors import bf16_values, write_bf16_safetensors

HEAD_LAYERS = 2
SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
# Target layers whose hidden states the head reads (fc's input); vLLM's default for 8
# layers would be (2, 4, 5). fc is zero, so which ones changes the work, not the drafts.
AUX_LAYER_IDS = [1, 4, 7]
KEY_SCALE = 4.0  # query = key = 4 x the code slice: a self score of ~100 nats
CODE_SCALE = 2.0**-7  # the code's size in the residual stream (exact in bfloat16)
LOOKUP_GAIN, LOOKUP_THRESHOLD = 40.0, 0.6  # a unit fires at code cosine 1, is off below 0.3
RMS_EPS = 1e-6


def _rms_norm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(RMS_EPS))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def head_weights(draft: dict[str, np.ndarray], shape: dict, seed: int) -> dict[str, np.ndarray]:
    """The head's tensors (float32 values, written as bfloat16) from the draft's, for a
    target of this shape (its config's sizes)."""
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    heads, kv = shape["num_attention_heads"], shape["num_key_value_heads"]
    d = shape["head_dim"]
    embed = bf16_values(draft["model.embed_tokens.weight"])
    vocab = embed.shape[0]
    if vocab > inter:
        raise ValueError(f"vocabulary {vocab} larger than the lookup's {inter} units")
    # Each KV head reads its own 64 coordinates of the normed embedding, for its keys
    # (and its first query head's query) and for its value.
    coords = np.random.default_rng([seed, 3]).permutation(h)[: kv * d].reshape(kv, d)
    q = np.zeros((heads * d, 2 * h), np.float32)
    k = np.zeros((kv * d, 2 * h), np.float32)
    v = np.zeros((kv * d, 2 * h), np.float32)
    o = np.zeros((h, heads * d), np.float32)
    group = heads // kv
    for g in range(kv):
        rows = np.arange(d)
        q[g * group * d + rows, coords[g]] = KEY_SCALE
        k[g * d + rows, coords[g]] = KEY_SCALE
        v[g * d + rows, coords[g]] = CODE_SCALE
        o[coords[g], g * group * d + rows] = 1.0  # the group's first head writes the code
    # What the attention writes for token j when it attends to itself, as the engine
    # computes it: the code, then the MLP's normed input.
    normed = _rms_norm(embed)
    code = np.zeros((vocab, h), np.float32)
    code[:, coords.ravel()] = normed[:, coords.ravel()] * np.float32(CODE_SCALE)
    mlp_in = _rms_norm(code)
    unit = mlp_in / np.sum(mlp_in * mlp_in, axis=1, keepdims=True)
    cos = mlp_in / np.linalg.norm(mlp_in, axis=1, keepdims=True)
    cos = cos @ cos.T
    np.fill_diagonal(cos, 0.0)
    if cos.max() > LOOKUP_THRESHOLD - 0.15:  # never for a random embedding of this width
        raise ValueError(f"two tokens' codes are too alike (cosine {cos.max():.2f})")
    gate = np.zeros((inter, h), np.float32)
    gate_bias = np.zeros(inter, np.float32)
    up_bias = np.zeros(inter, np.float32)
    gate[:vocab] = bf16_values(unit * np.float32(LOOKUP_GAIN))
    gate_bias[:vocab] = bf16_values(np.full(vocab, -LOOKUP_GAIN * LOOKUP_THRESHOLD, np.float32))
    up_bias[:vocab] = 1.0
    fired = _silu(np.sum(gate[:vocab] * mlp_in, axis=1) + gate_bias[:vocab])
    down = np.zeros((h, inter), np.float32)
    down[:, :vocab] = ((embed - code) / fired[:, None]).T

    layer0 = {
        "self_attn.q_proj.weight": q,
        "self_attn.k_proj.weight": k,
        "self_attn.v_proj.weight": v,
        "self_attn.o_proj.weight": o,
        "mlp.gate_proj.weight": gate,
        "mlp.gate_proj.bias": gate_bias,
        "mlp.up_proj.weight": np.zeros((inter, h), np.float32),
        "mlp.up_proj.bias": up_bias,
        "mlp.down_proj.weight": down,
        "mlp.down_proj.bias": np.zeros(h, np.float32),
        "input_layernorm.weight": np.ones(h, np.float32),
        "post_attention_layernorm.weight": np.ones(h, np.float32),
        "hidden_norm.weight": np.zeros(h, np.float32),  # the hidden-state input, off
    }
    src = "model.layers.0."
    layer1 = {
        name: draft[src + name]
        for name in (
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
        )
    }
    layer1 |= {
        "mlp.gate_proj.bias": np.zeros(inter, np.float32),
        "mlp.up_proj.bias": np.zeros(inter, np.float32),
        "mlp.down_proj.bias": np.zeros(h, np.float32),
        "hidden_norm.weight": np.ones(h, np.float32),
    }  # read by layer 0 only
    tensors = {f"layers.0.{n}": t for n, t in layer0.items()}
    tensors |= {f"layers.1.{n}": t for n, t in layer1.items()}
    tensors["fc.weight"] = np.zeros((h, len(AUX_LAYER_IDS) * h), np.float32)
    tensors["norm.weight"] = draft["model.norm.weight"]
    return dict(sorted(tensors.items()))


def head_config(target_config: dict) -> dict:
    """The draft's config with what vLLM's Eagle3LlamaForCausalLM reads added."""
    keep = (
        "vocab_size",
        "hidden_act",
        "rms_norm_eps",
        "rope_theta",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "tie_word_embeddings",
        *SHAPE_KEYS,
    )
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **{key: target_config[key] for key in keep},
        "num_hidden_layers": HEAD_LAYERS,
        "draft_vocab_size": target_config["vocab_size"],
        "norm_before_residual": True,
        "attention_bias": False,
        "mlp_bias": True,  # the lookup's thresholds
        "torch_dtype": "bfloat16",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
            "use_aux_hidden_state": True,
        },
    }


def write_eagle3_head(
    out: Path, draft: dict[str, np.ndarray], target_config: dict, seed: int
) -> Path:
    """Write the head's config.json and model.safetensors into `out`; returns `out`."""
    shape = {key: target_config[key] for key in SHAPE_KEYS}
    write_bf16_safetensors(out / "model.safetensors", head_weights(draft, shape, seed))
    # The config last: a cached pair counts as built with its head once it exists.
    write_text(
        out / "config.json", json.dumps(head_config(target_config), indent=2, sort_keys=True) + "\n"
    )
    return out
