"""Attempts at one cell: measure it until it is usable or `recording.cell_retries` is spent.

A dead engine is restarted and the cell tried again. A cell that measured nothing a
bar can use (harness.derived.usable: aborted for errors, client lag, nothing that
succeeded, no request with a per-user speed, a timed cell during which other processes
took more of the host's CPU than `recording.host_foreign_cpu_limit`, and under
`recording.gpu_throttle: remeasure` a GPU that throttled during a timed cell) is
measured again while fewer than cell_retries + 1 attempts have measured it. Earlier
runs of the same folder count, so `--resume` remeasures a complete but unusable cell
only while attempts remain, and repeating a run can never fish for a good
measurement. `--remeasure-invalid` (harness.run.remeasure) gives a cell left invalid by a
cause that passes (a busy host, a client that fell behind) a fresh budget: that waits for
a quiet moment, never for a figure, since a valid cell is never measured again. Every
attempt stays in cell.json and requests.jsonl; complete.json names the latest attempt
that measured to its end, and a cell that stayed unusable keeps its reason for analysis
to report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness import interrupts
from harness.derived.throttle import gpu_throttle
from harness.derived.usable import Unusable, unusable
from harness.prereg.schema import Study
from harness.records import GpuSample, RequestRecord
from harness.run.execute import EngineDied, execute_cell
from harness.run.progress import RunProgress
from harness.run.store import RunStore
from harness.rundir import Outcome
from harness.rundir.cell import Cell
from harness.rundir.schedule import FailedCell

if TYPE_CHECKING:
    from harness.run.arm_engine import ArmEngine


def attempt_unusable(
    study: Study,
    cell: Cell,
    outcome: Outcome,
    requests: list[RequestRecord],
    gpu_samples: list[GpuSample] | None = None,
) -> Unusable | None:
    """Why one attempt measured nothing a bar can use (None: usable)."""
    return unusable(
        kind=cell.kind,
        requests=requests,
        aborted=outcome.aborted,
        abort_reason=outcome.reason,
        health=outcome.health,
        gpu_throttle=gpu_throttle(gpu_samples or []),
        gpu_throttle_policy=study.recording.gpu_throttle,
    )


def outcome_detail(outcome: Outcome) -> str:
    """ "31 ok, 1 error (http)": requests cancelled by an abort are named as such."""
    errors = outcome.errors_by_kind
    detail = f"{outcome.n_ok} ok, {outcome.n_errors} errors"
    if errors:
        detail += " (" + ", ".join(f"{n} {kind}" for kind, n in sorted(errors.items())) + ")"
    return detail


def attempt_budget(study: Study) -> int:
    return study.recording.cell_retries + 1


def needs_measuring(
    store: RunStore, study: Study, cell: Cell, progress: RunProgress | None
) -> bool:
    """Not complete, or complete but unusable with attempts left (an interrupted
    remeasure, or a folder written before such cells were measured again); said on
    `progress` unless it is None."""
    note = progress.note if progress is not None else (lambda _: None)
    done = store.completion(cell.id)
    if done is None:
        return True
    attempt = done.attempt
    judged = attempt_unusable(
        study,
        cell,
        done.outcome,
        store.attempt_requests(cell.id, attempt),
        store.attempt_gpu_samples(cell.id, attempt),
    )
    if judged is None:
        return False
    reason = judged.reason
    store.judge_attempt(cell.id, attempt, reason)
    measured, budget = store.measured_attempts(cell.id), attempt_budget(study)
    if measured >= budget:
        again = (
            "; `--remeasure-invalid` measures it again with a fresh budget" if judged.passes else ""
        )
        note(
            f"{cell.id} stays invalid: {reason} (all {budget} measurements"
            f" that cell_retries allows are spent{again})"
        )
        return False
    note(
        f"remeasuring {cell.id}: attempt {attempt} is unusable: {reason}"
        f" ({measured} of at most {budget} measurements used)"
    )
    return True


def pending_cells(
    store: RunStore, study: Study, cells: list[Cell], progress: RunProgress
) -> list[Cell]:
    """The cells still to measure (needs_measuring); the others count as done on the
    progress bar."""
    pending = [c for c in cells if needs_measuring(store, study, c, progress)]
    for cell in cells:
        if cell not in pending:
            progress.skip(cell)
    return pending


def measure_cell(
    store: RunStore,
    study: Study,
    engine: ArmEngine,
    cell: Cell,
    progress: RunProgress,
    rate_rps: float | None = None,
    extra: dict | None = None,
) -> bool:
    """Attempt the cell until it is usable or its attempts are spent; True if usable."""
    budget = attempt_budget(study)
    records: list[RequestRecord] = []  # this attempt's, for the usability check
    gpu_samples: list[GpuSample] = []

    def on_record(rec: RequestRecord) -> None:
        records.append(rec)
        progress.on_record(rec)

    for _ in range(budget):  # within one invocation engine deaths count as well
        interrupts.raise_pending()  # a stop signal swallowed during the last attempt
        measured = store.measured_attempts(cell.id)
        if measured >= budget:
            break
        records.clear()
        gpu_samples.clear()
        attempt = store.start_attempt(cell, **(extra or {}))
        try:
            process = engine.ensure(cell.id)
            progress.start_cell(cell, attempt)  # after the engine: times are the cell's
            outcome = execute_cell(
                store=store,
                engine=process,
                arm=engine.arm,
                study=study,
                cell=cell,
                attempt=attempt,
                rate_rps=rate_rps,
                on_record=on_record,
                on_sample=progress.on_sample,
                gpus=engine.gpus,
                on_gpu_sample=gpu_samples.append,
            )
        except EngineDied as err:
            store.end_attempt(cell.id, attempt, "failed", str(err))
            progress.end_cell(cell, "RETRY", str(err))
            continue
        except KeyboardInterrupt:
            store.end_attempt(cell.id, attempt, "interrupted")
            progress.end_cell(cell, "STOPPED", "interrupted")
            raise
        except BaseException as err:
            store.end_attempt(cell.id, attempt, "failed", f"{type(err).__name__}: {err}")
            progress.end_cell(cell, "FAILED", str(err))
            raise
        judged = attempt_unusable(study, cell, outcome, records, gpu_samples)
        reason = judged.reason if judged else None
        # Written even when unusable: a crash now leaves a complete but unusable cell,
        # which a resume remeasures while attempts remain.
        store.mark_complete(cell.id, attempt, outcome, unusable=reason)
        detail = outcome_detail(outcome)
        if reason is None:
            progress.end_cell(cell, "done", detail)
            return True
        if measured + 1 < budget:
            progress.end_cell(
                cell,
                "REMEASURE",
                f"{detail}; unusable: {reason}"
                f" ({measured + 1} of at most {budget} measurements used)",
            )
            continue
        progress.end_cell(
            cell,
            "INVALID",
            f"{detail}; unusable: {reason}; all {budget} measurements spent, so no bar uses it",
        )
        return False
    if not store.is_complete(cell.id):
        failed = FailedCell(cell=cell.id, reason=f"failed {budget} attempts")
        store.edit_manifest(lambda m: m.failed_cells.append(failed))
    return False
