"""Does specbench deliver the load it registers? Compare it with `vllm bench serve`.

One vLLM CPU server (the tiny offline model, n-gram k=3, as examples/cpu.yaml serves
it). Closed loop: the same MT-Bench first turns, in the same order, at the same
concurrency, 128 output tokens with ignore_eos, from specbench's closed loop and from
`vllm bench serve` (custom dataset, --skip-chat-template, --disable-shuffle,
--ignore-eos, --max-concurrency), in both orders. Open loop: Poisson arrivals at one
rate from each tool (each draws its own schedule, so they are compared by
seed-independent statistics: mean arrival rate and interarrival CV). Every figure is
computed the same way from each tool's per-request send and end times.

The host's arrangement is a choice (issue 34: a client must keep its users where the
engine does not yield to it):
- `--engine-session normal`: the engine in its own session at normal priority, as a
  user who starts vLLM themselves (or any GPU engine) runs it; the default `nice10` is
  the study's own arrangement on a CPU host (vllm_cpu_launcher lowers it).
- `--client-session-nice N`: this benchmark (both clients) in a session of its own at
  nice N, as a shell started at nice 10.
- `--busy-cpu K`: a neighbour spinning on CPU K at normal priority the whole time.
Its work is sized by the step time it measures first (`--budget-s`), so it ends in
minutes on a slow host too. Each tool's own CPU time, its event loop's wake-up lag
and a sleeping thread's wake-up lag (the GIL and the CPU) are printed beside.

    .venv/bin/python benchmarks/peer_parity.py [--concurrency 4] [--prompts 32]
        [--engine-session normal] [--client-session-nice 10] [--busy-cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from harness.engines.launch.base import expand_study
from harness.engines.launch.vllm_engine import default_vllm_cpu_python
from harness.engines.readout.metrics import acceptance_window, parse_metrics
from harness.engines.running.lifecycle import start_engine
from harness.engines.tiny.tiny_model import build_tiny_model
from harness.measure.delivered import (
    Span,
    arrival_statistics,
    delivered_load,
    measured_window,
)
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop, OpenLoop
from harness.measure.placement import place_client
from harness.measure.priority import match_engine_priority, restore_priority
from harness.measure.requests import RequestSpec
from harness.measure.scrape import MetricsScraper
from harness.prereg import load_study
from harness.workloads import load_items

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _lag_probes import LagProbes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))
OUTPUT_TOKENS = 128
PROBE_KEYS = [
    "cpus",
    "cpu_share",
    "runq_wait_share",
    "slices_per_s",
    "loop_lag_p99_ms",
    "thread_lag_p99_ms",
]
# vllm-cpu's console script fails on importlib.metadata.version("vllm"); answer for it.
_VLLM_SHIM = """
import importlib.metadata as m, os, sys
if os.environ.get("SPECBENCH_LAG_PROBES_OUT"):  # vllm bench, probed like specbench
    sys.path.insert(0, os.environ["SPECBENCH_LAG_PROBES_DIR"])
    import _lag_probes
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
    probes: dict | None = None  # the client's CPU share and wake-up lags (_lag_probes)
    server_running: float | None = None  # the engine's own running count, time-averaged
    duration_s: float | None = None  # vllm bench: its own run's length
    process_s: float | None = None  # vllm bench: its process's, start-up included
    invalid_reason: str | None = None  # specbench: why client health refused the cell

    def figures(self, users: int | None) -> dict[str, float | None]:
        load = delivered_load(self.spans)
        start = min(s.sent_t for s in self.spans)
        span = max(s.end_t for s in self.spans) - start
        rate, cv = arrival_statistics([s.sent_t for s in self.spans])
        drawn, drawn_cv = arrival_statistics(self.scheduled_t or [])
        return {
            "delivered": load.concurrency,
            "server_running": self.server_running,
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
            **{k: (self.probes or {}).get(k) for k in PROBE_KEYS},
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

    specs = [
        RequestSpec(f"p{i}", [{"role": "user", "content": p}], OUTPUT_TOKENS)
        for i, p in enumerate(prompts)
    ]
    records: list = []
    probes = LagProbes()
    async with httpx.AsyncClient() as client:
        before = (await client.get(engine.metrics_url)).text
        probes.start()
        async with MetricsScraper(metrics_url=engine.metrics_url, dialect="vllm", cell_id="c"):
            outcome = await run_cell(
                base_url=engine.base_url,
                model=engine.served_model,
                requests=specs,
                pattern=pattern,
                sampling={"temperature": 0.0, "ignore_eos": True},
                extra_body={},
                cell_id="c",
                attempt=1,
                on_record=records.append,
                lag_limit_ms=5.0,
            )
        probed = probes.stop()
        after = (await client.get(engine.metrics_url)).text
    ok = [r for r in records if r.ok]
    if len(ok) != len(records):
        sys.exit(f"specbench: {len(records) - len(ok)} requests failed: {records[0].error}")
    return Run(
        "specbench",
        [Span(r.sent_t, r.end_t, r.user) for r in ok],
        [r.completion_tokens for r in ok],
        [r.ttft_s for r in ok],
        [r.tpot_s for r in ok],
        acceptance(before, after),
        outcome.health.send_lag_p99_ms,
        outcome.health.valid,
        [r.scheduled_t for r in ok] if isinstance(pattern, OpenLoop) else None,
        probed,
        invalid_reason=outcome.health.reason,
    )


def vllm_bench(
    python: str,
    engine,
    model: Path,
    dataset: Path,
    n: int,
    out: Path,
    concurrency: int | None = None,
    rate: float | None = None,
    seed: int = 0,
) -> Run:
    cmd = [
        python,
        "-c",
        _VLLM_SHIM,
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        engine.base_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        engine.served_model,
        "--tokenizer",
        str(model),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        str(OUTPUT_TOKENS),
        "--skip-chat-template",
        "--disable-shuffle",
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-prompts",
        str(n),
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]
    cmd += ["--max-concurrency", str(concurrency)] if concurrency else []
    cmd += ["--request-rate", str(rate)] if rate else []
    probes_out = out.with_suffix(".probes.json")
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        VLLM_TARGET_DEVICE="cpu",
        SPECBENCH_LAG_PROBES_OUT=str(probes_out),
        SPECBENCH_LAG_PROBES_DIR=str(Path(__file__).resolve().parent),
    )
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    rows = list(
        zip(
            result["start_times"],
            result["latencies"],
            result["ttfts"],
            result["output_lens"],
            strict=True,
        )
    )
    if result["failed"]:
        sys.exit(f"vllm bench serve: {result['failed']} requests failed: {result['errors'][:1]}")
    return Run(
        "vllm bench",
        [Span(st, st + lat) for st, lat, _, _ in rows],
        [n for *_, n in rows],
        [t for _, _, t, _ in rows],
        [(lat - t) / (n - 1) for _, lat, t, n in rows],
        result.get("spec_decode_acceptance_length"),
        probes=json.loads(probes_out.read_text()) if probes_out.exists() else None,
        duration_s=result["duration"],
        process_s=wall,
    )


