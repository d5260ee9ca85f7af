"""GPU telemetry check: NVML each second while the GPU idles, works and idles again.

    python benchmarks/gpu_telemetry_check.py [--idle-s 8] [--load-s 20] [--after-s 12] [--no-load]

Reads the GPUs through the harness's own NVML boundary (harness.measure.gpu) and prints
one line a second per GPU: phase, SM and memory clocks, power draw and limit,
temperature, utilization, memory used, clock-event (throttle) reasons, and how long the
reading took. The load is a bf16 matrix product through torch in a child process, so
this process holds only the sampling thread and an event loop whose lag it reports (the
question being whether NVML's blocking calls would hold a client's loop). A summary per
phase follows; the check fails (exit 1) if power and utilization did not rise under
the load and fall after it. Needs only the NVML binding (nvidia-ml-py) and, for the
load, torch: about a minute on a GPU. Without NVML it says why it cannot measure and
exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.measure.gpu import Gpu, NoTelemetry, Nvml, open_nvml  # noqa: E402

THROTTLE = {"sw_power_cap", "hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"}

# The child: torch's start-up happens before "load start", so the phases are the GPU's.
LOAD = r"""
import sys, time, torch
idle_s, load_s = float(sys.argv[1]), float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", torch.cuda.get_device_name(0), flush=True)
time.sleep(idle_s)
print("load start", flush=True)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < load_s:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
took = time.monotonic() - t0
print(f"load end: {n} products, {2 * 8192 ** 3 * n / took / 1e12:.0f} TFLOP/s", flush=True)
"""


class Phases:
    """The phase now, moved by the load child's lines (or by the clock without a load)."""

    def __init__(self) -> None:
        self.now = "idle"
        self.notes: list[str] = []


def read_load_child(proc: subprocess.Popen, phases: Phases) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.strip()
        if line == "load start":
            phases.now = "load"
        elif line.startswith("load end"):
            phases.now = "after"
        phases.notes.append(line)
        print(f"# load: {line}", flush=True)


def sample_each_second(
    nvml: Nvml, gpus: list[Gpu], phases: Phases, stop: threading.Event, rows: list[dict]
) -> None:
    """The harness's sampler in miniature (same grid, own thread), printing as it goes."""
    start, k = time.monotonic(), 0
    while not stop.is_set():
        due = start + k * 1.0
        if due > time.monotonic() and stop.wait(due - time.monotonic()):
            break
        began = time.monotonic()
        readings = [nvml.read(g) for g in gpus]
        took_ms = (time.monotonic() - began) * 1000
        for r in readings:
            rows.append({"t": due - start, "phase": phases.now, "took_ms": took_ms, **r})
            print(line_of(rows[-1]), flush=True)
        k = int((time.monotonic() - start) // 1.0) + 1


def line_of(r: dict) -> str:
    if not r["ok"]:
        return f"{r['t']:5.0f}s {r['phase']:5} GPU {r['index']}  gap: {r['error']}"

    def f(key: str, fmt: str) -> str:
        return "-" if r.get(key) is None else format(r[key], fmt)

    events = ",".join(r.get("clock_events") or []) or "none"
    hot = " THROTTLED" if THROTTLE & set(r.get("clock_events") or []) else ""
    return (
        f"{r['t']:5.0f}s {r['phase']:5} GPU {r['index']}  SM {f('sm_clock_mhz', '5.0f')} MHz"
        f"  mem {f('mem_clock_mhz', '5.0f')} MHz  {f('power_w', '6.1f')}/"
        f"{f('power_limit_w', '.0f')} W  {f('temperature_c', '3.0f')} C"
        f"  util {f('gpu_util_pct', '3.0f')}%  mem used {f('memory_used_mib', '7.0f')} MiB"
        f"  events {events}{hot}  read {r['took_ms']:.1f} ms"
    )


async def loop_lag(stop: threading.Event, lags: list[float]) -> None:
    """How late a 10 ms timer fires on this process's event loop while sampling runs."""
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        lags.append((time.monotonic() - t - 0.01) * 1000)


def summary(rows: list[dict]) -> list[str]:
    out = []
    for phase in ("idle", "load", "after"):
        got = [r for r in rows if r["phase"] == phase and r["ok"]]
        if not got:
            continue

        def mean(key: str, got: list[dict] = got) -> float:
            values = [r[key] for r in got if r.get(key) is not None]
            return statistics.fmean(values) if values else float("nan")

        events = sorted({e for r in got for e in r.get("clock_events") or []})
        out.append(
            f"{phase:5}: {len(got)} readings, SM {mean('sm_clock_mhz'):.0f} MHz, power"
            f" {mean('power_w'):.1f} W, temperature {mean('temperature_c'):.1f} C"
            f" (max {max((r['temperature_c'] or 0) for r in got):.0f}), utilization"
            f" {mean('gpu_util_pct'):.0f}%, events seen: {', '.join(events) or 'none'}"
        )
    return out


def followed_the_load(rows: list[dict]) -> tuple[bool, str]:
    def mean(phase: str, key: str) -> float | None:
        values = [
            r[key] for r in rows if r["phase"] == phase and r["ok"] and r.get(key) is not None
        ]
        return statistics.fmean(values) if values else None

    figures = {
        (p, k): mean(p, k) for p in ("idle", "load", "after") for k in ("power_w", "gpu_util_pct")
    }
    if any(v is None for v in figures.values()):
        return False, "a phase has no power or utilization readings"
    rose = all(
        figures["load", k] > figures["idle", k] and figures["load", k] > figures["after", k]
        for k in ("power_w", "gpu_util_pct")
    )
    words = ", ".join(
        f"{k} {figures['idle', k]:.0f} -> {figures['load', k]:.0f} -> {figures['after', k]:.0f}"
        for k in ("power_w", "gpu_util_pct")
    )
    return rose, words


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=8.0, help="idle before the load")
    ap.add_argument("--load-s", type=float, default=20.0, help="matrix products")
    ap.add_argument("--after-s", type=float, default=12.0, help="idle after the load")
    ap.add_argument("--no-load", action="store_true", help="sample only; start no torch load")
    args = ap.parse_args()
    nvml = open_nvml()
    if isinstance(nvml, NoTelemetry):
        print(f"cannot measure: {nvml.reason}")
        return 0
    try:
        sel = nvml.select(os.environ.get("CUDA_VISIBLE_DEVICES"))
        print(f"NVML: {nvml.facts()}")
        if not sel.gpus:
            print(f"cannot measure: no GPU selected ({'; '.join(sel.missing)})")
            return 0
        print(f"sampling {[g.describe() for g in sel.gpus]} ({sel.source})")
        return run_check(args, nvml, sel.gpus)
    finally:
        nvml.close()


