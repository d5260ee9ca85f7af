"""The host's foreign CPU share (harness.measure.host_cpu) of a quiet window and a busy one.

    .venv/bin/python benchmarks/host_foreign_share.py            # 10 s quiet, 10 s busy
    .venv/bin/python benchmarks/host_foreign_share.py --seconds 5 --repeat 3

This script stands for the harness (no engine: only it is own). Each window is
measured as a cell is, with the 1 Hz sampler: once with nothing else started, once
with a process spinning on CPU 0, started outside this process's tree (so it counts
as foreign, as another program would). On n CPUs one spinning process is ~1/n of the
host's CPU time. What picks `recording.host_foreign_cpu_limit`: a limit between the
quiet figures and the busy ones.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.measure.host_cpu import HostCpu, HostCpuMeter, HostCpuSampler  # noqa: E402


def spin_outside_this_tree(cpu: int) -> int:
    """Start a process spinning on `cpu` whose parent exits at once: it is no
    descendant of this one. Returns its pid (end it with os.kill)."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    out = subprocess.run(
        ["sh", "-c", '"$0" -c "$1" </dev/null >/dev/null 2>&1 & echo $!', sys.executable, code],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return int(out.stdout)


def window(seconds: float) -> HostCpu | None:
    sampler = HostCpuSampler(HostCpuMeter(engine_group=None))
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def show(label: str, cpu: HostCpu | None) -> None:
    if cpu is None:
        print(f"{label}: /proc/stat cannot be read here")
    else:
        print(
            f"{label}: foreign {cpu.foreign_share:.3f}, steal {cpu.steal_share:.3f},"
            f" foreign + steal {cpu.foreign_share + cpu.steal_share:.3f}",
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="each window's length")
    ap.add_argument("--repeat", type=int, default=1, help="quiet/busy pairs")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    for i in range(args.repeat):
        show(f"quiet {i + 1}", window(args.seconds))
        pid = spin_outside_this_tree(0)
        try:
            time.sleep(0.2)  # let it reach its core
            show(f"busy  {i + 1}", window(args.seconds))
        finally:
            os.kill(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
