"""The run folder's format, owned here: its version (`manifest.json`'s `format_version`),
the cell ids' folder names and rerun suffixes, and the typed records of a cell
(`CellFile` for cell.json, `CompleteFile` for complete.json), which the writer
(harness.run.store) builds and analysis (harness.analysis.load) reads back. The records
allow fields they do not name (a newer writer may add some); the ones named are checked.

It imports no part of the run stack, so reading a folder (`analyse`, `report`) does not
load what writes one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from harness.errors import InputError
from harness.records import ClientHealth

MANIFEST = "manifest.json"
COMPLETE = "complete.json"
# The run folder's format; a folder written by a newer format is refused, not misread.
# 1: the first versioned one (folders without the field are read as 1).
FORMAT_VERSION = 1
# A check-bar rerun of a cell is the cell id with this suffix (its folder: `__rerun1`).
RERUN_SUFFIX = "/rerun1"
RERUN = re.compile(r"^(?P<original>.+)/rerun(?P<n>\d+)$")
RERUN_DIR = re.compile(r"^(?P<original>.+)__rerun(?P<n>\d+)$")


def cell_dirname(cell_id: str) -> str:
    return cell_id.replace("/", "__")


def rerun_of(cell_id: str) -> str | None:
    """The cell a rerun id measures again (None: not a rerun)."""
    m = RERUN.match(cell_id)
    return m.group("original") if m else None


def check_format(manifest: dict[str, Any], where: Path) -> None:
    version = manifest.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InputError(f"{where}: field format_version: {version!r} is newer than this"
                         f" specbench reads ({FORMAT_VERSION}); analyse it with the specbench"
                         " that wrote it")


# --- the records of one cell -----------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class Outcome(_Record):
    """What an attempt measured, in complete.json (harness.run.execute writes it)."""

    n_ok: int = 0
    n_errors: int = 0
    errors_by_kind: dict[str, int] = {}
    aborted: bool = False
    reason: str | None = None
    started_t: float | None = None
    ended_t: float | None = None
    health: ClientHealth | None = None


class CompleteFile(_Record):
    """complete.json: the latest attempt that measured to its end."""

    attempt: int
    finished_wall: float | None = None
    outcome: Outcome


class Attempt(_Record):
    attempt: int
    started_wall: float
    ended_wall: float | None = None
    status: Literal["running", "complete", "invalid", "failed", "interrupted"] | str
    error: str | None = None


class OpenLoopInfo(_Record):
    reference_rps: float | None = None
    rate_rps: float


class CellFile(_Record):
    """cell.json: the planned cell, every attempt at it, and where it was measured."""

    cell: dict[str, Any]
    attempts: list[Attempt] = []
    open_loop: OpenLoopInfo | None = None
    where: dict[str, Any] | None = None  # harness.run.where writes it; gpu_key reads it


def gpu_key(where: dict[str, Any]) -> str:
    """One GPU set: its UUIDs where NVML saw them, else the ids Ray or the environment
    gave (logical GPUs), on its host."""
    uuids = [g.get("uuid") or f"index {g.get('index')}" for g in where.get("gpus") or []]
    ids = uuids or where.get("ray_gpu_ids") or [where.get("cuda_visible_devices") or "all"]
    return f"{where.get('hostname')}:{','.join(str(i) for i in ids)}"
