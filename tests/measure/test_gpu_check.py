"""benchmarks/gpu_telemetry_check.py: runs without a GPU (says why it cannot measure),
prints a line a second through the fake binding, and judges rising and falling."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_telemetry_check.py"
FAKE_DIR = ROOT / "tests" / "fake_nvml"


def check(*args: str, scenario: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML", "CUDA_VISIBLE_DEVICES")}
    if scenario is not None:
        env.update(PYTHONPATH=str(FAKE_DIR), FAKE_NVML=json.dumps(scenario))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def test_without_nvml_it_says_why_and_exits_0():
    proc = check(scenario={"init_error": 12})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "cannot measure: no GPU telemetry: NVML did not start (NVML Shared Library Not Found)"
    )


# Phases by the clock, sampled each second: a reading must fall in each. The after phase is
# two seconds, so its reading at 3 s is a second clear of both ends (with one second, the
# 2 s reading raced the switch to "after" and, the main loop a few ms late, was "load").
@pytest.mark.timing
def test_with_a_gpu_it_prints_every_figure_each_second_and_a_summary():
    proc = check(
        "--idle-s",
        "1",
        "--load-s",
        "1",
        "--after-s",
        "2",
        "--no-load",
        scenario={"clock_event_bits": 1, "events": [{"calls": [2], "bits": 0x4}]},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if " GPU 0 " in ln]
    assert len(lines) >= 3
    assert lines[0].split()[:2] == ["0s", "idle"] and "after" in lines[-1]
    for part in (
        "SM  1755 MHz",
        "mem  1593 MHz",
        "280.0/350 W",
        "61 C",
        "util  97%",
        "mem used   72000 MiB",
        "read ",
    ):
        assert part in lines[0], (part, lines[0])
    assert "events gpu_idle" in lines[0] and "THROTTLED" not in lines[0]
    assert "events sw_power_cap THROTTLED" in lines[1]
    assert "== summary" in proc.stdout and "event loop lag while sampling" in proc.stdout
    assert "NVML reading of 1 GPU(s)" in proc.stdout


def test_the_nvml_boundary_needs_nothing_but_the_standard_library():
    """The script must run on a GPU host that has torch and the binding and nothing else."""
    code = (
        "import sys; sys.modules['pydantic'] = None; sys.path.insert(0, '.');"
        " import harness.measure.gpu"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _module():
    spec = importlib.util.spec_from_file_location("gpu_telemetry_check", SCRIPT)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _rows(power: dict[str, float], util: dict[str, float]) -> list[dict]:
    return [
        {"phase": p, "ok": True, "power_w": power[p], "gpu_util_pct": util[p]}
        for p in ("idle", "load", "after")
        for _ in range(3)
    ]


def test_telemetry_follows_the_load_only_if_power_and_utilization_rise_and_fall():
    follows = _module().followed_the_load
    ok, words = follows(
        _rows({"idle": 75, "load": 650, "after": 120}, {"idle": 0, "load": 100, "after": 0})
    )
    assert ok and words == "power_w 75 -> 650 -> 120, gpu_util_pct 0 -> 100 -> 0"
    assert not follows(
        _rows(
            {"idle": 75, "load": 650, "after": 700},  # did not fall
            {"idle": 0, "load": 100, "after": 0},
        )
    )[0]
    assert not follows(
        _rows(
            {"idle": 75, "load": 650, "after": 80},  # utilization flat
            {"idle": 0, "load": 0, "after": 0},
        )
    )[0]
    assert follows([])[0] is False
