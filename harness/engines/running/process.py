"""Process-group plumbing for engine processes: ports, spawning, stopping, log tails.

An engine must not outlive the harness that started it, however the harness ends
(SIGKILL, the OOM killer, a lost session): on a GPU an orphan holds most of the
GPU's memory. Two things see to it. The engine's leader gets a parent-death signal
(SIGKILL), and a guard process (engine_guard.py) holding a lifeline pipe stops the
engine's whole process group, children such as vLLM's EngineCore and SGLang's
scheduler included, when the harness is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import psutil

GUARD_SCRIPT = Path(__file__).with_name("engine_guard.py")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port or holds it bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        if sock.connect_ex((host, port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR a bind also fails on a port held by a bound,
        # not-yet-listening socket; connections in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def tail_lines(path: Path, n: int = 40) -> list[str]:
    """The last n lines of a (possibly large, possibly binary-tainted) log."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in deque(fh, maxlen=n)]
    except OSError:
        return []


def _die_with_parent():
    """A preexec_fn: SIGKILL this child when the thread that forked it exits.

    PR_SET_PDEATHSIG fires on the exit of the parent *thread*, not the process, so it is
    only set when the engine is started from the main thread (which lives as long as the
    harness); from any other thread the guard alone stops the engine. Linux only."""
    if (
        not sys.platform.startswith("linux")
        or threading.current_thread() is not threading.main_thread()
    ):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the harness died before the signal was set
            os._exit(1)

    return preexec


def spawn(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start cmd in a new session (so its own process group), output to log_path, set to
    die with this process (the parent-death signal; start an EngineGuard for its children)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )


class EngineGuard:
    """The guard process of one engine's process group (engine_guard.py): it stops the
    group when this process is gone. `release()` after the engine is stopped."""

    def __init__(self, pgid: int, log_path: Path, grace_s: float) -> None:
        self.pgid = pgid
        read_end, self._lifeline = os.pipe()  # both ends close-on-exec; the guard gets its own
        try:
            with log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-I",
                        str(GUARD_SCRIPT),
                        str(read_end),
                        str(pgid),
                        f"{min(grace_s, 30.0):g}",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(read_end,),
                    start_new_session=True,  # a kill of the harness's group must miss it
                )
        except BaseException:
            os.close(self._lifeline)
            raise
        finally:
            os.close(read_end)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def release(self, timeout_s: float = 10.0) -> None:
        """Close the lifeline (the guard then stops whatever is left, and exits)."""
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes in a process group."""
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError, psutil.AccessDenied):
            continue
    return members


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` still running (zombies and vanished processes left out)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _signal_all(pgid: int, known: list[psutil.Process], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    # Children that left the group (setsid) are still ours to stop.
    for p in alive(known):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)


def stop_group(proc: subprocess.Popen, grace_s: float) -> list[psutil.Process]:
    """SIGTERM the process group, SIGKILL after grace_s; reap the leader.

    Returns the processes still alive afterwards (empty when the stop is clean).
    """
    pgid = proc.pid  # leader of its own session, so pgid == pid
    known = descendants(proc.pid) + group_members(pgid)
    if proc.poll() is None or alive(known):
        _signal_all(pgid, known, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not alive(known) and not group_members(pgid):
                break
            time.sleep(0.1)
        else:
            known += group_members(pgid)
            _signal_all(pgid, known, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    left = alive(known + group_members(pgid))
    while left and time.monotonic() < deadline:
        for p in left:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                p.kill()
        time.sleep(0.2)
        left = alive(known + group_members(pgid))
    return left


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not port_in_use(host, port):
            return True
        time.sleep(0.2)
    return not port_in_use(host, port)
