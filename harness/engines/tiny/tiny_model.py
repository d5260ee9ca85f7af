"""Tiny random-weight Llama models that engines can serve, built offline in seconds.

Tests and the laptop demo serve them because nothing can be downloaded. Without
torch: a byte-level BPE tokenizer trained with `tokenizers` on a corpus shipped
beside this file, weights drawn with numpy and written with safetensors, and a
ChatML chat template. The same seed gives byte-identical files.

`build_tiny_model` is the 2-layer test model (steps of ~1.5 ms). `build_tiny_pair`
(tiny_pair.py) is the demo's draft and target, sized so a target step is
memory-bound and lasts milliseconds, like GPU decode.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CORPUS = Path(__file__).with_name("tiny_corpus.txt")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Small enough to build and load in seconds; head_dim 64 because vLLM's CPU
# attention supports only some head sizes (32, 64, 80, ...).
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 2048,
}
TARGET_VOCAB = 4096
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def train_tokenizer(text: str, vocab_size: int = TARGET_VOCAB) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    return tokenizer


def random_weights(vocab: int, seed: int, shape: dict | None = None) -> dict[str, np.ndarray]:
    """Llama parameter names and shapes, N(0, 0.02) matrices and unit norms."""
    shape = SHAPE if shape is None else shape
    rng = np.random.default_rng(seed)
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    q_out = shape["num_attention_heads"] * shape["head_dim"]
    kv_out = shape["num_key_value_heads"] * shape["head_dim"]

    def normal(*dims: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=dims).astype(np.float32)

    weights = {"model.embed_tokens.weight": normal(vocab, h)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights[p + "self_attn.q_proj.weight"] = normal(q_out, h)
        weights[p + "self_attn.k_proj.weight"] = normal(kv_out, h)
        weights[p + "self_attn.v_proj.weight"] = normal(kv_out, h)
        weights[p + "self_attn.o_proj.weight"] = normal(h, q_out)
        weights[p + "mlp.gate_proj.weight"] = normal(inter, h)
        weights[p + "mlp.up_proj.weight"] = normal(inter, h)
        weights[p + "mlp.down_proj.weight"] = normal(h, inter)
        weights[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        weights[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
    weights["model.norm.weight"] = np.ones(h, dtype=np.float32)
    weights["lm_head.weight"] = normal(vocab, h)
    return weights


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def build_tiny_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a servable model folder; returns its path. Overwrites the model files."""
    out = Path(out_dir)
    vocab = write_model_files(out, SHAPE, "float32")
    save_file(
        random_weights(vocab, seed), str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    return out


def write_model_files(out: Path, shape: dict, dtype: str) -> int:
    """Everything but the weights: config, tokenizer, chat template. Returns the
    vocabulary size the weights must have."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(CORPUS.read_text(encoding="utf-8"))
    ids: dict[str, int] = {}
    for t in SPECIAL_TOKENS:  # trained in as special tokens: each has its id
        token_id = tokenizer.token_to_id(t)
        assert token_id is not None, t
        ids[t] = token_id
    # Round the embedding rows up to a multiple of 64, as real checkpoints do.
    vocab = -(-tokenizer.get_vocab_size() // 64) * 64
    tokenizer.save(str(out / "tokenizer.json"), pretty=False)
    eos, pad = ids["<|im_end|>"], ids["<|endoftext|>"]
    _write_json(
        out / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": vocab,
            **shape,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "torch_dtype": dtype,
            "bos_token_id": pad,
            "eos_token_id": eos,
            "pad_token_id": pad,
        },
    )
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": pad, "eos_token_id": eos, "pad_token_id": pad},
    )
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": CHATML_TEMPLATE,
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": shape["max_position_embeddings"],
            "added_tokens_decoder": {
                str(i): {
                    "content": t,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for t, i in sorted(ids.items(), key=lambda kv: kv[1])
            },
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    )
    return vocab
