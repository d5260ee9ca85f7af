"""`specbench doctor`: every check a GPU host must pass before a run, one line each.

GPU facts come from NVML (gpu.py); the rest from the study, the engine environments,
the hub cache and the results folder. A FAIL is a blocker and names its fix; on a
host without a GPU the GPU lines say so and every other check still runs.
"""

from __future__ import annotations

from pathlib import Path

from harness.doctor.check import Check
from harness.doctor.gpu import gpu_report
from harness.doctor.gpu_checks import gpu_checks
from harness.doctor.host_checks import (
    environment_checks,
    port_checks,
    stale_checks,
    weight_checks,
)
from harness.engines.launch.base import expand_study
from harness.engines.running.stale import find_stale_in
from harness.errors import InputError
from harness.prereg.schema import Study


def run_doctor(
    study: Study,
    results_dir: Path,
    *,
    stop_stale: bool = False,
    doctor_cmd: str = "specbench doctor FILE",
) -> list[Check]:
    """Every check, in the order they are printed. `study` is the text as registered."""
    stale = find_stale_in(results_dir)
    report = gpu_report()
    checks = gpu_checks(study, report, stale)
    try:
        expanded = expand_study(study)
    except InputError as err:
        checks.append(Check("variables", "FAIL", err.lines[0], "set it and run the doctor again"))
        expanded = None
    if expanded is not None:
        checks += environment_checks(expanded, report)
        checks += weight_checks(expanded)
        checks += port_checks(expanded)
    checks += stale_checks(stale, stop_stale, doctor_cmd)
    return checks


__all__ = ["Check", "run_doctor"]