def show(label: str, runs: list[Run], users: int | None, keys: list[str]) -> dict:
    figs = [r.figures(users) for r in runs]

    def cell(v) -> str:
        return "-" if v is None else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")

    print(f"\n{label}")
    print(f"{'run':<22}" + "".join(f"{k:>14}" for k in keys))
    for r, f in zip(runs, figs, strict=True):
        print(
            f"{r.tool + (' (INVALID)' if r.valid is False else ''):<22}"
            + "".join(f"{cell(f[k]):>14}" for k in keys)
        )
    for i, r in enumerate(runs, 1):
        if r.valid is False and r.invalid_reason:
            print(f"  run {i} invalid: {r.invalid_reason}")
    mean = {}
    for tool in ("specbench", "vllm bench"):
        mine = [f for r, f in zip(runs, figs, strict=True) if r.tool == tool]
        mean[tool] = {
            k: (
                float(np.mean([f[k] for f in mine]))
                if all(f[k] is not None for f in mine)
                else None
            )
            for k in keys
        }
        print(f"{'mean ' + tool:<22}" + "".join(f"{cell(mean[tool][k]):>14}" for k in keys))
    for tool in ("specbench", "vllm bench"):
        mine = [f for r, f in zip(runs, figs, strict=True) if r.tool == tool]
        if len(mine) > 1:
            print(
                f"{'spread ' + tool:<22}"
                + "".join(f"{cell(_relative_spread([f[k] for f in mine])):>14}" for k in keys)
                + "   (std / mean over runs)"
            )
    ratios = {
        k: (
            mean["specbench"][k] / mean["vllm bench"][k]
            if mean["specbench"][k] and mean["vllm bench"][k]
            else None
        )
        for k in keys
    }
    print(f"{'ratio specbench/peer':<22}" + "".join(f"{cell(ratios[k]):>14}" for k in keys))
    return {"mean": mean, "ratios": ratios}


