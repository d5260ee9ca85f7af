"""Measure the two figures a roofline needs on this device: read bandwidth and dense
matmul throughput.

Run as a script by an engine environment's interpreter (the harness imports its DTYPES
only: harness/calibration.py runs it and reads the one JSON line it prints on stdout); it
imports torch and the standard library only, so `benchmarks/gpu_calibrate.py` can load
it by path on a machine with torch alone.

    python calibrate_probe.py --device cpu --threads 1 --cpus 0 --dtype float32
    python calibrate_probe.py --device cuda:0 --dtype bfloat16

Bandwidth is *read* bandwidth, bytes read / s of a sum over a float32 buffer far larger
than any cache: a decode step reads its weights once, and a sum reads without writing
(a copy's write-allocate traffic would be counted by neither read nor read+write). The
matmul is square, n grown from small until one product takes long enough to time well,
in the dtype asked for (float8: e4m3 through torch._scaled_mm, GPUs of compute capability
8.9 and up; elsewhere bfloat16, and `note` says so). Each figure is the best of its
repeats (a roofline is a bound: the best run is the nearest to what the hardware does)
with the median beside. On the CPU the process is pinned to `--cpus` before torch loads,
so its OpenMP threads start there: the cores the CPU engine's worker is bound to.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

# Run as a script, this file's folder (harness/engines/probe) heads sys.path: drop it so
# nothing in the harness shadows the engine's own modules.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

DTYPES = ("bfloat16", "float16", "float32", "float8")
FLOAT8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper: e4m3 tensor cores

# Per device class: the read buffer (well past a last-level cache: an EPYC CCD's 32-96 MB,
# an H200's 50 MB L2), the matmul's first and largest n, how long one product should take
# before its size is kept, and each figure's time budget and most repeats.
SETTINGS = {
    "cpu": {
        "bandwidth_mib": 256,
        "n_min": 128,
        "n_max": 2048,
        "target_s": 0.02,
        "budget_s": 1.5,
        "max_repeats": 20,
    },
    "cuda": {
        "bandwidth_mib": 2048,
        "n_min": 1024,
        "n_max": 16384,
        "target_s": 0.002,
        "budget_s": 3.0,
        "max_repeats": 50,
    },
}


def parse_cpus(text: str) -> list[int]:
    """`0`, `0,2`, `0-3` -> CPU ids."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if not cpus:
        raise ValueError(f"--cpus {text!r}: no CPU ids")
    return sorted(cpus)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


def fail(message: str) -> int:
    print(f"calibrate_probe: {message}", file=sys.stderr)
    return 1


class Timer:
    """Seconds one call of `fn` takes: CUDA events on a GPU, the wall clock on a CPU."""

    def __init__(self, torch, device: str) -> None:
        self.torch = torch
        self.cuda = device.startswith("cuda")

    def __call__(self, fn: Callable[[], object]) -> float:
        if not self.cuda:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        start_ev = self.torch.cuda.Event(enable_timing=True)
        end_ev = self.torch.cuda.Event(enable_timing=True)
        start_ev.record()
        fn()
        end_ev.record()
        end_ev.synchronize()
        return start_ev.elapsed_time(end_ev) / 1e3

    def repeat(self, fn: Callable[[], object], budget_s: float, max_repeats: int) -> list[float]:
        """At least 3 timings, more while the budget lasts."""
        times: list[float] = []
        began = time.perf_counter()
        while len(times) < max_repeats and (
            len(times) < 3 or time.perf_counter() - began < budget_s
        ):
            times.append(self(fn))
        return times


def read_bandwidth(torch, device: str, timer: Timer, mib: int, s: dict) -> dict:
    n = mib * 2**20 // 4
    buf = torch.ones(n, dtype=torch.float32, device=device)  # every page touched
    buf.sum()  # first call: allocator, kernel selection
    times = timer.repeat(buf.sum, s["budget_s"], s["max_repeats"])
    nbytes = n * 4
    rates = [nbytes / t / 1e9 for t in times]
    del buf
    return {
        "method": "read",
        "what": "bytes read / s, sum over a float32 buffer",
        "bytes": nbytes,
        "repeats": len(times),
        "best_gb_s": max(rates),
        "median_gb_s": statistics.median(rates),
    }


def float8_product(torch, device: str, n: int) -> Callable[[], object]:
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    # _scaled_mm wants its second operand column-major: a transposed row-major tensor.
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def product(torch, device: str, dtype: str, n: int) -> Callable[[], object]:
    if dtype == "float8":
        return float8_product(torch, device, n)
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    return lambda: torch.matmul(a, b)


