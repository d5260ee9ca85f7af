"""A stop signal whose exception lands where Python drops it is raised again."""

from __future__ import annotations

import gc
import signal
import sys
import types
import weakref

import pytest

from harness import interrupts
from harness.engines.running.readiness import wait_ready


@pytest.fixture(autouse=True)
def nothing_pending():
    interrupts.handled()
    yield
    interrupts.handled()


def swallowed_in_a_weakref_callback(handler) -> list[str]:
    """Run the handler where a signal can land and its exception is dropped: a weakref
    callback (the import system's module-lock cleanup is one). Returns what Python
    reported as ignored."""
    dropped: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: dropped.append(type(unraisable.exc_value).__name__)
    try:

        class Lock:
            pass

        lock = Lock()
        ref = weakref.ref(lock, lambda _: handler(signal.SIGTERM, None))  # noqa: F841
        del lock
        gc.collect()
    finally:
        sys.unraisablehook = previous
    return dropped


def test_an_interrupt_dropped_in_a_callback_is_raised_again_until_handled():
    handler = interrupts.raising(KeyboardInterrupt)
    # What happened to `specbench serve` in the suite: the signal's exception was dropped.
    assert swallowed_in_a_weakref_callback(handler) == ["KeyboardInterrupt"]
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_pending()
    with pytest.raises(KeyboardInterrupt):  # still pending: nobody acted on it yet
        interrupts.raise_pending()
    interrupts.handled()
    interrupts.raise_pending()  # nothing now


def test_a_sigterm_exit_dropped_in_a_callback_is_raised_again_with_its_code():
    handler = interrupts.raising(lambda: SystemExit(128 + signal.SIGTERM))
    assert swallowed_in_a_weakref_callback(handler) == ["SystemExit"]
    with pytest.raises(SystemExit) as exc:
        interrupts.raise_pending()
    assert exc.value.code == 143


def test_an_engine_start_stops_waiting_on_a_swallowed_interrupt():
    # An engine that never answers, its start already past the deadline: without the
    # pending signal raised first, wait_ready would end in a start failure instead (in
    # the suite's hang it polled for the whole start timeout, 120 s).
    engine = types.SimpleNamespace(
        kind=types.SimpleNamespace(readiness_path="/health"),
        exit_code=None,
        base_url="http://127.0.0.1:9",
    )
    swallowed_in_a_weakref_callback(interrupts.raising(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        wait_ready(engine, timeout_s=120, started=0.0, version=lambda: None)  # type: ignore[arg-type]


def test_install_and_restore_put_the_previous_handlers_back():
    before = signal.getsignal(signal.SIGUSR1)
    previous = interrupts.install((signal.SIGUSR1,), KeyboardInterrupt)
    assert signal.getsignal(signal.SIGUSR1) is not before
    interrupts.restore(previous)
    assert signal.getsignal(signal.SIGUSR1) is before
