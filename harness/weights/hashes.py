"""sha256 of a checkpoint's weight files, computed once and cached.

A 16 GB checkpoint takes about a minute to hash, so a run must not hash it on every
start: each result is kept under the specbench cache with the file's resolved path,
size and mtime, and reused while all three still match. In a hub cache a weight
file is a link to a blob named by the sha256 the hub recorded for it (a Git LFS
object), so a freshly computed digest that differs from its blob's name is a
corrupt download, and is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness import paths
from harness.atomic import write_json
from harness.errors import InputError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 8 << 20


class FileHash(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str  # relative to the checkpoint folder
    size: int
    sha256: str


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    real: str
    size: int
    mtime_ns: int
    sha256: str


def weight_files(folder: Path) -> list[Path]:
    """The weight files under a checkpoint folder, in a stable order."""
    return sorted(
        p for p in Path(folder).rglob("*") if p.name.endswith(WEIGHT_SUFFIXES) and p.is_file()
    )


def cache_file(folder: Path) -> Path:
    """Where the hashes of one checkpoint folder are kept (keyed by its resolved path)."""
    key = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:24]
    return paths.CACHE_DIR / "weight-sha256" / f"{key}.json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_cache(path: Path) -> dict[str, _Entry]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {k: _Entry.model_validate(v) for k, v in raw.items()}
    except (OSError, ValueError):
        return {}  # absent or unreadable: hash again


def weight_hashes(folder: Path) -> tuple[list[FileHash], int]:
    """(each weight file with its sha256, how many were hashed now rather than cached)."""
    folder = Path(folder)
    store = cache_file(folder)
    cached = _read_cache(store)
    entries: dict[str, _Entry] = {}
    out: list[FileHash] = []
    hashed = 0
    for path in weight_files(folder):
        rel = path.relative_to(folder).as_posix()
        real = path.resolve()
        stat = real.stat()
        old = cached.get(rel)
        if old is not None and (old.real, old.size, old.mtime_ns) == (
            str(real),
            stat.st_size,
            stat.st_mtime_ns,
        ):
            entry = old
        else:
            entry = _Entry(
                real=str(real), size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha256_of(real)
            )
            hashed += 1
            if _SHA256.match(real.name) and real.name != entry.sha256:
                raise InputError(
                    f"{path}: sha256 {entry.sha256} differs from the hub's {real.name} for this"
                    f" blob ({real}): a corrupt download; delete the blob and fetch again"
                )
        entries[rel] = entry
        out.append(FileHash(file=rel, size=entry.size, sha256=entry.sha256))
    if hashed or set(entries) != set(cached):
        write_json(store, {k: v.model_dump() for k, v in entries.items()}, indent=1)
    return out, hashed
