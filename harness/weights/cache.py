"""The hub cache: where it is, and whether a checkpoint is in it at a revision.

One answer for every command. `specbench fetch` fills this cache; `validate` reads a
drafter's config.json from it; `doctor` checks the weights in it; pre-flight and the
manifest find their snapshots in it (harness.weights.hub.locate); the engines are
started pointed at it (HF_HUB_CACHE, harness.weights.record). Where it is follows
huggingface_hub's own rule, read at call time, not at import (huggingface_hub reads its
environment once, when imported).

The cache's layout (what huggingface_hub writes): models--ORG--NAME/ holds
refs/<branch> (a file with the commit sha) and snapshots/<sha>/ (the files). A
snapshot is complete when it has config.json and its weights: every shard its
*.safetensors.index.json names, or at least one *.safetensors / *.bin file.

Imports nothing beyond the standard library: `validate` reads the cache without
loading huggingface_hub, the doctor or the engines.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

_SHA = re.compile(r"^[0-9a-f]{40}$")


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, by its own rule (constants.py: HF_HUB_CACHE, else
    the legacy HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    env = os.environ
    raw = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not raw:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
        )
        raw = os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(raw))).resolve()


def repo_folder(cache: Path, repo: str) -> Path:
    """models--org--name, as huggingface_hub lays a model repository out in its cache."""
    return cache / "--".join(["models", *repo.split("/")])


def is_commit(revision: str | None) -> bool:
    return bool(revision and _SHA.match(revision))


@dataclass
class CachedCheckpoint:
    repo_id: str
    revision: str
    commit: str | None = None  # the snapshot the revision names here, if any
    missing: list[str] | None = None  # files a found snapshot lacks
    size_bytes: int = 0
    snapshot: Path | None = None  # cache/models--org--name/snapshots/<commit>, when found

    @property
    def present(self) -> bool:
        return self.commit is not None and not self.missing


def _weights_missing(snapshot: Path) -> list[str]:
    missing = [] if (snapshot / "config.json").exists() else ["config.json"]
    indexes = list(snapshot.glob("*.safetensors.index.json")) + list(
        snapshot.glob("*.bin.index.json")
    )
    if indexes:
        for index in indexes:
            try:
                shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
            except (OSError, ValueError):
                return missing + [f"{index.name} (unreadable)"]
            missing += sorted(s for s in shards if not (snapshot / s).exists())
    elif not (list(snapshot.glob("*.safetensors")) or list(snapshot.glob("*.bin"))):
        missing.append("weights (*.safetensors)")
    return missing


def _size(snapshot: Path) -> int:
    total = 0
    for path in snapshot.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0  # follows the blob links
        except OSError:
            continue
    return total


def find_checkpoint(
    repo_id: str, revision: str | None, cache: Path | None = None
) -> CachedCheckpoint:
    """The cached snapshot of repo_id at revision (a commit sha, or a branch or tag
    whose ref the cache holds); revision None means the hub's default, main. `cache`
    defaults to hub_cache_dir()."""
    revision = revision or "main"
    root = repo_folder(cache or hub_cache_dir(), repo_id)
    found = CachedCheckpoint(repo_id, revision)
    commit = revision if is_commit(revision) else None
    if commit is None:
        ref = root / "refs" / revision
        if ref.is_file():
            commit = ref.read_text().strip()
    if commit is None or not (root / "snapshots" / commit).is_dir():
        return found
    snapshot = root / "snapshots" / commit
    found.commit, found.snapshot = commit, snapshot
    found.missing, found.size_bytes = _weights_missing(snapshot), _size(snapshot)
    return found


def local_checkpoint_missing(path: str) -> list[str] | None:
    """For a local model folder: the files it lacks (None when the folder is absent)."""
    folder = Path(os.path.expanduser(path))
    return _weights_missing(folder) if folder.is_dir() else None
