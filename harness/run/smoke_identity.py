"""The smoke's greedy answers (the cells' client) and a drafter's text against its baseline's."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict

from harness.analysis.identity import DEFAULT_NEAR_TIE_MARGIN, excerpt_around, token_divergence
from harness.analysis.smoke import margin_text
from harness.engines import get_engine_kind
from harness.engines.running.engine_process import EngineProcess
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec, scored_output_fields
from harness.prereg.schema import Study
from harness.records import RequestRecord, SmokeAnswer, SmokeDivergence, SmokeIdentityCheck
from harness.run.execute import sampling_fields
from harness.run.store import JsonlWriter
from harness.rundir import SMOKE_DIR


def smoke_answers(
    study: Study,
    name: str,
    requests: list[RequestSpec],
    process: EngineProcess,
    attempt: int,
    requests_out: JsonlWriter,
) -> tuple[list[SmokeAnswer], list[RequestRecord]]:
    """The smoke prompts one at a time, through the cells' client, every record kept;
    returns each prompt's answer and the measured request records."""
    arm = study.arm(name)
    records: list[RequestRecord] = []

    def record(rec: RequestRecord) -> None:
        requests_out.write(rec)
        records.append(rec)

    asyncio.run(
        run_cell(
            base_url=process.base_url,
            model=process.served_model,
            requests=requests,
            pattern=ClosedLoop(concurrency=1, requests=len(requests), warmup=0),
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
    answers = [
        SmokeAnswer(
            item_id=spec.item_id,
            ok=r is not None and r.ok,
            error=("not sent" if r is None else r.error),
            output_text=r.output_text if r else "",
            token_logprobs=r.token_logprobs if r else None,
            finish_reason=r.finish_reason if r else None,
            completion_tokens=r.completion_tokens if r else None,
        )
        for spec in requests
        for r in [by_item.get(spec.item_id)]
    ]
    return answers, list(by_item.values())


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
    pinned release, has only that one (harness/engines/launch/sglang_engine.py)."""
    if not error or "logprob" not in error.lower():
        return ""
    return (
        " (the smoke and identity cells ask for logprobs, top 2, to read identity token"
        " by token: serve this drafter through a path that returns them, e.g. SGLang's"
        " spec v2 for DFLASH, the only DFLASH worker in the pinned SGLang 0.5.23: check"
        " the engine environment's version)"
    )
