"""The smoke stage: minutes before the hours, every arm shown to be the arm registered.

Before the first registered cell, each arm starts, answers two greedy prompts (the
first two items of the identity task, at its max_tokens, through the client the cells
use), moves its speculation counter (drafter arms: vLLM
`vllm:spec_decode_num_drafts_total`, SGLang `sglang:spec_verify_calls_total`), and
gives its baseline's text on both prompts, and (a drafter registering
`drafter.expect.acceptance_length_min`) reaches that many tokens per round at one user,
from the client's chunks. A failure stops the run with one line naming the arm and the
engine log's last relevant line; `--allow-deviation` runs a drafter below its floor
anyway and records the deviation.

Everything is appended to the run folder as it is made: `smoke/requests.jsonl` (each
request's record) and `smoke/arms.jsonl` (each arm's check, and each drafter-baseline
comparison once both sides have answered). A resume skips an arm whose checks passed
under the same key (a hash of the arm, its baseline, the model, sampling and prompts),
so a smoke is redone only for arms that changed.

Order: baselines, then drafters, and last the arm of the first registered cell to run,
whose engine the runner keeps for that cell (one engine start fewer).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.identity import DEFAULT_NEAR_TIE_MARGIN, excerpt_around, token_divergence
from harness.analysis.regime import REGIME_FILE, regime_levels
from harness.analysis.smoke import compares, margin_text, smoke_line, value_text
from harness.derived.itl import tokens_per_chunk
from harness.dialects import Dialect
from harness.engines import get_engine_kind
from harness.engines.drafting import wait_for_drafting
from harness.engines.engine_log import relevant_log_line
from harness.engines.engine_process import EngineProcess
from harness.engines.metrics import counter_name, scrape_metrics
from harness.engines.process import tail_lines
from harness.errors import SpecbenchError
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec, scored_output_fields
from harness.prereg.schema import Drafter, Study, TaskSpec
from harness.records import (
    RequestRecord,
    SmokeAcceptance,
    SmokeAnswer,
    SmokeArmCheck,
    SmokeCounter,
    SmokeDivergence,
    SmokeIdentityCheck,
    read_smoke_records,
)
from harness.run.cell_requests import task_items
from harness.run.execute import sampling_fields
from harness.run.progress import RunProgress
from harness.run.regime import measure_regime
from harness.run.store import JsonlWriter, RunStore
from harness.rundir.manifest import Deviation, SmokeSummary

if TYPE_CHECKING:
    from harness.run.arm_engine import ArmEngine

SMOKE_DIR = "smoke"
SMOKE_PROMPTS = 2
# Both engines count a request's drafts when it finishes, so the series can trail the
# stream's end a little: the after-scrape is retried this long before "did not move"
# (the rule itself, absent-before included: harness/engines/drafting.py).
COUNTER_WAIT_S = 10.0
LOG_TAIL = 200


class SmokeFailed(SpecbenchError):
    """The smoke stage found a broken arm: the run stops before its first cell."""


def smoke_task(study: Study) -> TaskSpec:
    """The identity task (the prompts the identity bar compares), else the first speed task."""
    for task in study.tasks:
        if "identity" in task.uses:
            return task
    return next(t for t in study.tasks if "speed" in t.uses)


def smoke_requests(study: Study) -> list[RequestSpec]:
    task = smoke_task(study)
    return [
        RequestSpec(item_id=item.id, messages=item.messages, max_tokens=task.max_tokens)
        for item in task_items(task)[:SMOKE_PROMPTS]
    ]


def smoke_key(study: Study, arm_name: str, requests: list[RequestSpec]) -> str:
    arm = study.arm(arm_name)
    baseline = study.arm(arm.baseline) if arm.baseline else None
    data = {
        "arm": arm.model_dump(mode="json"),
        "baseline": baseline.model_dump(mode="json") if baseline else None,
        "model": study.model.model_dump(mode="json"),
        "sampling": study.sampling.model_dump(mode="json"),
        "requests": [asdict(r) for r in requests],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def smoke_order(study: Study, arms: list[str], last: str | None) -> list[str]:
    """Baselines first (a drafter is compared as soon as it answers), then drafters, and
    `last` (the first registered cell's arm) at the end, so its engine stays up."""
    baselines = [a.name for a in study.arms if a.name in arms and a.is_baseline]
    drafters = [a.name for a in study.arms if a.name in arms and not a.is_baseline]
    order = [n for n in baselines + drafters if n != last]
    return order + [last] if last in arms else order


def smoke_records(root: Path) -> list[SmokeArmCheck | SmokeIdentityCheck]:
    """smoke/arms.jsonl as written (empty when the run has no smoke yet)."""
    return read_smoke_records(root / SMOKE_DIR / "arms.jsonl")


def passed_checks(records: list, keys: dict[str, str]) -> tuple[dict[str, SmokeArmCheck], set[str]]:
    """The latest passed own check of each arm under its current key, and the drafters
    whose latest comparison under their current key passed."""
    own: dict[str, SmokeArmCheck] = {}
    identity: dict[str, bool] = {}
    for rec in records:
        if keys.get(rec.arm) != rec.key:
            continue
        if isinstance(rec, SmokeArmCheck):
            if rec.status == "passed":
                own[rec.arm] = rec
            else:
                own.pop(rec.arm, None)
        else:
            identity[rec.arm] = rec.status == "passed"
    return own, {arm for arm, ok in identity.items() if ok}


def compare_answers(
    drafter: str,
    baseline: str,
    key: str,
    mine: list[SmokeAnswer],
    theirs: list[SmokeAnswer],
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN,
) -> SmokeIdentityCheck:
    """A drafter's smoke answers against its baseline's. A text that differs where the
    target's two best tokens were a near-tie is numerics (speculative decoding is lossless
    up to them): recorded, and the run goes on. Any other divergence, or one a side sent
    no logprobs for, fails the check with the token and both margins."""
    by_item = {a.item_id: a for a in theirs}
    compared = 0
    near_ties: list[SmokeDivergence] = []
    for answer in mine:
        other = by_item.get(answer.item_id)
        if other is None or not (answer.ok and other.ok):
            continue  # the answer check already failed the side that did not answer
        compared += 1
        if answer.output_text == other.output_text:
            continue
        div = SmokeDivergence(
            item_id=answer.item_id,
            **asdict(
                token_divergence(
                    answer.token_logprobs,
                    other.token_logprobs,
                    near_tie_margin,
                    answer.output_text,
                    other.output_text,
                )
            ),
        )
        if div.kind == "numeric":
            near_ties.append(div)
            continue
        i = len(os.path.commonprefix([answer.output_text, other.output_text]))
        token = (
            ""
            if div.token_index is None
            else f" token {div.token_index} {div.drafter_token!r} vs {div.baseline_token!r}"
            f" (the target's margin {margin_text(div.drafter_margin)} drafter,"
            f" {margin_text(div.baseline_margin)} baseline; a near-tie is below"
            f" {near_tie_margin:g}),"
        )
        drafter_text = excerpt_around(answer.output_text, i)
        baseline_text = excerpt_around(other.output_text, i)
        return SmokeIdentityCheck(
            arm=drafter,
            baseline=baseline,
            key=key,
            wall=time.time(),
            status="failed",
            compared=compared,
            item_id=answer.item_id,
            char_index=i,
            drafter_text=drafter_text,
            baseline_text=baseline_text,
            divergence=div,
            near_ties=near_ties,
            near_tie_margin=near_tie_margin,
            reason=(
                f"arm {drafter!r}: its greedy output differs from its baseline"
                f" {baseline!r} on item {answer.item_id} at{token} character {i}:"
                f" {drafter_text!r} vs {baseline_text!r}"
                f" -- {div.kind}: {div.why}"
            ),
        )
    return SmokeIdentityCheck(
        arm=drafter,
        baseline=baseline,
        key=key,
        wall=time.time(),
        status="passed",
        compared=compared,
        near_ties=near_ties,
        near_tie_margin=near_tie_margin,
    )


def logprobs_hint(error: str | None) -> str:
    """What to do when an engine refused the logprobs the smoke asks for (identity is read
    token by token): SGLang's spec-v1 DFlash worker raised "DFLASH does not support
    return_logprob"; its spec-v2 worker serves them (sglang PR 33459), and 0.5.23, the
    pinned release, has only that one (harness/engines/sglang_engine.py)."""
    if not error or "logprob" not in error.lower():
        return ""
    return (
        " (the smoke and identity cells ask for logprobs, top 2, to read identity token"
        " by token: serve this drafter through a path that returns them, e.g. SGLang's"
        " spec v2 for DFLASH, the only DFLASH worker in the pinned SGLang 0.5.23: check"
        " the engine environment's version)"
    )


# Drafters that may skip a step (no match to propose from): their rounds are a lower bound.
MAY_SKIP_DRAFTING = {"ngram", "ngram_gpu", "suffix"}


def draft_count_problem(rec: RequestRecord, drafter: Drafter) -> str | None:
    """Whether a request's own speculation figures add up to its tokens: the first token
    comes from the prefill and each round gives its accepted drafts plus one, so
    rounds + accepted + 1 = completion_tokens (within one token). A request cut at
    max_tokens may have dropped up to k of its last round's tokens; a drafter that can
    skip steps (n-gram: no match) gives the plain steps between its rounds uncounted, so
    for it the sum is only a lower bound. None: they agree, or the engine sent none."""
    s, tokens = rec.speculation, rec.completion_tokens
    if s is None or tokens is None or not rec.ok:
        return None
    counted = s.rounds + s.accepted + 1
    cut = drafter.num_draft_tokens if rec.finish_reason == "length" else 0
    low = float("-inf") if drafter.method in MAY_SKIP_DRAFTING else tokens - 1
    if low <= counted <= tokens + cut + 1:
        return None
    return (
        f"item {rec.item_id}: the engine counted {s.rounds} rounds and {s.accepted}"
        f" accepted drafts (+1 for the prefill's token = {counted} tokens) for a request"
        f" of {tokens} completion tokens (finish {rec.finish_reason}): what a 'draft'"
        " counts does not match what the acceptance figures assume"
    )


class SmokeStage:
    """Runs the smoke over the arms that need it; raises SmokeFailed at the first broken one.

    `engine_for(arm)` hands out the runner's engine for an arm (one engine up at a time),
    so the last arm's engine is still running for the first cell when this returns."""

    def __init__(
        self,
        store: RunStore,
        study: Study,
        progress: RunProgress,
        engine_for: Callable[[str], ArmEngine],
        allow_deviation: bool = False,
    ) -> None:
        self.store, self.study, self.progress = store, study, progress
        self.engine_for = engine_for
        # --allow-deviation: a drafter below its acceptance floor runs, recorded as such.
        self.allow_deviation = allow_deviation
        self.requests = smoke_requests(study)
        self.keys = {a.name: smoke_key(study, a.name, self.requests) for a in study.arms}
        self.folder = store.root / SMOKE_DIR
        self.answers: dict[str, list[SmokeAnswer]] = {}
        self._records: dict[str, list[RequestRecord]] = {}  # this stage's, per arm

    def run(self, last: str | None) -> list[str]:
        """Smoke every arm not already passed; returns the arms smoked now."""
        records = smoke_records(self.store.root)
        own, compared = passed_checks(records, self.keys)
        for arm, rec in own.items():
            self.answers[arm] = rec.answers
        todo = [
            a.name
            for a in self.study.arms
            if a.name not in own or (compares(a) and a.name not in compared)
        ]
        attempts = {
            a.name: sum(1 for r in records if isinstance(r, SmokeArmCheck) and r.arm == a.name)
            for a in self.study.arms
        }
        started = time.time()
        if not todo:
            self.progress.note(
                f"smoke: every arm passed it earlier in this run folder"
                f" ({len(self.study.arms)} arms, keys unchanged); not redone"
            )
            self._record(
                SmokeSummary(
                    status="passed", smoked_now=[], started_wall=started, ended_wall=started
                )
            )
            return []
        order = smoke_order(self.study, todo, last)
        self.progress.note(
            f"smoke stage: {', '.join(order)} (two greedy prompts of task"
            f" {smoke_task(self.study).name} each)"
        )
        self._record(SmokeSummary(status="running", order=order, started_wall=started))
        self.folder.mkdir(exist_ok=True)
        with (
            JsonlWriter(self.folder / "arms.jsonl") as out,
            JsonlWriter(self.folder / "requests.jsonl") as requests_out,
        ):
            for name in order:
                check = self._check_arm(name, attempts[name] + 1, requests_out)
                out.write(check)
                self._say(check)
                if check.status == "failed":
                    self._stop(check, started, order)
                self.answers[name] = check.answers
                self._time_regime(name)
                for identity in self._comparisons(name):
                    out.write(identity)
                    self._say(identity)
                    if identity.status == "failed":
                        self._stop(identity, started, order)
        self._record(
            SmokeSummary(
                status="passed",
                order=order,
                smoked_now=order,
                started_wall=started,
                ended_wall=time.time(),
            )
        )
        self.progress.note(f"smoke passed: {len(order)} arms in {time.time() - started:.0f} s")
        return order

    # --- one arm -------------------------------------------------------------------

    def _check_arm(self, name: str, attempt: int, requests_out: JsonlWriter) -> SmokeArmCheck:
        arm = self.study.arm(name)
        engine = self.engine_for(name)
        started = time.time()
        fields: dict[str, Any] = {
            "arm": name,
            "key": self.keys[name],
            "attempt": attempt,
            "started_wall": started,
            "log_path": str(self.log_path(name)),
        }
        was_up = engine.running() and not getattr(engine, "prestarted", False)
        engine.prestarted = False
        try:
            process = engine.ensure("smoke")
        except SpecbenchError as err:
            return SmokeArmCheck(
                **fields,
                ended_wall=time.time(),
                engine="not started",
                status="failed",
                failed_check="start",
                reason=f"arm {name!r}: did not start: {err.lines[0]}",
                log_line=self._log_line(self.log_path(name)),
            )
        how = "attached" if arm.attach is not None else ("reused" if was_up else "started")
        fields["engine"] = how
        dialect = process.metrics_dialect
        before = self._drafts(process) if arm.drafter is not None else None
        answers = self._answer(process, name, attempt, requests_out)
        failed = [a for a in answers if not a.ok or not (a.completion_tokens or a.output_text)]
        if failed:
            what = (failed[0].error or "no output tokens") + logprobs_hint(failed[0].error)
            return SmokeArmCheck(
                **fields,
                ended_wall=time.time(),
                status="failed",
                failed_check="answer",
                reason=(
                    f"arm {name!r}: {len(answers) - len(failed)} of {len(answers)} smoke"
                    f" prompts answered; item {failed[0].item_id}: {what}"
                ),
                log_line=self._log_line(self.log_path(name)),
                answers=answers,
            )
        counter = None
        if arm.drafter is not None and before is not None:  # before: read for a drafter
            counter = self._counter(process, dialect, before)
            if not counter.moved:
                return SmokeArmCheck(
                    **fields,
                    ended_wall=time.time(),
                    status="failed",
                    failed_check="counter",
                    reason=(
                        f"arm {name!r}: its speculation counter {counter.name} did not move"
                        f" over {len(answers)} greedy requests ({value_text(counter.before)} ->"
                        f" {value_text(counter.after)}): the engine is not drafting"
                    ),
                    log_line=self._log_line(self.log_path(name)),
                    answers=answers,
                    counter=counter,
                )
            problem = next(
                (
                    p
                    for r in self._records.get(name, [])
                    if (p := draft_count_problem(r, arm.drafter)) is not None
                ),
                None,
            )
            if problem is not None:
                return SmokeArmCheck(
                    **fields,
                    ended_wall=time.time(),
                    status="failed",
                    failed_check="draft_count",
                    reason=f"arm {name!r}: {problem}",
                    log_line=self._log_line(self.log_path(name)),
                    answers=answers,
                    counter=counter,
                )
        acceptance = self._acceptance(name)
        if acceptance is not None and acceptance.below:
            measured = (
                "no chunk after the first"
                if acceptance.tokens_per_round is None
                else f"{acceptance.tokens_per_round:.2f} tokens per round"
            )
            reason = (
                f"arm {name!r}: {measured} over {len(answers)} greedy prompts at one user,"
                f" below its drafter.expect.acceptance_length_min {acceptance.floor:g}"
                " (a drafter stale against its target?)"
            )
            if not self.allow_deviation:
                return SmokeArmCheck(
                    **fields,
                    ended_wall=time.time(),
                    status="failed",
                    failed_check="acceptance",
                    reason=reason,
                    log_line=self._log_line(self.log_path(name)),
                    answers=answers,
                    counter=counter,
                    acceptance=acceptance,
                )
            acceptance = acceptance.model_copy(update={"allowed": True})
            self.store.record_deviation(
                Deviation(
                    when=time.time(),
                    arm=name,
                    reason=reason,
                    what=f"run below its acceptance floor (--allow-deviation): {reason}",
                )
            )
            self.progress.note(
                f"[yellow]deviation recorded:[/yellow] {reason}; run anyway (--allow-deviation)"
            )
        return SmokeArmCheck(
            **fields,
            ended_wall=time.time(),
            status="passed",
            answers=answers,
            counter=counter,
            acceptance=acceptance,
        )

    def _time_regime(self, name: str) -> None:
        """A baseline's plain step by level (harness/run/regime.py), while its engine is up."""
        arm = self.study.arm(name)
        if not arm.is_baseline or not self.study.recording.regime.enabled:
            return
        levels = regime_levels(self.study)
        self.progress.note(
            f"timing {name}'s plain step at {', '.join(map(str, levels))} users (the host's regime)"
        )
        process = self.engine_for(name).ensure("smoke")
        try:
            record = measure_regime(
                self.study,
                name,
                self.keys[name],
                process.base_url,
                process.served_model,
                self.requests,
                engine_group=process.pgid,
            )
        except SpecbenchError as err:  # a host that cannot be timed is said, never fatal
            self.progress.note(f"[yellow]host regime not timed for {name}:[/yellow] {err.lines[0]}")
            return
        with JsonlWriter(self.folder / REGIME_FILE) as out:
            out.write(record)
        self.store.edit_manifest(lambda m: m.regime.update({name: record}))
        self.progress.note(record.line())

    def _acceptance(self, name: str) -> SmokeAcceptance | None:
        """The drafter's tokens per round over its smoke prompts against its floor (None:
        no floor registered). The client's chunks, so attached arms are measured alike."""
        drafter = self.study.arm(name).drafter
        floor = drafter.expect.acceptance_length_min if drafter and drafter.expect else None
        if floor is None:
            return None
        tpr = tokens_per_chunk(self._records.get(name, []))
        return SmokeAcceptance(tokens_per_round=tpr, floor=floor, below=tpr is None or tpr < floor)

    def _answer(
        self, process: EngineProcess, name: str, attempt: int, requests_out: JsonlWriter
    ) -> list[SmokeAnswer]:
        """The smoke prompts one at a time, through the cells' client, every record kept."""
        arm, study = self.study.arm(name), self.study
        records: list[RequestRecord] = []

        def record(rec: RequestRecord) -> None:
            requests_out.write(rec)
            records.append(rec)

        asyncio.run(
            run_cell(
                base_url=process.base_url,
                model=process.served_model,
                requests=self.requests,
                pattern=ClosedLoop(concurrency=1, requests=len(self.requests), warmup=0),
                sampling=sampling_fields(study),
                extra_body={
                    **get_engine_kind(arm.engine).request_fields(arm, study),
                    **scored_output_fields(process.metrics_dialect),
                },
                cell_id=f"{SMOKE_DIR}/{name}",
                attempt=attempt,
                on_record=record,
                timeout_s=study.recording.request_timeout_s,
                error_rate_limit=None,
                lag_limit_ms=study.recording.lag_limit_p99_ms,
                judge_timing=False,
            )
        )
        by_item = {r.item_id: r for r in records if r.phase == "measure"}
        self._records[name] = list(by_item.values())
        return [
            SmokeAnswer(
                item_id=spec.item_id,
                ok=r is not None and r.ok,
                error=("not sent" if r is None else r.error),
                output_text=r.output_text if r else "",
                token_logprobs=r.token_logprobs if r else None,
                finish_reason=r.finish_reason if r else None,
                completion_tokens=r.completion_tokens if r else None,
            )
            for spec in self.requests
            for r in [by_item.get(spec.item_id)]
        ]

    @staticmethod
    def _drafts(process: EngineProcess) -> tuple[float | None, str | None]:
        """The drafts counter now (None: the series is absent), or why /metrics failed."""
        result = scrape_metrics(process.metrics_url, process.metrics_dialect)
        if result.snapshot is None:
            return None, f"/metrics failed: {result.error}"
        return result.snapshot.drafts, None

    def _counter(
        self, process: EngineProcess, dialect: Dialect, before: tuple[float | None, str | None]
    ) -> SmokeCounter:
        """Whether the drafts counter moved past its reading before the prompts, by the
        drafting rule readiness uses too (harness/engines/drafting.py)."""
        name = counter_name(dialect, "drafts")
        value, error = before
        if error is not None:
            return SmokeCounter(name=f"{name} ({error})", before=None, after=None, moved=False)
        reading = wait_for_drafting(
            lambda: self._drafts(process),
            dialect,
            drafter=True,
            before=value,
            over="the smoke prompts",
            wait_s=COUNTER_WAIT_S,
            poll_s=0.5,
        )
        if reading.problem is None:
            return SmokeCounter(name=name, before=value, after=reading.after, moved=True)
        label = name + (f" ({reading.error})" if reading.error else "")
        return SmokeCounter(name=label, before=value, after=reading.after, moved=False)

    # --- drafter against baseline ---------------------------------------------------

    def _comparisons(self, name: str) -> list[SmokeIdentityCheck]:
        """Each drafter-baseline pair `name` belongs to whose other side has answered
        (now, or in a passed check under its current key)."""
        arm = self.study.arm(name)
        # A control arm's text is not its baseline's (drafts kept whatever they say).
        if arm.baseline is not None:
            pairs = [] if arm.is_control else [(name, arm.baseline)]
        else:
            pairs = [
                (a.name, name) for a in self.study.arms if a.baseline == name and not a.is_control
            ]
        out = []
        for drafter, baseline in pairs:
            if drafter not in self.answers or baseline not in self.answers:
                continue  # compared when the other side answers
            bar = self.study.bars.pass_.identity
            check = compare_answers(
                drafter,
                baseline,
                self.keys[drafter],
                self.answers[drafter],
                self.answers[baseline],
                bar.near_tie_margin if bar is not None else DEFAULT_NEAR_TIE_MARGIN,
            )
            if check.status == "failed":
                log = self.log_path(drafter)
                check = check.model_copy(
                    update={"log_line": self._log_line(log), "log_path": str(log)}
                )
            out.append(check)
        return out

    def log_path(self, name: str) -> Path:
        return self.store.engine_log(name)

    # --- reporting ------------------------------------------------------------------

    @staticmethod
    def _log_line(path: Path | None) -> str | None:
        return relevant_log_line(tail_lines(path, LOG_TAIL)) if path is not None else None

    def _record(self, summary: SmokeSummary) -> None:
        self.store.edit_manifest(lambda m: setattr(m, "smoke", summary))

    def _say(self, rec: SmokeArmCheck | SmokeIdentityCheck) -> None:
        self.progress.note(smoke_line(rec))

    def _stop(
        self, rec: SmokeArmCheck | SmokeIdentityCheck, started: float, order: list[str]
    ) -> None:
        self._record(
            SmokeSummary(
                status="failed",
                order=order,
                arm=rec.arm,
                reason=rec.reason,
                log_line=rec.log_line,
                started_wall=started,
                ended_wall=time.time(),
            )
        )
        raise SmokeFailed(
            f"smoke: {rec.reason} | engine log: {rec.log_line or '(nothing logged)'}",
            f"the run stopped before its first registered cell; log file {rec.log_path},"
            f" smoke records {self.folder / 'arms.jsonl'}",
        )
