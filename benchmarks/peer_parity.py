"""Does specbench deliver the load it registers? Compare it with `vllm bench serve`.

One vLLM CPU server (the tiny offline model, n-gram k=3, as examples/cpu.yaml serves
it). Closed loop: the same MT-Bench first turns, in the same order, at the same
concurrency, 128 output tokens with ignore_eos, from specbench's closed loop and from
`vllm bench serve` (custom dataset, --skip-chat-template, --disable-shuffle,
--ignore-eos, --max-concurrency), in both orders. Open loop: Poisson arrivals at one
rate from each tool (each draws its own schedule, so they are compared by
seed-independent statistics: mean arrival rate and interarrival CV). Every figure is
computed the same way from each tool's per-request send and end times.

    .venv/bin/python benchmarks/peer_parity.py [--concurrency 4] [--prompts 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from harness.engines.lifecycle import start_engine
from harness.engines.metrics import acceptance_window, parse_metrics
from harness.engines.tiny_model import build_tiny_model
from harness.engines.vllm_engine import default_vllm_cpu_python
from harness.measure.delivered import Span, arrival_statistics, delivered_load
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop, OpenLoop
from harness.measure.placement import place_client
from harness.measure.requests import RequestSpec
from harness.measure.scrape import MetricsScraper
from harness.prereg import load_study
from harness.run.runner import expand_environment
from harness.workloads import load_items

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))
OUTPUT_TOKENS = 128
# vllm-cpu's console script fails on importlib.metadata.version("vllm"); answer for it.
_VLLM_SHIM = """
import importlib.metadata as m, sys
_v = m.version
m.version = lambda name: _v("vllm-cpu") if name == "vllm" else _v(name)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm"] + sys.argv[1:]
main()
"""


@dataclass
class Run:
    """One tool's cell, reduced to the figures both tools are compared on."""

    tool: str
    spans: list[Span]
    tokens: list[int]
    ttft_s: list[float]
    tpot_s: list[float]
    acceptance: float | None
    send_lag_p99_ms: float | None = None
    valid: bool | None = None
    scheduled_t: list[float] | None = None  # specbench's open loop: its drawn schedule

    def figures(self, users: int | None) -> dict[str, float | None]:
        load = delivered_load(self.spans)
        start = min(s.sent_t for s in self.spans)
        span = max(s.end_t for s in self.spans) - start
        rate, cv = arrival_statistics([s.sent_t for s in self.spans])
        drawn, drawn_cv = arrival_statistics(self.scheduled_t or [])
        return {
            "delivered": load.concurrency,
            "share": load.concurrency / users if users and load.concurrency else None,
            "tok_s": sum(self.tokens) / span,
            "tpot_ms": float(np.median(self.tpot_s)) * 1e3,
            "ttft_ms": float(np.median(self.ttft_s)) * 1e3,
            "accept": self.acceptance,
            "turn_p99_ms": load.turnaround_p99_ms,
            "req_s": len(self.spans) / span,
            "rate": rate,
            "cv": cv,
            "drawn_rate": drawn,
            "drawn_cv": drawn_cv,
            "send_lag_p99_ms": self.send_lag_p99_ms,
            "n": len(self.spans),
        }


def engine_python() -> str:
    python = default_vllm_cpu_python()  # SPECBENCH_VLLM_CPU_PYTHON, else the pinned venv
    if not Path(python).exists():
        sys.exit(f"no vllm-cpu engine at {python}: run `bash scripts/setup.sh` first")
    # vllm bench's custom dataset reads JSONL with pandas (setup.sh installs it too).
    if subprocess.run([python, "-c", "import pandas"], capture_output=True).returncode:
        subprocess.run([python, "-m", "pip", "install", "-q", "pandas"], check=True)
    return python


def tiny_model() -> Path:
    model = Path(os.environ.get("SPECBENCH_TINY_MODEL", CACHE / "models" / "tiny-llama-seed0"))
    if not (model / "config.json").exists():
        build_tiny_model(model, seed=0)
    return model


def acceptance(before: str, after: str) -> float | None:
    window = acceptance_window(parse_metrics(before, "vllm"), parse_metrics(after, "vllm"))
    return window.acceptance_length if window is not None else None


