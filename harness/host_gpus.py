"""nvidia-smi's one line per GPU (name, driver, memory), asked once per question: the
run's host facts (harness.run.store.host_facts) and each engine start's `gpu` read it."""

from __future__ import annotations

import subprocess

QUERY = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]


def gpu_lines(timeout_s: float = 20) -> list[str] | None:
    """One line per GPU; None where nvidia-smi is absent or did not answer."""
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def gpu_description() -> str | None:
    """The GPUs in one string, for an engine start's record (None: no GPU seen)."""
    lines = gpu_lines()
    return "; ".join(lines) if lines else None


__all__ = ["gpu_description", "gpu_lines"]
