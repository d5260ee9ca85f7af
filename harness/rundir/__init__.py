"""The run folder's format, owned here: its version (`manifest.json`'s `format_version`),
the planned cell and the one grammar of its id and folder name (harness.rundir.cell),
the names of a cell folder's files, and the typed records of a cell
(`CellFile` for cell.json, `CompleteFile` for complete.json), which the writer
(harness.run.store) builds and analysis (harness.analysis.load) reads back. The records
allow fields they do not name (a newer writer may add some); the ones named are checked.

It imports no part of the run stack, so reading a folder (`analyse`, `report`) does not
load what writes one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.records import ClientHealth
from harness.rundir.cell import (
    RERUN_DIR,
    Cell,
    cell_dirname,
    rerun_of,
    speed_cell_id,
)

# The run folder's file names: the writer (harness.run.store) and the readers use these.
STUDY_FILE = "study.json"  # the resolved study the run measured
CELLS = "cells"  # one folder per cell, named `Cell.dirname`
CELL_FILE = "cell.json"  # CellFile
COMPLETE = "complete.json"  # CompleteFile
REQUESTS = "requests.jsonl"  # harness.records.RequestRecord, every attempt's
METRICS = "metrics.jsonl"  # harness.records.MetricSample: the engine's counters
GPU_SAMPLES = "gpu.jsonl"  # harness.records.GpuSample (absent where NVML is not)
SCORES = "scores.jsonl"  # ScoreRecord: an accuracy cell's
SMOKE_DIR = "smoke"  # the smoke stage's requests and checks (harness.run.smoke)
SMOKE_RECORDS = f"{SMOKE_DIR}/arms.jsonl"  # harness.records.read_smoke_records


# --- the records of one cell -----------------------------------------------------------


class _Record(BaseModel):
    """A cell's record: a key it does not name is refused (a newer writer bumps the
    folder's format_version, which this reader refuses first)."""

    model_config = ConfigDict(extra="forbid")


class Outcome(_Record):
    """What an attempt measured: the load driver (harness.measure.driver.run_cell)
    returns it, complete.json holds it, analysis reads it back."""

    n_ok: int = 0  # measured (non-warm-up) requests that succeeded
    n_errors: int = 0  # measured requests that failed
    errors_by_kind: dict[str, int] = {}
    aborted: bool = False
    reason: str | None = None  # why it was aborted
    started_t: float | None = None  # the driver's monotonic clock
    ended_t: float | None = None
    health: ClientHealth | None = None
    n_warmup: int = 0
    warmup_errors: int = 0
    records: int = 0  # every record handed on, warm-up included


class ScoreRecord(_Record):
    """One line of an accuracy cell's scores.jsonl (harness.run.execute.score_cell)."""

    id: str
    extracted: str | None  # the answer / code read from the response (None: nothing found)
    correct: bool
    detail: str | None = None


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


class GpuSeen(_Record):
    """One GPU NVML saw (harness.measure.gpu.Gpu.describe)."""

    index: int
    uuid: str | None = None
    name: str | None = None


class MeasuredOn(_Record):
    """Where a cell was measured, a shard's worker ran: harness.run.where.placement
    writes it (cell.json, the manifest's shards), gpu_key reads it."""

    shard: str | None = None  # the Ray shard (None: measured on this machine)
    hostname: str | None = None
    node_id: str | None = None  # Ray's node
    cuda_visible_devices: str | None = None
    ray_gpu_ids: list[str] | None = None  # the GPUs Ray gave a shard's worker
    gpus: list[GpuSeen] = []
    gpu_reason: str | None = None  # why NVML saw none, or the visible ones it did not find
    driver_version: str | None = None
    engine_versions: dict[str, str | None] = {}  # arm -> "<package> <version>"


class CellFile(_Record):
    """cell.json: the planned cell, every attempt at it, and where it was measured."""

    cell: Cell
    attempts: list[Attempt] = []
    open_loop: OpenLoopInfo | None = None
    where: MeasuredOn | None = None
    # `--remeasure-invalid` gave the cell a fresh cell_retries budget after this many
    # attempts had measured to their end (None: never); harness.run.attempts counts from it.
    fresh_budget_after: int | None = None


__all__ = [
    "RERUN_DIR",
    "Cell",
    "cell_dirname",
    "rerun_of",
    "speed_cell_id",
]


def gpu_key(where: MeasuredOn) -> str:
    """One GPU set: its UUIDs where NVML saw them, else the ids Ray or the environment
    gave (logical GPUs), on its host."""
    uuids = [g.uuid or f"index {g.index}" for g in where.gpus]
    ids = uuids or where.ray_gpu_ids or [where.cuda_visible_devices or "all"]
    return f"{where.hostname}:{','.join(ids)}"
