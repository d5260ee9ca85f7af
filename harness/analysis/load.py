"""Read a run folder back: manifest, study, and each cell's records.

Only the run folder is read (never an engine), so analysis and report can be
rebuilt from an old run. A cell counts when its complete.json exists; analysis
uses the measured requests of the attempt complete.json names. Cells that
measured nothing usable (harness.derived.usable: aborted for errors, client
unhealthy, nothing succeeded, no per-user speed, and under `recording.gpu_throttle:
remeasure` a GPU that throttled during a timed cell) are loaded but marked invalid, so
every bar can exclude them and say so. gpu.jsonl is read when it exists (a host without
NVML writes none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from harness.derived.throttle import gpu_throttle
from harness.derived.usable import Cause, unusable
from harness.errors import InputError
from harness.plan import plan_cells
from harness.prereg.schema import Study
from harness.records import (
    GpuSample,
    MetricSample,
    RequestRecord,
    SmokeArmCheck,
    SmokeIdentityCheck,
    read_smoke_records,
)
from harness.rundir import (
    CELL_FILE,
    CELLS,
    COMPLETE,
    GPU_SAMPLES,
    METRICS,
    REQUESTS,
    RERUN_DIR,
    SCORES,
    SMOKE_RECORDS,
    STUDY_FILE,
    Attempt,
    Cell,
    CellFile,
    CompleteFile,
    MeasuredOn,
    OpenLoopInfo,
    ScoreRecord,
    rerun_of,
    speed_cell_id,
)
from harness.rundir.manifest import MANIFEST, Manifest, read_manifest, validation_problem

CellStatus = Literal["complete", "invalid", "missing", "skipped"]


@dataclass
class CellData:
    """One cell of the run as the folder holds it."""

    id: str
    arm: str
    task: str
    kind: str
    concurrency: int | None
    rate_relative: float | None
    stage: int | None
    status: CellStatus
    reason: str | None = None
    # Why an invalid or missing cell is so, typed (harness.derived.usable): what the
    # verdict of an unfinished run counts, and what --remeasure-invalid measures again.
    causes: tuple[Cause, ...] = ()
    attempts: list[Attempt] = field(default_factory=list)  # cell.json's, every one
    folder: Path | None = None
    complete: CompleteFile | None = None
    open_loop: OpenLoopInfo | None = None
    where: MeasuredOn | None = None  # harness.run.where: node, GPUs, shard
    requests: list[RequestRecord] = field(default_factory=list)  # measured, completed attempt
    # The completed attempt's warm-up requests: not the cell's figures, but inside the
    # engine counters' window (acceptance_requests checks the counters against them too).
    warmup: list[RequestRecord] = field(default_factory=list)
    samples: list[MetricSample] = field(default_factory=list)  # completed attempt
    gpu_samples: list[GpuSample] = field(default_factory=list)  # completed attempt
    scores: dict[str, bool] | None = None
    session: int | None = None  # repeated sessions: 1..N (None: measured once)
    # The arm's k (0 without a drafter; None for an arm the study does not name): one
    # round's chunk is one step, not a burst (harness.derived.bursts).
    num_draft_tokens: int | None = None

    @property
    def usable(self) -> bool:
        return self.status == "complete"

    @property
    def rerun_of(self) -> str | None:
        return rerun_of(self.id)


@dataclass
class RunData:
    run_dir: Path
    run_id: str
    manifest: Manifest
    study: Study
    cells: dict[str, CellData]  # planned cells (possibly missing) and reruns found on disk
    # smoke/arms.jsonl in the order written: each arm's smoke check and comparison
    smoke: list[SmokeArmCheck | SmokeIdentityCheck] = field(default_factory=list)

    def cell(self, cell_id: str) -> CellData:
        return self.cells.get(cell_id) or _missing(cell_id, "not in the plan")

    def find(self, arm: str, task: str, kind: str, concurrency: int | None = None) -> CellData:
        """The cell (for repeated sessions: its first session)."""
        if kind == "speed":
            return self.cell(speed_cell_id(arm, task, concurrency))
        return self.cell(f"{arm}/{task}/{kind}")  # identity, accuracy (task_cell_id)

    def sessions_of(self, cell: CellData) -> list[CellData]:
        """Every session of a planned cell in session order; [cell] for one measured once.
        A later session skipped (a group-sequential look decided its bars) is left out."""
        if cell.session is None:
            return [cell]
        found = [
            c
            for c in self.cells.values()
            if c.rerun_of is None
            and c.session is not None
            and (c.id == cell.id or c.id.startswith(cell.id + "/s"))
            and (c.id == cell.id or c.status != "skipped")
        ]
        return sorted(found, key=lambda c: c.session or 0)

    @property
    def stop_fired(self) -> bool:
        return bool(self.manifest.stop and self.manifest.stop.fired)


def _missing(cell_id: str, reason: str) -> CellData:
    parts = cell_id.split("/")
    return CellData(
        cell_id,
        parts[0],
        parts[1] if len(parts) > 1 else "",
        "unknown",
        None,
        None,
        None,
        "missing",
        reason,
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise InputError(f"{path}: file not found") from err
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from err


def _validate(model: type[BaseModel], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InputError(f"{where}: {validation_problem(err)}") from err


def _read_jsonl(path: Path, model: type[BaseModel]) -> list[Any]:
    if not path.exists():
        return []
    out = []
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}: line {n}: not valid JSON ({err.msg})") from err
            out.append(_validate(model, data, f"{path}: line {n}"))
    return out


def load_study_json(run_dir: Path) -> Study:
    path = run_dir / STUDY_FILE
    data = _read_json(path)
    if not isinstance(data, dict) or "study" not in data:
        raise InputError(f"{path}: field study: expected the resolved study object")
    return _validate(Study, data["study"], str(path))


def arm_draft_tokens(study: Study, arm: str) -> int | None:
    """The arm's k for its bursts: its drafter's num_draft_tokens, 0 without a drafter.
    None for an arm the study does not name: judged as before rounds were known."""
    try:
        drafter = study.arm(arm).drafter
    except KeyError:
        return None
    return drafter.num_draft_tokens if drafter else 0


def planned_cells(study: Study) -> list[Cell]:
    # Item counts only size the cells; ids and kinds are all analysis needs.
    return plan_cells(study, sizes={t.name: 1 for t in study.tasks})


def _load_cell(
    folder: Path, planned: Cell | None, cell_id: str, gpu_throttle_policy: str = "flag"
) -> CellData:
    cell_path = folder / CELL_FILE
    if planned is not None:
        base = CellData(
            cell_id,
            planned.arm,
            planned.task,
            planned.kind,
            planned.concurrency,
            planned.rate_relative,
            planned.stage,
            "missing",
            folder=folder,
            # A rerun's session is a fresh one after the registered sessions: none of them.
            session=None if planned.rerun else planned.session,
        )
    else:
        base = _missing(cell_id, "")
        base.folder = folder
    if not cell_path.exists():
        base.reason = "not run"
        return base
    cell_file: CellFile = _validate(CellFile, _read_json(cell_path), str(cell_path))
    c = cell_file.cell
    if c.id != cell_id:
        raise InputError(
            f"{cell_path}: field cell: holds cell {c.id!r}, its folder is {cell_id!r}'s"
        )
    base.arm, base.task, base.kind = c.arm, c.task, c.kind
    base.concurrency, base.rate_relative, base.stage = c.concurrency, c.rate_relative, c.stage
    base.open_loop = cell_file.open_loop
    base.attempts = cell_file.attempts
    base.where = cell_file.where
    complete_path = folder / COMPLETE
    if not complete_path.exists():
        last = cell_file.attempts[-1] if cell_file.attempts else None
        base.reason = (
            f"no complete attempt (last: {last.status}: {last.error})"
            if last
            else "started, never completed"
        )
        died = last is not None and last.status == "failed"
        base.causes = (Cause("engine_died" if died else "not_measured"),)
        return base
    done: CompleteFile = _validate(CompleteFile, _read_json(complete_path), str(complete_path))
    base.complete = done
    attempt = [
        r for r in _read_jsonl(folder / REQUESTS, RequestRecord) if r.attempt == done.attempt
    ]
    base.requests = [r for r in attempt if r.phase == "measure"]
    base.warmup = [r for r in attempt if r.phase == "warmup"]
    base.samples = [
        s for s in _read_jsonl(folder / METRICS, MetricSample) if s.attempt == done.attempt
    ]
    base.gpu_samples = [
        s for s in _read_jsonl(folder / GPU_SAMPLES, GpuSample) if s.attempt == done.attempt
    ]
    if (folder / SCORES).exists():
        base.scores = {s.id: s.correct for s in _read_jsonl(folder / SCORES, ScoreRecord)}
    judged = unusable(
        kind=base.kind,
        requests=base.requests,
        aborted=done.outcome.aborted,
        abort_reason=done.outcome.reason,
        health=done.outcome.health,
        gpu_throttle=gpu_throttle(base.gpu_samples),
        gpu_throttle_policy=gpu_throttle_policy,
    )
    if judged is None:
        base.status, base.reason = "complete", None
    else:
        base.status, base.reason, base.causes = "invalid", judged.reason, judged.causes
    return base


def load_run(run_dir: str | Path, study: Study | None = None) -> RunData:
    """Everything analysis needs from a run folder. `study` overrides study.json."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run folder (no such directory)")
    manifest = read_manifest(run_dir / MANIFEST)
    if study is None:
        study = load_study_json(run_dir)
    skipped = manifest.skipped_reasons()
    policy = study.recording.gpu_throttle
    cells_root = run_dir / CELLS
    cells: dict[str, CellData] = {}
    planned = planned_cells(study)
    for cell in planned:
        data = _load_cell(cells_root / cell.dirname, cell, cell.id, policy)
        if data.status == "missing" and cell.id in skipped:
            data.status, data.reason = "skipped", skipped[cell.id] or "skipped"
        cells[cell.id] = data
    planned_by_dir = {c.dirname: c for c in planned}
    registered = max((c.session for c in planned if c.session is not None), default=0)
    if cells_root.is_dir():
        for folder in sorted(cells_root.iterdir()):
            # A check-bar rerun is found by its folder: `<planned cell's folder>__rerun<n>`.
            m = RERUN_DIR.match(folder.name)
            if not m or m.group("original") not in planned_by_dir:
                continue
            rerun = planned_by_dir[m.group("original")].rerun_cell(registered, int(m.group("n")))
            if rerun.id not in cells:
                cells[rerun.id] = _load_cell(folder, rerun, rerun.id, policy)
    for data in cells.values():
        data.num_draft_tokens = arm_draft_tokens(study, data.arm)
    run_id = manifest.run_id or run_dir.name
    return RunData(
        run_dir,
        run_id,
        manifest,
        study,
        cells,
        read_smoke_records(run_dir / SMOKE_RECORDS),
    )
