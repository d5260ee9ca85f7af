"""A small SPEED-Bench in the dataset's exact schema, laid out in a scratch hub cache as
`specbench fetch` (huggingface_hub's snapshot_download, repo_type="dataset") leaves it.

The columns and types are the dataset card's `dataset_info` (nvidia/SPEED-Bench,
README.md): question_id, category, sub_category, turns (list of string), source, src_id,
difficulty (strings) and multiturn (bool). The prompts are made up: nothing of the
dataset is copied here (its license does not allow it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.weights.local_hub import add_to_hub_cache
from tests.run.conftest import run_folder, specbench

REPO = "nvidia/SPEED-Bench"
SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("category", pa.string()),
        ("sub_category", pa.string()),
        ("turns", pa.list_(pa.string())),
        ("source", pa.string()),
        ("src_id", pa.string()),
        ("difficulty", pa.string()),
        ("multiturn", pa.bool_()),
    ]
)
# What the card's front matter says of the files (configs: data_files).
CARD_HEAD = """---
license: other
license_name: nvidia-evaluation-dataset-license
configs:
"""
CARD_CONFIG = """- config_name: {config}
  data_files:
  - split: test
    path: {config}/test-*
"""
CARD_TAIL = """---
# A made-up SPEED-Bench for the tests
"""


def row(qid: str, category: str, turns: list[str], difficulty: str = "easy") -> dict:
    return {
        "question_id": qid,
        "category": category,
        "sub_category": f"{category}-sub",
        "turns": turns,
        "source": "made-up",
        "src_id": f"src-{qid}",
        "difficulty": difficulty,
        "multiturn": len(turns) > 1,
    }


# Two categories, four prompts each; coding's last item has two turns.
ROWS = [
    *(
        row(f"coding-{i}", "coding", [f"Write a function number {i} that adds two numbers."])
        for i in range(3)
    ),
    row("coding-3", "coding", ["Write a stack class.", "Now add a peek method."], "hard"),
    *(
        row(f"math-{i}", "math", [f"What is {i} plus {i + 1}? Answer briefly."], "medium")
        for i in range(4)
    ),
]


@dataclass(frozen=True)
class SpeedBenchCache:
    root: Path  # the HF_HUB_CACHE folder
    commit: str  # datasets--nvidia--SPEED-Bench/snapshots/<commit>, refs/main


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return path


def build_speed_bench_cache(
    base: Path,
    rows: list[dict] | None = None,
    commit: str | None = None,
    configs: tuple[str, ...] = ("qualitative",),
) -> SpeedBenchCache:
    """The dataset (each config with the same rows) in `base/hub`, at `commit` (default:
    one made from the files, as local_hub does)."""
    folder = base / "speed-bench-files"
    folder.mkdir(parents=True, exist_ok=True)
    card = CARD_HEAD + "".join(CARD_CONFIG.format(config=c) for c in configs) + CARD_TAIL
    (folder / "README.md").write_text(card)
    for config in configs:
        write_parquet(folder / config / "test-00000-of-00001.parquet", rows or ROWS)
    root = base / "hub"
    sha = add_to_hub_cache(folder, root, REPO, commit=commit, repo_type="dataset")
    return SpeedBenchCache(root, sha)


def speed_bench_task(commit: str, name: str = "speed", **extra: object) -> dict:
    return {
        "name": name,
        "kind": "speed_bench",
        "uses": ["speed"],
        "max_tokens": 8,
        "config": "qualitative",
        "revision": commit,
        **extra,
    }


def offline_env(hub: Path, folder: Path) -> dict[str, str]:
    """SPEED-Bench read offline from the hub cache `hub`; the specbench cache in `folder`."""
    return {
        **{k: v for k, v in os.environ.items() if k != "HF_HOME"},
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "SPECBENCH_CACHE": str(folder / "specbench-cache"),
    }


def run_offline(study: Path, hub: Path, folder: Path) -> Path:
    """`specbench run STUDY` under offline_env, results and reports under `folder`: the
    run folder."""
    results = folder / "results"
    specbench(
        "run",
        str(study),
        "--results",
        str(results),
        "--reports",
        str(folder / "reports"),
        env=offline_env(hub, folder),
        timeout=300,
    )
    return run_folder(results)
