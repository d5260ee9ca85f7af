"""Process-group plumbing for engine processes: ports, spawning, stopping, log tails."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections import deque
from pathlib import Path

import psutil


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


def spawn(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start cmd in a new session (so its own process group), output to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


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


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _signal_all(pgid: int, known: list[psutil.Process], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    # Children that left the group (setsid) are still ours to stop.
    for p in _alive(known):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            p.send_signal(sig)


def stop_group(proc: subprocess.Popen, grace_s: float) -> list[psutil.Process]:
    """SIGTERM the process group, SIGKILL after grace_s; reap the leader.

    Returns the processes still alive afterwards (empty when the stop is clean).
    """
    pgid = proc.pid  # leader of its own session, so pgid == pid
    known = descendants(proc.pid) + group_members(pgid)
    if proc.poll() is None or _alive(known):
        _signal_all(pgid, known, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _alive(known) and not group_members(pgid):
                break
            time.sleep(0.1)
        else:
            known += group_members(pgid)
            _signal_all(pgid, known, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    left = _alive(known + group_members(pgid))
    while left and time.monotonic() < deadline:
        for p in left:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                p.kill()
        time.sleep(0.2)
        left = _alive(known + group_members(pgid))
    return left


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not port_in_use(host, port):
            return True
        time.sleep(0.2)
    return not port_in_use(host, port)
