"""`specbench rerun-baseline RUN`: rerun the baseline cells behind a fired check bar."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from harness.errors import InputError
from harness.paths import RESULTS_DIR
from harness.prereg.schema import Study
from harness.run.leftovers import clear_leftovers
from harness.run.progress import RunProgress
from harness.run.runner import Runner, expand_environment
from harness.run.store import RunStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rerun-baseline",
                       help="rerun the baseline cells behind a fired check bar, keeping both runs")
    p.add_argument("run", help="run id or folder")
    p.add_argument("--results", type=Path, default=RESULTS_DIR)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.run) if Path(args.run).is_dir() else args.results / args.run
    if not (root / "study.json").exists():
        raise InputError(f"{args.run}: not a run folder (no study.json)")
    from harness.engines.preflight import require_preflight
    from harness.finalize import finalize_run, verdict_exit

    study = Study.model_validate(json.loads((root / "study.json").read_text())["study"])
    study = expand_environment(study)
    require_preflight(study)
    console = Console(highlight=False)
    store = RunStore(root)
    clear_leftovers(store, console)  # engines an earlier attempt left running
    runner = Runner(store, study, console)
    with RunProgress(console, 0) as progress:
        try:
            runner.rerun_baselines(progress)
        finally:
            runner.close()
    verdict = finalize_run(root, study).verdict
    console.print(f"verdict: {verdict.verdict}")
    for line in verdict.reasons:
        console.print(f"  {line}", markup=False, soft_wrap=True)
    return verdict_exit(verdict)
