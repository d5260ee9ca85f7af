"""Scorer benchmark: data loading, text scorers, and the 164 canonical HumanEval programs.

    .venv/bin/python benchmarks/bench_scorers.py [--parallel N] [--repeat R]

Prints wall times; the HumanEval figure is the end-to-end scorer (extraction,
program assembly, sandbox start, run, verdict) over all 164 canonical solutions,
which must all pass. It also prints which isolation the sandbox used and the
spread of per-program times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from harness.workloads import TASK_KINDS, load_items, score_items, summarize
from harness.workloads.sandbox import default_parallel, isolation_mode, run_programs
from harness.workloads.scoring import humaneval_program_for


def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, default=default_parallel())
    ap.add_argument("--repeat", type=int, default=2, help="HumanEval passes (best is reported)")
    args = ap.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
        f"python {sys.version.split()[0]}"
    )

    print("\n== loading (datasets, sha256 checked every time)")
    for kind in TASK_KINDS:
        first, items = _time(lambda k=kind: load_items(k))
        again, _ = _time(lambda k=kind: load_items(k))
        print(
            f"  {kind:<10} {len(items):>5} items   first {first * 1000:7.1f} ms"
            f"   again {again * 1000:6.1f} ms"
        )

    print("\n== text scorers")
    gsm = {it.id: it for it in load_items("gsm8k")}
    gsm_resp = {
        i: f"Step by step... so the total is \\boxed{{{it.reference['answer']}}}."
        for i, it in gsm.items()
    }
    dt, scores = _time(lambda: score_items("gsm8k", gsm, gsm_resp))
    s = summarize("gsm8k", scores)
    print(f"  gsm8k      {s['n']:>5} responses  {dt * 1000:7.1f} ms   accuracy {s['accuracy']:.3f}")
    mmlu = {it.id: it for it in load_items("mmlu")}
    mmlu_resp = {i: f"Reasoning.\nAnswer: {it.reference['answer']}" for i, it in mmlu.items()}
    dt, scores = _time(lambda: score_items("mmlu", mmlu, mmlu_resp))
    s = summarize("mmlu", scores)
    print(f"  mmlu       {s['n']:>5} responses  {dt * 1000:7.1f} ms   accuracy {s['accuracy']:.3f}")

    print("\n== HumanEval: 164 canonical solutions scored end to end")
    mode = isolation_mode()
    print(f"  sandbox isolation: {mode.name} ({mode.reason}); parallel {args.parallel}")
    he = {it.id: it for it in load_items("humaneval")}
    responses = {
        i: "```python\n" + it.reference["prompt"] + it.reference["canonical_solution"] + "```"
        for i, it in he.items()
    }
    best = None
    for r in range(args.repeat):
        dt, scores = _time(lambda: score_items("humaneval", he, responses, parallel=args.parallel))
        s = summarize("humaneval", scores)
        print(
            f"  pass {r + 1}: {dt:6.2f} s for {s['n']} programs "
            f"({dt / s['n'] * 1000:.0f} ms each at parallel {args.parallel}); "
            f"passed {s['correct']}/{s['n']}"
        )
        if s["correct"] != s["n"]:
            bad = [x for x in scores if not x.correct]
            print(f"  FAILED: {bad[0].id}: {bad[0].detail}")
            return 1
        best = dt if best is None else min(best, dt)
    print(f"  best: {best:.2f} s")

    programs = [humaneval_program_for(it, responses[i])[1] for i, it in he.items()]
    results = run_programs(programs, parallel=args.parallel)
    per_id = {i: r.elapsed_s * 1000 for i, r in zip(he, results, strict=True)}
    run_ms = sorted(per_id.values())
    total_ms = sorted((r.t_end - r.t_launch) * 1000 for r in results)
    q = statistics.quantiles
    print(
        f"  per program, program only: median {statistics.median(run_ms):.0f} ms, "
        f"p90 {q(run_ms, n=10)[-1]:.0f} ms, max {run_ms[-1]:.0f} ms"
    )
    print(
        f"  per program, launch to exit (sandbox set-up included): median "
        f"{statistics.median(total_ms):.0f} ms, p90 {q(total_ms, n=10)[-1]:.0f} ms, "
        f"max {total_ms[-1]:.0f} ms"
    )
    slow = sorted(per_id.items(), key=lambda kv: kv[1], reverse=True)[:3]
    print("  slowest: " + ", ".join(f"{i} {ms:.0f} ms" for i, ms in slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
