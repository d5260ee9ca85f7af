"""The demo's draft and target: a pair where drafting pays, built offline in seconds.

The target is the draft's layers plus extra layers whose output projections
(o_proj, down_proj) are zero. Those layers read their weights and do their
arithmetic like real ones, but add nothing to the residual stream, so the target's
greedy output is the draft's and a draft-model arm is accepted nearly always, while
a target step costs several draft steps. Sized so a target step at one user is
memory-bound and lasts ~10-20 ms on one core (figures in benchmarks/README.md), like
GPU decode at batch 1; verification of k + 1 positions then costs about one step, and
only a larger batch turns it compute-bound.

Beside them, an EAGLE-3 head constructed to predict the target (tiny_eagle3.py), so the
registered study's vLLM drafter runs on the CPU build too.

Weights are written as bfloat16 (what the CPU engine serves) by a small safetensors
writer (bf16_safetensors.py), since numpy has no bfloat16 type. Same seed, same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from harness.engines.tiny.bf16_safetensors import write_bf16_safetensors
from harness.engines.tiny.tiny_eagle3 import write_eagle3_head
from harness.engines.tiny.tiny_model import write_model_files

# hidden 1024 and 16 x 64 heads: a step is weight-bound (29 MB a layer) rather than
# dispatch-bound, as a layer of the 128-wide test model is.
PAIR_SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 2048,
}
DRAFT_LAYERS = 1
TARGET_EXTRA_LAYERS = 7
EAGLE3_DIR = "eagle3"  # the EAGLE-3 head's folder beside draft/ and target/


def _layer(
    rng: np.random.Generator, prefix: str, zero_output: bool
) -> Iterator[tuple[str, np.ndarray]]:
    s = PAIR_SHAPE
    h, inter = s["hidden_size"], s["intermediate_size"]
    q_out, kv_out = (
        s["num_attention_heads"] * s["head_dim"],
        s["num_key_value_heads"] * s["head_dim"],
    )

    def normal(*dims: int) -> np.ndarray:
        return rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)

    def output(*dims: int) -> np.ndarray:
        return np.zeros(dims, dtype=np.float32) if zero_output else normal(*dims)

    yield prefix + "self_attn.q_proj.weight", normal(q_out, h)
    yield prefix + "self_attn.k_proj.weight", normal(kv_out, h)
    yield prefix + "self_attn.v_proj.weight", normal(kv_out, h)
    yield prefix + "self_attn.o_proj.weight", output(h, q_out)
    yield prefix + "mlp.gate_proj.weight", normal(inter, h)
    yield prefix + "mlp.up_proj.weight", normal(inter, h)
    yield prefix + "mlp.down_proj.weight", output(h, inter)
    yield prefix + "input_layernorm.weight", np.ones(h, dtype=np.float32)
    yield prefix + "post_attention_layernorm.weight", np.ones(h, dtype=np.float32)


def pair_weights(vocab: int, seed: int, extra_layers: int) -> tuple[dict, dict]:
    """(draft, target) tensors; the target shares every draft tensor by value."""
    h = PAIR_SHAPE["hidden_size"]
    rng = np.random.default_rng(seed)
    draft: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.standard_normal((vocab, h), dtype=np.float32) * 0.02,
    }
    for i in range(DRAFT_LAYERS):
        draft.update(_layer(rng, f"model.layers.{i}.", zero_output=False))
    draft["model.norm.weight"] = np.ones(h, dtype=np.float32)
    draft["lm_head.weight"] = rng.standard_normal((vocab, h), dtype=np.float32) * 0.02
    # The extra layers draw from their own stream: the draft's bytes do not depend on them.
    extra_rng = np.random.default_rng([seed, 1])
    target = {k: v for k, v in draft.items() if k.startswith("model.layers.")}
    target = {"model.embed_tokens.weight": draft["model.embed_tokens.weight"], **target}
    for i in range(DRAFT_LAYERS, DRAFT_LAYERS + extra_layers):
        target.update(_layer(extra_rng, f"model.layers.{i}.", zero_output=True))
    target["model.norm.weight"] = draft["model.norm.weight"]
    target["lm_head.weight"] = draft["lm_head.weight"]
    return draft, target


def build_tiny_pair(
    out_dir: str | Path, seed: int = 0, extra_layers: int = TARGET_EXTRA_LAYERS
) -> tuple[Path, Path]:
    """Write out_dir/draft, out_dir/target and the EAGLE-3 head for the target,
    out_dir/eagle3 (tiny_eagle3.py); returns (target, draft)."""
    out = Path(out_dir)
    target_dir, draft_dir = out / "target", out / "draft"
    vocab = write_model_files(
        draft_dir, {**PAIR_SHAPE, "num_hidden_layers": DRAFT_LAYERS}, "bfloat16"
    )
    write_model_files(
        target_dir, {**PAIR_SHAPE, "num_hidden_layers": DRAFT_LAYERS + extra_layers}, "bfloat16"
    )
    draft, target = pair_weights(vocab, seed, extra_layers)
    write_bf16_safetensors(draft_dir / "model.safetensors", draft)
    write_bf16_safetensors(target_dir / "model.safetensors", target)
    write_eagle3_head(
        out / EAGLE3_DIR, draft, json.loads((target_dir / "config.json").read_text()), seed
    )
    return target_dir, draft_dir
