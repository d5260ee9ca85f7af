"""SPEED-Bench as a task: registered by config, categories and revision; read offline
from the hub cache (a parquet built here in the dataset's exact schema); refused by
validate and pre-flight when absent; its bytes in the seal; fetched offline."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.engines.probe.preflight import preflight
from harness.prereg import load_study, seal_of
from harness.prereg.schema import TaskSpec
from harness.workloads import DataIntegrityError, load_items
from tests.workloads.speedbench import (
    ROWS,
    build_speed_bench_cache,
    row,
    speed_bench_task,
)

ROOT = Path(__file__).resolve().parents[2]
ABSENT = "feedfacefeedfacefeedfacefeedfacefeedface"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = build_speed_bench_cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache.root))
    return cache


def study(commit: str, **task: Any) -> dict:
    return {
        "title": "speed bench",
        "registered": "2026-12-05",
        "hardware": {"gpu": "scripted", "memory_bandwidth_gb_s": 2000, "dense_tflops": 40},
        "model": {"id": "scripted", "served_name": "scripted", "params_billion": 1},
        "arms": [{"name": "base", "engine": "scripted", "launch": {}, "scripted": {}}],
        "loads": {"closed_loop": {"concurrency": [1]}},
        "tasks": [speed_bench_task(commit, **task)],
        "bars": {
            "pass": {"speed": {"concurrencies": [1]}, "identity": None},
            "stop": {"concurrencies": [1]},
        },
    }


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_loader_reads_the_cached_parquet_by_category(hub):
    task = TaskSpec.model_validate(speed_bench_task(hub.commit))
    items = load_items("speed_bench", source=task.source)
    assert [it.id for it in items] == [f"speed_bench:{r['question_id']}" for r in ROWS]
    for it, r in zip(items, ROWS, strict=True):
        # The first turn only (multi-turn sessions are issue 33 part 2).
        assert it.messages == [{"role": "user", "content": r["turns"][0]}]
        assert {k: it.reference[k] for k in ("category", "sub_category", "difficulty")} == {
            k: r[k] for k in ("category", "sub_category", "difficulty")
        }
    two_turns = [it for it in items if it.reference["multiturn"]]
    assert [(it.id, it.reference["turns"]) for it in two_turns] == [("speed_bench:coding-3", 2)]
    math_only = TaskSpec.model_validate(speed_bench_task(hub.commit, categories=["math"]))
    assert {
        it.reference["category"] for it in load_items("speed_bench", source=math_only.source)
    } == {"math"}
    unknown = TaskSpec.model_validate(speed_bench_task(hub.commit, categories=["poetry"]))
    with pytest.raises(
        DataIntegrityError,
        match=r"no row of category \['poetry'\]; the"
        r" categories there are \['coding', 'math'\]",
    ):
        load_items("speed_bench", source=unknown.source)


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"revision": None}, "a speed_bench task needs config"),
        ({"revision": "main"}, "revision 'main': expected a 40-hex commit sha"),
        ({"config": "throughput_4k"}, "Input should be 'qualitative', 'throughput_1k'"),
        ({"categories": []}, "expected a non-empty list of distinct categories"),
        ({"uses": ["accuracy"]}, "speed_bench has no correctness scorer"),
    ],
)
def test_the_registration_is_checked(task, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TaskSpec.model_validate({**speed_bench_task("a" * 40), **task})
    with pytest.raises(ValueError, match="config: only a speed_bench task takes these"):
        TaskSpec.model_validate(
            {
                "name": "c",
                "kind": "chat",
                "uses": ["speed"],
                "max_tokens": 8,
                "config": "qualitative",
            }
        )


def test_validate_refuses_a_study_whose_dataset_is_not_fetched(hub, tmp_path, capsys):
    path = write(tmp_path / "study.yaml", study(ABSENT))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and "seal:" not in out
    line = _line_of(path, f"revision: {ABSENT}")
    assert err.splitlines() == [
        f"specbench: {path}:{line}: tasks[0].revision: task 'speed': nvidia/SPEED-Bench@{ABSENT}"
        f" (config qualitative) is not in the hub cache {hub.root}: expected"
        f" datasets--nvidia--SPEED-Bench/snapshots/{ABSENT}; run `specbench fetch` on the study"
    ]
    # Pre-flight says the same (before any engine starts); fetched, both are content.
    assert preflight(load_study(path)) == [
        f"tasks[0].revision: task 'speed': nvidia/SPEED-Bench@{ABSENT} (config qualitative) is"
        f" not in the hub cache {hub.root}: expected datasets--nvidia--SPEED-Bench/snapshots/"
        f"{ABSENT}; run `specbench fetch` on the study"
    ]
    fetched = write(tmp_path / "fetched.yaml", study(hub.commit))
    assert main(["validate", str(fetched)]) == 0
    assert re.search(r"^seal: [0-9a-f]{64}$", capsys.readouterr().out, re.M)
    assert not [p for p in preflight(load_study(fetched)) if p.startswith("tasks[")]


def test_validate_exits_2_in_a_real_process_with_one_line(hub, tmp_path):
    path = write(tmp_path / "study.yaml", study(ABSENT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "tasks[0].revision" in proc.stderr


def test_the_seal_covers_the_parquet_bytes(tmp_path, monkeypatch):
    commit = "c" * 40  # the same revision, two different files under it
    one = build_speed_bench_cache(tmp_path / "one", commit=commit)
    rows = copy.deepcopy(ROWS)
    rows[0] = row("coding-0", "coding", ["Write a function that subtracts two numbers."])
    two = build_speed_bench_cache(tmp_path / "two", rows=rows, commit=commit)
    path = write(tmp_path / "study.yaml", study(commit))
    monkeypatch.setenv("HF_HUB_CACHE", str(one.root))
    first = seal_of(load_study(path))
    assert seal_of(load_study(path)) == first
    monkeypatch.setenv("HF_HUB_CACHE", str(two.root))
    assert seal_of(load_study(path)) != first


def test_fetch_offline_finds_the_dataset_and_prints_its_digests(hub, tmp_path):
    path = write(tmp_path / "study.yaml", study(hub.commit))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub.root),
        "SPECBENCH_CACHE": str(tmp_path / "c"),
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "fetch", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        rf"sha256 [0-9a-f]{{64}}  nvidia/SPEED-Bench@{hub.commit}/qualitative/"
        r"test-00000-of-00001\.parquet",
        proc.stdout,
    ), proc.stdout
    assert "fetched: 1 task dataset(s)" in proc.stdout
    absent = write(tmp_path / "absent.yaml", study(ABSENT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "fetch", str(absent)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "is not in the hub cache" in proc.stderr


def _line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(text)


def test_fetch_downloads_the_card_then_only_the_registered_configuration(tmp_path, monkeypatch):
    """`specbench fetch` asks the hub for the dataset card, then for the files the card names
    for the registered config: another config's parquet stays on the hub."""
    import fnmatch
    import io
    import shutil

    import huggingface_hub
    from rich.console import Console

    from harness.weights.datasets import DatasetSource, dataset_folder, fetch_dataset

    commit = "d" * 40
    remote = build_speed_bench_cache(
        tmp_path / "remote", commit=commit, configs=("qualitative", "throughput_1k")
    )
    remote_snapshot = dataset_folder(remote.root, "nvidia/SPEED-Bench") / "snapshots" / commit
    cache = tmp_path / "hub"
    asked: list[list[str]] = []

    def snapshot_download(repo_id, *, repo_type, revision, cache_dir, allow_patterns):
        # What huggingface_hub does with allow_patterns: fnmatch on each repository path.
        assert (repo_id, repo_type, revision) == ("nvidia/SPEED-Bench", "dataset", commit)
        asked.append(list(allow_patterns))
        snapshot = dataset_folder(Path(cache_dir), repo_id) / "snapshots" / revision
        for path in remote_snapshot.rglob("*"):
            name = path.relative_to(remote_snapshot).as_posix()
            if path.is_file() and any(fnmatch.fnmatch(name, p) for p in allow_patterns):
                (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, snapshot / name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    files = fetch_dataset(
        DatasetSource("nvidia/SPEED-Bench", commit, "qualitative"),
        Console(file=io.StringIO()),
        cache=cache,
    )
    assert asked == [["README.md"], ["qualitative/test-*"]]
    snapshot = dataset_folder(cache, "nvidia/SPEED-Bench") / "snapshots" / commit
    assert [p.relative_to(snapshot).as_posix() for p in files] == [
        "qualitative/test-00000-of-00001.parquet"
    ]
    assert not (snapshot / "throughput_1k").exists()
