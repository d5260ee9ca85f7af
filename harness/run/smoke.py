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

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.identity import DEFAULT_NEAR_TIE_MARGIN
from harness.analysis.regime import REGIME_FILE, regime_levels
from harness.analysis.smoke import compares, smoke_line, value_text
from harness.engines.running.engine_log import relevant_log_line
from harness.engines.running.process import tail_lines
from harness.errors import SpecbenchError
from harness.prereg.schema import Study
from harness.records import RequestRecord, SmokeAnswer, SmokeArmCheck, SmokeIdentityCheck
from harness.run.progress import RunProgress
from harness.run.regime import measure_regime
from harness.run.smoke_identity import compare_answers, logprobs_hint, smoke_answers
from harness.run.smoke_plan import (
    passed_checks,
    smoke_key,
    smoke_order,
    smoke_records,
    smoke_requests,
    smoke_task,
)
from harness.run.smoke_speculation import (
    acceptance_check,
    counter_check,
    draft_count_problem,
    read_drafts,
)
from harness.run.store import JsonlWriter, RunStore
from harness.rundir import REQUESTS, SMOKE_DIR, SMOKE_RECORDS
from harness.rundir.manifest import Deviation
from harness.rundir.schedule import SmokeSummary

if TYPE_CHECKING:
    from harness.run.arm_engine import ArmEngine

LOG_TAIL = 200


class SmokeFailed(SpecbenchError):
    """The smoke stage found a broken arm: the run stops before its first cell."""


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
            JsonlWriter(self.store.root / SMOKE_RECORDS) as out,
            JsonlWriter(self.folder / REQUESTS) as requests_out,
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
        before = read_drafts(process) if arm.drafter is not None else None
        answers, self._records[name] = smoke_answers(
            self.study, name, self.requests, process, attempt, requests_out
        )
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
            counter = counter_check(process, dialect, before)
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
        acceptance = acceptance_check(arm.drafter, self._records.get(name, []))
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
            f" smoke records {self.store.root / SMOKE_RECORDS}",
        )
