"""Run untrusted Python programs (HumanEval completions) without harm to the run.

Each program runs in its own process, in its own session and process group, in
a fresh temporary directory, under a wall-clock limit (default 3 s), and is
killed together with everything it started when the limit passes. Programs run
in parallel up to a bound (default ``min(2, os.cpu_count())``).

Two isolation modes; the one used is named in every result's ``isolation`` and
in the scorer's per-item detail (``[sandbox: ...]``):

``namespaces`` (Linux as root; what CI and this project's machines use)
    New mount, network, PID, IPC and UTS namespaces (unshare(2)):
    * network: an empty network namespace (only a downed loopback), so every
      connection attempt, even to 127.0.0.1, fails;
    * files: every mount is made private and read-only; the work directory is
      a tmpfs of its own (64 MiB, 4096 inodes) owned by the sandbox uid, so the
      program can write nowhere else and nothing it writes reaches the disk;
    * processes: the program runs as a dedicated unprivileged uid (one per
      parallel slot, 2,000,000,000 + ...; no groups, no_new_privs), so it
      cannot signal, ptrace or write to anything of the harness, and
      RLIMIT_NPROC (per uid) bounds its processes; PID 1 of its namespace is a
      small reaper, and when the program ends or is killed the kernel kills
      everything left in the namespace (fork bombs, setsid escapees).
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
Choose the mode with SPECBENCH_SANDBOX=auto (default) | namespaces | hook.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import SpecbenchError

_HERE = Path(__file__).resolve().parent
LAUNCHER = _HERE / "_sandbox_launcher.py"
GUARD = _HERE / "_sandbox_guard.py"
SETUP_ERROR_EXIT = 97
SETUP_TIMEOUT_S = 15.0  # launcher start to the program's first instruction
UID_BASE = 2_000_000_000
MAX_SLOTS = 64
_TAIL = 16 * 1024


class SandboxError(SpecbenchError):
    """The sandbox itself could not run a program (not the program's fault)."""


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


@dataclass(frozen=True)
class RunResult:
    passed: bool
    status: str  # passed | failed | timeout | crashed
    detail: str  # why, one line
    isolation: str  # what contained it
    elapsed_s: float  # from the program's start (START) to its end or kill
    exit_code: int | None
    output_tail: str  # last bytes of stdout+stderr
    t_launch: float = 0.0  # monotonic: launcher started
    t_start: float | None = None  # monotonic: program started (None: never)
    t_end: float = 0.0  # monotonic: everything exited or was killed


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
    try:
        probe = _run_one("pass\n", SandboxLimits(timeout_s=10.0), _Mode("namespaces", "probe"))
    except SandboxError as err:
        return False, f"probe failed: {err}"
    if not probe.passed:
        return False, f"probe failed: {probe.detail}"
    return True, "root on Linux"


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
        return isolation_mode()
    if limits.isolation == "hook":
        return _Mode("hook", "requested")
    ok, why = namespaces_available()
    if not ok:
        raise SandboxError(f"namespace isolation requested but {why}")
    return _Mode("namespaces", why)


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
    """Where sandbox directories go: the temp dir, if the sandbox uid can reach it."""
    for cand in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(cand) and _world_traversable(cand):
            return cand
    raise SandboxError("no temporary directory that an unprivileged uid can reach")


def _tag(mode: _Mode, limits: SandboxLimits, uid: int | None) -> str:
    hook = "+audit-hook" if limits.audit_hook else ""
    if mode.name == "namespaces":
        return f"namespaces(net,mnt,pid,ipc,uts)+own uid+rlimits{hook}"
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


def _uid_processes(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry.name))
                        break
        except (OSError, ValueError):
            continue
    return pids


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


def _python_layout() -> tuple[str, str, str]:
    """(real base prefix, executable relative to it, real executable)."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    rel = os.path.relpath(exe, prefix)
    if rel.startswith(".."):
        # The executable lives outside its prefix (unusual layouts): look for
        # the base interpreter by name under the prefix.
        cand = os.path.join(prefix, "bin", os.path.basename(exe))
        if not os.path.exists(cand):
            raise SandboxError(f"cannot locate the interpreter {exe} under {prefix}")
        rel = os.path.relpath(os.path.realpath(cand), prefix)
    return prefix, rel, exe


def _run_one(source: str, limits: SandboxLimits, mode: _Mode) -> RunResult:
    slot = _SLOTS.acquire()
    uid = _slot_uid(slot) if mode.name == "namespaces" else None
    root = _sandbox_root() if mode.name == "namespaces" else None
    base = tempfile.mkdtemp(prefix="specbench-sbx-", dir=root)
    try:
        return _run_in(base, source, limits, mode, uid)
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


def _run_in(base: str, source: str, limits: SandboxLimits, mode: _Mode, uid: int | None):
    os.chmod(base, 0o755)  # the sandbox uid must reach work/, python/, program.py
    work = os.path.join(base, "work")
    pydir = os.path.join(base, "python")
    program = os.path.join(base, "program.py")
    os.mkdir(work, 0o700)
    os.mkdir(pydir, 0o755)
    with open(program, "w", encoding="utf-8") as f:
        f.write(source)
    os.chmod(program, 0o644)
    prefix, exe_rel, exe = _python_layout()
    tag = _tag(mode, limits, uid)
    res_r, res_w = os.pipe()
    cfg = {
        "mode": mode.name,
        "tag": tag,
        "workdir": work,
        "pydir": pydir,
        "prefix": prefix,
        "exe_rel": exe_rel,
        "python": exe,
        "program": program,
        "guard_path": str(GUARD),
        "result_fd": res_w,
        "uid": uid,
        "audit_hook": bool(limits.audit_hook),
        "limits": {
            "cpu_s": limits.resolved_cpu_s(),
            "memory_bytes": int(limits.memory_bytes),
            "file_size_bytes": int(limits.file_size_bytes),
            "nproc": int(limits.nproc),
            "nofile": int(limits.nofile),
            "tmpfs_bytes": int(limits.tmpfs_bytes),
            "tmpfs_inodes": int(limits.tmpfs_inodes),
        },
    }
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(cfg)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(res_w,),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as err:
        os.close(res_r)
        os.close(res_w)
        raise SandboxError(f"cannot start the sandbox launcher: {err}") from err
    os.close(res_w)
    try:
        out, res, timed_out, t_start = _collect(proc, res_r, t0, limits.timeout_s)
    finally:
        os.close(res_r)
        if proc.poll() is None:  # only on an unexpected error in _collect
            _kill_group(proc)
        if proc.stdout:
            proc.stdout.close()
    t_end = time.monotonic()
    if timed_out and uid is not None:
        _wait_uid_gone(uid, time.monotonic() + 5.0)
    return _verdict(proc.returncode, out, res, timed_out, t0, t_start, t_end, limits, tag)


class _Capped:
    """Keeps the first and the last `cap` bytes of a stream."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.cap:
                self.dropped += len(self.tail) - self.cap
                del self.tail[: len(self.tail) - self.cap]

    def text(self) -> str:
        mid = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + mid + bytes(self.tail)).decode("utf-8", "replace")


