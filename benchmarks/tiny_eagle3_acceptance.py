"""How much of the demo's target the constructed EAGLE-3 head predicts, on the CPU build.

    .venv/bin/python benchmarks/tiny_eagle3_acceptance.py [--pair DIR] [--prompts N] [--k 3]
        [--max-tokens 32] [--only eagle3|draft_model]

Serves the demo's target with its EAGLE-3 head (DIR/eagle3, harness/engines/tiny/tiny_eagle3.py)
and, beside it, with its draft model (DIR/draft), each at k draft tokens, one user at a
time, and sends the first N chat prompts greedily to max_tokens. Prints the engine's tokens
per drafting round (1 + accepted / drafts) and per-position acceptance from its /metrics
counters over those requests, the client's tokens per streamed chunk, and whether each
output equals the draft-model engine's (greedy identity). The head is built to draft what
the draft model drafts but for the sequence's first token, which EAGLE's inputs (token
t + 1 at position t) never put in its cache; chance would be ~1.0 tokens a round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.derived.itl import tokens_per_chunk  # noqa: E402
from harness.engines.launch.vllm_engine import default_vllm_cpu_python  # noqa: E402
from harness.engines.readout.metrics import acceptance_window, scrape_metrics  # noqa: E402
from harness.engines.running.lifecycle import start_engine  # noqa: E402
from harness.engines.tiny.tiny_pair import EAGLE3_DIR, build_tiny_pair  # noqa: E402
from harness.measure.driver import run_cell  # noqa: E402
from harness.measure.patterns import ClosedLoop  # noqa: E402
from harness.measure.requests import RequestSpec  # noqa: E402
from harness.prereg.schema import Study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DRAFT_DIRS = {"eagle3": EAGLE3_DIR, "draft_model": "draft"}


def study_for(pair: Path, method: str, k: int, max_tokens: int) -> Study:
    launch = {
        "python": default_vllm_cpu_python(),
        "env": {"HF_HUB_OFFLINE": "1"},
        "dtype": "cpu_native",
        "extra_args": ["--enforce-eager"],
        "startup_timeout_s": 600,
    }
    return Study.model_validate(
        {
            "title": "EAGLE-3 head acceptance",
            "registered": "2026-12-06",
            "hardware": {"gpu": "none", "memory_bandwidth_gb_s": 10, "dense_tflops": 0.2},
            "model": {
                "id": str(pair / "target"),
                "served_name": "tiny",
                "params_billion": 0.12,
                "weight_bytes_per_param": 2,
                "max_model_len": 1024,
            },
            "arms": [
                {"name": "base", "engine": "vllm-cpu", "launch": launch},
                {
                    "name": method,
                    "engine": "vllm-cpu",
                    "launch": launch,
                    "baseline": "base",
                    "drafter": {
                        "method": method,
                        "model": str(pair / DRAFT_DIRS[method]),
                        "num_draft_tokens": k,
                    },
                },
            ],
            "loads": {"closed_loop": {"concurrency": [1]}},
            "tasks": [
                {"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": max_tokens}
            ],
            "bars": {
                "pass": {"speed": {"concurrencies": [1]}, "identity": None},
                "stop": {"concurrencies": [1]},
            },
        }
    )


def prompts(n: int) -> list[RequestSpec]:
    lines = (ROOT / "workloads" / "chat" / "question.jsonl").read_text().splitlines()[:n]
    return [
        RequestSpec(f"q{i}", [{"role": "user", "content": json.loads(line)["turns"][0]}], 0)
        for i, line in enumerate(lines)
    ]


def measure(pair: Path, method: str, k: int, n: int, max_tokens: int) -> dict:
    study = study_for(pair, method, k, max_tokens)
    arm = study.arm(method)
    engine = start_engine(arm, study, Path(tempfile.mkdtemp()))
    try:
        before = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
        records: list = []
        specs = [RequestSpec(s.item_id, s.messages, max_tokens) for s in prompts(n)]
        asyncio.run(
            run_cell(
                base_url=engine.base_url,
                model=engine.served_model,
                requests=specs,
                pattern=ClosedLoop(concurrency=1, requests=n, warmup=0),
                sampling={"temperature": 0.0, "seed": 0, "ignore_eos": True},
                extra_body=dict(engine.request_fields),
                cell_id=method,
                attempt=1,
                on_record=records.append,
                lag_limit_ms=1e6,
                timeout_s=600,
            )
        )
        after = scrape_metrics(engine.metrics_url, "vllm", timeout_s=30)
    finally:
        engine.stop()
    window = acceptance_window(before.snapshot, after.snapshot)
    ok = sorted((r for r in records if r.ok), key=lambda r: r.item_id)
    return {
        "window": window,
        "client": tokens_per_chunk(ok),
        "n_ok": len(ok),
        "texts": [r.output_text for r in ok],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default=None, help="a folder from `specbench tiny-model --pair`")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--only", choices=sorted(DRAFT_DIRS), action="append")
    args = ap.parse_args()
    pair = Path(args.pair) if args.pair else Path(tempfile.mkdtemp()) / "pair"
    if not (pair / EAGLE3_DIR / "config.json").exists():
        build_tiny_pair(pair, seed=0)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {}
    for method in args.only or ["eagle3", "draft_model"]:
        r = results[method] = measure(pair, method, args.k, args.prompts, args.max_tokens)
        w = r["window"]
        rates = " / ".join(f"{p:.3f}" for p in (w.per_position_rates or []))
        print(
            f"{method:12s} k={args.k}: {w.acceptance_length:.3f} tokens per drafting round"
            f" (engine, {w.drafts:.0f} rounds; per position {rates}); client"
            f" {r['client']:.3f} tokens per chunk; {r['n_ok']} of {args.prompts} requests",
            flush=True,
        )
    if len(results) == 2:
        same = sum(
            a == b
            for a, b in zip(
                results["eagle3"]["texts"], results["draft_model"]["texts"], strict=True
            )
        )
        print(f"greedy outputs identical between the two engines: {same} of {args.prompts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
