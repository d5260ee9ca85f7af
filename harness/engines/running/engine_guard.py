"""The guard of one engine: stops the engine's processes when the harness is gone.

Run by the harness's interpreter as a script (`python -I engine_guard.py FD PGID
GRACE_S`), in a session of its own so a kill of the harness's process group misses
it, holding the read end of a pipe (the lifeline) whose only write end the harness
keeps. The kernel closes that end however the harness ends, SIGKILL and the OOM
killer included, so end of file on the lifeline means: stop the engine now. The
harness also closes it after a normal stop, when there is nothing left to stop.

It stops the engine's process group and every process it has seen descend from
the group (one that moved to a group of its own is still the engine's): SIGTERM,
then SIGKILL after the grace period. It exits by itself once the group and those
descendants are gone, so it never outlives the engine it guards.
Standard library only, and no harness import: the engine's environment variables
(PYTHONPATH among them) must not decide whether the guard can start.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

LIFELINE_POLL_S = 1.0


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, start time in clock ticks, state) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the name may hold spaces and parentheses
    state = fields[0]
    if state in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19]), state


def _processes() -> dict[int, tuple[int, int, int, str]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def engine_processes(pgid: int, known: dict[int, int]) -> dict[int, int]:
    """pid -> start time of the group's live members and their descendants, plus those
    in `known` that are still the same process (pid not reused)."""
    table = _processes()
    found = {pid: st[2] for pid, st in table.items() if st[1] == pgid}
    for pid, start in known.items():
        st = table.get(pid)
        if st is not None and st[2] == start:
            found[pid] = start
    grew = True
    while grew:  # children of anything found, to any depth
        grew = False
        for pid, st in table.items():
            if pid not in found and st[0] in found:
                found[pid] = st[2]
                grew = True
    found.pop(os.getpid(), None)
    return found


def _signal(pgid: int, procs: dict[int, int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
    for pid in procs:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def stop_engine(pgid: int, known: dict[int, int], grace_s: float) -> None:
    procs = engine_processes(pgid, known)
    if not procs:
        return
    print(
        f"specbench engine guard: the harness is gone; stopping the engine's processes"
        f" {sorted(procs)} (group {pgid})",
        flush=True,
    )
    _signal(pgid, procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        procs = engine_processes(pgid, procs)
        if not procs:
            return
        time.sleep(0.1)
    _signal(pgid, engine_processes(pgid, procs), signal.SIGKILL)


def main(argv: list[str]) -> int:
    fd, pgid, grace_s = int(argv[0]), int(argv[1]), float(argv[2])
    # A terminal's Ctrl-C or a hang-up reaches the harness, which stops its engines
    # itself; the guard waits for the lifeline either way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    known: dict[int, int] = {}
    while True:
        readable, _, _ = select.select([fd], [], [], LIFELINE_POLL_S)
        if readable and os.read(fd, 1) == b"":
            stop_engine(pgid, known, grace_s)
            return 0
        known = engine_processes(pgid, known)
        if not known:
            return 0  # the engine is gone: nothing left to guard


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
