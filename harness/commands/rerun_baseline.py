"""`specbench rerun-baseline RUN`: rerun the baseline cells behind a fired check bar."""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.commands.report import resolve_run
from harness.commands.run_folder import add_results_option
from harness.run.leftovers import clear_leftovers
from harness.run.runner import Runner
from harness.run.session import executed_study, finish_run
from harness.run.store import RunStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rerun-baseline",
        help="rerun the baseline cells behind a fired check bar, keeping both runs",
    )
    p.add_argument("run", help="run id or folder")
    add_results_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.analysis.load import load_study_json
    from harness.finalize import verdict_exit

    root = resolve_run(args.run, args.results)
    study = executed_study(load_study_json(root))
    console = Console(highlight=False)
    store = RunStore(root)
    clear_leftovers(store, console)  # engines an earlier attempt left running
    Runner(store, study, console).rerun_baselines()
    return verdict_exit(finish_run(root, study, console))
