"""One arm's engine in a run: started on first use, restarted if it died, its starts
recorded in the manifest (pid and port the moment it is spawned, then what it was
started for, its client placement, its GPUs and, in repeated sessions, its session).
The runner (harness.run.runner) decides when one is kept and when a fresh one starts.
"""

from __future__ import annotations

from typing import Any

from harness.engines.running.engine_process import EngineProcess
from harness.engines.running.lifecycle import start_engine
from harness.measure.placement import local_listener_pid, place_client
from harness.measure.priority import match_engine_priority
from harness.prereg.schema import Arm, Study
from harness.run.gpu_telemetry import ArmGpus, RunTelemetry
from harness.run.progress import RunProgress
from harness.run.store import RunStore
from harness.rundir.engines import EngineInfo, EngineStart
from harness.rundir.manifest import Manifest


class ArmEngine:
    """One arm's engine: started on first use, restarted if it died, kept while the
    next cells are the same arm's (across stages too)."""

    def __init__(
        self,
        store: RunStore,
        arm: Arm,
        study: Study,
        progress: RunProgress,
        telemetry: RunTelemetry | None = None,
    ) -> None:
        self.store, self.arm, self.study, self.progress = store, arm, study, progress
        self.telemetry = telemetry
        self.process: EngineProcess | None = None
        self.gpus: ArmGpus | None = None  # what each cell's GPU sampler reads
        self._slot: int | None = None  # this start's entry in manifest["engines"][arm]
        self.stage: str | None = None  # the stage that last used it
        # The repeated session (plan stage, session) this engine was started for; None
        # outside sessions. Each session is a fresh start.
        self.session: tuple[int, int] | None = None
        # Started ahead of the smoke (Runner._start_together): the smoke counts it as its
        # own start, not a reused engine.
        self.prestarted = False

    def running(self) -> bool:
        return self.process is not None and self.process.alive()

    def ensure(self, started_for: str = "") -> EngineProcess:
        """The running engine, started (or restarted) if need be; `started_for` (the
        smoke or a cell id) is recorded with a start."""
        if self.process is not None and self.process.alive():
            return self.process
        if self.process is not None:
            self.progress.note(f"engine of {self.arm.name} is down; restarting")
            self.close()
        log_dir = self.store.engine_dir(self.arm.name)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.progress.note(f"starting {self.arm.engine} engine for arm {self.arm.name}")
        self._slot = None
        try:
            self.process = start_engine(
                self.arm,
                self.study,
                log_dir,
                on_spawn=self._record_spawn,
                session=self.session[1] if self.session else None,
            )
        except BaseException:
            self._record({"state": "failed to start"})
            raise
        data: dict[str, Any] = self.process.info.model_dump(mode="json")
        data["state"] = "ready"
        data["started_for"] = started_for or None
        if self.session is not None:
            data["session"] = {"stage": self.session[0], "session": self.session[1]}
        # Off the engine's pinned cores where there are others (recorded with the start);
        # an attached engine on this host is found by its port.
        pid = self.process.pid or local_listener_pid(self.process.info.base_url or "")
        if pid and self.study.recording.client_priority == "match_engine":
            lift = match_engine_priority(pid)
            data["client_priority"] = lift.to_dict()
            for refused in lift.refused:
                self.progress.note(
                    f"warning: arm {self.arm.name}: the client could not"
                    f" match the engine's priority: {refused}"
                )
        placement = place_client(pid)
        data["client_placement"] = placement.to_dict()
        if placement.engine_outranks_client:
            self.progress.note(f"warning: arm {self.arm.name}: {placement.engine_outranks_client}")
        if self.telemetry is not None:
            self.gpus, data["gpu_telemetry"] = self.telemetry.for_arm(self.arm, self.progress.note)
        self._record(data)
        return self.process

    def _record_spawn(self, info: EngineInfo) -> None:
        """The engine's pid, group and port go in the manifest the moment it exists, so a
        harness killed while it loads leaves a record the next attempt finds it by."""

        def add(manifest: Manifest) -> None:
            records = manifest.engines.setdefault(self.arm.name, [])
            records.append(EngineStart(**info.model_dump(), state="starting"))
            self._slot = len(records) - 1

        self.store.edit_manifest(add)

    def _record(self, changes: dict[str, Any]) -> None:
        def change(manifest: Manifest) -> None:
            records = manifest.engines.setdefault(self.arm.name, [])
            if self._slot is None or self._slot >= len(records):
                if "started_wall" in changes:  # else it failed before the process existed
                    records.append(EngineStart.model_validate(changes))
            else:
                records[self._slot] = EngineStart.model_validate(
                    {**records[self._slot].model_dump(), **changes}
                )

        self.store.edit_manifest(change)

    def close(self) -> None:
        if self.process is not None:
            try:
                self.process.stop()
            finally:
                self.process = None
