"""Errors that the CLI turns into a clear message and an exit code, never a traceback."""

from __future__ import annotations


class SpecbenchError(Exception):
    """A problem the user can fix; `lines` are printed one per line."""

    exit_code = 1

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class InputError(SpecbenchError):
    """A bad invocation or a bad input file: exit code 2."""

    exit_code = 2
