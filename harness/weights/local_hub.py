"""Lay a model folder out as a huggingface_hub cache entry, offline: for tests and for
trying `specbench fetch` without a network (`specbench tiny-model DIR --hub-repo ORG/NAME`).

The layout is the one huggingface_hub writes: models--org--name/blobs/<digest> holds
each file once, snapshots/<commit>/<file> links to its blob, refs/<branch> names the
commit. Every blob is named by its sha256, as the hub names LFS files (weights).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from harness.weights.cache import repo_folder
from harness.weights.datasets import dataset_folder
from harness.weights.hashes import sha256_of


def folder_commit(folder: Path) -> str:
    """A 40-hex commit id for a folder's contents: the same files, the same id."""
    digest = hashlib.sha1()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_of(path)}\n".encode())
    return digest.hexdigest()


def add_to_hub_cache(
    folder: Path,
    cache: Path,
    repo: str,
    *,
    branch: str | None = "main",
    commit: str | None = None,
    repo_type: str = "model",
) -> str:
    """Copy `folder` into `cache` as `repo` (a model, or with repo_type "dataset" a
    dataset: datasets--org--name) at a commit (default: folder_commit), with
    refs/<branch> pointing at it; returns the commit."""
    folder = Path(folder)
    commit = commit or folder_commit(folder)
    storage = (
        dataset_folder(Path(cache), repo)
        if repo_type == "dataset"
        else repo_folder(Path(cache), repo)
    )
    snapshot = storage / "snapshots" / commit
    (storage / "blobs").mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = sha256_of(path)
        blob = storage / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    if branch is not None:
        (storage / "refs").mkdir(parents=True, exist_ok=True)
        (storage / "refs" / branch).write_text(commit)
    return commit
