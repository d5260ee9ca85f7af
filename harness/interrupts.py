"""A stop signal turned into an exception that cannot be lost.

Python runs a signal handler between two bytecodes of the main thread, wherever it is,
and an exception raised inside a weakref callback, a `__del__` or the import system's
module-lock cleanup is printed as "Exception ignored in ..." and dropped. A SIGTERM that
lands there would be swallowed: `specbench serve` went on waiting for a hanging engine
(seen in the suite: "Traceback ... importlib._bootstrap, in cb", then the engine's whole
start timeout). So a handler from `raising` also records the signal, and the loops that
wait (an engine's start, a cell's turn, `serve`'s watch) call `raise_pending()`, which
raises it again until someone has caught it and called `handled()`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

_pending: Callable[[], BaseException] | None = None


def raising(make: Callable[[], BaseException]) -> Callable[[int, FrameType | None], None]:
    """A signal handler that raises `make()` and keeps it pending until handled."""

    def handler(signum: int, frame: FrameType | None) -> None:
        global _pending
        _pending = make
        raise make()

    return handler


def raise_pending() -> None:
    """Raise again a stop signal whose first exception was swallowed."""
    if _pending is not None:
        raise _pending()


def handled() -> None:
    """The pending stop was caught where it is acted on: do not raise it again."""
    global _pending
    _pending = None


def install(signums: tuple[int, ...], make: Callable[[], BaseException]) -> dict[int, object]:
    """Install `raising(make)` for each signal; returns the previous handlers."""
    handler = raising(make)
    return {s: signal.signal(s, handler) for s in signums}


def restore(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)  # type: ignore[arg-type]
