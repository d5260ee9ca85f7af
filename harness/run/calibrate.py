"""A study's calibration: which probe it runs, and the run's record of it.

The probe runs in the engine environment of the study's first baseline arm (its
interpreter as the engine kind resolves it, after `${VAR}` expansion), under that arm's
environment (an arm's CUDA_VISIBLE_DEVICES or ONEDNN_MAX_CPU_ISA applies to the probe
too): on GPU 0 of what the arm sees for a GPU engine kind, else on the CPU cores the CPU
engine's worker is bound to. Its matmul dtype is the one the arm's engine computes in
when the arm names one (launch.dtype; `cpu_native` as the engine kind resolves it on this
host), else the model's precision (`model.weight_bytes_per_param`: 1 float8, 2
bfloat16, 4 float32). Why the arm's first: on an AVX2-only CPU the demo registers 2-byte
weights but serves float32, and a bfloat16 matmul there runs at ~1 GFLOP/s against ~70
in float32, which would make every predicted step compute-bound.

`specbench run` calibrates once, after the run folder exists and before the smoke stage
(harness/commands/run.py); a resumed run keeps a calibration that succeeded. A scripted
study (engine: scripted) has no torch in its interpreter and is skipped without starting
a process, as is an arm attached to an endpoint; any other failure is recorded with its
reason and the run goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.calibration import (
    TIMEOUT_S,
    CalibrationFailed,
    CalibrationRecord,
    ProbeRequest,
    RegisteredFigures,
    run_probe,
)
from harness.prereg.schema import Arm, Study
from harness.run.store import RunStore

WEIGHT_DTYPES = {1.0: "float8", 2.0: "bfloat16", 4.0: "float32"}
ENGINE_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class StudyProbe:
    """The probe a study's calibration runs, or why none runs."""

    request: ProbeRequest | None
    skip: str | None = None
    dtype_why: str | None = None


def first_baseline(study: Study) -> Arm:
    return next(a for a in study.arms if a.is_baseline)


def cpu_engine_cores(bind: str | None = None) -> list[int]:
    """The cores vLLM's CPU worker is bound to. An explicit VLLM_CPU_OMP_THREADS_BIND list
    (`0-3`, `0,2`; the first worker's before a `|`) names them; `auto` (the CPU kind's
    default) binds every allowed core but the last, which vLLM keeps for the rest of the
    engine (one worker; on a 2-core host: core 0)."""
    allowed = sorted(os.sched_getaffinity(0))
    if bind and bind not in ("auto", "all", "nobind"):
        try:
            from harness.engines.probe.calibrate_probe import parse_cpus

            return parse_cpus(bind.split("|")[0])
        except ValueError:
            pass
    return allowed[:-1] if len(allowed) > 1 else allowed


def probe_dtype(study: Study, arm: Arm, override: str | None = None) -> tuple[str, str]:
    """(dtype, why) for the probe's matmul."""
    if override:
        return override, "--dtype"
    from harness.engines import get_engine_kind

    kind = get_engine_kind(arm.engine)
    engine = kind.dtype_for(arm)
    if engine in ENGINE_DTYPES:
        return engine, f"arm {arm.name}'s engine computes in {kind.dtype_setting(arm)}"
    bpp = float(study.model.weight_bytes_per_param)
    dtype = WEIGHT_DTYPES.get(bpp)
    if dtype is None:
        return "bfloat16", f"model.weight_bytes_per_param {bpp:g} names no dtype: bfloat16"
    return dtype, f"model.weight_bytes_per_param {bpp:g}"


def study_probe(
    study: Study, gpu: int | None = None, python: str | None = None, dtype: str | None = None
) -> StudyProbe:
    """The probe for a study, its baseline arm's `${VAR}`s expanded as a run expands them
    (the model's are not needed)."""
    from harness.engines import get_engine_kind
    from harness.engines.launch.base import expand_arm

    arm, unset = expand_arm(first_baseline(study))
    kind = get_engine_kind(arm.engine)
    if python is None:
        if arm.scripted is not None:
            return StudyProbe(
                None, f"arm {arm.name} runs the scripted test engine: no torch in its interpreter"
            )
        if arm.attach is not None:
            return StudyProbe(
                None, f"arm {arm.name} attaches to a running endpoint: no engine environment here"
            )
        python = kind.interpreter(arm)
        if python is None:
            return StudyProbe(
                None,
                f"arm {arm.name} starts by launch.command: no interpreter"
                " to probe with (give --python)",
            )
        if "${" in python:
            return StudyProbe(
                None,
                f"arm {arm.name}: launch.python {python}: environment"
                f" variable {unset[0] if unset else '?'} is not set",
            )
    env = kind.environment(arm)
    chosen, why = probe_dtype(study, arm, dtype)
    if gpu is not None or kind.gpu:
        device = f"cuda:{gpu if gpu is not None else 0}"
        return StudyProbe(ProbeRequest(python, device, chosen, env=env), dtype_why=why)
    cores = cpu_engine_cores(env.get("VLLM_CPU_OMP_THREADS_BIND"))
    return StudyProbe(
        ProbeRequest(python, "cpu", chosen, threads=len(cores), cpus=cores, env=env), dtype_why=why
    )


def calibrate_study(
    study: Study,
    gpu: int | None = None,
    python: str | None = None,
    dtype: str | None = None,
    timeout_s: float = TIMEOUT_S,
    probe: os.PathLike | str | None = None,
) -> CalibrationRecord:
    """The outcome, never an exception for a probe that did not measure."""
    registered = RegisteredFigures.of(study)
    target = study_probe(study, gpu, python, dtype)
    if target.request is None:
        return CalibrationRecord(status="skipped", reason=target.skip, registered=registered)
    req = target.request
    facts: dict[str, Any] = {
        "interpreter": req.python,
        "device": req.device,
        "dtype": req.dtype,
        "dtype_why": target.dtype_why,
        "registered": registered,
    }
    try:
        measured = run_probe(req, timeout_s, probe=probe)
    except CalibrationFailed as err:
        return CalibrationRecord(status="failed", reason=str(err), **facts)
    return CalibrationRecord(status="ok", measured=measured, **facts)


def record_calibration(
    store: RunStore,
    study: Study,
    note: Callable[[str], None],
    calibrate: Callable[[Study], CalibrationRecord] = calibrate_study,
) -> CalibrationRecord:
    """Calibrate once per run into the manifest's `calibration`; a resume keeps one that
    succeeded. Never raises: the roofline is a prediction beside the measurements, not
    worth a run."""
    from harness.calibration import effective_hardware

    before = store.manifest().calibration
    if before is not None and before.status == "ok":
        note(f"calibration kept from the run's start: {effective_hardware(study, before).line()}")
        return before
    try:
        record = calibrate(study)
    except Exception as err:  # noqa: BLE001 - whatever went wrong is recorded, not raised
        record = CalibrationRecord(
            status="failed",
            reason=f"{type(err).__name__}: {err}",
            registered=RegisteredFigures.of(study),
        )
    store.edit_manifest(lambda m: setattr(m, "calibration", record))
    if record.status == "ok":
        note(effective_hardware(study, record).line())
    else:
        note(
            f"calibration {record.status}: {record.reason}; the roofline uses the registered"
            " figures"
        )
    return record