def _collect(proc: subprocess.Popen, res_r: int, t0: float, timeout_s: float):
    """Read both pipes until the launcher exits or the time is up.

    The wall-clock limit counts from the guard's START line (the program's
    first instruction), so setup time under load is not charged to the
    program; setup itself gets SETUP_TIMEOUT_S.
    """
    out = _Capped(_TAIL)
    res = _Capped(_TAIL)
    sel = selectors.DefaultSelector()
    out_fd = proc.stdout.fileno()
    for fd, sink in ((out_fd, out), (res_r, res)):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, sink)
    deadline = t0 + max(SETUP_TIMEOUT_S, timeout_s)
    t_start = None
    timed_out = False
    try:
        while True:
            if t_start is None and b"START\n" in res.head:
                t_start = time.monotonic()
                deadline = t_start + timeout_s
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = proc.poll() is None
                break
            if not sel.get_map():  # both pipes closed: everything has exited
                try:
                    proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    continue
                break
            wait = min(remaining, 0.25) if t_start is not None else min(remaining, 0.05)
            for key, _ in sel.select(timeout=wait):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    key.data.add(data)
                else:
                    sel.unregister(key.fd)
            if proc.poll() is not None and sel.get_map():
                # The launcher is gone but something (an escaped process in
                # hook mode) may still hold a pipe open: take what is there.
                _drain(sel)
                break
        if timed_out:
            _kill_group(proc)
        _drain(sel)
    finally:
        sel.close()
    if t_start is None and b"START\n" in res.head:
        t_start = time.monotonic()
    return out, res, timed_out, t_start


def _drain(sel: selectors.BaseSelector) -> None:
    for key in list(sel.get_map().values()):
        while True:
            try:
                data = os.read(key.fd, 65536)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            key.data.add(data)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def _wait_uid_gone(uid: int, deadline: float) -> None:
    """After a kill, wait until the namespace's processes are all reaped."""
    while _uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.01)


_SIGNAL_NOTES = {
    signal.SIGXCPU: "CPU time limit",
    signal.SIGXFSZ: "file size limit",
    signal.SIGKILL: "killed",
    signal.SIGSEGV: "segmentation fault",
}


def _signal_text(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    note = _SIGNAL_NOTES.get(signum)
    return f"{name} ({note})" if note else name


def _verdict(code, out: _Capped, res: _Capped, timed_out, t0, t_start, t_end, limits, tag):
    lines = res.text().splitlines()
    started = "START" in lines
    trusted = lines[: lines.index("START")] if started else lines
    setup_errors = [ln[len("SETUP-ERROR ") :] for ln in trusted if ln.startswith("SETUP-ERROR ")]
    for ln in trusted:
        if ln.startswith("ISOLATION "):
            tag = ln[len("ISOLATION ") :]
    output = out.text()
    elapsed = t_end - (t_start if t_start is not None else t0)

    def result(passed: bool, status: str, detail: str) -> RunResult:
        return RunResult(passed, status, detail, tag, elapsed, code, output[-4096:],
                         t0, t_start, t_end)

    if not started:
        if setup_errors:
            raise SandboxError(f"sandbox setup failed: {setup_errors[-1]}")
        if timed_out:
            raise SandboxError(
                f"sandbox did not start the program within "
                f"{max(SETUP_TIMEOUT_S, limits.timeout_s):g} s; "
                f"output: {output[-300:]!r}"
            )
        raise SandboxError(
            f"sandbox launcher exited with {code} before the program started; "
            f"output: {output[-300:]!r}"
        )
    if timed_out:
        return result(False, "timeout", f"timed out after {limits.timeout_s:g} s (killed)")
    after = lines[lines.index("START") + 1 :]
    last = after[-1] if after else ""
    if code == 0 and last == "PASS":
        return result(True, "passed", "passed")
    if code is not None and code > 128:
        return result(False, "crashed", f"killed by {_signal_text(code - 128)}")
    if code is not None and code < 0:
        return result(False, "crashed", f"killed by {_signal_text(-code)}")
    fails = [ln[5:] for ln in after if ln.startswith("FAIL ")]
    if fails:
        return result(False, "failed", fails[-1])
    return result(
        False, "failed", f"exited with status {code} before its tests finished (no verdict)"
    )


def with_limits(limits: SandboxLimits | None = None, **changes) -> SandboxLimits:
    return replace(limits or SandboxLimits(), **changes)
