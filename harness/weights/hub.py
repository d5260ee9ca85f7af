"""Hub checkpoints on this machine: finding one offline, and downloading one at its
registered revision, in the one hub cache (harness.weights.cache: where it is, and
whether a checkpoint is in it), so `fetch`, `validate`, `doctor`, pre-flight and the
engines' environment agree on one cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.errors import InputError
from harness.prereg.pins import Checkpoint, is_commit_sha
from harness.weights.cache import find_checkpoint, hub_cache_dir

_TRUE = {"1", "ON", "YES", "TRUE"}


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


@dataclass(frozen=True)
class Snapshot:
    repo: str
    revision: str | None  # as registered
    commit: str  # the commit the snapshot is of
    path: Path  # cache/models--org--name/snapshots/<commit>


class NotFetched(InputError):
    """A checkpoint that is not on this machine, or cannot be downloaded."""


def locate(ckpt: Checkpoint, cache: Path | None = None) -> Snapshot:
    """The cached snapshot of a checkpoint, without any network access. Raises NotFetched.

    Whether it is there, and at which commit, is find_checkpoint's answer (the same for
    every command); huggingface_hub is asked only whether a download it made into that
    snapshot finished (the tree listing it cached names no file the snapshot lacks)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = cache or hub_cache_dir()
    found = find_checkpoint(ckpt.repo, ckpt.revision, cache)
    if found.commit is None or found.snapshot is None:
        raise NotFetched(f"{ckpt.label}: not in the hub cache {cache}")
    try:
        snapshot_download(ckpt.repo, revision=found.commit, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError as err:
        # Its subclass IncompleteSnapshotError: the snapshot folder exists, but the tree
        # listing cached by an earlier download names files it lacks.
        if type(err).__name__ == "IncompleteSnapshotError":
            raise NotFetched(
                f"{ckpt.label}: the cached snapshot in {cache} is incomplete;"
                " run `specbench fetch` with network access"
            ) from None
        raise NotFetched(f"{ckpt.label}: not in the hub cache {cache}") from None
    except ValueError as err:  # not a valid repository id or revision
        raise NotFetched(f"{ckpt.label}: not in the hub cache {cache} ({err})") from None
    return Snapshot(ckpt.repo, ckpt.revision, found.commit, found.snapshot)


def download_problem(
    err: BaseException, label: str, revision: str | None, what: str = "repository"
) -> str:
    """A failed snapshot_download in one line: gated, missing, no such revision, offline
    and not cached, or the error's first line."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(err, GatedRepoError):
        return (
            f"{label}: the {what} is gated: accept its terms on the hub and log in"
            " (`hf auth login`)"
        )
    if isinstance(err, RepositoryNotFoundError):
        return f"{label}: no such {what} on the hub (or it is private: log in with `hf auth login`)"
    if isinstance(err, RevisionNotFoundError):
        return f"{label}: the {what} has no revision {revision!r}"
    text = str(err).strip()
    if isinstance(err, LocalEntryNotFoundError):
        first = text.splitlines()[0] if text else type(err).__name__
        return f"{label}: cannot reach the hub and it is not cached ({first})"
    return f"{label}: download failed: {type(err).__name__}: {text.splitlines()[0] if text else ''}"


def fetch(ckpt: Checkpoint, console: Console, cache: Path | None = None) -> Snapshot:
    """Download a checkpoint at its revision into the hub cache (offline: find it there).

    huggingface_hub skips the files already in the cache, so an interrupted fetch
    goes on where it stopped, file by file; within one fetch a dropped connection
    resumes its file with a Range request (file_download.py, http_get). A file cut off
    by a killed process starts over: huggingface_hub 2.x downloads each file to a
    process-unique temporary file and deletes it on failure (_download_to_tmp_and_move).
    """
    cache = cache or hub_cache_dir()
    if offline():
        return locate(ckpt, cache)
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    from harness.weights.progress import RichTqdm, rich_progress

    try:
        info = HfApi().model_info(ckpt.repo, revision=ckpt.revision, files_metadata=True)
        sizes = [s.size for s in info.siblings or [] if s.size is not None]
        total = sum(sizes)
        console.print(f"  on the hub: commit {info.sha}, {len(sizes)} files, {size_text(total)}")
        with rich_progress(console):
            # Typed as tqdm.auto's class, any tqdm works (RichTqdm: a plain one, on purpose).
            bars: Any = RichTqdm
            path = snapshot_download(
                ckpt.repo, revision=ckpt.revision, cache_dir=cache, tqdm_class=bars
            )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as err:
        raise NotFetched(download_problem(err, ckpt.label, ckpt.revision)) from None
    return Snapshot(ckpt.repo, ckpt.revision, Path(path).name, Path(path))


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def pinned_text(ckpt: Checkpoint, snap: Snapshot) -> str | None:
    """What to register for an unpinned checkpoint (None when it is pinned)."""
    if is_commit_sha(ckpt.revision):
        return None
    return f"revision: {snap.commit}"
