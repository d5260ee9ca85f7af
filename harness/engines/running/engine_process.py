"""The handle of one engine process (or attached endpoint): where it serves, whether it
is alive, its log tail, and stopping it leaving nothing behind. Every engine this
interpreter launched and has not stopped is stopped at exit, and SIGTERM unwinds like
Ctrl-C, so an uncaught error never leaves an engine holding a port and gigabytes."""

from __future__ import annotations

import atexit
import contextlib
import signal
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx

from harness import interrupts
from harness.dialects import Dialect
from harness.engines.running.engine_log import LOG_TAIL_LINES
from harness.engines.running.process import EngineGuard, stop_group, tail_lines, wait_port_free
from harness.errors import SpecbenchError
from harness.rundir.engines import EngineInfo

if TYPE_CHECKING:
    from harness.engines.launch.base import EngineKind
    from harness.prereg.schema import Arm


class EngineProcess:
    """A running engine (or an attached endpoint). Use as a context manager."""

    def __init__(
        self,
        *,
        arm: Arm,
        kind: EngineKind | None,
        info: EngineInfo,
        request_fields: dict[str, Any],
        popen: subprocess.Popen | None = None,
        host: str | None = None,
        port: int | None = None,
        stop_grace_s: float = 30.0,
        guard: EngineGuard | None = None,
    ) -> None:
        self.arm = arm
        self.kind = kind
        self.info = info
        self.request_fields = request_fields
        self._popen = popen
        self._host = host
        self._port = port
        self._grace = stop_grace_s
        self._guard = guard
        self._stopped = popen is None

    @property
    def base_url(self) -> str:
        return self.info.base_url

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    @property
    def served_model(self) -> str:
        return self.info.served_model

    @property
    def metrics_dialect(self) -> Dialect:
        return self.info.metrics_dialect

    @property
    def log_path(self) -> Path | None:
        return Path(self.info.log_path) if self.info.log_path else None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def pgid(self) -> int | None:
        """The process group it leads (None attached): its CPU time is the engine's."""
        return self.info.pgid or self.pid

    @property
    def exit_code(self) -> int | None:
        """The engine process's exit code once it has exited (None while running or attached)."""
        return self._popen.poll() if self._popen is not None else None

    def alive(self) -> bool:
        if self._popen is not None:
            return not self._stopped and self._popen.poll() is None
        try:  # attached: alive while it answers
            return httpx.get(self.base_url + "/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        return tail_lines(self.log_path, n) if self.log_path else []

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL after the grace period, then verify the port is
        free and no process is left. Does nothing for attached endpoints."""
        if self._stopped or self._popen is None:
            return
        self._stopped = True
        _LIVE.discard(self)
        try:
            left = stop_group(self._popen, self._grace)
        finally:
            if self._guard is not None:  # nothing left for it to stop
                self._guard.release()
        problems = []
        if left:
            problems.append(
                "processes still alive after SIGKILL: " + ", ".join(str(p.pid) for p in left)
            )
        if self._host and self._port and not wait_port_free(self._host, self._port, 15):
            problems.append(f"port {self._port} on {self._host} is still in use")
        if problems:
            raise SpecbenchError(f"arm {self.arm.name!r}: engine did not stop cleanly", *problems)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.stop()
        except SpecbenchError:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        state = "attached" if self._popen is None else ("running" if self.alive() else "stopped")
        return f"<EngineProcess {self.arm.name} {self.info.kind} {self.base_url} {state}>"


# Engines this interpreter launched and has not stopped: stopped at exit, so an
# uncaught error never leaves an engine holding a port and gigabytes of memory.
_LIVE: set[EngineProcess] = set()


def track(engine: EngineProcess) -> None:
    """A launched engine, stopped at exit unless stopped before."""
    _LIVE.add(engine)


@atexit.register
def _stop_leftovers() -> None:
    for engine in list(_LIVE):
        with contextlib.suppress(Exception):
            engine.stop()


def stop_engines_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so `finally`, context managers and the atexit
    hook stop our engines (they run in their own session and would outlive us).
    Only from the main thread, and only where nobody installed a handler."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # Kept pending until the process exits (harness.interrupts): a SystemExit raised
        # inside an import's cleanup is dropped, and the run would go on.
        signal.signal(signal.SIGTERM, interrupts.raising(lambda: SystemExit(128 + signal.SIGTERM)))


__all__ = ["EngineProcess", "stop_engines_on_sigterm", "track"]
