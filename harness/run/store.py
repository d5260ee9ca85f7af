"""The run folder: append-only records, atomic markers, a manifest.

Nothing measured is ever held only in memory: every record is appended and
flushed the moment it is made, and a cell is complete only once its
`complete.json` has been renamed into place, so a crash or Ctrl-C leaves every
finished cell readable and every unfinished one visibly unfinished.

The folder's format (its version, the cells' folder names, the typed records of a
cell) is harness.rundir's; this module writes it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from harness.atomic import write_json
from harness.host_gpus import gpu_lines
from harness.paths import PROJECT_ROOT
from harness.records import GpuSample, RequestRecord
from harness.rundir import (
    CELL_FILE,
    CELLS,
    COMPLETE,
    GPU_SAMPLES,
    REQUESTS,
    Attempt,
    Cell,
    CellFile,
    CompleteFile,
    Outcome,
    cell_dirname,
)
from harness.rundir.manifest import MANIFEST, Deviation, HostFacts, Manifest, read_manifest


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


class JsonlWriter:
    """Appends one JSON object per line, flushed at once (line-buffered)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] = open(path, "a", encoding="utf-8", buffering=1)

    def write(self, record: BaseModel | dict) -> None:
        line = record.model_dump_json() if isinstance(record, BaseModel) else json.dumps(record)
        self._fh.write(line + "\n")

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def specbench_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def host_facts() -> HostFacts:
    facts: dict[str, Any] = {"hostname": socket.gethostname(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    facts["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    facts["gpus"] = gpu_lines() or []  # [] where nvidia-smi is absent or says nothing
    return HostFacts(**facts)


_MANIFEST_LOCK = threading.RLock()


class RunStore:
    """One run folder: results/<run-id>/."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def run_id(self) -> str:
        return self.root.name

    # --- manifest ------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def manifest(self) -> Manifest:
        return read_manifest(self.manifest_path)

    def create_manifest(self, manifest: Manifest) -> Manifest:
        """The run folder's first manifest (refused where one exists)."""
        with _MANIFEST_LOCK:
            if self.manifest_path.exists():
                raise FileExistsError(self.manifest_path)
            return self._write_manifest(manifest)

    def edit_manifest(self, edit: Callable[[Manifest], None]) -> Manifest:
        """Read, change in place, check, write: one edit at a time in this process (the
        sharded driver's threads and its main thread all edit one manifest). The edited
        manifest is validated whole before it is written, so a bad edit fails here, at
        once, not in the report after the hours."""
        with _MANIFEST_LOCK:
            manifest = self.manifest()
            edit(manifest)
            return self._write_manifest(manifest)

    def _write_manifest(self, manifest: Manifest) -> Manifest:
        checked = Manifest.model_validate(manifest.model_dump(mode="python"))
        write_json(self.manifest_path, checked.to_json())
        return checked

    def record_deviation(self, deviation: Deviation) -> None:
        self.edit_manifest(lambda m: m.deviations.append(deviation))

    def record_deviation_once(self, what: str) -> bool:
        """A deviation sentence into the manifest unless it is there already (a resume
        finds the same one again); True when it was new."""
        added = False

        def add(manifest: Manifest) -> None:
            nonlocal added
            if not any(d.what == what for d in manifest.deviations):
                manifest.deviations.append(Deviation(when=time.time(), what=what))
                added = True

        self.edit_manifest(add)
        return added

    # --- engines ---------------------------------------------------------------------

    def engine_dir(self, arm: str) -> Path:
        """Where an arm's engine logs (harness.engines.running.lifecycle names the file in it)."""
        return self.root / "engines" / arm

    def engine_log(self, arm: str) -> Path:
        return self.engine_dir(arm) / f"engine-{arm}.log"

    # --- cells ---------------------------------------------------------------------

    def cell_folder(self, cell_id: str) -> Path:
        """The cell's folder, made or not (`cell_dir` makes it)."""
        return self.root / CELLS / cell_dirname(cell_id)

    def cell_dir(self, cell_id: str) -> Path:
        path = self.cell_folder(cell_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def is_complete(self, cell_id: str) -> bool:
        return (self.cell_folder(cell_id) / COMPLETE).exists()

    def completion(self, cell_id: str) -> CompleteFile | None:
        path = self.cell_folder(cell_id) / COMPLETE
        return CompleteFile.model_validate(read_json(path)) if path.exists() else None

    def cell_info(self, cell_id: str) -> dict[str, Any]:
        path = self.cell_dir(cell_id) / CELL_FILE
        return read_json(path) if path.exists() else {}

    def start_attempt(self, cell: Cell, **extra: Any) -> int:
        cell_id = cell.id
        info = self.cell_info(cell_id) or {"attempts": []}
        info["cell"] = cell.model_dump(mode="json")
        info.update(extra)
        attempt = len(info["attempts"]) + 1
        info["attempts"].append(
            Attempt(attempt=attempt, started_wall=time.time(), status="running").model_dump()
        )
        self._write_cell(cell_id, info)
        return attempt

    def _write_cell(self, cell_id: str, info: dict[str, Any]) -> None:
        """cell.json, checked against its record first."""
        write_json(
            self.cell_dir(cell_id) / CELL_FILE,
            CellFile.model_validate(info).model_dump(mode="json", exclude_none=False),
        )

    def set_cell_facts(self, cell_id: str, **facts: Any) -> None:
        """Facts about the cell as a whole (`where` it was measured) into cell.json."""
        info = self.cell_info(cell_id)
        if info:
            info.update(facts)
            self._write_cell(cell_id, info)

    def end_attempt(
        self, cell_id: str, attempt: int, status: str, error: str | None = None
    ) -> None:
        info = self.cell_info(cell_id)
        for entry in info["attempts"]:
            if entry["attempt"] == attempt:
                entry.update(ended_wall=time.time(), status=status, error=error)
        self._write_cell(cell_id, info)

    def mark_complete(
        self, cell_id: str, attempt: int, outcome: Outcome, unusable: str | None = None
    ) -> None:
        """The last thing written for an attempt that measured to its end: complete.json
        names the cell's latest such attempt. An unusable one ends "invalid" with its
        reason, and a later attempt (now or on resume) may replace it."""
        self.end_attempt(cell_id, attempt, "invalid" if unusable else "complete", unusable)
        record = CompleteFile(attempt=attempt, finished_wall=time.time(), outcome=outcome)
        write_json(self.cell_dir(cell_id) / COMPLETE, record.model_dump(mode="json"))

    def judge_attempt(self, cell_id: str, attempt: int, reason: str) -> None:
        """Record that a finished attempt turned out unusable (found so on resume)."""
        info = self.cell_info(cell_id)
        for entry in info.get("attempts", []):
            if entry["attempt"] == attempt and entry.get("status") == "complete":
                entry.update(status="invalid", error=reason)
                self._write_cell(cell_id, info)

    def measured_attempts(self, cell_id: str) -> int:
        """Attempts that measured to their end, usable or not, within the cell's budget:
        what cell_retries bounds across runs and resumes (engine deaths and interruptions
        are not counted), since `--remeasure-invalid` gave it a fresh budget if it did."""
        info = self.cell_info(cell_id)
        measured = sum(
            1 for a in info.get("attempts", []) if a.get("status") in ("complete", "invalid")
        )
        return measured - (info.get("fresh_budget_after") or 0)

    def give_fresh_budget(self, cell_id: str) -> int:
        """A fresh cell_retries budget from now (`--remeasure-invalid`); returns the
        attempts measured to their end before it, every one kept."""
        info = self.cell_info(cell_id)
        before = sum(
            1 for a in info.get("attempts", []) if a.get("status") in ("complete", "invalid")
        )
        info["fresh_budget_after"] = before
        self._write_cell(cell_id, info)
        return before

    def attempt_requests(self, cell_id: str, attempt: int) -> list[RequestRecord]:
        """The measured requests of one attempt, as requests.jsonl holds them."""
        path = self.cell_folder(cell_id) / REQUESTS
        if not path.exists():
            return []
        out = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    rec = RequestRecord.model_validate_json(line)
                    if rec.attempt == attempt and rec.phase == "measure":
                        out.append(rec)
        return out

    def attempt_gpu_samples(self, cell_id: str, attempt: int) -> list[GpuSample]:
        """One attempt's GPU samples, as gpu.jsonl holds them (none without telemetry)."""
        path = self.cell_folder(cell_id) / GPU_SAMPLES
        if not path.exists():
            return []
        with open(path, encoding="utf-8") as fh:
            samples = [GpuSample.model_validate_json(line) for line in fh if line.strip()]
        return [s for s in samples if s.attempt == attempt]

    def writer(self, cell_id: str, name: str) -> JsonlWriter:
        return JsonlWriter(self.cell_dir(cell_id) / name)
