"""`specbench engines install|check|list|path|warm`: the engine environments engines.lock.toml
pins, and SGLang's DeepGEMM kernels compiled before the first engine start."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from harness.engines.install.deepgemm import DEFAULT_TIMEOUT_S
from harness.engines.install.install import install_engine
from harness.engines.install.pin_check import check_pins
from harness.engines.install.pins import EnginePin, interpreter_for, load_pins, pin
from harness.errors import SpecbenchError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "engines", help="install and check the engine environments engines.lock.toml pins"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    inst = verbs.add_parser("install", help="create each engine's own venv at its pinned version")
    inst.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="engines to install (default: every GPU engine: vllm, sglang)",
    )
    inst.add_argument(
        "--python",
        help="the interpreter that makes the venv (default: python3.X"
        " for the pin's 3.X; uv fetches it itself)",
    )
    inst.add_argument("--no-uv", action="store_true", help="use pip even where uv is installed")
    inst.add_argument("--force", action="store_true", help="reinstall over a finished venv")
    inst.add_argument("--quiet", action="store_true", help="only specbench's own lines")
    inst.set_defaults(func=run_install)

    chk = verbs.add_parser(
        "check",
        help="ask the package index whether every pin has a wheel"
        " for its platform and Python (metadata only)",
    )
    chk.add_argument("names", nargs="*", metavar="NAME")
    chk.set_defaults(func=run_check)

    lst = verbs.add_parser("list", help="each pin, its interpreter and whether it is installed")
    lst.set_defaults(func=run_list)

    path = verbs.add_parser("path", help="print the interpreter the arms get for one engine")
    path.add_argument("name")
    path.add_argument(
        "--pinned",
        action="store_true",
        help="the pinned venv's interpreter, even when the variable names another",
    )
    path.set_defaults(func=run_path)

    warm = verbs.add_parser(
        "warm",
        help="compile SGLang's DeepGEMM FP8 kernels for the registered"
        " model before the first engine start",
    )
    warm.add_argument("name", choices=["sglang"], help="the engine (only SGLang has a warm step)")
    warm.add_argument(
        "--prereg",
        default="prereg.yaml",
        help="the study whose model and arm flags to compile for (default: prereg.yaml)",
    )
    warm.add_argument(
        "--arm", help="the SGLang arm whose flags to use (default: the first SGLang baseline)"
    )
    warm.add_argument(
        "--timeout",
        type=int,
        default=DEFAULT_TIMEOUT_S,
        help="seconds SGLang's compile server may take to answer (its --timeout)",
    )
    warm.add_argument("--port", type=int, help="the compile server's port (default: a free one)")
    warm.add_argument(
        "--print-command",
        action="store_true",
        help="print the command it would run, as one shell line; run nothing",
    )
    warm.set_defaults(func=run_warm)


def _selected(names: list[str], default_gpu: bool) -> list[EnginePin]:
    if names:
        return [pin(n) for n in names]
    pins = list(load_pins().values())
    return [p for p in pins if p.gpu] if default_gpu else pins


def run_install(args: argparse.Namespace) -> int:
    uv = None if args.no_uv else shutil.which("uv")
    for p in _selected(args.names, default_gpu=True):
        python = install_engine(p, uv=uv, python=args.python, quiet=args.quiet, force=args.force)
        if os.environ.get(p.variable) and os.environ[p.variable] != str(python):
            print(
                f"{p.name}: note: {p.variable} is set ({os.environ[p.variable]}), so the arms"
                " use that interpreter, not this one"
            )
    return 0


def run_check(args: argparse.Namespace) -> int:
    results = check_pins(_selected(args.names, default_gpu=False))
    for r in results:
        print(r.line())
    failed = [r.pin.name for r in results if not r.ok]
    if failed:
        raise SpecbenchError(f"pins that do not resolve: {', '.join(failed)} (engines.lock.toml)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    for p in load_pins().values():
        python = interpreter_for(p.name)
        source = f"from {p.variable}" if os.environ.get(p.variable) else "the pinned venv"
        state = "installed" if p.installed() else "not installed"
        if os.environ.get(p.variable):
            state = "exists" if Path(python).exists() else "does not exist"
        print(f"{p.name:10} {p.requirement:18} python {p.python}  {python} ({source}, {state})")
    return 0


def run_path(args: argparse.Namespace) -> int:
    p = pin(args.name)
    print(p.default_interpreter() if args.pinned else interpreter_for(p.name))
    return 0


def run_warm(args: argparse.Namespace) -> int:
    from harness.engines.install.warm import warm_sglang

    return warm_sglang(
        args.prereg,
        arm_name=args.arm,
        timeout_s=args.timeout,
        port=args.port,
        print_only=args.print_command,
    )