class ServerGauge:
    """The engine's running-request count, sampled by a process of its own at 50 Hz."""

    def __init__(self, metrics_url: str, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("_server_gauge.py")),
                metrics_url,
                str(out),
            ],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )

    def samples(self) -> list[tuple[float, float]]:
        rows = []
        if self.out.exists():
            for line in self.out.read_text().splitlines():
                t, running, _ = line.split()
                rows.append((float(t), float(running)))
        return rows

    def mean_over(self, spans: list[Span]) -> float | None:
        """Time-averaged running requests over the window `delivered` is judged on."""
        window = measured_window(spans)
        if window is None:
            return None
        inside = [running for t, running in self.samples() if window[0] <= t <= window[1]]
        return float(np.mean(inside)) if inside else None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_to_json(run: Run) -> dict:
    data = {k: v for k, v in run.__dict__.items() if k != "spans"}
    data["spans"] = [[sp.sent_t, sp.end_t, sp.user] for sp in run.spans]
    return data


def run_from_json(data: dict) -> Run:
    spans = [Span(a, b, u) for a, b, u in data.pop("spans")]
    return Run(spans=spans, **data)


def cell_in_own_process(spec: dict, tmp: Path, i: int) -> Run:
    """specbench's closed-loop cell in a fresh process of its own, as vllm bench runs."""
    spec_path, out = tmp / f"cell{i}.spec.json", tmp / f"cell{i}.run.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, __file__, "--_cell", str(spec_path), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        sys.exit(f"specbench's cell process failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return run_from_json(json.loads(out.read_text()))


def cell_process_main(spec_path: str, out: str) -> int:
    from types import SimpleNamespace

    spec = json.loads(Path(spec_path).read_text())
    if spec["reader_thread"]:
        from harness.measure import arrival_stamps

        arrival_stamps.READ_IN_LOOP = False
    engine = SimpleNamespace(
        base_url=spec["base_url"],
        metrics_url=spec["metrics_url"],
        served_model=spec["served_model"],
    )
    run = asyncio.run(
        specbench_cell(
            engine,
            spec["prompts"],
            ClosedLoop(concurrency=spec["concurrency"], requests=len(spec["prompts"])),
        )
    )
    Path(out).write_text(json.dumps(run_to_json(run)))
    return 0


