"""One shard's worker: the local executor (harness.run.runner) on the node Ray placed it,
over a run folder of its own, shipping each finished cell back to the driver.

Ray gives the worker its GPUs (CUDA_VISIBLE_DEVICES), and the engines it starts inherit
them; the load is driven from the same process, so client and engine share the node.
The worker's folder is scratch: what counts is what reaches the driver. After each cell
it sends a payload (`ShardPayload`): that cell's folder, whole (cell.json with `where`
added, complete.json, requests, metrics and GPU samples), and the parts of its manifest
the driver merges (engine starts, sessions, failed cells, deviations, the smoke's
state); at the end of a batch, also its smoke and engine logs. A worker killed mid-shard
so loses only the cell it was measuring.

Plain Python: harness.run.ray_executor makes it a Ray actor. Cells and batches cross
the process boundary as dicts (`Cell.model_dump`), the study as its pydantic model.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.prereg.schema import Study
from harness.run.progress import RunProgress
from harness.run.schedule import Batch
from harness.run.store import RunStore
from harness.rundir import SMOKE_DIR, SMOKE_RECORDS
from harness.rundir.cell import Cell
from harness.rundir.manifest import Manifest
from harness.shards import Shard

# The manifest entries a shard's worker makes that the driver's manifest keeps (its
# engine starts too): lists merged into the run's, facts kept under shards[name].
MERGED_LISTS = ("sessions", "failed_cells", "deviations")


def batch_to_dict(batch: Batch) -> dict[str, Any]:
    return {
        "stage": batch.stage,
        "cells": [c.model_dump(mode="json") for c in batch.cells],
        "smoke": batch.smoke,
        "rates": batch.rates,
        "fresh_engines": sorted(batch.fresh_engines),
        "k_schedules": {a: [list(r) for r in ranges] for a, ranges in batch.k_schedules.items()},
    }


def batch_from_dict(data: dict[str, Any]) -> Batch:
    return Batch(
        data["stage"],
        [Cell.model_validate(c) for c in data["cells"]],
        smoke=data["smoke"],
        rates=data["rates"],
        fresh_engines=frozenset(data["fresh_engines"]),
        k_schedules={a: [tuple(r) for r in ranges] for a, ranges in data["k_schedules"].items()},
    )


def folder_files(folder: Path, root: Path) -> dict[str, bytes]:
    """Every file under `folder`, keyed by its path relative to `root`."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def shard_study(study: Study, shard: Shard) -> Study:
    """The study with the shard's arms only (its smoke and pre-flight cover those); the
    round-cost surface goes with the shard that holds the drafter arm it copies."""
    arms = set(shard.arms)
    surface = study.surface if study.surface and study.surface.drafter in arms else None
    return study.model_copy(
        update={"arms": [a for a in study.arms if a.name in arms], "surface": surface}
    )


class ShardWorker:
    def __init__(
        self,
        run_id: str,
        shard: dict[str, Any],
        study: Study,
        cells: list[dict[str, Any]],
        allow_deviation: bool = False,
    ) -> None:
        from harness.run.environments import record_environments
        from harness.run.runner import Runner
        from harness.run.session import executed_study
        from harness.run.where import placement

        self.shard = Shard.from_dict(shard)
        self.root = Path(tempfile.mkdtemp(prefix=f"specbench-{run_id}-{self.shard.name}-"))
        self.store = RunStore(self.root)
        self.store.create_manifest(Manifest(run_id=run_id, shard=self.shard.name))
        # ${VAR}s and the pre-flight are this node's business: expanded and checked here.
        executed = executed_study(shard_study(study, self.shard))
        record_environments(self.store, executed)
        node_id, gpu_ids = _ray_context()
        self.where = placement(
            executed,
            self.store.manifest().engine_environments,
            shard=self.shard.name,
            node_id=node_id,
            ray_gpu_ids=gpu_ids,
        )
        # Notes go to the worker's stderr, which Ray forwards to the driver's terminal.
        self.console = Console(file=sys.stderr, highlight=False, force_terminal=False)
        self.runner = Runner(
            self.store,
            executed,
            self.console,
            allow_deviation=allow_deviation,
            cells=[Cell.model_validate(c) for c in cells],
        )
        self.runner.where = self.where
        self._smoke_sent = 0  # bytes of smoke/arms.jsonl already shipped

    def hello(self) -> dict[str, Any]:
        """Where this worker runs (the driver records it before any cell)."""
        return {
            "shard": self.shard.name,
            "pid": os.getpid(),
            "where": self.where.model_dump(mode="json"),
            "folder": str(self.root),
        }

    def seed(self, files: dict[str, bytes]) -> None:
        """Earlier attempts at cells this worker will measure (a resume), so attempt
        numbers and cell_retries continue where the driver's folder left them."""
        for rel, data in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def run_batch(self, batch: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Measure the batch; yields a payload per finished cell, then a closing one (also
        when the batch fails, before its error is raised)."""
        done: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.runner.on_cell_done = lambda cell_id: done.put(("cell", cell_id))

        def measure() -> None:
            try:
                with RunProgress(self.console, 0, bars=False) as progress:
                    self.runner.run_batch(batch_from_dict(batch), progress)
                done.put(("end", None))
            except BaseException as err:  # raised in the caller's thread, below
                done.put(("error", err))

        thread = threading.Thread(target=measure, name=f"{self.shard.name}-batch", daemon=True)
        thread.start()
        while True:
            kind, value = done.get()
            if kind == "cell":
                yield self.payload(value)
                continue
            thread.join()
            yield self.payload(None, closing=True)
            if kind == "error":
                raise value
            return

    def payload(self, cell_id: str | None, closing: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shard": self.shard.name,
            "cell": cell_id,
            "pid": os.getpid(),
            "files": {},
            "smoke_lines": b"",
            "logs": {},
            # The worker's whole manifest, as its file holds it: the driver reads it back
            # through the same model (harness.run.ray_executor.ShardSink._merged).
            "manifest": self.store.manifest().to_json(),
        }
        if cell_id is not None:
            folder = self.store.cell_folder(cell_id)
            out["files"] = folder_files(folder, self.root)
        smoke = self.root / SMOKE_RECORDS
        if smoke.exists():
            data = smoke.read_bytes()
            out["smoke_lines"] = data[self._smoke_sent :]
            self._smoke_sent = len(data)
        if closing:
            logs = folder_files(self.root / SMOKE_DIR, self.root)
            logs.pop(SMOKE_RECORDS, None)
            logs.update(folder_files(self.root / "engines", self.root))
            out["logs"] = logs
        return out

    def close(self) -> None:
        """Engines stopped; the scratch folder goes (what counts reached the driver with
        each batch's closing payload)."""
        try:
            self.runner.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _ray_context() -> tuple[str | None, list | None]:
    """The Ray node id and the GPU ids Ray gave this worker (None outside Ray)."""
    try:
        import ray
    except ImportError:
        return None, None
    if not ray.is_initialized():
        return None, None
    context = ray.get_runtime_context()
    return context.get_node_id(), list(ray.get_gpu_ids())
