"""Where a plain arm's per-user speed goes as users are added: steps, or other users' prefills.

    .venv/bin/python benchmarks/stream_gaps.py RUN_FOLDER [--arm cpu-base] [--task chat]

Reads the arm's closed-loop speed cells of a finished run (their `requests.jsonl`, the
measured requests of each level's kept attempt) and prints, per level, the gaps between a
stream's consecutive chunks: the median (a decode step as the user sees it), the mean,
and the share of the stream's time spent in gaps over 2.5x the median. On a plain arm
each chunk is one step, so a long gap is a step that carried something else: on a CPU,
another user's prompt being prefilled. Also the median TTFT (one prompt's prefill plus
the wait for a step) and the mean prompt length. The per-user speed ratio the issue judges
(level 1 against level 4) is the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

LONG_GAP = 2.5  # x the level's median gap


def level_figures(requests: Path) -> dict[str, float] | None:
    recs = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
    kept = max((r["attempt"] for r in recs), default=None)
    measured = [
        r
        for r in recs
        if r["phase"] == "measure"
        and r["attempt"] == kept
        and r["error"] is None
        and len(r["chunk_times"]) > 1
    ]
    if not measured:
        return None
    gaps = np.concatenate([np.diff(r["chunk_times"]) for r in measured]) * 1e3
    median = float(np.median(gaps))
    long = gaps[gaps > LONG_GAP * median]
    speeds = [
        (r["completion_tokens"] - 1) / (r["end_t"] - r["first_token_t"])
        for r in measured
        if r["end_t"] > r["first_token_t"]
    ]
    return {
        "gap_p50_ms": median,
        "gap_mean_ms": float(gaps.mean()),
        "long_gaps": float(len(long)),
        "gaps": float(len(gaps)),
        "long_share": float(long.sum() / gaps.sum()),
        "ttft_p50_ms": 1e3 * float(np.median([r["first_token_t"] - r["sent_t"] for r in measured])),
        "prompt_mean": float(np.mean([r["prompt_tokens"] for r in measured])),
        "per_user_tok_s": float(np.mean(speeds)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--arm", default="cpu-base")
    ap.add_argument("--task", default="chat")
    args = ap.parse_args()
    cells = sorted((args.run / "cells").glob(f"{args.arm}__{args.task}__speed__c*"))
    if not cells:
        print(
            f"stream_gaps: {args.run}/cells has no {args.arm} {args.task} speed cells",
            file=sys.stderr,
        )
        return 2
    by_level: dict[int, dict[str, float]] = {}
    print(
        f"{args.arm} {args.task}: gaps between a stream's chunks (long: over {LONG_GAP}x the"
        " median)"
    )
    for cell in cells:
        figures = level_figures(cell / "requests.jsonl")
        if figures is None:
            continue
        level = int(cell.name.rsplit("__c", 1)[1].split("__")[0])
        by_level[level] = figures
        f = figures
        print(
            f"  {level:3d} users  gap p50 {f['gap_p50_ms']:6.1f} ms  mean {f['gap_mean_ms']:6.1f}"
            f"  long {int(f['long_gaps']):4d}/{int(f['gaps']):4d} ({f['long_share']:.0%} of the"
            f" time)  ttft p50 {f['ttft_p50_ms']:6.0f} ms  prompt {f['prompt_mean']:4.0f} tok"
            f"  per user {f['per_user_tok_s']:5.1f} tok/s"
        )
    if 1 in by_level and 4 in by_level:
        one, four = by_level[1], by_level[4]
        print(
            f"per-user speed at 1 / 4 users: x{one['per_user_tok_s'] / four['per_user_tok_s']:.2f}"
            f" (median gap x{four['gap_p50_ms'] / one['gap_p50_ms']:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