def run_check(args: argparse.Namespace, nvml: Nvml, gpus: list[Gpu]) -> int:
    phases, rows, lags = Phases(), [], []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_each_second, args=(nvml, gpus, phases, stop, rows))
    child = None
    has_torch = (
        not args.no_load
        and subprocess.run(
            [
                sys.executable,
                "-c",
                "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)",
            ],
            capture_output=True,
        ).returncode
        == 0
    )
    if not has_torch:
        print(
            "# no load: "
            + ("--no-load" if args.no_load else "torch with CUDA is not importable here")
            + "; phases by the clock"
        )
    sampler.start()

    async def drive() -> None:
        nonlocal child
        probe = asyncio.create_task(loop_lag(stop, lags))
        if has_torch:
            child = subprocess.Popen(
                [sys.executable, "-c", LOAD, str(args.idle_s), str(args.load_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            reader = threading.Thread(target=read_load_child, args=(child, phases), daemon=True)
            reader.start()
            await asyncio.to_thread(child.wait)
        else:
            await asyncio.sleep(args.idle_s)
            phases.now = "load"
            await asyncio.sleep(args.load_s)
            phases.now = "after"
        phases.now = "after"
        await asyncio.sleep(args.after_s)
        stop.set()
        await probe

    asyncio.run(drive())
    sampler.join(5)
    print("\n== summary")
    for line in summary(rows):
        print(line)
    took = sorted(r["took_ms"] for r in rows)
    if took:
        print(
            f"NVML reading of {len(gpus)} GPU(s): p50 {statistics.median(took):.2f} ms,"
            f" max {took[-1]:.2f} ms (in the sampler's thread)"
        )
    if lags:
        lags.sort()
        print(
            f"event loop lag while sampling: p50 {statistics.median(lags):.2f} ms, p99"
            f" {lags[int(0.99 * (len(lags) - 1))]:.2f} ms, max {lags[-1]:.2f} ms"
        )
    if child is not None and child.returncode != 0:
        print(
            f"the load exited {child.returncode}: the check cannot say whether telemetry"
            " follows a load"
        )
        return 1
    if not has_torch:
        return 0
    ok, words = followed_the_load(rows)
    print(f"telemetry {'followed' if ok else 'did NOT follow'} the load: {words}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
