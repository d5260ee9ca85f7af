"""The sharded executor: each shard a Ray actor on its own GPUs, every cell sent back to the
driver's run folder the moment it is measured.

`specbench run FILE --gpus N` starts a local Ray instance with N GPUs (one multi-GPU host;
here, logical GPUs); `--ray ADDRESS` joins a running cluster and uses its GPUs. The plan is
cut into shards (harness.shards), never more than there are GPU slots, so every shard's
actor holds its GPUs for the whole run and keeps its engines up across stages, as the local
executor does. A batch of the schedule (harness.run.schedule) goes to every shard that has
cells in it, and returns when all of them finished it: that is the stage barrier the stop
bar is judged at. A check bar's rerun goes to the shard that measured the baseline.

A shard whose actor dies (its node lost, its process killed) loses only the cell it was
measuring; the other shards finish the batch, then the run stops as interrupted, and
`--resume` (with the same --gpus or --ray) measures what is missing with the shards the
manifest recorded. The manifest's `sharding` names the shards, `shards[name]` where each
worker ran, and every cell.json its `where`.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from harness.atomic import write_bytes
from harness.errors import InputError, SpecbenchError
from harness.prereg.schema import Study
from harness.run.attempts import pending_cells
from harness.run.progress import RunProgress
from harness.run.schedule import Batch
from harness.run.shard_worker import (
    MERGED_LISTS,
    ShardWorker,
    batch_to_dict,
    folder_files,
)
from harness.run.smoke import SmokeFailed
from harness.run.store import RunStore
from harness.run.where import gpu_model_deviation
from harness.rundir import COMPLETE, SMOKE_RECORDS, MeasuredOn
from harness.rundir.cell import Cell
from harness.rundir.manifest import MANIFEST, Manifest, manifest_from
from harness.rundir.schedule import SmokeStatus, SmokeSummary
from harness.rundir.shards import Sharding, ShardPlan, ShardRecord, ShardWorkerRecord
from harness.shards import Shard, plan_shards, shard_cells, shard_of, slots_for


def import_ray():
    try:
        import ray
    except ImportError as err:
        raise InputError(
            "--gpus and --ray run shards on Ray, which is not installed here:"
            " pip install -e '.[ray]'"
        ) from err
    return ray


def start_ray(address: str | None, gpus: int | None) -> int:
    """Ray up (a local instance with `gpus` GPUs, or the cluster at `address`); returns the
    GPUs the run may use."""
    ray = import_ray()
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=True)
        else:
            ray.init(
                num_gpus=gpus,
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                log_to_driver=True,
            )
    have = int(ray.cluster_resources().get("GPU", 0))
    if gpus is not None and gpus > have:
        raise InputError(f"--gpus {gpus}: the Ray cluster has {have} GPUs")
    if have < 1:
        raise InputError("the Ray cluster has no GPUs (give --gpus N for a local instance)")
    return gpus or have


def recorded_or_planned_shards(
    store: RunStore, study: Study, cells: list[Cell], gpus: int
) -> list[Shard]:
    """The shards the manifest recorded (a resume keeps them: a unit's cells stay on one
    shard), else the plan cut for `gpus` GPUs, recorded."""
    slots = slots_for(study, gpus)
    recorded = store.manifest().sharding
    if recorded:
        shards = [Shard.from_dict(s.model_dump()) for s in recorded.shards]
        if len(shards) > slots:
            raise InputError(
                f"run {store.run_id} was cut into {len(shards)} shards for {recorded.gpus}"
                f" GPUs; resume it with at least {len(shards) * study.hardware.count} GPUs"
            )
        return shards
    shards = plan_shards(study, cells, slots)
    sharding = Sharding(
        gpus=gpus, slots=slots, shards=[ShardPlan.model_validate(s.to_dict()) for s in shards]
    )
    store.edit_manifest(lambda m: setattr(m, "sharding", sharding))
    return shards


class ShardSink:
    """The driver's side: payloads into the run folder, one at a time."""

    def __init__(self, store: RunStore, progress: RunProgress, cells: dict[str, Cell]) -> None:
        self.store, self.progress, self.cells = store, progress, cells
        self.lock = threading.Lock()

    def hello(self, info: dict[str, Any]) -> None:
        def add(manifest: Manifest) -> None:
            entry = manifest.shards.setdefault(info["shard"], ShardRecord())
            entry.workers.append(
                ShardWorkerRecord(
                    pid=info["pid"],
                    where=info["where"],
                    folder=info["folder"],
                    started_wall=time.time(),
                )
            )
            entry.where, entry.status = MeasuredOn.model_validate(info["where"]), "running"

        self.store.edit_manifest(add)

    def receive(self, payload: dict[str, Any]) -> None:
        with self.lock:
            self._files(payload["files"])
            self._merge(payload)
            if payload["smoke_lines"]:
                path = self.store.root / SMOKE_RECORDS
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "ab") as fh:
                    fh.write(payload["smoke_lines"])
                    fh.flush()
                    os.fsync(fh.fileno())
            for rel, data in payload["logs"].items():
                # Under the shard's name: engines/<shard>/<arm>/..., smoke/<shard>/...
                top, *rest = Path(rel).parts
                target = self.store.root / top / payload["shard"] / Path(*rest)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        cell_id = payload["cell"]
        if cell_id is not None and cell_id in self.cells:
            done = self.store.completion(cell_id)
            self.progress.skip(self.cells[cell_id])
            self.progress.note(
                f"{payload['shard']}: {cell_id} " + ("received" if done else "ended unmeasured")
            )

    def _files(self, files: dict[str, bytes]) -> None:
        # complete.json last: a driver killed halfway leaves the cell visibly unfinished.
        for rel in sorted(files, key=lambda r: Path(r).name == COMPLETE):
            path = self.store.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes(path, files[rel])

    def _merge(self, payload: dict[str, Any]) -> None:
        """The worker's manifest entries replace what that same worker sent before; each
        is tagged with its shard (and the worker's pid, which tells resumed workers apart)."""
        self.store.edit_manifest(lambda manifest: self._merged(manifest, payload))

    @staticmethod
    def _merged(manifest: Manifest, payload: dict[str, Any]) -> None:
        shard, pid = payload["shard"], payload["pid"]
        worker = manifest_from(payload["manifest"], Path(f"shard {shard}'s {MANIFEST}"))
        tag = {"shard": shard, "shard_worker": pid}
        entry = manifest.shards.setdefault(shard, ShardRecord())
        hostname = entry.where.hostname if entry.where else None

        def mine(record: Any) -> bool:
            return record.shard == shard and record.shard_worker == pid

        for arm, starts in worker.engines.items():
            kept = [e for e in manifest.engines.get(arm, []) if not mine(e)]
            manifest.engines[arm] = kept + [
                e.model_copy(update={**tag, "node_hostname": hostname}) for e in starts
            ]
        for key in MERGED_LISTS:
            kept = [e for e in getattr(manifest, key) if not mine(e)]
            setattr(manifest, key, kept + [e.model_copy(update=tag) for e in getattr(worker, key)])
        entry.smoke = worker.smoke
        entry.gpu_telemetry = worker.gpu_telemetry
        entry.engine_environments = worker.engine_environments
        manifest.smoke = _overall_smoke(manifest.shards)
        if manifest.gpu_telemetry is None:
            manifest.gpu_telemetry = entry.gpu_telemetry

    def shard_status(self, shard: str, status: str, error: str | None = None) -> None:
        def change(manifest: Manifest) -> None:
            entry = manifest.shards.setdefault(shard, ShardRecord())
            entry.status, entry.error, entry.status_wall = status, error, time.time()

        self.store.edit_manifest(change)


