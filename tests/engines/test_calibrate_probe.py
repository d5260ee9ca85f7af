"""The calibration probe itself (harness/engines/probe/calibrate_probe.py): its CPU list, its
refusal where torch is missing, and a real measurement in the CPU engine's environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.calibration import CALIBRATE_PROBE, ProbeRequest, run_probe
from harness.engines.launch.vllm_engine import default_vllm_cpu_python
from harness.engines.probe.calibrate_probe import parse_cpus


def test_cpu_lists_are_read_as_the_kernel_writes_them():
    assert parse_cpus("0") == [0]
    assert parse_cpus("0,2") == [0, 2]
    assert parse_cpus("4-6,1") == [1, 4, 5, 6]
    with pytest.raises(ValueError):
        parse_cpus(",")


def test_an_interpreter_without_torch_is_refused_in_one_line():
    # The harness's own venv has no torch (engines live in their own environments).
    proc = subprocess.run(
        [sys.executable, str(CALIBRATE_PROBE), "--device", "cpu", "--cpus", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("calibrate_probe: torch is not importable by")


@pytest.mark.vllm
def test_the_probe_measures_plausible_figures_on_one_core_of_this_cpu():
    python = default_vllm_cpu_python()
    if not Path(python).exists():
        pytest.skip(f"the vLLM CPU engine's environment is not installed ({python})")
    cal = run_probe(ProbeRequest(python, "cpu", "float32", threads=1, cpus=[0]), timeout_s=60)
    assert cal.device == "cpu" and cal.cpus == [0] and cal.threads == 1
    assert cal.dtype == "float32" and cal.note is None and cal.device_name
    # One core reads from DRAM at a few to a few tens of GB/s; one core's float32 FMA
    # units do tens to a few hundred GFLOP/s.
    assert 0.5 < cal.bandwidth_gb_s < 500
    assert 0.001 < cal.dense_tflops < 5
    assert cal.bandwidth.best_gb_s >= cal.bandwidth.median_gb_s
    assert cal.matmul.best_tflops >= cal.matmul.median_tflops
    assert cal.bandwidth.bytes >= 256 * 2**20 and cal.bandwidth.repeats >= 3
    assert cal.seconds < 30  # the budget that keeps a run's start short
