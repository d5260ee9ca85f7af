"""`specbench run FILE`: run a whole study, resumably, and write its verdict and report."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console

from harness.commands.run_folder import add_run_folder_options
from harness.errors import InputError
from harness.plan import plan_cells
from harness.prereg import load_study_file
from harness.prereg.pins import gate
from harness.prereg.schema import Study
from harness.run.calibrate import record_calibration
from harness.run.environments import record_environments
from harness.run.leftovers import clear_leftovers, record_runner
from harness.run.progress import RunProgress
from harness.run.remeasure import remeasure_invalid
from harness.run.runner import Runner, find_run, new_run, reopen_run
from harness.run.schedule import run_schedule
from harness.run.session import executed_study, finish_run
from harness.run.store import RunStore
from harness.run.where import placement, split_units
from harness.rundir import CELL_FILE, CELLS, CellFile
from harness.rundir.manifest import CheckpointRecord, Deviation, Manifest
from harness.shards import engine_groups
from harness.weights.record import checkpoint_records


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a study: every cell, the bars, the verdict and the report")
    p.add_argument("file", help="the study's prereg YAML")
    add_run_folder_options(p, resume="a run (its id or folder; default: the newest run of FILE)")
    p.add_argument(
        "--allow-deviation",
        action="store_true",
        help="resume even though the study's seal changed, or run a drafter below its"
        " drafter.expect floor in the smoke; the deviation is recorded",
    )
    p.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="run a GPU study with unpinned revisions or open TO FIX BEFORE THE RUN"
        " markers; each is recorded as a deviation",
    )
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="run the study in shards on N GPUs of this host, through a local Ray"
        " instance (pip install -e '.[ray]'); every speedup's two cells in one"
        " shard (see `specbench plan FILE --gpus N`)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        default=None,
        metavar="ADDRESS",
        help="run the study in shards on a running Ray cluster (default address:"
        " auto), on its GPUs or --gpus N of them",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, deviations: list[str] | None = None) -> int:
    """`deviations`: sentences recorded in the manifest before the smoke (a rehearsal's
    differences from its registered study: harness/commands/rehearse.py)."""
    console = Console(highlight=False)
    loaded = load_study_file(args.file)
    if args.resume is not None and args.run_id:
        raise InputError("give --resume or --run-id, not both")
    if args.remeasure_invalid and args.resume is None:
        raise InputError(
            "--remeasure-invalid needs --resume [RUN]: it measures again the"
            " invalid cells of an earlier run"
        )
    sharded = args.gpus is not None or args.ray is not None
    if sharded:  # a bad invocation is refused before any folder or engine exists
        from harness.run.ray_executor import import_ray

        if args.gpus is not None and args.gpus < 1:
            raise InputError(f"--gpus {args.gpus}: expected a whole number of GPUs, at least 1")
        import_ray()
    # Pins first: a GPU study that is not pinned is refused before anything is probed.
    unpinned = gate(loaded, args.allow_unpinned)
    study = executed_study(loaded.study, say=console.print)
    if args.resume is not None:
        store = find_run(args.results, loaded, args.resume or None)
        clear_leftovers(store, console)  # an earlier attempt's runner or engines
        reopen_run(store, loaded, args.allow_deviation)
        console.print(f"resuming run {store.run_id} in {store.root}")
        if args.remeasure_invalid:
            remeasure_invalid(store, study, lambda line: console.print(line, markup=False))
    else:
        store = new_run(loaded, args.results, args.run_id)
        console.print(f"run {store.run_id} in {store.root}")
    record_pins(store, study, unpinned)
    for sentence in deviations or []:
        store.record_deviation_once(sentence)
    record_runner(store)
    for change in record_environments(store, study):  # every engine venv's packages
        console.print(f"[yellow]deviation recorded:[/yellow] {change}")
    # The roofline's bandwidth and FLOP rate measured on this machine, before the smoke;
    # a failure is recorded, never raised (harness/run/calibrate.py).
    record_calibration(store, study, lambda line: console.print(line, markup=False))
    if sharded:
        run_sharded(args, store, study, loaded.study, console)
    else:
        runner = Runner(store, study, console, allow_deviation=args.allow_deviation)
        runner.where = placement(study, store.manifest().engine_environments)
        runner.run()
    record_split_units(store, study)
    from harness.finalize import verdict_exit

    pdf = None if args.no_report else args.reports / f"{store.run_id}.pdf"
    verdict = finish_run(store.root, study, console, report=pdf)
    finish = verdict.unfinished.command if verdict.unfinished is not None else None
    print(json.dumps({"run": str(store.root), "verdict": verdict.verdict, "finish": finish}))
    return verdict_exit(verdict)


def run_sharded(
    args: argparse.Namespace, store: RunStore, study: Study, as_written: Study, console: Console
) -> None:
    """The schedule through shards on Ray (harness.run.ray_executor)."""
    from harness.run.ray_executor import RayExecutor, start_ray

    gpus = start_ray(args.ray, args.gpus)  # None: a local instance with --gpus GPUs
    cells = plan_cells(study)
    executor = RayExecutor(
        store, study, as_written, cells, gpus, allow_deviation=args.allow_deviation
    )
    console.print(f"{len(executor.shards)} shards on {gpus} GPUs:")
    for line in executor.describe():
        console.print(f"  {line}")
    total = sum((c.requests or 0) + c.warmup for c in cells)
    with RunProgress(console, total) as progress:
        run_schedule(store, study, cells, executor, progress)


def record_split_units(store: RunStore, study: Study) -> None:
    """Each engine group x task measured on more than one GPU: a deviation (once)."""
    paths = sorted((store.root / CELLS).glob(f"*/{CELL_FILE}"))
    infos = [CellFile.model_validate_json(p.read_text()) for p in paths]
    for sentence in split_units(infos, engine_groups(study)):
        store.record_deviation_once(sentence)


def record_pins(store: RunStore, study: Study, unpinned: dict[str, Any] | None) -> None:
    """The manifest's checkpoints (commit and weight sha256 of each), and the deviation
    --allow-unpinned let through (once per distinct deviation across resumes)."""
    records = [CheckpointRecord.model_validate(r) for r in checkpoint_records(study)]

    def record(m: Manifest) -> None:
        if m.checkpoints is not None and m.checkpoints != records:
            m.deviations.append(
                Deviation(
                    when=time.time(),
                    what="resumed with different checkpoints",
                    old_checkpoints=m.checkpoints,
                    new_checkpoints=records,
                )
            )
        m.checkpoints = records
        if unpinned is None:
            return
        deviation = Deviation(when=time.time(), **unpinned)
        if not any(
            d.model_copy(update={"when": deviation.when}) == deviation for d in m.deviations
        ):
            m.deviations.append(deviation)

    store.edit_manifest(record)