def _overall_smoke(shards: dict[str, ShardRecord]) -> SmokeSummary:
    """The run's smoke: passed when every shard's passed (or was off)."""
    states: dict[str, str | None] = {
        name: s.smoke.status if s.smoke else None for name, s in shards.items()
    }
    known = [v for v in states.values() if v]
    status: SmokeStatus
    if known and all(v == "off" for v in known):
        status = "off"
    elif known and all(v in ("passed", "off") for v in known):
        status = "passed"
    elif "failed" in known:
        status = "failed"
    else:
        status = "running"
    return SmokeSummary(status=status, shards=states)


class RayExecutor:
    """Batches of the schedule, each shard's part on its actor, in parallel."""

    def __init__(
        self,
        store: RunStore,
        study: Study,
        loaded_study: Study,
        cells: list[Cell],
        gpus: int,
        allow_deviation: bool = False,
    ) -> None:
        self.ray = import_ray()
        self.store, self.study, self.loaded_study = store, study, loaded_study
        self.shards = recorded_or_planned_shards(store, study, cells, gpus)
        self.allow_deviation = allow_deviation
        self.by_shard = shard_cells(self.shards, cells)
        self._actors: dict[str, Any] = {}
        self._lost: dict[str, str] = {}
        self._interrupted = False
        self._worker = self.ray.remote(ShardWorker)

    def describe(self) -> list[str]:
        return [f"{s.name}: {s.label} ({len(self.by_shard[s.name])} cells)" for s in self.shards]

    def _actor(self, shard: Shard, sink: ShardSink) -> Any:
        if shard.name not in self._actors:
            pending = [
                c.model_dump(mode="json")
                for c in self.by_shard[shard.name]
                if not self.store.is_complete(c.id)
            ]
            # num_cpus=0: the client's cores are the node's business (harness.measure.
            # placement pins it off the engine's); what a shard must hold is its GPUs.
            actor = self._worker.options(
                num_gpus=self.study.hardware.count, num_cpus=0, max_restarts=0, name=None
            ).remote(
                self.store.run_id, shard.to_dict(), self.loaded_study, pending, self.allow_deviation
            )
            sink.hello(self.ray.get(actor.hello.remote()))
            self._actors[shard.name] = actor
        return self._actors[shard.name]

    def run_batch(self, batch: Batch, progress: RunProgress) -> None:
        if self._lost:
            raise self._lost_error()
        # The driver's folder decides what is left (a resume); the workers measure it.
        pending = pending_cells(self.store, self.study, batch.cells, progress)
        sink = ShardSink(self.store, progress, {c.id: c for c in batch.cells})
        parts: dict[str, list[Cell]] = {}
        for cell in pending:
            parts.setdefault(shard_of(self.shards, cell).name, []).append(cell)
        if batch.smoke:  # every shard with work left shows its arms working first
            for shard in self.shards:
                if any(not self.store.is_complete(c.id) for c in self.by_shard[shard.name]):
                    parts.setdefault(shard.name, [])
        if not parts:
            return
        progress.note(
            f"{batch.stage}: "
            + ", ".join(f"{name} {len(cells)} cells" for name, cells in sorted(parts.items()))
        )
        threads = []
        errors: dict[str, BaseException] = {}
        for shard in self.shards:
            if shard.name not in parts:
                continue
            part = Batch(
                batch.stage,
                parts[shard.name],
                smoke=batch.smoke,
                rates=batch.rates,
                fresh_engines=frozenset(a for a in batch.fresh_engines if a in shard.arms),
                k_schedules={a: r for a, r in batch.k_schedules.items() if a in shard.arms},
            )
            thread = threading.Thread(
                target=self._drive,
                args=(shard, part, sink, errors),
                name=f"drive-{shard.name}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)  # a Ctrl-C reaches the main thread between joins
        except KeyboardInterrupt:
            self._interrupted = True  # close() kills the workers instead of waiting on them
            raise
        smoke = [e for e in errors.values() if isinstance(e, SmokeFailed)]
        if smoke:
            raise smoke[0]
        failed = {n: e for n, e in errors.items() if n not in self._lost}
        if failed:
            name, err = next(iter(failed.items()))
            raise SpecbenchError(f"{name} failed: {err}")
        if self._lost:
            raise self._lost_error()

    def _drive(
        self, shard: Shard, part: Batch, sink: ShardSink, errors: dict[str, BaseException]
    ) -> None:
        ray = self.ray
        try:
            actor = self._actor(shard, sink)
            seed: dict[str, bytes] = {}
            for cell in part.cells:
                folder = self.store.cell_folder(cell.id)
                seed.update(folder_files(folder, self.store.root))
            if seed:
                ray.get(actor.seed.remote(seed))
            stream = actor.run_batch.options(num_returns="streaming").remote(batch_to_dict(part))
            for ref in stream:
                sink.receive(ray.get(ref))
            sink.shard_status(shard.name, "idle")
        except BaseException as err:  # noqa: BLE001 -- sorted out by the main thread
            cause = _cause(err)
            if isinstance(cause, SmokeFailed):
                errors[shard.name] = cause
                sink.shard_status(shard.name, "smoke_failed", str(cause))
                return
            if self._interrupted:
                sink.shard_status(shard.name, "interrupted")
            elif _actor_lost(ray, err):
                self._lost[shard.name] = str(err).splitlines()[0] if str(err) else repr(err)
                self._actors.pop(shard.name, None)
                sink.shard_status(shard.name, "lost", self._lost[shard.name])
            else:
                sink.shard_status(shard.name, "failed", f"{type(cause).__name__}: {cause}")
            errors[shard.name] = cause

    def _lost_error(self) -> SpecbenchError:
        names = ", ".join(sorted(self._lost))
        return SpecbenchError(
            f"shard {names} lost its worker mid-run ({next(iter(self._lost.values()))});"
            " every cell it finished is in the run folder: run again with --resume (and the"
            " same --gpus or --ray) to measure what is missing"
        )

    def close(self) -> None:
        for name, actor in list(self._actors.items()):
            if not self._interrupted:  # its engines stopped in order; killed, its guards do it
                try:
                    self.ray.get(actor.close.remote(), timeout=120)
                except Exception:  # noqa: BLE001 -- a dead actor has nothing left to close
                    pass
            self.ray.kill(actor)
            self._actors.pop(name, None)
        record_gpu_model_deviation(self.store)


def record_gpu_model_deviation(store: RunStore) -> str | None:
    """Shards on more than one GPU model: a deviation in the manifest (once), which the
    verdict page names."""
    placements = {
        name: entry.where or MeasuredOn() for name, entry in store.manifest().shards.items()
    }
    deviation = gpu_model_deviation(placements)
    if deviation:
        store.record_deviation_once(deviation)
    return deviation


def _cause(err: BaseException) -> BaseException:
    """The worker's own exception inside Ray's task error."""
    return getattr(err, "cause", None) or err


def _actor_lost(ray, err: BaseException) -> bool:
    lost = tuple(
        t
        for t in (
            getattr(ray.exceptions, "RayActorError", None),
            getattr(ray.exceptions, "ActorDiedError", None),
            getattr(ray.exceptions, "ActorUnavailableError", None),
            getattr(ray.exceptions, "WorkerCrashedError", None),
            getattr(ray.exceptions, "NodeDiedError", None),
        )
        if t
    )
    return isinstance(err, lost)
