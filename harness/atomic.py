"""Files written whole or not at all: a reader never opens half a file, a crash leaves the old one.

The one atomic writer of the package: everything that replaces a file (the manifest, cell
records, verdict.json, tables, reports, the weights' hash store) goes through here.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; it takes `path`'s name when the block ends.

    For writers that want a file name (PdfPages, DataFrame.to_parquet). The temporary file is
    flushed to disk before the rename, and removed if the block raises.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # One temporary name per process and thread: two writers of one file never share it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any, *, indent: int | None = 2) -> None:
    write_text(path, json.dumps(data, indent=indent, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
