"""Hand-made run folders of the runner's shape, with known per-user speeds, counters and scores.

A cell's requests get per-user speeds spread symmetrically around the figure
asked for, so the cell's median is exactly that figure; vLLM-dialect counters
grow so the engine's acceptance length is known. Requests belong to users (request i to
user i % concurrency, as a closed loop deals them), so the intervals resample users as
they do on a real run. A study registering sessions (study_dict(sessions=N)) gets every
repeating cell in N sessions, each arm's sessions off its figure by session_factor and
averaging to it, so the speedups' points are the figures asked for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from harness.prereg.schema import Study
from harness.records import (
    ClientHealth,
    EngineSnapshot,
    MetricSample,
    RequestRecord,
    RequestSpeculation,
)
from harness.rundir import CellFile, CompleteFile, cell_dirname, rerun_of
from harness.rundir.cell import SESSION_SUFFIX
from harness.rundir.engines import EngineStart
from harness.rundir.manifest import HostFacts, Manifest

LEVELS = [1, 2, 4, 8, 16]
TOKENS = 101  # completion tokens per request: 100 intervals after the first token


def study_dict(sessions: int = 1, sessions_for: str = "pass_cells", **bars_overrides) -> dict:
    def attach(engine: str) -> dict:
        return {"base_url": "http://127.0.0.1:9", "metrics": engine, "served_model": "m"}

    bars = {
        "pass": {
            "speed": {"threshold": 2.0, "concurrencies": [1, 2, 4]},
            "identity": {"concurrency": 1, "min_identical_share": 1.0, "arms": "best_drafter"},
            "accuracy": {"tasks": ["gsm8k", "mmlu"], "level": 0.95, "arms": "best_drafter"},
            "knee": {"required": True},
        },
        "stop": {"threshold": 1.3, "concurrencies": [1, 2, 4]},
        "check": {"threshold": 5.0, "agree_within": 0.10},
        "intervals": {"level": 0.95, "bootstrap_resamples": 300, "seed": 7},
    }
    for key, value in bars_overrides.items():
        bars[key] = value
    return {
        "title": "synthetic study",
        "registered": "2026-11-30",
        "hardware": {"gpu": "test", "memory_bandwidth_gb_s": 1000, "dense_tflops": 100},
        "model": {"id": "local/model", "params_billion": 1.0},
        "arms": [
            {"name": "vllm-base", "engine": "vllm", "attach": attach("vllm")},
            {
                "name": "vllm-ngram",
                "engine": "vllm",
                "attach": attach("vllm"),
                "baseline": "vllm-base",
                "drafter": {"method": "ngram", "num_draft_tokens": 3},
            },
            {
                "name": "vllm-eagle3",
                "engine": "vllm",
                "attach": attach("vllm"),
                "baseline": "vllm-base",
                "drafter": {"method": "eagle3", "num_draft_tokens": 3},
            },
            {"name": "sglang-base", "engine": "sglang", "attach": attach("sglang")},
            {
                "name": "sglang-dflash",
                "engine": "sglang",
                "attach": attach("sglang"),
                "baseline": "sglang-base",
                "drafter": {"method": "dflash", "num_draft_tokens": 8},
            },
        ],
        "loads": {
            "closed_loop": {"concurrency": LEVELS, "requests": {"min": 21, "per_user": 1}},
            "open_loop": {
                "task": "chat",
                "rates_relative_to_knee": [0.5, 1.0, 1.5],
                "requests": 30,
                "objective": {"metric": "ttft", "percentile": 99, "max_s": 2.0},
                "fleet_traffic_rps": 100,
            },
        },
        "tasks": [
            {"name": "chat", "kind": "chat", "uses": ["speed", "identity"], "max_tokens": 128},
            {
                "name": "gsm8k",
                "kind": "gsm8k",
                "uses": ["speed", "accuracy", "identity"],
                "max_tokens": 128,
            },
            {"name": "mmlu", "kind": "mmlu", "uses": ["accuracy"], "max_tokens": 16},
        ],
        "bars": bars,
        "recording": {"sessions": sessions, "sessions_for": sessions_for},
    }


def session_factor(baseline: bool, session: int, sessions: int) -> float:
    """Session s's speed over the arm's figure: the drafter's sessions swing +-3 %, the
    baseline's +-2 % out of phase with them (so the paired ratios differ), each summing
    to the figure over the sessions (cosines at n evenly spaced phases sum to 0)."""
    if sessions <= 1:
        return 1.0
    phase = 2 * math.pi * (session - 1) / sessions
    return 1 - 0.02 * math.cos(phase + math.pi / 3) if baseline else 1 + 0.03 * math.cos(phase)


# The default scenario: speedup per drafter arm per level (every speed task alike).
PASSING_SPEEDUPS = {
    "vllm-ngram": {1: 2.5, 2: 2.4, 4: 2.2, 8: 1.5, 16: 0.8},
    "vllm-eagle3": {1: 1.8, 2: 1.7, 4: 1.6, 8: 1.2, 16: 0.9},
    "sglang-dflash": {1: 3.0, 2: 2.8, 4: 2.5, 8: 1.6, 16: 0.9},
}
BASE_SPEED = 40.0
IDENTITY_ITEMS = [f"item{i}" for i in range(8)]
ACCURACY_ITEMS = [f"q{i}" for i in range(100)]


def cell_dir(cell_id: str) -> str:
    return cell_dirname(cell_id)  # the store's folder names


def engine_start(
    arm: str,
    kind: str = "vllm",
    version: str | None = "0.11.0",
    settings: dict[str, str] | None = None,
) -> EngineStart:
    """One ready engine start as the manifest keeps it."""
    return EngineStart(
        arm=arm,
        kind=kind,
        metrics_dialect="sglang" if kind == "sglang" else "vllm",
        version=version,
        gpu="H100",
        settings=settings or {},
        started_wall=1_700_000_000.0,
        started_iso="2023-11-14T22:13:20Z",
        launched=True,
        base_url="http://127.0.0.1:8000",
        served_model="target",
        state="ready",
    )


class RunBuilder:
    def __init__(self, root: Path, study: dict | None = None, run_id: str = "synthetic-run"):
        self.root = root / run_id
        self.root.mkdir(parents=True)
        self.study_data = study or study_dict()
        self.study = Study.model_validate(self.study_data)
        self.manifest = Manifest(
            run_id=run_id,
            seal="f" * 64,
            study_file="prereg.yaml",
            specbench_commit="abc1234",
            host=HostFacts(hostname="test", cpus=2),
            started_wall=1_700_000_000.0,
            ended_wall=1_700_003_600.0,
            status="complete",
            engines={"vllm-base": [engine_start("vllm-base")]},
        )
        self.write_manifest()
        (self.root / "study.json").write_text(
            json.dumps({"study": self.study.model_dump(mode="json", by_alias=True), "data": {}})
        )

    def write_manifest(self) -> None:
        (self.root / "manifest.json").write_text(json.dumps(self.manifest.to_json()))

    # --- one cell ---------------------------------------------------------------------

    def write_cell(
        self,
        cell_id: str,
        cell: dict,
        requests: list[RequestRecord],
        samples: Sequence[MetricSample] = (),
        scores: dict[str, bool] | None = None,
        complete: bool = True,
        valid: bool = True,
        aborted: bool = False,
        attempt: int = 1,
        open_loop: dict | None = None,
    ) -> Path:
        folder = self.root / "cells" / cell_dir(cell_id)
        folder.mkdir(parents=True, exist_ok=True)
        # A session's cell names its session, as the runner writes it (a rerun's is read
        # from its id, as a folder of format 5 holds it).
        session = SESSION_SUFFIX.search(rerun_of(cell_id) or cell_id)
        info = {
            "cell": {"id": cell_id, "session": int(session[1]) if session else None, **cell},
            "attempts": [
                {
                    "attempt": attempt,
                    "started_wall": 0.0,
                    "ended_wall": 1.0,
                    "status": "complete" if complete else "failed",
                    "error": None,
                }
            ],
        }
        if open_loop is not None:
            info["open_loop"] = open_loop
        # Through the store's records: what is built here is what the runner writes.
        (folder / "cell.json").write_text(CellFile.model_validate(info).model_dump_json())
        with (folder / "requests.jsonl").open("w") as fh:
            for r in requests:
                fh.write(r.model_dump_json() + "\n")
        with (folder / "metrics.jsonl").open("w") as fh:
            for s in samples:
                fh.write(s.model_dump_json() + "\n")
        if scores is not None:
            with (folder / "scores.jsonl").open("w") as fh:
                for item, ok in scores.items():
                    fh.write(
                        json.dumps({"id": item, "extracted": "x", "correct": ok, "detail": None})
                        + "\n"
                    )
        if complete:
            health = ClientHealth(
                lag_p50_ms=0.1,
                lag_p99_ms=1.0,
                lag_max_ms=2.0,
                cpu_percent=10,
                lag_limit_ms=5.0,
                valid=valid,
                reason=None if valid else "event-loop lag p99 9 ms > 5 ms",
            )
            if cell.get("concurrency") and cell.get("kind") != "open":
                c = cell["concurrency"]
                health = health.model_copy(
                    update={
                        "registered_concurrency": c,
                        "delivered_concurrency": 0.99 * c,
                        "delivered_share": 0.99,
                        "min_delivered_share": 0.97,
                        "turnaround_p50_ms": 1.0,
                        "turnaround_p99_ms": 2.0,
                        "turnaround_max_ms": 3.0,
                    }
                )
            outcome = {
                "n_ok": len(requests),
                "n_errors": 0,
                "errors_by_kind": {},
                "aborted": aborted,
                "reason": "error rate 9% > 2%" if aborted else None,
                "started_t": 0.0,
                "ended_t": 100.0,
                "health": health.model_dump(),
            }
            (folder / "complete.json").write_text(
                CompleteFile.model_validate(
                    {"attempt": attempt, "finished_wall": 2.0, "outcome": outcome}
                ).model_dump_json()
            )
        return folder

    # --- kinds of cell ----------------------------------------------------------------

    def speed(
        self,
        arm: str,
        task: str,
        c: int,
        speed: float,
        n: int = 21,
        spread: float = 0.02,
        cell_id: str | None = None,
        accept_length: float = 2.5,
        speculation: RequestSpeculation | None = None,
        **kw,
    ) -> str:
        """speculation: the engine's per-request figures on every measured request."""
        cell_id = cell_id or f"{arm}/{task}/speed/c{c:03d}"
        recs = speed_requests(cell_id, speed, n, spread, concurrency=c)
        for r in recs:
            r.speculation = speculation
        # Warm-up and an earlier attempt must be ignored: make them absurdly fast (and the
        # other attempt's per-request figures absurd; the warm-up's lie in the counters'
        # window, so they are the measured ones').
        absurd = RequestSpeculation(engine="vllm", rounds=1, draft_tokens=3, accepted=300)
        recs.insert(0, speed_requests(cell_id, 1e6, 1, 0, phase="warmup")[0])
        recs[0].speculation = speculation
        recs.extend(speed_requests(cell_id, 1e6, 3, 0, attempt=kw.get("attempt", 1) + 1))
        for r in recs[-3:]:
            r.speculation = absurd if speculation is not None else None
        drafter = self.study.arm(arm).drafter is not None
        engine = self.study.arm(arm).engine
        samples = counter_samples(cell_id, engine, accept_length if drafter else None)
        self.write_cell(
            cell_id,
            {
                "arm": arm,
                "task": task,
                "kind": "speed",
                "concurrency": c,
                "stage": 1 if c <= 4 else 2,
                "requests": n,
                "warmup": 1,
                "rate_relative": None,
            },
            recs,
            samples,
            **kw,
        )
        return cell_id

    def identity(self, arm: str, task: str, outputs: dict[str, str], **kw) -> str:
        cell_id = f"{arm}/{task}/identity"
        recs = item_records(cell_id, outputs)
        self.write_cell(
            cell_id,
            {"arm": arm, "task": task, "kind": "identity", "concurrency": 1, "stage": 1}
            | {"requests": len(outputs), "warmup": 0},
            recs,
            **kw,
        )
        return cell_id

    def accuracy(self, arm: str, task: str, correct: dict[str, bool], **kw) -> str:
        cell_id = f"{arm}/{task}/accuracy"
        recs = item_records(cell_id, dict.fromkeys(correct, "answer"))
        self.write_cell(
            cell_id,
            {"arm": arm, "task": task, "kind": "accuracy", "concurrency": 16, "stage": 2}
            | {"requests": len(correct), "warmup": 0},
            recs,
            scores=correct,
            **kw,
        )
        return cell_id

    def open_cell(
        self,
        arm: str,
        rate_relative: float,
        rate_rps: float,
        ttft_s: float,
        reference_rps: float = 1.0,
        n: int = 30,
        queue_growth_s: float = 0.0,
    ) -> str:
        """queue_growth_s: request i waits i * that long in the client before it leaves."""
        cell_id = f"{arm}/chat/open/x{rate_relative:g}"
        recs = []
        for i in range(n):
            t = i / rate_rps
            sent = t + i * queue_growth_s
            recs.append(
                RequestRecord(
                    cell_id=cell_id,
                    index=i,
                    item_id=f"p{i}",
                    scheduled_t=t,
                    sent_t=sent,
                    first_token_t=sent + ttft_s,
                    end_t=sent + ttft_s + 2.0,
                    completion_tokens=TOKENS,
                )
            )
        self.write_cell(
            cell_id,
            {
                "arm": arm,
                "task": "chat",
                "kind": "open",
                "concurrency": None,
                "stage": 3,
                "requests": n,
                "warmup": 0,
                "rate_relative": rate_relative,
            },
            recs,
            open_loop={"reference_rps": reference_rps, "rate_rps": rate_rps},
        )
        return cell_id

    # --- whole scenarios ----------------------------------------------------------------

    def speed_cells(
        self,
        speedups: dict[str, dict[int, float]] = PASSING_SPEEDUPS,
        levels: list[int] = LEVELS,
        tasks: tuple[str, ...] = ("chat", "gsm8k"),
        base_speed: float = BASE_SPEED,
    ) -> None:
        for task in tasks:
            for c in levels:
                for s in self.sessions_at(c):
                    self.speed_sessions("vllm-base", task, c, base_speed, s)
                    self.speed_sessions("sglang-base", task, c, base_speed, s)
                    for arm, by_c in speedups.items():
                        self.speed_sessions(arm, task, c, base_speed * by_c[c], s)

    def sessions_at(self, c: int) -> list[int]:
        """The sessions a speed cell at level c is measured in (the plan's rule)."""
        rec = self.study.recording
        repeats = rec.sessions > 1 and (
            rec.sessions_for == "speed_cells" or c in self.study.bars.pass_.speed.concurrencies
        )
        return list(range(1, rec.sessions + 1)) if repeats else [1]

    def speed_sessions(self, arm: str, task: str, c: int, speed: float, session: int, **kw) -> str:
        """Session `session`'s cell of an arm at its figure `speed` (session_factor off it)."""
        n = len(self.sessions_at(c))
        cell_id = f"{arm}/{task}/speed/c{c:03d}" + (f"/s{session}" if session > 1 else "")
        baseline = self.study.arm(arm).drafter is None
        return self.speed(
            arm, task, c, speed * session_factor(baseline, session, n), cell_id=cell_id, **kw
        )

    def identity_cells(self, drafter_outputs: dict[str, dict[str, str]] | None = None) -> None:
        base = {item: f"The answer to {item} is 42 and that is all." for item in IDENTITY_ITEMS}
        for task in ("chat", "gsm8k"):
            for arm in ("vllm-base", "sglang-base"):
                self.identity(arm, task, base)
            for arm in PASSING_SPEEDUPS:
                outputs = (drafter_outputs or {}).get(arm, base)
                self.identity(arm, task, outputs)

    def accuracy_cells(
        self, drafter_correct: dict[str, int] | None = None, base_correct: int = 70
    ) -> None:
        for task in ("gsm8k", "mmlu"):
            for arm in ("vllm-base", "sglang-base", *PASSING_SPEEDUPS):
                k = (drafter_correct or {}).get(arm, base_correct)
                self.accuracy(arm, task, {q: i < k for i, q in enumerate(ACCURACY_ITEMS)})

    def open_cells(
        self, ttft_by_arm: dict[str, list[float]] | None = None, reference: float = 2.0
    ) -> None:
        ttft_by_arm = ttft_by_arm or {
            "vllm-base": [0.5, 1.5, 3.0],
            "vllm-ngram": [0.3, 0.8, 2.5],
            "vllm-eagle3": [0.4, 1.2, 2.8],
            "sglang-base": [0.5, 1.5, 3.0],
            "sglang-dflash": [0.2, 0.5, 1.0],
        }
        for arm, ttfts in ttft_by_arm.items():
            for rel, ttft in zip([0.5, 1.0, 1.5], ttfts, strict=True):
                self.open_cell(arm, rel, rel * reference, ttft, reference_rps=reference)

    def full_passing_run(self) -> RunBuilder:
        self.speed_cells()
        self.identity_cells()
        self.accuracy_cells()
        self.open_cells()
        return self


