"""Roofline inputs measured on the machine that runs the study, beside the registered ones.

A registration states `hardware.memory_bandwidth_gb_s` and `hardware.dense_tflops` once
(published figures, or measured on another machine); the plan's estimate and the
analysis's predicted speedups divide by them. This module runs the probe
(harness/engines/probe/calibrate_probe.py) with an engine environment's interpreter, in a
subprocess under a timeout, reads its one JSON line into a `Calibration`, and says which
figures a roofline should use: the measured ones where a calibration succeeded, the
registered ones otherwise, both kept (`EffectiveHardware`). What a run records in its
manifest is a `CalibrationRecord` (harness/run/calibrate.py writes it): the outcome,
never an exception, so a run without torch in its engine's environment still runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.prereg.schema import Study
from harness.prereg.schema.base import Positive

if TYPE_CHECKING:
    from harness.rundir.manifest import Manifest

CALIBRATE_PROBE = Path(__file__).parent / "engines" / "probe" / "calibrate_probe.py"
# The probe takes ~5 s on one CPU core and under 20 s on a GPU; torch's import on a
# loaded host and a first CUDA context take the rest.
TIMEOUT_S = 120.0

CalibrationStatus = Literal["ok", "failed", "skipped"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BandwidthFigures(_Record):
    method: Literal["read"]
    what: str
    bytes: int
    repeats: int
    best_gb_s: Positive
    median_gb_s: Positive


class MatmulFigures(_Record):
    m: int
    n: int
    k: int
    repeats: int
    best_tflops: Positive
    median_tflops: Positive


class Calibration(_Record):
    """What the probe measured (its JSON line), with when and by which interpreter."""

    device: str  # cpu, cuda:N
    device_name: str
    dtype: str  # the matmul's dtype as measured
    requested_dtype: str
    note: str | None = None  # e.g. float8 asked for, bfloat16 measured
    torch: str
    threads: int | None = None
    cpus: list[int] | None = None
    bandwidth_gb_s: Positive  # best of the repeats
    dense_tflops: Positive  # best of the repeats
    bandwidth: BandwidthFigures
    matmul: MatmulFigures
    seconds: float
    when: float  # wall clock, seconds since the epoch
    interpreter: str


class RegisteredFigures(_Record):
    gpu: str
    memory_bandwidth_gb_s: Positive
    dense_tflops: Positive

    @classmethod
    def of(cls, study: Study) -> RegisteredFigures:
        hw = study.hardware
        return cls(
            gpu=hw.gpu, memory_bandwidth_gb_s=hw.memory_bandwidth_gb_s, dense_tflops=hw.dense_tflops
        )


class CalibrationRecord(_Record):
    """A calibration's outcome as the manifest keeps it (`calibration`)."""

    status: CalibrationStatus
    reason: str | None = None  # why it failed or was skipped
    interpreter: str | None = None
    device: str | None = None
    dtype: str | None = None  # asked for
    dtype_why: str | None = None
    measured: Calibration | None = None
    registered: RegisteredFigures


class CalibrationFailed(Exception):
    """The probe did not give figures: the one-line reason."""


@dataclass(frozen=True)
class ProbeRequest:
    """How to run the probe: which interpreter, on which device, in which dtype."""

    python: str
    device: str = "cpu"
    dtype: str = "bfloat16"
    threads: int | None = None
    cpus: list[int] | None = None
    env: dict[str, str] | None = None  # over os.environ (an arm's CUDA_VISIBLE_DEVICES)

    def command(self, probe: Path = CALIBRATE_PROBE) -> list[str]:
        cmd = [self.python, str(probe), "--device", self.device, "--dtype", self.dtype]
        if self.threads is not None:
            cmd += ["--threads", str(self.threads)]
        if self.cpus:
            cmd += ["--cpus", ",".join(str(c) for c in self.cpus)]
        return cmd


