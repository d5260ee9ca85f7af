"""`specbench rehearse FILE [--small] [--pair DIR] [--write STUDY] [--no-run]`: the
registered study's vLLM arms, with their registered settings, on vLLM's CPU build and the
demo's tiny target and drafters (harness/rehearsal/); every difference from the GPU day
is printed, written into the generated study as comments and recorded in the run as a
deviation, so the report's verdict page lists it. Then `specbench run` on it: the same
smoke, cells, bars, verdict and report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.atomic import write_text
from harness.commands import run as run_command
from harness.commands.run_folder import add_run_folder_options
from harness.engines.tiny.tiny_pair import EAGLE3_DIR, build_tiny_pair
from harness.errors import InputError
from harness.paths import CACHE_DIR
from harness.prereg import load_study_file
from harness.rehearsal import FULL, SMALL, rehearsal_study, study_yaml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rehearse",
        help="run a registered study's vLLM arms on vLLM's CPU build"
        " and the tiny pair, listing what differs from the GPU day",
    )
    p.add_argument("file", help="the registered study's prereg YAML (e.g. prereg.yaml)")
    p.add_argument(
        "--small",
        action="store_true",
        help="one session, a few prompts of 16 tokens, a short open loop (minutes);"
        " default: every level and session, 32 tokens, laptop-sized cells",
    )
    p.add_argument(
        "--pair",
        type=Path,
        default=None,
        help="the tiny pair's folder (default: $SPECBENCH_TINY_PAIR, else the cache's"
        " tiny-pair-seed0; built there if missing)",
    )
    p.add_argument(
        "--write",
        type=Path,
        default=None,
        metavar="STUDY",
        help="where the generated study goes (default: RESULTS/<name>-rehearsal[-small].yaml)",
    )
    p.add_argument(
        "--no-run",
        action="store_true",
        help="write the study and print the differences; run nothing",
    )
    add_run_folder_options(
        p,
        resume="a rehearsal's run (its id or folder; default: the newest run of the"
        " generated study)",
    )
    p.set_defaults(func=run)


def tiny_pair(folder: Path | None) -> Path:
    """The pair's folder, built (seed 0) when it or its head is missing."""
    pair = folder or Path(
        os.environ.get("SPECBENCH_TINY_PAIR") or CACHE_DIR / "models" / "tiny-pair-seed0"
    )
    if not all((pair / part / "config.json").exists() for part in ("target", "draft", EAGLE3_DIR)):
        try:
            build_tiny_pair(pair, seed=0)
        except OSError as err:
            raise InputError(f"{pair}: cannot build the tiny pair: {err}") from None
        print(f"built the tiny pair in {pair}")
    return pair.resolve()


def run(args: argparse.Namespace) -> int:
    loaded = load_study_file(args.file)
    pair = tiny_pair(args.pair)
    try:
        study, diffs = rehearsal_study(loaded.study, pair, SMALL if args.small else FULL)
    except ValueError as err:
        raise InputError(f"{args.file}: {err}") from None
    stem = Path(args.file).stem + ("-rehearsal-small" if args.small else "-rehearsal")
    out = args.write or args.results / f"{stem}.yaml"
    write_text(out, study_yaml(study, diffs, Path(args.file)))
    print(
        f"rehearsal study: {out} ({len(study.arms)} arms: {', '.join(a.name for a in study.arms)})"
    )
    print("what differs from the GPU day:")
    for d in diffs:
        print(f"  - {d.sentence().removeprefix('rehearsal on the CPU build: ')}")
    if args.no_run:
        return 0
    run_args = argparse.Namespace(
        file=str(out),
        resume=args.resume,
        remeasure_invalid=args.remeasure_invalid,
        run_id=args.run_id,
        results=args.results,
        reports=args.reports,
        no_report=args.no_report,
        allow_deviation=False,
        allow_unpinned=False,
        gpus=None,
        ray=None,
    )
    return run_command.run(run_args, deviations=[d.sentence() for d in diffs])