async def specbench_cell(engine, prompts: list[str], pattern) -> Run:
    """A cell exactly as a study runs it: the closed or open loop, the 1 Hz scraper."""
    import httpx

    specs = [RequestSpec(f"p{i}", [{"role": "user", "content": p}], OUTPUT_TOKENS)
             for i, p in enumerate(prompts)]
    records: list = []
    async with httpx.AsyncClient() as client:
        before = (await client.get(engine.metrics_url)).text
        async with MetricsScraper(metrics_url=engine.metrics_url, dialect="vllm", cell_id="c"):
            outcome = await run_cell(
                base_url=engine.base_url, model=engine.served_model, requests=specs,
                pattern=pattern, sampling={"temperature": 0.0, "ignore_eos": True},
                extra_body={}, cell_id="c", attempt=1, on_record=records.append,
                lag_limit_ms=5.0)
        after = (await client.get(engine.metrics_url)).text
    ok = [r for r in records if r.ok]
    if len(ok) != len(records):
        sys.exit(f"specbench: {len(records) - len(ok)} requests failed: {records[0].error}")
    return Run("specbench", [Span(r.sent_t, r.end_t, r.user) for r in ok],
               [r.completion_tokens for r in ok], [r.ttft_s for r in ok],
               [r.tpot_s for r in ok], acceptance(before, after),
               outcome.health.send_lag_p99_ms, outcome.health.valid,
               [r.scheduled_t for r in ok] if isinstance(pattern, OpenLoop) else None)


def vllm_bench(python: str, engine, model: Path, dataset: Path, n: int, out: Path,
               concurrency: int | None = None, rate: float | None = None,
               seed: int = 0) -> Run:
    cmd = [python, "-c", _VLLM_SHIM, "bench", "serve", "--backend", "openai-chat",
           "--base-url", engine.base_url, "--endpoint", "/v1/chat/completions",
           "--model", engine.served_model, "--tokenizer", str(model),
           "--dataset-name", "custom", "--dataset-path", str(dataset),
           "--custom-output-len", str(OUTPUT_TOKENS), "--skip-chat-template",
           "--disable-shuffle", "--ignore-eos", "--temperature", "0", "--num-prompts", str(n),
           "--seed", str(seed), "--disable-tqdm", "--save-result", "--save-detailed",
           "--result-dir", str(out.parent), "--result-filename", out.name]
    cmd += ["--max-concurrency", str(concurrency)] if concurrency else []
    cmd += ["--request-rate", str(rate)] if rate else []
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    rows = list(zip(result["start_times"], result["latencies"], result["ttfts"],
                    result["output_lens"], strict=True))
    if result["failed"]:
        sys.exit(f"vllm bench serve: {result['failed']} requests failed: {result['errors'][:1]}")
    return Run("vllm bench", [Span(st, st + lat) for st, lat, _, _ in rows],
               [n for *_, n in rows], [t for _, _, t, _ in rows],
               [(lat - t) / (n - 1) for _, lat, t, n in rows],
               result.get("spec_decode_acceptance_length"))


