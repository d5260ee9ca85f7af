"""One scripted study run sequentially and in shards on a local Ray instance: wall clock,
verdicts and every speedup side by side.

    .venv/bin/python benchmarks/sharded_run.py                  # ~2 min, 2 logical GPUs
    .venv/bin/python benchmarks/sharded_run.py --gpus 4 --study examples/scripted-shards.yaml

The shards share this host's CPU (the scripted engine computes nothing, but its client and
server do run), so on a 2-core VM the gain is well under the GPU count; on a GPU host each
shard's engine has its own GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(study: Path, results: Path, *extra: str) -> tuple[float, Path]:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(study),
            "--results",
            str(results),
            "--no-report",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if done.returncode not in (0, 3):  # 3: an INCOMPLETE verdict, still a finished run
        raise subprocess.CalledProcessError(done.returncode, done.args)
    (folder,) = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    return time.monotonic() - started, folder


def speedups(folder: Path) -> dict[tuple[str, str, str], float]:
    with open(folder / "speedups.csv", encoding="utf-8") as fh:
        return {
            (r["arm"], r["task"], r["concurrency"]): float(r["speedup"])
            for r in csv.DictReader(fh)
            if r["speedup"]
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=ROOT / "examples" / "scripted-shards.yaml")
    ap.add_argument("--gpus", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seq_s, seq = run(args.study, Path(tmp) / "sequential")
        par_s, par = run(args.study, Path(tmp) / "sharded", "--gpus", str(args.gpus))
        verdicts = [json.loads((f / "verdict.json").read_text())["verdict"] for f in (seq, par)]
        shards = json.loads((par / "manifest.json").read_text())["sharding"]["shards"]
        a, b = speedups(seq), speedups(par)
    print(f"study {args.study.name}: {len(shards)} shards on {args.gpus} GPUs")
    print(
        f"wall clock: sequential {seq_s:.0f} s, sharded {par_s:.0f} s"
        f" ({seq_s / par_s:.2f}x); verdicts {verdicts[0]} / {verdicts[1]}"
    )
    print(f"{'arm':10} {'task':8} {'c':>3} {'sequential':>10} {'sharded':>8} {'ratio':>6}")
    for key in sorted(a, key=lambda k: (k[0], k[1], int(k[2]))):
        x, y = a[key], b.get(key, float("nan"))
        print(f"{key[0]:10} {key[1]:8} {key[2]:>3} {x:10.3f} {y:8.3f} {y / x:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
