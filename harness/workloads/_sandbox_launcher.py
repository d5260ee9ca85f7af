"""Sandbox launcher: sets up one contained process and execs the guard in it.

Run by harness/workloads/sandbox.py as ``python -I -S _sandbox_launcher.py CONFIG``
(standard library only, trusted code). It writes protocol lines to the result
pipe (fd CONFIG["result_fd"]): ``ISOLATION <tag>`` once set up, or
``SETUP-ERROR <message>`` (exit 97) if something it needs fails. The guard it
execs then writes ``START`` before any untrusted code runs; see sandbox.py for
what happens after.

Mode "namespaces" (root on Linux):
  L (this process, root) unshare()s new mount, network, PID, IPC and UTS
  namespaces; makes every mount private and read-only; bind-mounts the Python
  installation read-only at <base>/python (so an unprivileged uid can run it
  even when it lives under /root); mounts a size-limited tmpfs owned by the
  sandbox uid on <base>/work; then forks
  I (PID 1 of the new PID namespace, root), which forks and reaps until
  P (the program) exits, and exits with P's status: when I exits the kernel
    kills everything left in the namespace.
  P sets the rlimits (address space, CPU, file size, process count, open files,
    core = 0), no_new_privs, a seccomp filter under which socket(2) fails
    (x86_64 and aarch64), drops to the sandbox uid/gid with no groups, and
    execs the interpreter on the guard.
  I also mounts a /proc of the new PID namespace (read-only), so the program
    sees none of the host's processes.
Mode "hook" (no root, or no namespaces): L sets the rlimits except the process
  count and execs the guard directly; the guard's audit hook is the only
  barrier against file writes outside the work dir, network, signals and
  process creation.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21

ST_FLAGS_TO_MS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (getattr(os, "ST_RELATIME", 4096), MS_RELATIME),
)
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# seccomp: per machine, (audit arch, socket(2) number); x32 syscalls carry bit 30.
SECCOMP_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
X32_SYSCALL_BIT = 0x40000000
SETUP_ERROR_EXIT = 97


class SetupError(Exception):
    pass


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    return libc


def _call(what: str, rc: int) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} (errno {err})")


def _mount(libc, source, target, fstype, flags, data=None) -> None:
    def enc(s):
        return None if s is None else os.fsencode(s)

    _call(
        f"mount({source!r}, {target!r}, {fstype!r}, {flags:#x})",
        libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
    )


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return [_unescape(line.split()[4]) for line in f if line.strip()]


def _remount_all_readonly(libc) -> None:
    done = set()
    for mp in _mount_points():
        if mp in done:
            continue
        done.add(mp)
        try:
            st = os.statvfs(mp)
        except OSError:
            continue  # hidden under another mount; not reachable anyway
        if st.f_flag & os.ST_RDONLY:
            continue
        keep = 0
        for st_flag, ms_flag in ST_FLAGS_TO_MS:
            if st.f_flag & st_flag:
                keep |= ms_flag
        _mount(libc, None, mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _deny_sockets(libc) -> bool:
    """A seccomp filter that makes socket(2) fail with EACCES (and refuses any other
    syscall ABI, so the filter cannot be side-stepped). False if the machine is not
    one this filter knows. The network namespace already leaves nothing to reach
    over IP; this also closes Unix sockets on the host's file system."""
    arch = SECCOMP_ARCHES.get(os.uname().machine)
    if arch is None:
        return False
    audit_arch, nr_socket = arch
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, errno_ret = 0x7FFF0000, 0x00050000
    prog = [
        (ld_abs, 0, 0, 4),  # 0: arch
        (jeq, 0, 5, audit_arch),  # 1: other ABI -> 7
        (ld_abs, 0, 0, 0),  # 2: syscall number
        (jge, 3, 0, X32_SYSCALL_BIT),  # 3: x32 -> 7
        (jeq, 0, 1, nr_socket),  # 4: socket -> 5, else 6
        (ret, 0, 0, errno_ret | 13),  # 5: EACCES
        (ret, 0, 0, allow),  # 6
        (ret, 0, 0, errno_ret | 1),  # 7: EPERM
    ]
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    _call(
        "prctl(SECCOMP)",
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
    )
    return True


