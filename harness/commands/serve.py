"""`specbench serve ARM --prereg FILE`: start one arm's engine and keep it up until Ctrl-C.

For a user checking an arm: pre-flight for that arm, start the engine exactly as a
run would, print its URL, and on Ctrl-C (or SIGTERM) stop it and check that the
port is free and no process is left.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
import time
from pathlib import Path

from harness.engines.base import expand_study
from harness.engines.lifecycle import start_engine
from harness.engines.preflight import require_preflight, settings_lines
from harness.errors import InputError, SpecbenchError
from harness.paths import CACHE_DIR
from harness.prereg import load_study


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start one arm's engine, print its URL, stop it on Ctrl-C")
    p.add_argument("arm", help="the arm's name in the prereg")
    p.add_argument("--prereg", required=True, help="the study's prereg YAML")
    p.add_argument(
        "--port", type=int, default=None, help="port to serve on (default: the arm's, or a free one)"
    )
    p.add_argument("--log-dir", default=None, help="engine log folder (default: under the cache)")
    p.set_defaults(func=run)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    # Expanded exactly as `run` expands it: the model id too (vLLM was handed
    # "${SPECBENCH_TINY_PAIR}/target" before).
    study = expand_study(load_study(args.prereg))
    names = [a.name for a in study.arms]
    if args.arm not in names:
        raise InputError(f"{args.prereg}: no arm named {args.arm!r} (arms: {', '.join(names)})")
    arm = study.arm(args.arm)
    require_preflight(study, [arm.name])
    for line in settings_lines(study, [arm.name]):
        print(line, flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = Path(args.log_dir) if args.log_dir else CACHE_DIR / "serve" / f"{arm.name}-{stamp}"
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return _serve(arm, study, log_dir, args.port)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(arm, study, log_dir: Path, port: int | None) -> int:
    if arm.attach is None:
        log = log_dir / f"engine-{arm.name}.log"
        print(f"starting arm {arm.name} ({arm.engine}); engine log: {log}", flush=True)
    try:
        engine = start_engine(arm, study, log_dir, port=port)
    except KeyboardInterrupt:
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
    except KeyboardInterrupt:
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
