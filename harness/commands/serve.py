"""`specbench serve ARM --prereg FILE`: start one arm's engine and keep it up until Ctrl-C.

For a user checking an arm: pre-flight for that arm, start the engine exactly as a
run would, print its URL, and on Ctrl-C (or SIGTERM) stop it and check that the
port is free and no process is left. With `--print-command` it starts nothing: it
prints the arm's resolved settings and the engine's command line with the variables
the harness sets, as one line to paste, also where the engine is not installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
import time
from pathlib import Path

from harness import interrupts
from harness.engines.launch.base import expand_study_leaving_unset
from harness.engines.launch.command_line import invocation
from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import free_port
from harness.errors import InputError, SpecbenchError
from harness.paths import CACHE_DIR
from harness.prereg import load_study
from harness.prereg.schema import Study
from harness.run.session import executed_study


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start one arm's engine, print its URL, stop it on Ctrl-C")
    p.add_argument("arm", help="the arm's name in the prereg")
    p.add_argument("--prereg", required=True, help="the study's prereg YAML")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="port to serve on (default: the arm's, or a free one)",
    )
    p.add_argument("--log-dir", default=None, help="engine log folder (default: under the cache)")
    p.add_argument(
        "--print-command",
        action="store_true",
        help="print the engine's command line and environment as one shell line; start nothing",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registered = load_study(args.prereg)
    names = [a.name for a in registered.arms]
    if args.arm not in names:
        raise InputError(f"{args.prereg}: no arm named {args.arm!r} (arms: {', '.join(names)})")
    if getattr(args, "print_command", False):
        return print_command(registered, args.arm, args.port)
    # Expanded and checked exactly as `run` does it, for this arm: the model id too (vLLM
    # was handed "${SPECBENCH_TINY_PAIR}/target" before).
    study = executed_study(registered, [args.arm], say=lambda line: print(line, flush=True))
    arm = study.arm(args.arm)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = Path(args.log_dir) if args.log_dir else CACHE_DIR / "serve" / f"{arm.name}-{stamp}"
    # Ctrl-C and SIGTERM alike, kept pending until caught (harness.interrupts: one that
    # lands in an import's cleanup would otherwise be dropped, and serve would keep going).
    previous = interrupts.install((signal.SIGINT, signal.SIGTERM), KeyboardInterrupt)
    try:
        return _serve(arm, study, log_dir, args.port)
    finally:
        interrupts.restore(previous)


def print_command(registered: Study, name: str, port: int | None) -> int:
    """Print the arm's engine invocation (comments, then the line); start nothing."""
    study, unset = expand_study_leaving_unset(registered)
    arm = study.arm(name)
    if arm.attach is not None:
        print(f"# arm {name} attaches to {arm.attach.base_url}: specbench starts no engine for it")
        return 0
    assert arm.launch is not None  # Arm: exactly one of launch and attach
    chosen = port or arm.launch.port
    shown = invocation(arm, study, chosen or free_port(arm.launch.host), unset)
    print(
        f"# arm {name} ({arm.engine}): the engine `specbench run` would start; nothing was started"
    )
    for note in shown.notes:
        print(f"# {note}")
    if chosen is None:
        print("# the port was free just now; a run picks a free one when the engine starts")
    if shown.env:
        print(
            "# the harness adds the variables at the start of the line; the rest of the"
            " environment is inherited"
        )
    print(shown.line())
    return 0


def _serve(arm, study, log_dir: Path, port: int | None) -> int:
    if arm.attach is None:
        log = log_dir / f"engine-{arm.name}.log"
        print(f"starting arm {arm.name} ({arm.engine}); engine log: {log}", flush=True)
    try:
        engine = start_engine(arm, study, log_dir, port=port)
    except KeyboardInterrupt:
        interrupts.handled()
        print("interrupted while starting; the engine was stopped", file=sys.stderr)
        return 130
    info = engine.info
    if not info.launched:
        print(
            f"arm {arm.name} is attached to {engine.base_url} (model {engine.served_model});"
            " specbench neither starts nor stops it",
            flush=True,
        )
        return 0
    try:  # from here on Ctrl-C means "stop it cleanly"
        print(f"arm {arm.name} is serving at {engine.base_url}", flush=True)
        print(f"  model {engine.served_model}; metrics {engine.metrics_url}", flush=True)
        print(
            f"  {info.kind} {info.version or '(version unknown)'},"
            f" ready after {info.ready_after_s:.0f} s, pid {info.pid}",
            flush=True,
        )
        print("press Ctrl-C to stop it", flush=True)
        while engine.alive():
            time.sleep(0.5)
            interrupts.raise_pending()
    except KeyboardInterrupt:
        interrupts.handled()
        print("stopping...", flush=True)
        engine.stop()
        print("stopped: the port is free and no engine process is left", flush=True)
        return 0
    code = engine.exit_code
    tail = engine.log_tail()
    engine.stop()
    raise SpecbenchError(
        f"arm {arm.name}: the engine exited on its own (code {code})",
        f"log: {info.log_path}",
        *(f"  | {line}" for line in tail),
    )