def show(label: str, runs: list[Run], users: int | None, keys: list[str]) -> dict:
    figs = [r.figures(users) for r in runs]

    def cell(v) -> str:
        return "-" if v is None else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")

    print(f"\n{label}")
    print(f"{'run':<22}" + "".join(f"{k:>14}" for k in keys))
    for r, f in zip(runs, figs, strict=True):
        print(f"{r.tool + (' (INVALID)' if r.valid is False else ''):<22}"
              + "".join(f"{cell(f[k]):>14}" for k in keys))
    mean = {}
    for tool in ("specbench", "vllm bench"):
        mine = [f for r, f in zip(runs, figs, strict=True) if r.tool == tool]
        mean[tool] = {k: (float(np.mean([f[k] for f in mine])) if all(
            f[k] is not None for f in mine) else None) for k in keys}
        print(f"{'mean ' + tool:<22}" + "".join(f"{cell(mean[tool][k]):>14}" for k in keys))
    for tool in ("specbench", "vllm bench"):
        mine = [f for r, f in zip(runs, figs, strict=True) if r.tool == tool]
        if len(mine) > 1:
            print(f"{'spread ' + tool:<22}" + "".join(
                f"{cell(_relative_spread([f[k] for f in mine])):>14}" for k in keys)
                + "   (std / mean over runs)")
    ratios = {k: (mean["specbench"][k] / mean["vllm bench"][k]
                  if mean["specbench"][k] and mean["vllm bench"][k] else None) for k in keys}
    print(f"{'ratio specbench/peer':<22}" + "".join(f"{cell(ratios[k]):>14}" for k in keys))
    return {"mean": mean, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=32, help="MT-Bench first turns")
    parser.add_argument("--rounds", type=int, default=3,
                        help="closed loop: repeat specbench, peer, peer, specbench this often")
    parser.add_argument("--rate", type=float, help="open-loop arrivals per s (default: half"
                        " the closed loop's request rate, so the server keeps up)")
    parser.add_argument("--arrivals", type=int, default=200, help="open-loop requests")
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument("--no-placement", action="store_true",
                        help="leave the client on every CPU (default: off the engine's cores)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="first wait up to S s for the 1-min load average to fall below 1")
    args = parser.parse_args()
    deadline = time.monotonic() + args.wait_quiet
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
    python, model = engine_python(), tiny_model()
    os.environ.setdefault("SPECBENCH_VLLM_CPU_PYTHON", python)
    # The demo's arm, served on the tiny test model (~1.5 ms steps): the demo's own model
    # is the pair's target, which it names through SPECBENCH_TINY_PAIR.
    os.environ.setdefault("SPECBENCH_TINY_PAIR", str(model.parent))
    study = expand_environment(load_study(ROOT / "examples" / "cpu.yaml"))
    study = study.model_copy(update={"model": study.model.model_copy(update={"id": str(model)})})
    prompts = [item.messages[0]["content"] for item in load_items("chat")[: args.prompts]]
    c = args.concurrency
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        dataset = tmp / "prompts.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": p, "output_tokens": OUTPUT_TOKENS})
                                   + "\n" for p in prompts))
        arm = study.arm("cpu-ngram")
        # A shared host slows the start of an engine that yields to everything else.
        launch = arm.launch.model_copy(update={"startup_timeout_s": 900})
        engine = start_engine(arm.model_copy(update={"launch": launch}), study, tmp / "engine")
        try:
            print(f"server: vllm-cpu {engine.info.version}, tiny model, n-gram k=3, "
                  f"{engine.base_url}; load average {os.getloadavg()[0]:.2f} on "
                  f"{os.cpu_count()} CPUs")
            placed = None if args.no_placement else place_client(engine.pid)
            print(f"engine: nice {psutil.Process(engine.pid).nice()}, session "
                  f"{_autogroup(engine.pid)}; client: " + (
                      "left on every CPU (--no-placement)" if placed is None else
                      f"{placed.reason} (engine-bound {placed.engine_bound_cpus}, client "
                      f"{placed.client_cpus or placed.allowed_cpus})"))

            def ours() -> Run:
                return asyncio.run(specbench_cell(
                    engine, prompts, ClosedLoop(concurrency=c, requests=len(prompts))))

            def peer(i: int) -> Run:
                return vllm_bench(python, engine, model, dataset, len(prompts),
                                  tmp / f"closed{i}.json", concurrency=c)

            # The first load on a fresh server pays its warm-up (caches, allocator, the
            # first batches): a discarded pass, so neither tool's first run carries it.
            peer(-1)
            # Both orders, repeated: this VM's engine speed drifts by ~5-10% from one run
            # to the next whichever tool drives it, so one pair cannot show a 5% gap.
            runs = []
            for r in range(args.rounds):
                runs += [ours(), peer(2 * r), peer(2 * r + 1), ours()]
            keys = ["delivered", "share", "tok_s", "tpot_ms", "ttft_ms", "accept", "turn_p99_ms",
                    "req_s"]
            closed = show(f"closed loop, {c} users, {len(prompts)} MT-Bench first turns, "
                          f"{OUTPUT_TOKENS} tokens (load average {os.getloadavg()[0]:.2f})",
                          runs, c, keys)
            if not args.skip_open:
                n = args.arrivals
                rate = args.rate or round(0.5 * closed["mean"]["vllm bench"]["req_s"], 1)
                opened = [asyncio.run(specbench_cell(
                              engine, prompts, OpenLoop(rate=rate, requests=n, seed=1))),
                          vllm_bench(python, engine, model, dataset, n, tmp / "open.json",
                                     rate=rate, seed=1)]
                print(f"\nopen loop: Poisson at {rate:g}/s, {n} arrivals each (each tool draws"
                      f" its own schedule; sampling spread of the rate ~{1 / n ** 0.5:.0%},"
                      " of the CV ~" f"{1 / (2 * n) ** 0.5:.0%})")
                show("open loop (rate, cv: of the sends; drawn: specbench's own schedule)",
                     opened, None, ["rate", "cv", "drawn_rate", "drawn_cv", "send_lag_p99_ms",
                                    "tok_s", "tpot_ms", "ttft_ms"])
        finally:
            engine.stop()
    r, share = closed["ratios"], closed["mean"]["specbench"]["share"]
    print(f"parity concurrency_ratio={r['delivered']:.3f} tok_s_ratio={r['tok_s']:.3f} "
          f"tpot_ratio={r['tpot_ms']:.3f} delivered_share={share:.3f}")
    return 0


def _relative_spread(values: list[float | None]) -> float | None:
    if any(v is None for v in values) or not np.mean(values):
        return None
    return float(np.std(values) / abs(np.mean(values)))


def _autogroup(pid: int | None) -> str:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
