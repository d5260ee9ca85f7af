"""Run untrusted Python programs (HumanEval completions) without harm to the run.

Each program runs in its own process, in its own session and process group, in
a fresh temporary directory, under a wall-clock limit (default 3 s, counted from
the program's first instruction), and is killed together with everything it
started when the limit passes. Programs run in parallel up to a bound (default
``min(2, os.cpu_count())``). The program sees the standard library only
(``python -S``) and a fixed hash seed (PYTHONHASHSEED=0), so a verdict does not
depend on the harness's packages or on set ordering luck.

Two isolation modes; the one used is named in every result's ``isolation`` and
in the scorer's per-item detail (``[sandbox: ...]``):

``namespaces`` (Linux as root; what CI and this project's machines use)
    New mount, network, PID, IPC and UTS namespaces (unshare(2)):
    * network: an empty network namespace (only a downed loopback), so every
      connection attempt, even to 127.0.0.1, fails; and on x86_64/aarch64 a
      seccomp filter makes socket(2) itself fail, which also closes Unix
      sockets on the host's file system;
    * files: every mount is made private and read-only; the work directory is
      a tmpfs of its own (64 MiB, 4096 inodes) owned by the sandbox uid, so the
      program can write nowhere else and nothing it writes reaches the disk;
    * processes: the program runs as a dedicated unprivileged uid (one per
      parallel slot and harness process, from 2,000,000,000; no groups,
      no_new_privs), so it cannot signal, ptrace or write to anything of the
      harness, and RLIMIT_NPROC (per uid) bounds its processes without one
      program's fork bomb touching its neighbour; it sees a /proc of its own
      PID namespace only (the host's processes are invisible); PID 1 of that
      namespace is a small reaper, and when the program ends or is killed the
      kernel kills everything left in it (fork bombs, setsid escapees).
    The Python installation is bind-mounted read-only into the sandbox so the
    unprivileged uid can run it even when it lives under /root.
``hook`` (fallback: not root, or namespaces refused by the platform)
    The same process group, temporary directory, wall-clock kill and rlimits
    (address space, CPU, file size, open files; not the process count, which
    is per-uid and would count the harness's own processes), plus an in-process
    audit hook (PEP 578, see _sandbox_guard.py) that refuses writes outside the
    work dir, sockets, signals to other processes, fork/exec and ctypes. This
    is weaker: a program written to defeat the hook could escape it. The
    reason for falling back is part of the isolation tag.

In both modes the audit hook is on by default (``SandboxLimits.audit_hook``)
as a second layer; the namespace mode does not depend on it (the tests run the
hostile programs with it off too).

Limits apply per program: address space (default 512 MiB), CPU seconds (the
wall-clock limit rounded up, + 1), file size (8 MiB), open files (64), no core
files, and in namespace mode 8 processes. Without cgroups (which this harness
does not touch) the worst case memory of one program is processes x address
space = 4 GiB.

Verdict: a program passes only if the guard printed PASS as its last line and
the process exited 0. Setup failures (SETUP-ERROR before the program starts)
raise SandboxError instead of being scored, since they are the harness's fault.
Choose the mode with SPECBENCH_SANDBOX=auto (default) | namespaces | hook, or per
call with SandboxLimits.isolation. Sandbox directories go under
SPECBENCH_SANDBOX_TMP, else the temp dir (it must be reachable by any uid).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from harness.workloads._sandbox_exec import (
    GUARD,
    LAUNCHER,
    MAX_SLOTS,
    SETUP_TIMEOUT_S,
    UID_BASE,
    RunResult,
    SandboxError,
    run_in,
    seccomp_supported,
)

__all__ = [
    "GUARD",
    "LAUNCHER",
    "MAX_SLOTS",
    "SETUP_TIMEOUT_S",
    "UID_BASE",
    "RunResult",
    "SandboxError",
    "SandboxLimits",
    "default_parallel",
    "isolation_mode",
    "namespaces_available",
    "run_program",
    "run_programs",
    "sandbox_uids",
    "with_limits",
]


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 3.0  # wall clock, from start to kill
    memory_bytes: int = 512 * 2**20  # RLIMIT_AS
    cpu_s: int | None = None  # RLIMIT_CPU; default ceil(timeout_s) + 1
    file_size_bytes: int = 8 * 2**20  # RLIMIT_FSIZE
    nproc: int = 8  # RLIMIT_NPROC (namespace mode: per dedicated uid)
    nofile: int = 64  # RLIMIT_NOFILE
    tmpfs_bytes: int = 64 * 2**20  # size of the work dir (namespace mode)
    tmpfs_inodes: int = 4096
    audit_hook: bool = True  # the in-process second layer
    isolation: str = "auto"  # auto (SPECBENCH_SANDBOX, else probe) | namespaces | hook

    def resolved_cpu_s(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


def default_parallel() -> int:
    return max(1, min(2, os.cpu_count() or 1))


# --------------------------------------------------------------------------- mode


@dataclass(frozen=True)
class _Mode:
    name: str  # "namespaces" | "hook"
    reason: str  # why this mode (for the hook mode: why not namespaces)


_MODE: _Mode | None = None
_NS: tuple[bool, str] | None = None
_MODE_LOCK = threading.Lock()
_NS_LOCK = threading.Lock()
_ISOLATIONS = ("auto", "namespaces", "hook")


def namespaces_available() -> tuple[bool, str]:
    """(usable, why): probed once per process by really running a trivial program."""
    global _NS
    with _NS_LOCK:
        if _NS is None:
            _NS = _probe_namespaces()
        return _NS


def _probe_namespaces() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"platform {sys.platform} has no Linux namespaces"
    if os.geteuid() != 0:
        return False, "not root: cannot create namespaces or switch uid"
    why = ""
    for _ in range(2):  # once more, so a hiccup on a loaded machine does not downgrade
        try:
            probe = _run_one("pass\n", SandboxLimits(timeout_s=10.0), _Mode("namespaces", "probe"))
        except SandboxError as err:
            why = f"probe failed: {err}"
            continue
        if probe.passed:
            return True, "root on Linux"
        why = f"probe failed: {probe.detail}"
    return False, why


def isolation_mode() -> _Mode:
    """The mode "auto" resolves to: SPECBENCH_SANDBOX if set, else namespaces when
    the probe succeeds, else the hook fallback (with the reason)."""
    global _MODE
    with _MODE_LOCK:
        if _MODE is None:
            _MODE = _choose_mode()
        return _MODE


def _choose_mode() -> _Mode:
    want = os.environ.get("SPECBENCH_SANDBOX", "auto").strip().lower() or "auto"
    if want not in _ISOLATIONS:
        raise SandboxError(f"SPECBENCH_SANDBOX must be auto, namespaces or hook, not {want!r}")
    if want == "hook":
        return _Mode("hook", "SPECBENCH_SANDBOX=hook")
    ok, why = namespaces_available()
    if ok:
        return _Mode("namespaces", why)
    if want == "namespaces":
        raise SandboxError(f"SPECBENCH_SANDBOX=namespaces but {why}")
    return _Mode("hook", why)


def _resolve(limits: SandboxLimits) -> _Mode:
    if limits.isolation not in _ISOLATIONS:
        raise ValueError(f"isolation must be one of {_ISOLATIONS}, not {limits.isolation!r}")
    if limits.isolation == "auto":
        mode = isolation_mode()
    elif limits.isolation == "hook":
        mode = _Mode("hook", "requested")
    else:
        ok, why = namespaces_available()
        if not ok:
            raise SandboxError(f"namespace isolation requested but {why}")
        mode = _Mode("namespaces", why)
    if mode.name == "hook" and not limits.audit_hook:
        # Without namespaces the hook is the only barrier: never run without it.
        raise SandboxError(f"audit_hook=False needs namespace isolation ({mode.reason})")
    return mode


def _world_traversable(path: str) -> bool:
    p = os.path.realpath(path)
    while True:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent


def _sandbox_root() -> str:
    """Where sandbox directories go: SPECBENCH_SANDBOX_TMP, else the temp dir, if the
    sandbox uid can reach it."""
    explicit = os.environ.get("SPECBENCH_SANDBOX_TMP")
    cands = [explicit] if explicit else [tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"]
    for cand in cands:
        if os.path.isdir(cand) and _world_traversable(cand):
            return cand
    raise SandboxError(
        f"no directory that an unprivileged uid can reach among {cands} (SPECBENCH_SANDBOX_TMP)"
    )


def _tag(mode: _Mode, limits: SandboxLimits, uid: int | None) -> str:
    hook = "+audit-hook" if limits.audit_hook else ""
    if mode.name == "namespaces":
        seccomp = "+seccomp(no sockets)" if seccomp_supported() else ""
        return f"namespaces(net,mnt,pid,ipc,uts)+own uid+rlimits{seccomp}{hook}"
    return f"rlimits{hook}, no namespaces ({mode.reason})"


# --------------------------------------------------------------------------- slots


class _Slots:
    """Parallel slots; each has its own uid, so RLIMIT_NPROC is per program."""

    def __init__(self, n: int) -> None:
        self._free = list(range(n))
        self._cv = threading.Condition()

    def acquire(self) -> int:
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop(0)

    def release(self, slot: int) -> None:
        with self._cv:
            self._free.append(slot)
            self._free.sort()
            self._cv.notify()


_SLOTS = _Slots(MAX_SLOTS)


def _slot_uid(slot: int) -> int:
    return UID_BASE + (os.getpid() % 1_000_000) * MAX_SLOTS + slot


def sandbox_uids() -> range:
    """The uids this process's sandboxes run as (namespace mode), one per slot."""
    return range(_slot_uid(0), _slot_uid(0) + MAX_SLOTS)