def run_probe(
    request: ProbeRequest, timeout_s: float = TIMEOUT_S, probe: os.PathLike | str | None = None
) -> Calibration:
    """The probe's figures (`probe`: another script, for tests); CalibrationFailed with
    the reason in one line otherwise."""
    env = {**os.environ, **(request.env or {})}
    when = time.time()
    try:
        proc = subprocess.run(
            request.command(Path(probe or CALIBRATE_PROBE)),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise CalibrationFailed(f"the probe ran past its {timeout_s:g} s timeout") from None
    except OSError as err:
        raise CalibrationFailed(
            f"{request.python}: cannot run it ({err.strerror or err})"
        ) from None
    if proc.returncode != 0:
        raise CalibrationFailed(f"the probe exited {proc.returncode}: {_last_line(proc.stderr)}")
    return parse_probe_output(proc.stdout, when=when, interpreter=request.python)


def parse_probe_output(stdout: str, when: float, interpreter: str) -> Calibration:
    """The last JSON object line of the probe's stdout as a Calibration."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        raise CalibrationFailed(f"the probe printed no JSON line (stdout: {_last_line(stdout)})")
    try:
        data: dict[str, Any] = json.loads(lines[-1])
        return Calibration.model_validate({**data, "when": when, "interpreter": interpreter})
    except json.JSONDecodeError as err:
        raise CalibrationFailed(f"the probe's output is not JSON ({err.msg})") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CalibrationFailed(
            f"the probe's output does not fit: {where}: {first['msg']}"
        ) from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(nothing)"


# --- which figures a roofline uses ---------------------------------------------------


@dataclass(frozen=True)
class RooflineFigures:
    """The two figures plan.roofline_step_s divides by."""

    memory_bandwidth_gb_s: float
    dense_tflops: float


@dataclass(frozen=True)
class EffectiveHardware:
    """The roofline's inputs: measured where a calibration succeeded, registered
    otherwise, the registered ones kept beside."""

    registered: RooflineFigures
    measured: RooflineFigures | None = None
    why_registered: str | None = None  # why no measured figures are used

    @property
    def used(self) -> RooflineFigures:
        return self.measured or self.registered

    @property
    def source(self) -> Literal["measured", "registered"]:
        return "measured" if self.measured is not None else "registered"

    def line(self) -> str:
        r = self.registered
        if self.measured is None:
            return (
                f"roofline inputs: registered {r.memory_bandwidth_gb_s:g} GB/s,"
                f" {r.dense_tflops:g} TFLOP/s"
                + (f" ({self.why_registered})" if self.why_registered else "")
            )
        m = self.measured
        return (
            f"roofline inputs: measured {figure_text(m.memory_bandwidth_gb_s)} GB/s,"
            f" {figure_text(m.dense_tflops)} TFLOP/s (registered"
            f" {r.memory_bandwidth_gb_s:g}, {r.dense_tflops:g})"
        )


def figure_text(value: float) -> str:
    """Three significant digits, never an exponent (4800 GB/s, 0.0815 TFLOP/s)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def effective_hardware(
    study: Study, calibration: Calibration | CalibrationRecord | None
) -> EffectiveHardware:
    hw = study.hardware
    registered = RooflineFigures(hw.memory_bandwidth_gb_s, hw.dense_tflops)
    if isinstance(calibration, CalibrationRecord):
        if calibration.measured is None:
            why = f"calibration {calibration.status}: {calibration.reason or 'no figures'}"
            return EffectiveHardware(registered, why_registered=why)
        calibration = calibration.measured
    if calibration is None:
        return EffectiveHardware(registered, why_registered="not calibrated")
    return EffectiveHardware(
        registered, RooflineFigures(calibration.bandwidth_gb_s, calibration.dense_tflops)
    )


def run_hardware(study: Study, manifest: Manifest) -> EffectiveHardware:
    """The roofline inputs of a run: its calibration's where it succeeded (the manifest
    reader checked the record; None for a run from before calibration existed)."""
    return effective_hardware(study, manifest.calibration)
