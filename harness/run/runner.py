"""The run folder's life (new, found, reopened) and the local executor: the batches of
the schedule (harness.run.schedule: the smoke and stage 1, the stop bar, stage 2, the
check bar's reruns, the open loop) measured on this machine; the caller then finishes
the run (harness.finalize: tables, verdict, report). A shard worker on a Ray node
(harness.run.shard_worker) runs this same executor over its shard's cells.

One engine is up at a time, and it is kept across a stage boundary: the smoke ends on
the arm of the first cell to run, each stage begins with the arm whose engine is
running when that arm has cells there, so an arm's cells on both sides of a boundary
share one engine start (minutes on a GPU).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.atomic import write_json
from harness.errors import InputError, SpecbenchError
from harness.plan import block_session, engine_blocks, plan_cells
from harness.plan_arms import schedule_arms
from harness.prereg import LoadedStudy, resolved_study, seal_of
from harness.prereg.schema import SCHEDULE_PREFIX, Arm, Study
from harness.run.arm_engine import ArmEngine
from harness.run.attempts import measure_cell, pending_cells
from harness.run.gpu_telemetry import RunTelemetry
from harness.run.progress import RunProgress
from harness.run.schedule import Batch, rerun_batch, rerun_cells, run_schedule
from harness.run.smoke import SmokeStage
from harness.run.store import RunStore, host_facts, specbench_commit
from harness.rundir import STUDY_FILE, MeasuredOn
from harness.rundir.cell import Cell
from harness.rundir.manifest import ControlArmRecord, Deviation, Manifest
from harness.rundir.schedule import SessionRecord, SmokeSummary


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: obj}


def study_differences(old: dict, new: dict) -> list[str]:
    a, b = _flatten(old), _flatten(new)
    return [
        f"{key}: {a.get(key, '(absent)')!r} -> {b.get(key, '(absent)')!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def new_run(loaded: LoadedStudy, results_dir: Path, run_id: str | None = None) -> RunStore:
    run_id = run_id or f"{loaded.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    root = results_dir / run_id
    if root.exists():
        raise InputError(f"{root}: a run folder of that name exists (use --resume {run_id})")
    (root / "prereg").mkdir(parents=True)
    shutil.copy2(loaded.path, root / "prereg" / loaded.path.name)
    for arm_path in loaded.arm_files.values():
        shutil.copy2(arm_path, root / "prereg" / arm_path.name)
    resolved = resolved_study(loaded.study)
    write_json(root / STUDY_FILE, resolved)
    store = RunStore(root)
    store.create_manifest(
        Manifest(
            run_id=run_id,
            seal=seal_of(loaded.study),
            study_file=str(loaded.path.resolve()),
            specbench_commit=specbench_commit(),
            host=host_facts(),
            started_wall=time.time(),
            # Arms measured for the cost of a round at a set acceptance, never judged.
            control_arms=[ControlArmRecord(**c) for c in loaded.study.control_arms()],
            speed_bench_placeholders=dropped_placeholders(loaded.study),
            status="running",
        )
    )
    record_item_categories(root, loaded.study)
    return store


def dropped_placeholders(study: Study) -> dict[str, dict[str, tuple[int, int]]]:
    """Each SPEED-Bench task's placeholder rows it drops and its rows, by category (none:
    not listed; a dataset not in the cache is left to pre-flight)."""
    from harness.workloads.speed_bench import task_placeholders

    out = {}
    for task in study.tasks:
        if task.placeholders == "drop" and task.source is not None:
            try:
                counts = task_placeholders(task.source)
            except (SpecbenchError, ValueError, OSError):
                continue
            if any(held for held, _ in counts.values()):
                out[task.name] = counts
    return out


def record_item_categories(root: Path, study: Study) -> None:
    """Each SPEED-Bench task's {item id: category}, kept with the run: its analysis then
    needs no hub cache (harness.analysis.categories). A dataset not in the cache is
    left to pre-flight, which refuses it in one line."""
    from harness.analysis.categories import items_path, loaded_categories
    from harness.workloads.kinds import CACHED_KINDS

    for task in study.tasks:
        if task.kind not in CACHED_KINDS:
            continue
        try:
            categories = loaded_categories(task)
        except SpecbenchError:
            continue
        items_path(root, task.name).parent.mkdir(exist_ok=True)
        write_json(items_path(root, task.name), categories)


def find_run(results_dir: Path, loaded: LoadedStudy, which: str | None) -> RunStore:
    """`--resume RUN` (an id or a folder), or the newest run of the same study file."""
    if which:
        path = Path(which)
        root = path if path.is_dir() else results_dir / which
        if not (root / "manifest.json").exists():
            raise InputError(f"--resume {which}: no run folder with a manifest.json there")
        return RunStore(root)
    study_file = str(loaded.path.resolve())
    candidates = []
    for manifest in results_dir.glob("*/manifest.json"):
        store = RunStore(manifest.parent)
        try:
            if store.manifest().study_file == study_file:
                candidates.append(store)
        except InputError:
            continue
    if not candidates:
        raise InputError(f"--resume: no earlier run of {loaded.path} under {results_dir}")
    return max(candidates, key=lambda s: s.manifest().started_wall or 0)


def reopen_run(store: RunStore, loaded: LoadedStudy, allow_deviation: bool) -> None:
    """Refuse to mix two different studies in one run folder unless told to, and
    then say exactly what changed, in the manifest and so in the report."""
    manifest = store.manifest()
    old_seal, new_seal = manifest.seal, seal_of(loaded.study)
    if old_seal != new_seal:
        old = json.loads((store.root / STUDY_FILE).read_text(encoding="utf-8"))
        diffs = study_differences(old, resolved_study(loaded.study))
        if not allow_deviation:
            raise InputError(
                f"{loaded.path}: its seal {new_seal[:12]} differs from run {store.run_id}'s"
                f" {(old_seal or 'none')[:12]} ({len(diffs)} changes, first: {diffs[0] if diffs else '?'});"
                " resume with --allow-deviation to record the deviation and continue"
            )
        original = store.root / "study.original.json"
        if not original.exists():
            shutil.copy2(store.root / STUDY_FILE, original)
        write_json(store.root / STUDY_FILE, resolved_study(loaded.study))
        deviation = Deviation(
            when=time.time(),
            what="resumed under a different seal",
            old_seal=old_seal,
            new_seal=new_seal,
            changes=diffs,
        )

        def record(m: Manifest) -> None:
            m.deviations.append(deviation)
            m.seal = new_seal

        store.edit_manifest(record)

    def running(m: Manifest) -> None:
        m.status, m.ended_wall = "running", None

    store.edit_manifest(running)


class Runner:
    def __init__(
        self,
        store: RunStore,
        study: Study,
        console: Console,
        allow_deviation: bool = False,
        cells: list[Cell] | None = None,
    ) -> None:
        self.store = store
        self.allow_deviation = allow_deviation  # a smoke check below a registered floor
        self.study = study  # environment-expanded, for execution
        self.console = console
        self.cells = plan_cells(study) if cells is None else cells  # a shard's, or all
        # The engines up, least recently used first; at most recording.engines_alive.
        self._engines: OrderedDict[str, ArmEngine] = OrderedDict()
        self.telemetry = RunTelemetry(store)
        self._smoked = False  # the smoke runs once per runner, with its first batch
        # Told each cell id the moment its measurement ends (a shard worker ships it).
        self.on_cell_done: Callable[[str], None] | None = None
        # Where its cells are measured (harness.run.where), written into each cell.json.
        self.where: MeasuredOn | None = None
        # The schedule arms' k schedules, as stage 5's batch brings them.
        self.k_schedules: dict[str, list[tuple[int, int | None, int]]] = {}

    # --- cells -----------------------------------------------------------------

    def _run_one(
        self,
        engine: ArmEngine,
        cell: Cell,
        progress: RunProgress,
        rate_rps: float | None = None,
        extra: dict | None = None,
    ) -> bool:
        try:
            return measure_cell(self.store, self.study, engine, cell, progress, rate_rps, extra)
        finally:
            if self.store.cell_info(cell.id):
                if self.where is not None:
                    self.store.set_cell_facts(cell.id, where=self.where)
                if self.on_cell_done is not None:
                    self.on_cell_done(cell.id)

    def _run_cells(
        self,
        cells: Iterable[Cell],
        progress: RunProgress,
        rates: dict[str, float] | None = None,
        stage: str = "",
    ) -> None:
        cells = list(cells)
        if any(c.session is not None for c in cells):
            self._run_sessions(cells, progress, stage)
            return
        by_arm: dict[str, list[Cell]] = {}
        for cell in cells:
            by_arm.setdefault(cell.arm, []).append(cell)
        order = list(by_arm)
        for up in self._engines:  # least recently used first, so the latest ends up first
            if up in by_arm:
                # Its engine is up: its cells first, so the boundary costs no restart.
                order.remove(up)
                order.insert(0, up)
        for arm_name in order:
            pending = self._pending(by_arm[arm_name], progress)
            if not pending:
                continue
            engine = self._engine_for(arm_name, progress, stage)
            for cell in pending:
                rate = extra = None
                if cell.kind == "open":
                    assert rates is not None and cell.rate_relative is not None
                    rate = cell.rate_relative * rates[arm_name]
                    extra = {"open_loop": {"reference_rps": rates[arm_name], "rate_rps": rate}}
                self._run_one(engine, cell, progress, rate, extra)

    def _pending(self, cells: list[Cell], progress: RunProgress) -> list[Cell]:
        return pending_cells(self.store, self.study, cells, progress)

    def _run_sessions(self, cells: list[Cell], progress: RunProgress, stage: str) -> None:
        """Repeated sessions in plan order, never reordered: the interleaving (baseline,
        drafter, drafter, baseline, ...) is the design. Each block of one arm's cells of
        one session gets its own engine start; a block already measured (resume) starts
        nothing."""
        for block in engine_blocks(cells):
            pending = self._pending(block, progress)
            if not pending:
                continue
            arm_name = block[0].arm
            session = block_session(block)
            engine = self._engine_for(arm_name, progress, stage, session)
            if session is not None:
                record = SessionRecord(
                    stage=session[0],
                    session=session[1],
                    arm=arm_name,
                    cells=[c.id for c in pending],
                    started_wall=time.time(),
                )

                def add_session(m: Manifest, r: SessionRecord = record) -> None:
                    m.sessions.append(r)

                self.store.edit_manifest(add_session)
            for cell in pending:
                self._run_one(engine, cell, progress)

    def _engine_for(
        self,
        arm_name: str,
        progress: RunProgress,
        stage: str = "",
        session: tuple[int, int] | None = None,
    ) -> ArmEngine:
        """The arm's engine, reused when it is up, except across repeated sessions: each
        session is a fresh start. At most `recording.engines_alive` stay up (1 unless
        registered: one GPU holds one engine); the least recently used goes first."""
        engine = self._engines.get(arm_name)
        if engine is not None and (session is None or engine.session == session):
            self._engines.move_to_end(arm_name)
            if stage and engine.stage and engine.stage != stage and engine.running():
                progress.note(
                    f"keeping the engine of arm {arm_name} from {engine.stage}"
                    f" for {stage} (no restart)"
                )
            engine.stage = stage or engine.stage
            return engine
        if engine is not None and session is not None:  # else it was returned above
            progress.note(f"session {session[1]} of arm {arm_name}: a fresh engine start")
            self.close_engine(arm_name)
        while self._engines and len(self._engines) >= self.study.recording.engines_alive:
            self.close_engine(next(iter(self._engines)))
        engine = ArmEngine(self.store, self._arm(arm_name), self.study, progress, self.telemetry)
        engine.stage = stage or None
        engine.session = session
        self._engines[arm_name] = engine
        return engine

    def _arm(self, arm_name: str) -> Arm:
        """The arm an engine starts for: a schedule arm with the schedule its batch set."""
        if not arm_name.startswith(SCHEDULE_PREFIX):
            return self.study.arm(arm_name)
        if arm_name not in self.k_schedules:
            raise SpecbenchError(
                f"arm {arm_name}: its k schedule is not set (the schedule"
                " verification runs only after the surface proposes one)"
            )
        return next(a for a in schedule_arms(self.study, self.k_schedules) if a.name == arm_name)

    def close_engine(self, arm_name: str | None = None) -> None:
        """Stop one arm's engine, or (None) every engine that is up."""
        for name in [arm_name] if arm_name is not None else list(self._engines):
            engine = self._engines.pop(name, None)
            if engine is not None:
                engine.close()

    def close(self) -> None:
        """The engine, then NVML."""
        try:
            self.close_engine()
        finally:
            self.telemetry.close()

    # --- batches (harness.run.schedule decides them) ----------------------------------

    def run_batch(self, batch: Batch, progress: RunProgress) -> None:
        """Measure one batch of the schedule on this machine."""
        if batch.smoke and not self._smoked:
            self._smoked = True
            self._smoke(progress)
        for arm in batch.fresh_engines:
            self.close_engine(arm)
        self.k_schedules.update(batch.k_schedules)
        self._run_cells(batch.cells, progress, batch.rates, stage=batch.stage)

    def run(self) -> None:
        """Every stage's cells; the caller finishes the run (harness.finalize)."""
        total = sum((c.requests or 0) + c.warmup for c in self.cells)
        with RunProgress(self.console, total) as progress:
            run_schedule(self.store, self.study, self.cells, self, progress)

    def _smoke(self, progress: RunProgress) -> None:
        """Every arm shown working before the first registered cell (harness.run.smoke);
        the engine of the first cell's arm is left up for it."""
        if not self.study.recording.smoke:
            progress.note("smoke stage off (the study registers recording.smoke: false)")
            self.store.edit_manifest(lambda m: setattr(m, "smoke", SmokeSummary(status="off")))
            return
        skipped = set(self.store.manifest().skipped_reasons())
        pending = [
            c for c in self.cells if not self.store.is_complete(c.id) and c.id not in skipped
        ]
        if not pending:
            return  # every cell is measured: nothing left for a smoke to protect
        first = pending[0].arm
        # The engine left up for the first cell starts as that cell's session, if it has one.
        session = block_session(engine_blocks(pending)[0])
        self._start_together(pending, progress)
        SmokeStage(
            self.store,
            self.study,
            progress,
            lambda arm: self._engine_for(
                arm, progress, "the smoke stage", session if arm == first else None
            ),
            allow_deviation=self.allow_deviation,
        ).run(first)

    def _start_together(self, pending: list[Cell], progress: RunProgress) -> None:
        """Where every arm with cells to measure may stay up (recording.engines_alive,
        CPU engines only) and no repeated sessions need fresh starts, start their engines
        at once, before the smoke: nothing is measured while engines start, and on the
        demo's 2 cores three vLLM starts take ~110 s together against ~150 s one after
        another. A start that fails here is left to the smoke, which tries it again and
        reports it as that arm's failed check."""
        arms = list(dict.fromkeys(c.arm for c in pending))
        if (
            len(arms) < 2
            or len(arms) > self.study.recording.engines_alive
            or any(block_session(b) is not None for b in engine_blocks(pending))
            or any(self.study.arm(a).attach is not None for a in arms)
        ):
            return
        engines = [self._engine_for(a, progress, "the smoke stage") for a in arms]
        progress.note(f"starting the engines of {', '.join(arms)} together")

        def start(engine: ArmEngine) -> None:
            # Said, not swallowed: a start that failed here was otherwise invisible (one
            # of three demo engines, twice in three runs, started only in the smoke; the
            # cause is not yet known). It is tried once more at once, then left to the
            # smoke, which tries again and reports a failure as the arm's failed check.
            for attempt in (1, 2):
                try:
                    engine.ensure("smoke")
                    engine.prestarted = True
                    return
                except Exception as err:  # noqa: BLE001 - the smoke's to judge
                    then = "trying once more" if attempt == 1 else "the smoke starts it again"
                    progress.note(
                        f"engine of {engine.arm.name} did not start with the others"
                        f" ({type(err).__name__}: {err}); {then}"
                    )

        threads = [threading.Thread(target=start, args=(e,), daemon=True) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def rerun_cells(self, targets: list[str]) -> list[Cell]:
        return rerun_cells(self.cells, targets)

    def rerun_baselines(self) -> None:
        """The check bar's reruns alone (`specbench rerun-baseline`); then its engines stop."""
        with RunProgress(self.console, 0) as progress:
            try:
                batch = rerun_batch(self.store, self.study, self.cells, progress)
                if batch is not None:
                    self.run_batch(batch, progress)
            finally:
                self.close()