def _set_limits(cfg: dict, with_nproc: bool) -> None:
    lim = cfg["limits"]
    cpu = int(lim["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_size_bytes"], lim["file_size_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if with_nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))


def _guard_argv(cfg: dict, exe: str) -> list[str]:
    with open(cfg["guard_path"], encoding="utf-8") as f:
        guard_src = f.read()
    return [
        exe,
        "-S",
        "-s",
        "-P",
        "-B",
        "-c",
        guard_src,
        cfg["program"],
        str(cfg["result_fd"]),
        "1" if cfg["audit_hook"] else "0",
        cfg["workdir"],
    ]


def _env(cfg: dict, extra: dict | None = None) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": cfg["workdir"],
        "TMPDIR": cfg["workdir"],
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
    }
    env.update(extra or {})
    return env


def main() -> None:
    cfg = json.loads(sys.argv[1])
    fd = cfg["result_fd"]

    def report(line: str) -> None:
        try:
            os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    try:
        if cfg["mode"] == "namespaces":
            run_namespaces(cfg, report)
        else:
            run_hook_only(cfg, report)
    except SetupError as err:
        report(f"SETUP-ERROR {err}")
        os._exit(SETUP_ERROR_EXIT)
    except BaseException as err:  # noqa: BLE001 - any failure here is a setup failure
        report(f"SETUP-ERROR {type(err).__name__}: {err}")
        os._exit(SETUP_ERROR_EXIT)


def run_hook_only(cfg: dict, report) -> None:
    _set_limits(cfg, with_nproc=False)
    os.umask(0o077)
    report("ISOLATION " + cfg["tag"])
    argv = _guard_argv(cfg, cfg["python"])
    os.execve(argv[0], argv, _env(cfg))


def run_namespaces(cfg: dict, report) -> None:
    libc = _libc()
    uid = int(cfg["uid"])
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    _call("unshare(mnt|net|pid|ipc|uts)", libc.unshare(flags))
    # Nothing done below may propagate back to the host's mounts.
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, cfg["prefix"], cfg["pydir"], None, MS_BIND | MS_REC)
    _remount_all_readonly(libc)
    tmpfs_opts = (
        f"size={int(cfg['limits']['tmpfs_bytes'])},nr_inodes={int(cfg['limits']['tmpfs_inodes'])},"
        f"mode=0700,uid={uid},gid={uid}"
    )
    _mount(libc, "tmpfs", cfg["workdir"], "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts)
    exe = os.path.join(cfg["pydir"], cfg["exe_rel"])
    argv = _guard_argv(cfg, exe)
    env = _env(cfg, {"LD_LIBRARY_PATH": os.path.join(cfg["pydir"], "lib")})
    init_pid = os.fork()
    if init_pid:
        # L: wait for I and pass its status on.
        _, status = os.waitpid(init_pid, 0)
        os._exit(_exit_code(status))

    # I: PID 1 of the new namespace. A /proc of its own hides the host's processes.
    tag = cfg["tag"]
    try:
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
        tag += "+private /proc"
    except SetupError:
        pass  # some container runtimes forbid it; the host /proc stays (read-only)
    report("ISOLATION " + tag)
    try:
        child = os.fork()
    except OSError as err:
        report(f"SETUP-ERROR fork: {err}")
        os._exit(SETUP_ERROR_EXIT)
    if child == 0:
        _exec_program(libc, cfg, uid, argv, env, report)
    code = SETUP_ERROR_EXIT
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            code = _exit_code(status)
            break
    os._exit(code)  # the kernel now kills whatever is left in the namespace


def _exec_program(libc, cfg, uid, argv, env, report) -> None:
    try:
        os.chdir(cfg["workdir"])  # the tmpfs now mounted there
        _set_limits(cfg, with_nproc=True)
        _call("prctl(NO_NEW_PRIVS)", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        if cfg.get("seccomp_sockets") and not _deny_sockets(libc):
            raise SetupError(f"no seccomp filter for machine {os.uname().machine}")
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os.umask(0o077)
        os.execve(argv[0], argv, env)
    except BaseException as err:  # noqa: BLE001
        report(f"SETUP-ERROR exec: {type(err).__name__}: {err}")
        os._exit(SETUP_ERROR_EXIT)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    main()
