"""`specbench` command line: one subcommand per module in harness.commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness import __version__
from harness.errors import SpecbenchError

# Each module defines `register(subparsers)`, which adds its parser and sets
# `func(args) -> int` as the default.
COMMAND_MODULES = [
    "harness.commands.validate",
    "harness.commands.fetch",
    "harness.commands.plan",
    "harness.commands.calibrate",
    "harness.commands.run",
    "harness.commands.rerun_baseline",
    "harness.commands.tiny_model",
    "harness.commands.serve",
    "harness.commands.analyse",
    "harness.commands.compare",
    "harness.commands.report",
    "harness.commands.score",
    "harness.commands.engines",
    "harness.commands.doctor",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specbench",
        description="Pre-registered benchmark studies of speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed subcommand: user errors become their lines and exit code."""
    try:
        return int(args.func(args) or 0)
    except SpecbenchError as err:
        for line in err.lines:
            print(f"specbench: {line}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("specbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`| head`): what it wanted was printed. Point stdout at
        # /dev/null so the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
