"""`specbench` command line: one subcommand per module in harness.commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness import __version__
from harness.errors import SpecbenchError

# Each module defines `register(subparsers)`, which adds its parser and sets
# `func(args) -> int` as the default. The command's name says which module to import, so a
# command loads only its own module (`specbench validate` does not import the run stack).
COMMAND_MODULES = {
    "validate": "harness.commands.validate",
    "fetch": "harness.commands.fetch",
    "plan": "harness.commands.plan",
    "calibrate": "harness.commands.calibrate",
    "run": "harness.commands.run",
    "rehearse": "harness.commands.rehearse",
    "rerun-baseline": "harness.commands.rerun_baseline",
    "tiny-model": "harness.commands.tiny_model",
    "serve": "harness.commands.serve",
    "analyse": "harness.commands.analyse",
    "compare": "harness.commands.compare",
    "report": "harness.commands.report",
    "score": "harness.commands.score",
    "engines": "harness.commands.engines",
    "doctor": "harness.commands.doctor",
}


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command (help, the docs' reference), or of the named ones alone."""
    parser = argparse.ArgumentParser(
        prog="specbench",
        description="Pre-registered benchmark studies of speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in commands if commands is not None else COMMAND_MODULES:
        importlib.import_module(COMMAND_MODULES[name]).register(sub)
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The command argv names, when it is the first word and help for all is not asked."""
    if argv and argv[0] in COMMAND_MODULES:
        return argv[0]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = chosen_command(argv)
    return dispatch(build_parser([name] if name else None).parse_args(argv))


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
