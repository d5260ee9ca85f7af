"""bfloat16 safetensors from numpy, which has no bfloat16 type: the tiny models' weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from harness.atomic import write_bytes


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounded to nearest even."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def write_bf16_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout (u64 header size, JSON header, raw data), in bfloat16."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in tensors.items():
        size = t.size * 2
        header[name] = {
            "dtype": "BF16",
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    # Whole or not at all: a cached model is reused when its files exist.
    write_bytes(
        path,
        b"".join(
            [struct.pack("<Q", len(raw)), raw, *(bf16_bits(t).tobytes() for t in tensors.values())]
        ),
    )


def bf16_values(values: np.ndarray) -> np.ndarray:
    """The float32 values a bfloat16 file holds for these (what an engine loads)."""
    return (bf16_bits(values).astype(np.uint32) << 16).view(np.float32)