# --- records ----------------------------------------------------------------------------


def item_records(cell_id: str, outputs: dict[str, str]) -> list[RequestRecord]:
    """One request a second per item, its answer the item's text."""
    return [
        RequestRecord(
            cell_id=cell_id,
            index=i,
            item_id=item,
            scheduled_t=i,
            sent_t=i,
            first_token_t=i + 0.1,
            end_t=i + 1.0,
            completion_tokens=TOKENS,
            output_text=text,
        )
        for i, (item, text) in enumerate(outputs.items())
    ]


def speed_requests(
    cell_id: str,
    speed: float,
    n: int,
    spread: float,
    phase: Literal["warmup", "measure"] = "measure",
    attempt: int = 1,
    concurrency: int = 1,
) -> list[RequestRecord]:
    """n requests whose per-user speeds spread +-spread around `speed` (median exactly it)."""
    out = []
    for i in range(n):
        user = i % concurrency  # a closed loop deals request i to user i mod N
        frac = (i / (n - 1) - 0.5) * 2 if n > 1 else 0.0
        s = speed * (1 + spread * frac)
        start = (i // concurrency) * (0.1 + (TOKENS - 1) / speed)
        first = start + 0.1
        end = first + (TOKENS - 1) / s
        times = [first + k * (end - first) / 10 for k in range(11)]
        out.append(
            RequestRecord(
                cell_id=cell_id,
                attempt=attempt,
                index=i,
                item_id=f"p{i}",
                phase=phase,
                user=user,
                scheduled_t=start,
                sent_t=start,
                first_token_t=first,
                end_t=end,
                prompt_tokens=50,
                completion_tokens=TOKENS,
                chunk_times=times,
                chunk_tokens=[1, *[10] * 10],
                finish_reason="length",
                output_text="x",
            )
        )
    return out


def counter_samples(
    cell_id: str, engine: str, accept_length: float | None, seconds: int = 10
) -> list[MetricSample]:
    """1 Hz scrapes with 100 drafts a second at `accept_length` (None: no speculation);
    one failed scrape in the middle is a gap."""
    out = []
    for t in range(seconds + 1):
        if t == seconds // 2:
            out.append(
                MetricSample(
                    cell_id=cell_id, t=float(t), wall_time=1e9 + t, ok=False, error="timeout"
                )
            )
            continue
        drafts = 100.0 * t
        snap: dict = {"engine": engine, "generation_tokens": 300.0 * t}
        if accept_length is not None:
            accepted = drafts * (accept_length - 1)
            if engine == "vllm":
                # three positions with rates summing to accept_length - 1; 50 tokens a
                # second come from steps without drafts, which vLLM counts as no round
                share = [0.5, 0.3, 0.2]
                snap.update(
                    drafts=drafts,
                    draft_tokens=3 * drafts,
                    accepted_tokens=accepted,
                    accepted_per_position=[accepted * s for s in share],
                    generation_tokens=drafts * accept_length + 50.0 * t,
                )
            else:
                snap.update(
                    drafts=drafts,
                    generation_tokens=drafts * accept_length,
                    engine_accept_length=accept_length,
                )
        out.append(
            MetricSample(
                cell_id=cell_id,
                t=float(t),
                wall_time=1e9 + t,
                ok=True,
                snapshot=EngineSnapshot(**snap),
            )
        )
    return out
