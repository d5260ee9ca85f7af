"""Sandbox guard: runs one untrusted program and reports how it ended.

Executed by the launcher as ``python -S -s -P -B -c <this source> PROGRAM FD HOOK WORKDIR``
inside the sandbox (it is passed as text, so the sandbox uid need not be able
to read the harness's files). ``-S``: no site module, so the program sees the
standard library only (no third-party packages, no .pth files of the host);
the guard supplies ``exit``/``quit``, which site would have added. Protocol on
the result pipe FD:

    START             written before any untrusted code runs
    PASS              the program ran to its end without an exception
    FAIL <reason>     it raised (SystemExit included: exiting before the tests
                      finish is a failure, whatever the exit code)

Only a PASS line as the last line together with exit status 0 counts as a pass;
a program that calls os._exit() before its tests finish leaves no verdict.

With HOOK=1 an audit hook (PEP 578) refuses, with PermissionError: opening a
file for writing, and removing, renaming, creating, linking or changing files
or directories, outside WORKDIR (``/dev/null`` excepted); sockets; signals to
any process but itself; fork/exec/spawn/subprocess; ctypes; and changing
rlimits. The hook runs in the program's own process, so it is a second layer:
a program written to defeat this harness could get around it (which is why the
namespace mode does not depend on it). Likewise the verdict lines share the
process with the program, so such a program could forge a PASS; it cannot harm
the run.
"""

import os
import sys


def _install_hook(workdir):
    root = os.path.realpath(workdir)
    prefix = root.rstrip(os.sep) + os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    allowed = ("/dev/null",)
    my_pid = os.getpid()
    abspath, fsdecode = os.path.abspath, os.fsdecode

    def inside(path):
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            p = abspath(fsdecode(path))
        except (TypeError, ValueError, UnicodeError):
            return False
        return p == root or p.startswith(prefix) or p in allowed

    denied = {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "os.startfile",
        "os.killpg",
        "os.link",
        "os.symlink",
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getnameinfo",
        "socket.sethostname",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.cdata",
        "ctypes.call_function",
        "ctypes.create_string_buffer",
        "resource.setrlimit",
        "resource.prlimit",
        "os.setxattr",
        "os.removexattr",
        "os.chroot",
    }
    # event -> (indices of path arguments that must be inside, indices of dir_fd arguments)
    path_events = {
        "os.remove": ((0,), (1,)),
        "os.rmdir": ((0,), (1,)),
        "os.mkdir": ((0,), (2,)),
        "os.chmod": ((0,), (2,)),
        "os.chown": ((0,), (3,)),
        "os.utime": ((0,), (3,)),
        "os.rename": ((0, 1), (2, 3)),
        "os.truncate": ((0,), ()),
        "os.chflags": ((0,), ()),
        "os.lchflags": ((0,), ()),
        "shutil.rmtree": ((0,), (1,)),
        "shutil.copyfile": ((1,), ()),
        "shutil.copytree": ((1,), ()),
        "shutil.move": ((0, 1), ()),
    }

    # The hook itself raises no audit events (abspath, fsdecode and getcwd
    # have none), so it cannot recurse; and it keeps no state that a second
    # thread could race.
    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags
            )
            if writing and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} is outside the work dir")
        elif event in denied:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "os.kill":
            if args[0] != my_pid:
                raise PermissionError("sandbox: os.kill of another process is not allowed")
        elif event in path_events:
            path_idx, dirfd_idx = path_events[event]
            for i in path_idx:
                if i < len(args) and not inside(args[i]):
                    raise PermissionError(f"sandbox: {event} outside the work dir")
            for i in dirfd_idx:  # dir_fd-relative paths cannot be resolved here
                if i < len(args) and args[i] is not None:
                    raise PermissionError(f"sandbox: {event} with dir_fd is not allowed")

    sys.addaudithook(hook)


def _describe(exc):
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = type(exc).__name__
    return text.replace("\n", " ")[:500]


def _main():
    program_path, fd, hook, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
    with open(program_path, encoding="utf-8") as f:
        source = f.read()

    def emit(line):
        try:
            os.write(fd, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    def flush():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001, S110 - a closed or replaced stream
                pass

    import builtins

    def _exit(code=None):
        raise SystemExit(code)

    # What site.py would provide (typeshed types them as site's Quitter objects).
    builtins.exit = builtins.quit = _exit  # type: ignore[assignment]
    if hook:
        _install_hook(workdir)
    sys.argv = ["program.py"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "program.py"}
    emit("START")
    try:
        exec(compile(source, "program.py", "exec"), namespace)  # noqa: S102 - the point
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
        flush()
        emit("FAIL " + _describe(exc))
        os._exit(1)
    flush()
    emit("PASS")
    os._exit(0)


_main()