def size_work(
    wave_s: float,
    peer_overhead_s: float,
    users: int,
    prompts: int,
    rounds: int,
    arrivals: int,
    budget_s: float,
) -> tuple[int, int, int]:
    """(prompts, rounds, arrivals) that fit `budget_s`, from one wave's length (each user
    one request, measured) and vllm bench's start-up: rounds first, then prompts (at
    least two waves), then the open loop's arrivals (at least 60)."""

    def closed_s(n: int, k: int) -> float:
        return 4 * k * (wave_s * -(-n // users)) + 2 * k * peer_overhead_s

    k = rounds
    while k > 1 and closed_s(prompts, k) > 0.7 * budget_s:
        k -= 1
    n = prompts
    while n > 2 * users and closed_s(n, k) > 0.7 * budget_s:
        n -= users
    left = max(0.0, budget_s - closed_s(n, k) - peer_overhead_s)
    # The open loop runs at half the closed loop's request rate: one arrival per
    # 2 * wave_s / users seconds, twice (one cell per tool).
    per_arrival_s = 2 * wave_s / users
    m = max(60, min(arrivals, int(left / 2 / per_arrival_s)))
    return n, k, m


def enter_own_session(nice: int) -> int | None:
    """Re-run this benchmark in a new session whose autogroup (and processes) sit at
    `nice`, as a shell started at that priority; returns the child's exit code, or
    None inside the child."""
    if os.environ.get("PEER_PARITY_IN_SESSION") == "1":
        try:
            Path("/proc/self/autogroup").write_text(str(nice))
        except OSError:
            pass
        os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
        return None
    env = dict(os.environ, PEER_PARITY_IN_SESSION="1")
    return subprocess.run([sys.executable, *sys.argv], env=env, start_new_session=True).returncode


def start_busy_cpu(cpu: int) -> subprocess.Popen:
    """A neighbour at normal priority in a session of its own, spinning on one CPU."""
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen(
        [sys.executable, "-c", spin], start_new_session=True, stdin=subprocess.DEVNULL
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=32, help="MT-Bench first turns (most)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="closed loop: repeat specbench, peer, peer, specbench this often (most)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="open-loop arrivals per s (default: half"
        " the closed loop's request rate, so the server keeps up)",
    )
    parser.add_argument("--arrivals", type=int, default=200, help="open-loop requests (most)")
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420,
        help="size prompts, rounds and arrivals by the measured step time"
        " so the measured part takes about this long",
    )
    parser.add_argument(
        "--no-placement",
        action="store_true",
        help="leave the client on every CPU (default: off the engine's cores)",
    )
    parser.add_argument(
        "--engine-session",
        choices=["nice10", "normal"],
        default="nice10",
        help="nice10: as a study starts the CPU engine (lowered); normal: in"
        " its own session at normal priority, as a user starts it",
    )
    parser.add_argument(
        "--client-session-nice",
        type=int,
        metavar="N",
        help="run both clients in a session of their own at nice N",
    )
    parser.add_argument(
        "--busy-cpu",
        type=int,
        metavar="K",
        help="keep CPU K busy with a spinning neighbour at normal priority",
    )
    parser.add_argument(
        "--reader-thread",
        action="store_true",
        help="read every connection on specbench's reader thread, as before"
        " issue 34 (default: kernel-stamped ones in the event loop)",
    )
    parser.add_argument(
        "--specbench-process",
        action="store_true",
        help="run specbench's closed-loop cells in a fresh process each, as"
        " vllm bench runs (default: in this benchmark's own process)",
    )
    parser.add_argument(
        "--client-priority",
        choices=["match_engine", "as_started"],
        default="match_engine",
        help="match_engine: specbench raises itself to an engine that"
        " outranks it for its own runs, as a study does, and puts it back"
        " before vllm bench's (which runs as started); as_started: both as"
        " started",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="print each client thread's CPU, run-queue wait and slices",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait up to S s for the 1-min load average to fall below 1",
    )
    if len(sys.argv) == 4 and sys.argv[1] == "--_cell":  # cell_in_own_process's child
        return cell_process_main(sys.argv[2], sys.argv[3])
    args = parser.parse_args()
    if args.client_session_nice is not None:
        rc = enter_own_session(args.client_session_nice)
        if rc is not None:
            return rc
    deadline = time.monotonic() + args.wait_quiet
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
    begun = time.monotonic()
    python, model = engine_python(), tiny_model()
    os.environ.setdefault("SPECBENCH_VLLM_CPU_PYTHON", python)
    # The demo's arm, served on the tiny test model (~1.5 ms steps): the demo's own model
    # is the pair's target, which it names through SPECBENCH_TINY_PAIR.
    os.environ.setdefault("SPECBENCH_TINY_PAIR", str(model.parent))
    study = expand_study(load_study(ROOT / "examples" / "cpu.yaml"))
    study = study.model_copy(update={"model": study.model.model_copy(update={"id": str(model)})})
    items = [item.messages[0]["content"] for item in load_items("chat")]
    c = args.concurrency
    busy = start_busy_cpu(args.busy_cpu) if args.busy_cpu is not None else None
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)

        def dataset(n: int) -> Path:
            path = tmp / f"prompts{n}.jsonl"
            path.write_text(
                "".join(
                    json.dumps({"prompt": p, "output_tokens": OUTPUT_TOKENS}) + "\n"
                    for p in items[:n]
                )
            )
            return path

        arm = study.arm("cpu-ngram")
        # A shared host slows the start of an engine that yields to everything else.
        launch = arm.launch.model_copy(update={"startup_timeout_s": 900})
        if args.engine_session == "normal":  # not through the launcher, which lowers it
            launch = launch.model_copy(
                update={"command": [python, "-c", _VLLM_SHIM], "python": None}
            )
        engine = start_engine(arm.model_copy(update={"launch": launch}), study, tmp / "engine")
        try:
            print(
                f"server: vllm-cpu {engine.info.version}, tiny model, n-gram k=3, "
                f"{engine.base_url}; load average {os.getloadavg()[0]:.2f} on "
                f"{os.cpu_count()} CPUs"
                + (
                    f"; CPU {args.busy_cpu} kept busy by a neighbour (pid {busy.pid})"
                    if busy
                    else ""
                )
            )
            gauge = ServerGauge(engine.metrics_url, tmp / "gauge.txt")
            if args.reader_thread:
                from harness.measure import arrival_stamps

                arrival_stamps.READ_IN_LOOP = False
            placed = None if args.no_placement else place_client(engine.pid)
            print(
                f"engine: nice {psutil.Process(engine.pid).nice()}, session "
                f"{_autogroup(engine.pid)}; client: nice {os.getpriority(os.PRIO_PROCESS, 0)},"
                f" session {_autogroup(os.getpid())}, "
                + (
                    "left on every CPU (--no-placement)"
                    if placed is None
                    else f"{placed.reason} (engine-bound {placed.engine_bound_cpus}, client "
                    f"{placed.client_cpus or placed.allowed_cpus})"
                )
            )

            # The first load on a fresh server pays its warm-up (caches, allocator, the
            # first batches): a discarded pass, so neither tool's first run carries it.
            # Its two waves (each user one request, twice) size the rest.
            warm = vllm_bench(
                python, engine, model, dataset(2 * c), 2 * c, tmp / "warm.json", concurrency=c
            )
            wave_s = warm.duration_s / 2
            overhead_s = max(0.0, warm.process_s - warm.duration_s)
            n, rounds, arrivals = size_work(
                wave_s, overhead_s, c, args.prompts, args.rounds, args.arrivals, args.budget_s
            )
            print(
                f"sizing: a wave of {c} requests takes {wave_s:.1f} s, vllm bench starts in "
                f"{overhead_s:.0f} s: {n} prompts, {rounds} round(s), {arrivals} open-loop "
                f"arrivals for a budget of {args.budget_s:g} s"
            )
            prompts, data = items[:n], dataset(n)

            def server_side(run: Run) -> Run:
                run.server_running = gauge.mean_over(run.spans)
                return run

            lifts: list[dict] = []

            def ours() -> Run:
                # As a study's client does (recording.client_priority), and only for its
                # own runs: the peer runs as the user started it.
                if args.client_priority == "match_engine":
                    lifts.append(match_engine_priority(engine.pid).to_dict())
                try:
                    if args.specbench_process:
                        spec = {
                            "base_url": engine.base_url,
                            "metrics_url": engine.metrics_url,
                            "served_model": engine.served_model,
                            "prompts": prompts,
                            "concurrency": c,
                            "reader_thread": args.reader_thread,
                        }
                        return server_side(cell_in_own_process(spec, tmp, len(runs)))
                    return server_side(
                        asyncio.run(
                            specbench_cell(
                                engine, prompts, ClosedLoop(concurrency=c, requests=len(prompts))
                            )
                        )
                    )
                finally:
                    restore_priority()

            def peer(i: int) -> Run:
                return server_side(
                    vllm_bench(
                        python,
                        engine,
                        model,
                        data,
                        len(prompts),
                        tmp / f"closed{i}.json",
                        concurrency=c,
                    )
                )

            # Both orders, repeated: this VM's engine speed drifts by ~5-10% from one run
            # to the next whichever tool drives it, so one pair cannot show a 5% gap.
            runs = []
            for r in range(rounds):
                runs += [ours(), peer(2 * r), peer(2 * r + 1), ours()]
            keys = [
                "delivered",
                "server_running",
                "share",
                "tok_s",
                "tpot_ms",
                "ttft_ms",
                "accept",
                "turn_p99_ms",
                "req_s",
            ]
            label = (
                f"closed loop, {c} users, {len(prompts)} MT-Bench first turns, "
                f"{OUTPUT_TOKENS} tokens (load average {os.getloadavg()[0]:.2f})"
            )
            closed = show(label, runs, c, keys)
            if lifts:
                print(
                    f"specbench's priority for its runs: {lifts[0]['changed'] or 'unchanged'}"
                    + (f"; refused: {lifts[0]['refused']}" if lifts[0]["refused"] else "")
                )
            for run in runs:
                print(f"  {run.tool}: {(run.probes or {}).get('sched')}")
                if args.threads:
                    for name, figures in ((run.probes or {}).get("threads") or {}).items():
                        print(f"    thread {name}: {figures}")
            show(
                "the clients themselves (CPU share of one core; wake-up lag p99 of the event"
                " loop and of a thread)",
                runs,
                c,
                PROBE_KEYS,
            )
            if not args.skip_open:
                rate = args.rate or round(0.5 * closed["mean"]["vllm bench"]["req_s"], 1)
                if args.client_priority == "match_engine":
                    match_engine_priority(engine.pid)
                try:
                    ours_open = asyncio.run(
                        specbench_cell(
                            engine, prompts, OpenLoop(rate=rate, requests=arrivals, seed=1)
                        )
                    )
                finally:
                    restore_priority()
                opened = [
                    ours_open,
                    vllm_bench(
                        python, engine, model, data, arrivals, tmp / "open.json", rate=rate, seed=1
                    ),
                ]
                print(
                    f"\nopen loop: Poisson at {rate:g}/s, {arrivals} arrivals each (each tool"
                    f" draws its own schedule; sampling spread of the rate "
                    f"~{1 / arrivals**0.5:.0%}, of the CV ~{1 / (2 * arrivals) ** 0.5:.0%})"
                )
                show(
                    "open loop (rate, cv: of the sends; drawn: specbench's own schedule)",
                    opened,
                    None,
                    [
                        "rate",
                        "cv",
                        "drawn_rate",
                        "drawn_cv",
                        "send_lag_p99_ms",
                        "tok_s",
                        "tpot_ms",
                        "ttft_ms",
                    ],
                )
        finally:
            with contextlib.suppress(NameError):
                gauge.stop()
            engine.stop()
            if busy is not None:
                busy.kill()
                busy.wait()
    r, share = closed["ratios"], closed["mean"]["specbench"]["share"]

    def f3(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    print(
        f"parity concurrency_ratio={f3(r['delivered'])} "
        f"server_concurrency_ratio={f3(r['server_running'])} tok_s_ratio={f3(r['tok_s'])} "
        f"tpot_ratio={f3(r['tpot_ms'])} delivered_share={f3(share)} "
        f"reader={'thread' if args.reader_thread else 'loop'} "
        f"engine_session={args.engine_session} client_session_nice="
        f"{args.client_session_nice if args.client_session_nice is not None else 'inherited'}"
        f" busy_cpu={args.busy_cpu if args.busy_cpu is not None else 'none'} "
        f"client_priority={args.client_priority} "
        f"took_s={time.monotonic() - begun:.0f}"
    )
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
