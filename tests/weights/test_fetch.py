"""`specbench fetch` offline against a hub cache built from the tiny model: a pinned
checkpoint is found and its weights hashed (once), a branch prints the commit to
register, a missing one is a one-line error with exit code 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.weights.cache import repo_folder
from tests.weights.hubcache import ABSENT_SHA, HubCache, build_hub_cache, study, write_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> HubCache:
    return build_hub_cache(tmp_path_factory.mktemp("hub"))


def fetch(path: Path, hub: HubCache, cache: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub.root),
        "SPECBENCH_CACHE": str(cache),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("HF_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "fetch", str(path)],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def hash_cache_entries(cache: Path) -> dict:
    files = list((cache / "weight-sha256").glob("*.json"))
    return {k: v for f in files for k, v in json.loads(f.read_text()).items()}


def test_pinned_checkpoint_is_found_and_its_weights_hashed_once(hub, tmp_path) -> None:
    path = write_study(tmp_path / "study.yaml", study("specbench/tiny", hub.target_commit))
    cache = tmp_path / "specbench-cache"
    first = fetch(path, hub, cache)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "offline (HF_HUB_OFFLINE)" in out and "1 hub checkpoint(s)" in out
    assert f"ok: commit {hub.target_commit}" in out
    assert f"sha256 {hub.weights_sha256}  model.safetensors" in out
    assert "weights hashed now: 1, from the cache: 0" in out
    assert "not pinned" not in out and "register:" not in out
    assert "fetched: 1 checkpoint(s)" in out
    # The sha256 is recorded under the specbench cache with the blob it was taken from.
    entry = hash_cache_entries(cache)["model.safetensors"]
    assert entry["sha256"] == hub.weights_sha256
    assert Path(entry["real"]).parent.name == "blobs"
    # A second fetch (or a run) does not hash again ...
    again = fetch(path, hub, cache)
    assert again.returncode == 0 and "weights hashed now: 0, from the cache: 1" in again.stdout
    # ... until the file changes under it.
    blob = Path(entry["real"])
    os.utime(blob, ns=(blob.stat().st_atime_ns, blob.stat().st_mtime_ns + 10**9))
    third = fetch(path, hub, cache)
    assert third.returncode == 0 and "weights hashed now: 1, from the cache: 0" in third.stdout


def test_a_branch_prints_the_commit_to_register(hub, tmp_path) -> None:
    data = study("specbench/tiny", "main", drafter=("specbench/tiny-draft", None))
    path = write_study(tmp_path / "study.yaml", data)
    proc = fetch(path, hub, tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    register = re.findall(r"^register: (\S+) revision: ([0-9a-f]{40}) at (\S+)$", proc.stdout, re.M)
    assert [(repo, sha) for repo, sha, _ in register] == [
        ("specbench/tiny", hub.target_commit),
        ("specbench/tiny-draft", hub.draft_commit),
    ]
    # Each names the line to write it at: the revision, or the drafter without one.
    lines = path.read_text().splitlines()
    target_at, draft_at = (int(where.rsplit(":", 1)[1]) for _, _, where in register)
    assert lines[target_at - 1].strip() == "revision: main"
    assert lines[draft_at - 1].strip().startswith("model: specbench/tiny-draft")
    assert f"sha256 {hub.draft_sha256}  model.safetensors" in proc.stdout
    assert "revision 'main' is not a commit sha" in proc.stdout
    assert "no revision (the hub's default branch, which moves)" in proc.stdout


@pytest.mark.parametrize(
    "model, revision",
    [
        ("specbench/absent", ABSENT_SHA),  # no such repository in the cache
        ("specbench/tiny", ABSENT_SHA),  # the repository, not that commit
        ("specbench/absent", "main"),  # a branch of a repository never fetched
    ],
)
def test_a_missing_checkpoint_is_one_line_and_exit_2(hub, tmp_path, model, revision) -> None:
    path = write_study(tmp_path / "study.yaml", study(model, revision))
    proc = fetch(path, hub, tmp_path / "c")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert errors == [f"specbench: model {model}@{revision}: not in the hub cache {hub.root}"], (
        errors
    )
    assert "Traceback" not in proc.stderr


def test_one_missing_checkpoint_fails_the_fetch_after_the_others(hub, tmp_path) -> None:
    data = study("specbench/tiny", hub.target_commit, drafter=("specbench/absent", ABSENT_SHA))
    proc = fetch(write_study(tmp_path / "study.yaml", data), hub, tmp_path / "c")
    assert proc.returncode == 2
    assert f"ok: commit {hub.target_commit}" in proc.stdout  # the present one still fetched
    assert proc.stderr.strip().splitlines() == [
        f"specbench: drafter of arm draft specbench/absent@{ABSENT_SHA}: not in the hub cache"
        f" {hub.root}"
    ]


def test_a_corrupt_blob_is_refused(hub, tmp_path) -> None:
    bad = build_hub_cache(tmp_path / "bad")
    blob = repo_folder(bad.root, "specbench/tiny") / "blobs" / bad.weights_sha256
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    path = write_study(tmp_path / "study.yaml", study("specbench/tiny", bad.target_commit))
    proc = fetch(path, bad, tmp_path / "c")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert (
        "model.safetensors: sha256" in line
        and f"differs from the hub's {bad.weights_sha256}" in line
    )


def test_a_study_of_local_models_has_nothing_to_fetch(hub, tmp_path) -> None:
    data = study(str(hub.model_dir), None, engine="vllm-cpu")
    proc = fetch(write_study(tmp_path / "study.yaml", data), hub, tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert "0 hub checkpoint(s)" in proc.stdout and "nothing to fetch" in proc.stdout


def test_tiny_model_lays_itself_out_in_the_hub_cache(tmp_path) -> None:
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "tiny-model",
            str(tmp_path / "m"),
            "--hub-repo",
            "org/tiny",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    said = re.search(r"org/tiny at commit ([0-9a-f]{40}) \(refs/main\)", proc.stdout)
    assert said is not None, proc.stdout
    commit = said.group(1)
    storage = repo_folder(tmp_path / "hub", "org/tiny")
    assert (storage / "refs" / "main").read_text() == commit
    weights = storage / "snapshots" / commit / "model.safetensors"
    assert weights.is_symlink() and weights.resolve().parent == storage / "blobs"
    assert weights.read_bytes() == (tmp_path / "m" / "model.safetensors").read_bytes()


def test_an_interrupted_download_is_incomplete_not_present(tmp_path) -> None:
    # huggingface_hub keeps the tree listing of a commit it downloads (trees/<commit>.json,
    # format_version 1); a snapshot that lacks a listed file was cut off mid-download.
    cut = build_hub_cache(tmp_path / "cut")
    storage = repo_folder(cut.root, "specbench/tiny")
    listing = {
        f.name: {"size": f.stat().st_size, "blob_id": f.resolve().name}
        for f in (storage / "snapshots" / cut.target_commit).iterdir()
    }
    listing["model-00002-of-00002.safetensors"] = {"size": 10, "blob_id": "0" * 40}
    (storage / "trees").mkdir()
    (storage / "trees" / f"{cut.target_commit}.json").write_text(
        json.dumps({"format_version": 1, "files": listing})
    )
    path = write_study(tmp_path / "study.yaml", study("specbench/tiny", cut.target_commit))
    proc = fetch(path, cut, tmp_path / "c")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"specbench: model specbench/tiny@{cut.target_commit}: the cached snapshot in {cut.root}"
        " is incomplete; run `specbench fetch` with network access"
    ]