# --------------------------------------------------------------------------- running


def run_program(source: str, limits: SandboxLimits | None = None) -> RunResult:
    """Run one program in the sandbox and report how it ended."""
    limits = limits or SandboxLimits()
    return _run_one(source, limits, _resolve(limits))


def run_programs(
    sources: list[str], limits: SandboxLimits | None = None, *, parallel: int | None = None
) -> list[RunResult]:
    """Run programs concurrently, at most `parallel` at a time; results in input order."""
    limits = limits or SandboxLimits()
    mode = _resolve(limits)
    parallel = default_parallel() if parallel is None else parallel
    if not 1 <= parallel <= MAX_SLOTS:
        raise ValueError(f"parallel must be between 1 and {MAX_SLOTS}, got {parallel}")
    if parallel == 1 or len(sources) <= 1:
        return [_run_one(s, limits, mode) for s in sources]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda s: _run_one(s, limits, mode), sources))


def _run_one(source: str, limits: SandboxLimits, mode: _Mode) -> RunResult:
    slot = _SLOTS.acquire()
    uid = _slot_uid(slot) if mode.name == "namespaces" else None
    base = tempfile.mkdtemp(prefix="specbench-sbx-", dir=_sandbox_root())
    try:
        return run_in(base, source, limits, mode.name, _tag(mode, limits, uid), uid)
    finally:
        shutil.rmtree(base, onerror=_force_remove)
        _SLOTS.release(slot)


def _force_remove(func, path, _exc):
    # A program in hook mode may have made its files read-only: fix and retry.
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def with_limits(limits: SandboxLimits | None = None, **changes) -> SandboxLimits:
    return replace(limits or SandboxLimits(), **changes)