def float8_support(torch, device: str) -> str | None:
    """None where a float8 product runs here, else why not."""
    if not device.startswith("cuda"):
        return "float8 matmul is measured on GPUs only"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8 matmul"
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) < FLOAT8_MIN_CAPABILITY:
        return f"compute capability {capability[0]}.{capability[1]} has no float8 tensor cores"
    try:
        float8_product(torch, device, 64)()
        torch.cuda.synchronize(device)
    except Exception as err:  # noqa: BLE001 - any refusal means: not here
        return f"float8 matmul failed here ({type(err).__name__}: {str(err)[:160]})"
    return None


def matmul_throughput(torch, device: str, dtype: str, timer: Timer, s: dict) -> dict:
    """n doubled from n_min until one product takes target_s (or n_max, or the next size
    would eat a quarter of the budget), then timed within the budget."""
    n = s["n_min"]
    while True:
        fn = product(torch, device, dtype, n)
        fn()  # first call: allocator, kernel selection
        single = timer(fn)
        if single >= s["target_s"] or n >= s["n_max"] or 8 * single > s["budget_s"] / 4:
            break
        n *= 2
    if device.startswith("cuda"):  # a second's load first, so the clocks have risen
        began = time.perf_counter()
        while time.perf_counter() - began < 1.0:
            timer(fn)
    times = timer.repeat(fn, s["budget_s"], s["max_repeats"])
    rates = [2 * n**3 / t / 1e12 for t in times]
    return {
        "m": n,
        "n": n,
        "k": n,
        "repeats": len(times),
        "best_tflops": max(rates),
        "median_tflops": statistics.median(rates),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Measure read bandwidth and dense matmul throughput.")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    p.add_argument("--threads", type=int, help="CPU: torch threads (default: one per --cpus)")
    p.add_argument("--cpus", help="CPU: pin to these CPUs (0 / 0,2 / 0-3) before torch loads")
    p.add_argument("--bandwidth-mib", type=int, help="the read buffer's size in MiB")
    args = p.parse_args(argv)
    began = time.perf_counter()
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    if kind == "cpu" and args.device != "cpu":
        return fail(f"--device {args.device!r}: expected cpu or cuda:N")
    settings = dict(SETTINGS[kind])
    if args.bandwidth_mib:
        settings["bandwidth_mib"] = args.bandwidth_mib
    cpus = None
    threads = args.threads
    if kind == "cpu":
        if args.cpus:
            try:
                cpus = parse_cpus(args.cpus)
                os.sched_setaffinity(0, cpus)
            except (ValueError, OSError) as err:
                return fail(f"--cpus {args.cpus}: {err}")
        threads = threads or (len(cpus) if cpus else len(os.sched_getaffinity(0)))
        # Read by OpenMP when torch loads: its thread pool starts this size, on these CPUs.
        os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
    except ImportError as err:
        return fail(f"torch is not importable by {sys.executable}: {err}")
    if kind == "cpu":
        torch.set_num_threads(threads)
        name = cpu_name()
    else:
        if not torch.cuda.is_available():
            return fail(f"--device {args.device}: torch {torch.__version__} sees no CUDA device")
        try:
            torch.cuda.set_device(args.device)
            name = torch.cuda.get_device_name(args.device)
            free, _ = torch.cuda.mem_get_info(args.device)
        except (RuntimeError, ValueError, AssertionError) as err:
            return fail(f"--device {args.device}: {err}")
        # The read buffer fits in a quarter of what is free.
        settings["bandwidth_mib"] = min(settings["bandwidth_mib"], free // 4 // 2**20)
    dtype, note = args.dtype, None
    if dtype == "float8":
        why = float8_support(torch, args.device)
        if why is not None:
            dtype, note = "bfloat16", f"{why}: measured bfloat16 instead"
    timer = Timer(torch, args.device)
    with torch.no_grad():
        bandwidth = read_bandwidth(
            torch, args.device, timer, int(settings["bandwidth_mib"]), settings
        )
        matmul = matmul_throughput(torch, args.device, dtype, timer, settings)
    print(
        json.dumps(
            {
                "device": args.device,
                "device_name": name,
                "dtype": dtype,
                "requested_dtype": args.dtype,
                "note": note,
                "torch": torch.__version__,
                "threads": threads,
                "cpus": cpus,
                "bandwidth_gb_s": bandwidth["best_gb_s"],
                "dense_tflops": matmul["best_tflops"],
                "bandwidth": bandwidth,
                "matmul": matmul,
                "seconds": time.perf_counter() - began,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
