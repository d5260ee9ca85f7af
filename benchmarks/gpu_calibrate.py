"""Roofline inputs on every visible GPU, beside the published figures.

    python benchmarks/gpu_calibrate.py [--gpus 0,1] [--dtypes bfloat16,float8] [--json]

Runs the harness's calibration probe (harness/engines/probe/calibrate_probe.py, by path: torch
alone is needed, not the harness's venv) on each GPU, one process per GPU, all at once:
read bandwidth (bytes read / s of a sum over a float32 buffer) and dense matmul
throughput in bfloat16 and, where the GPU has float8 tensor cores (compute capability
8.9+), float8 e4m3. Each figure is the best of its repeats, the median beside, and the
share of NVIDIA's published figure for that GPU where one is known here. About 15 s per
GPU's dtypes; the GPUs run in parallel. Without torch or without a GPU it says so and
exits 0: there is nothing to measure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "harness" / "engines" / "calibrate_probe.py"
TIMEOUT_S = 120

# NVIDIA's datasheets: HBM bandwidth (GB/s) and dense (no sparsity) tensor TFLOP/s.
# Matched on the device name, most specific first.
PUBLISHED = [
    ("H200", {"name": "H200 (SXM)", "gb_s": 4800, "bfloat16": 989, "float8": 1979}),
    ("H100 PCIe", {"name": "H100 PCIe", "gb_s": 2000, "bfloat16": 756, "float8": 1513}),
    ("H100", {"name": "H100 SXM (HBM3)", "gb_s": 3350, "bfloat16": 989, "float8": 1979}),
]


def published(device_name: str) -> dict | None:
    for key, figures in PUBLISHED:
        if key.lower() in device_name.lower():
            return figures
    return None


def probe(gpu: int, dtype: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(PROBE), "--device", f"cuda:{gpu}", "--dtype", dtype],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["(no message)"]
        return {"gpu": gpu, "requested_dtype": dtype, "error": lines[-1]}
    return {"gpu": gpu, **json.loads(proc.stdout.strip().splitlines()[-1])}


def gpu_runs(gpu: int, dtypes: list[str]) -> list[dict]:
    """One GPU's dtypes one after another (their products would share the GPU)."""
    return [probe(gpu, dtype) for dtype in dtypes]


def share(measured: float, reference: float | None) -> str:
    return f"{measured / reference:.0%}" if reference else "-"


def rows(result: dict) -> list[list[str]]:
    if "error" in result:
        return [
            [
                f"cuda:{result['gpu']}",
                "-",
                result["requested_dtype"],
                result["error"],
                "",
                "",
                "",
                "",
            ]
        ]
    pub = published(result["device_name"]) or {}
    bw, mm, dtype = result["bandwidth"], result["matmul"], result["dtype"]
    if result["requested_dtype"] == "float8" and dtype != "float8":
        return [
            [
                result["device"],
                result["device_name"],
                "float8",
                f"not measured: {result['note']}",
                "",
                "",
                "",
                "",
            ]
        ]
    return [
        [
            result["device"],
            result["device_name"],
            dtype,
            f"{bw['best_gb_s']:.0f}",
            f"{bw['median_gb_s']:.0f}",
            f"{pub.get('gb_s', '-')} ({share(bw['best_gb_s'], pub.get('gb_s'))})",
            f"{mm['best_tflops']:.0f} / {mm['median_tflops']:.0f} (n={mm['n']})",
            f"{pub.get(dtype, '-')} ({share(mm['best_tflops'], pub.get(dtype))})",
        ]
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", help="GPU indices (default: every visible one)")
    p.add_argument("--dtypes", default="bfloat16,float8")
    p.add_argument("--json", action="store_true", help="one JSON object per run instead")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_calibrate: torch is not installed here: nothing to measure")
        return 0
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(f"gpu_calibrate: no GPU visible to torch {torch.__version__}: nothing to measure")
        return 0
    gpus = (
        [int(g) for g in args.gpus.split(",")]
        if args.gpus
        else list(range(torch.cuda.device_count()))
    )
    dtypes = [d for d in args.dtypes.split(",") if d]
    with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        results = [r for runs in pool.map(lambda g: gpu_runs(g, dtypes), gpus) for r in runs]
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    headers = [
        "device",
        "name",
        "dtype",
        "read GB/s best",
        "median",
        "published (share)",
        "dense TFLOP/s best / median",
        "published (share)",
    ]
    table = [headers] + [row for r in results for row in rows(r)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(
        "published: NVIDIA datasheets, dense (no sparsity); measured read bandwidth is a"
        " sum over a buffer in HBM (bytes read / s), which no kernel takes to the datasheet's"
        " figure"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
