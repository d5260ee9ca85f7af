"""Running one program in a prepared sandbox directory: launch, watch, kill, judge.

Used by harness.workloads.sandbox (see its docstring for the isolation modes).
The launcher and guard write protocol lines to a result pipe; only lines before
the guard's START come from trusted code, and a pass needs PASS as the last
line and exit status 0.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import SpecbenchError

_HERE = Path(__file__).resolve().parent
LAUNCHER = _HERE / "_sandbox_launcher.py"
GUARD = _HERE / "_sandbox_guard.py"
SETUP_TIMEOUT_S = 15.0  # launcher start to the program's first instruction
UID_BASE = 2_000_000_000
MAX_SLOTS = 64
_TAIL = 16 * 1024


class SandboxError(SpecbenchError):
    """The sandbox itself could not run a program (not the program's fault)."""


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


def seccomp_supported() -> bool:
    """Machines the launcher's socket(2) seccomp filter knows."""
    return os.uname().machine in ("x86_64", "aarch64")


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


def run_in(base: str, source: str, limits, mode_name: str, tag: str, uid: int | None):
    """Run `source` with `limits` in the fresh directory `base`; `tag` names the isolation."""
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
    res_r, res_w = os.pipe()
    cfg = {
        "mode": mode_name,
        "tag": tag,
        "seccomp_sockets": mode_name == "namespaces" and seccomp_supported(),
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
    assert proc.stdout is not None  # started with stdout=PIPE
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


_SIGNAL_NOTES: dict[int, str] = {
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
        return RunResult(
            passed, status, detail, tag, elapsed, code, output[-4096:], t0, t_start, t_end
        )

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
