"""A huggingface_hub cache built offline from the tiny model, for the fetch tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.engines.tiny.tiny_model import build_tiny_model
from harness.weights.hashes import sha256_of
from harness.weights.local_hub import add_to_hub_cache

ABSENT_SHA = "feedfacefeedfacefeedfacefeedfacefeedface"


@dataclass
class HubCache:
    root: Path  # the HF_HUB_CACHE folder
    model_dir: Path  # the tiny model it was built from
    target_commit: str  # specbench/tiny, refs/main
    draft_commit: str  # specbench/tiny-draft (another seed), refs/main
    weights_sha256: str  # the target's model.safetensors
    draft_sha256: str


def build_hub_cache(base: Path) -> HubCache:
    model = build_tiny_model(base / "tiny", seed=0)
    draft = build_tiny_model(base / "tiny-draft", seed=1)
    root = base / "hub"
    target = add_to_hub_cache(model, root, "specbench/tiny")
    draft_commit = add_to_hub_cache(draft, root, "specbench/tiny-draft")
    return HubCache(
        root,
        model,
        target,
        draft_commit,
        sha256_of(model / "model.safetensors"),
        sha256_of(draft / "model.safetensors"),
    )


def study(
    model: str,
    revision: str | None,
    drafter: tuple[str, str | None] | None = None,
    engine: str = "vllm",
    launch: dict | None = None,
) -> dict:
    launch = launch or {"python": "/x/python"}
    arms: list[dict] = [{"name": "base", "engine": engine, "launch": launch}]
    if drafter is not None:
        arms.append(
            {
                "name": "draft",
                "engine": engine,
                "launch": launch,
                "baseline": "base",
                "drafter": {
                    "method": "draft_model",
                    "model": drafter[0],
                    "num_draft_tokens": 3,
                    **({"revision": drafter[1]} if drafter[1] else {}),
                },
            }
        )
    return {
        "title": "fetch test",
        "registered": "2026-11-30",
        "hardware": {"gpu": "H100", "memory_bandwidth_gb_s": 2000, "dense_tflops": 1000},
        "model": {
            "id": model,
            "params_billion": 0.001,
            "served_name": "tiny",
            **({"revision": revision} if revision else {}),
        },
        "arms": arms,
        "loads": {"closed_loop": {"concurrency": [1]}},
        "tasks": [{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 8}],
        "bars": {
            "pass": {"speed": {"concurrencies": [1]}, "identity": None},
            "stop": {"concurrencies": [1]},
        },
    }


def write_study(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
