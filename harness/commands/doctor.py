"""`specbench doctor FILE`: is this host ready to run the study? One line per check."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.doctor import run_doctor
from harness.errors import SpecbenchError
from harness.paths import RESULTS_DIR
from harness.prereg import load_study_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this host before a run: GPU, driver, memory, engine"
        " environments, weights, disk, ports, stale engines",
    )
    p.add_argument("file", help="the study's prereg YAML")
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="the run folders whose engines may still be running",
    )
    p.add_argument(
        "--stop-stale",
        action="store_true",
        help="stop the engines earlier runs left running, instead of only naming them",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    loaded = load_study_file(args.file)
    study = loaded.study
    print(
        f"specbench doctor: {args.file} ({study.hardware.count} x {study.hardware.gpu},"
        f" model {study.model.id})",
        flush=True,
    )
    checks = run_doctor(
        study, args.results, stop_stale=args.stop_stale, doctor_cmd=f"specbench doctor {args.file}"
    )
    for check in checks:
        print(check.line(), flush=True)
    blockers = [c for c in checks if c.blocker]
    if blockers:
        raise SpecbenchError(
            f"{len(blockers)} blocker(s): "
            + ", ".join(dict.fromkeys(c.name for c in blockers))
            + "; fix them before `specbench run`"
        )
    warnings = sum(c.status == "warn" for c in checks)
    print(f"no blocker ({warnings} warning(s)): ready to run")
    return 0
