"""The doctor's GPU lines: model against `hardware.gpu`, driver and CUDA, other
processes holding GPU memory, free GPU memory against what the arms will ask for."""

from __future__ import annotations

import psutil

from harness.doctor.check import Check
from harness.doctor.gpu import GIB, GpuReport, GpuStatus, gpu_matches
from harness.engines import get_engine_kind
from harness.engines.launch.base import option_value
from harness.engines.running.stale import StaleEngine
from harness.prereg.schema import Study


def gpu_arms(study: Study) -> list[str]:
    """The launched arms whose engine needs a GPU on this host."""
    return [a.name for a in study.arms if a.launch is not None and get_engine_kind(a.engine).gpu]


def memory_fraction(study: Study) -> tuple[float, str] | None:
    """The largest share of a GPU's memory an arm's engine will claim, and whose (its
    kind's `memory_fraction_flag`, else its `default_memory_fraction`)."""
    best: tuple[float, str] | None = None
    for arm in study.arms:
        kind = get_engine_kind(arm.engine)
        flag = kind.memory_fraction_flag
        if arm.launch is None or flag is None:
            continue
        raw = option_value(list(arm.launch.extra_args), flag)
        if raw is None and kind.default_memory_fraction is not None:
            raw = str(kind.default_memory_fraction)
        try:
            value = float(raw) if raw is not None else None
        except ValueError:
            value = None
        if value is not None and (best is None or value > best[0]):
            best = (value, f"{flag} {value:g} of arm {arm.name}")
    return best


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _who(pid: int, stale: list[StaleEngine]) -> str:
    for s in stale:
        if pid in s.processes or pid == s.pid:
            return f"pid {pid}: a stale specbench engine ({s.describe()})"
    try:
        return f"pid {pid}: {' '.join(psutil.Process(pid).cmdline())[:120]}"
    except psutil.Error:
        return f"pid {pid} (not visible from here)"


def gpu_checks(study: Study, report: GpuReport, stale: list[StaleEngine]) -> list[Check]:
    need = gpu_arms(study)
    hw = study.hardware
    registered = f"{hw.count} x {hw.gpu}"
    if report.error or not report.gpus:
        why = report.error or "none found"
        if need:
            first = Check(
                "GPU",
                "FAIL",
                f"no GPU ({why}); the study registers {registered} and"
                f" arms {', '.join(need)} need one",
                "run it on the registered GPU host; the CPU demo (examples/cpu.yaml)"
                " runs without one",
            )
        else:
            first = Check(
                "GPU", "ok", f"no GPU ({why}), and none needed: no arm's engine runs on one"
            )
        return [first] + [
            Check(n, "skip", "no GPU")
            for n in ("driver and CUDA", "other GPU processes", "free GPU memory")
        ]
    matching = [g for g in report.gpus if gpu_matches(hw.gpu, g)]
    seen = "; ".join(f"GPU {g.index} {g.name} ({_gib(g.total_bytes)})" for g in report.gpus)
    if len(matching) >= hw.count:
        out = [Check("GPU", "ok", f"{seen}: matches hardware.gpu {registered}")]
        judged = matching[: hw.count]
    elif need:
        out = [
            Check(
                "GPU",
                "FAIL",
                f"{seen}; the study registers {registered}",
                "run on the registered GPU (another model is not the registered study)",
            )
        ]
        judged = report.gpus[: hw.count]
    else:
        out = [Check("GPU", "ok", f"{seen}; no arm's engine needs one")]
        judged = report.gpus[: hw.count]
    out.append(
        Check(
            "driver and CUDA",
            "ok",
            f"driver {report.driver}, CUDA {report.cuda or '?'} (the newest the driver"
            " runs; each engine's torch build is checked below)",
        )
    )
    out.append(_process_check(judged, stale))
    out.append(_free_check(study, judged))
    return out


def _process_check(judged: list[GpuStatus], stale: list[StaleEngine]) -> Check:
    held = [(g, p) for g in judged for p in g.processes]
    if not held:
        return Check(
            "other GPU processes",
            "ok",
            "none hold memory on " + ", ".join(f"GPU {g.index}" for g in judged),
        )
    named = "; ".join(
        f"GPU {g.index} {_gib(p.used_bytes) if p.used_bytes else '? GiB'} by {_who(p.pid, stale)}"
        for g, p in held
    )
    pids = " ".join(str(p.pid) for _, p in held)
    return Check(
        "other GPU processes",
        "FAIL",
        f"memory held: {named}",
        f"stop them (kill {pids}); a run must have the GPU to itself",
    )


def _free_check(study: Study, judged: list[GpuStatus]) -> Check:
    want = memory_fraction(study)
    free = "; ".join(
        f"GPU {g.index} {_gib(g.free_bytes)} of {_gib(g.total_bytes)} free" for g in judged
    )
    if want is None:
        return Check("free GPU memory", "ok", f"{free} (no arm fixes a memory share)")
    short = [g for g in judged if g.free_bytes < want[0] * g.total_bytes]
    if short:
        g = short[0]
        return Check(
            "free GPU memory",
            "FAIL",
            f"{free}; {want[1]} needs {_gib(int(want[0] * g.total_bytes))} free at start",
            "free the GPU (see the processes above) or lower that share in the arm",
        )
    return Check("free GPU memory", "ok", f"{free}; the largest claim is {want[1]}")
