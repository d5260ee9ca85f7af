"""A speed is only taken from steps the client saw: bursts have none, and void a cell."""

from __future__ import annotations

import pytest

from harness.analysis.cells import request_speed
from harness.analysis.load import arm_draft_tokens
from harness.derived.bursts import burst_share, is_burst, largest_stamp_share, merged_stamp_share
from harness.measure.patterns import ClosedLoop
from harness.prereg.load import load_study
from harness.records import RequestRecord
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec

from .cells import prompts, run


def record(times: list[float], tokens: list[int]) -> RequestRecord:
    return RequestRecord(
        cell_id="c",
        index=0,
        item_id="i",
        scheduled_t=0.0,
        sent_t=0.0,
        first_token_t=times[0],
        end_t=times[-1],
        chunk_times=times,
        chunk_tokens=list[int | None](tokens),
        completion_tokens=sum(tokens),
    )


def test_most_tokens_under_one_stamp_is_a_burst_with_no_speed() -> None:
    flushed = record([0.1] + [0.9] * 47, [1] * 48)  # first token, then 47 read together
    assert is_burst(flushed) and largest_stamp_share(flushed) == pytest.approx(47 / 48)
    assert request_speed(flushed) is None
    merged = record([0.1, 0.9], [1, 47])  # the server merged 47 steps into one chunk
    assert is_burst(merged) and request_speed(merged) is None


def test_steps_a_step_apart_and_drafted_chunks_are_not_bursts() -> None:
    steady = record([0.1 + 0.02 * i for i in range(48)], [1] * 48)
    assert not is_burst(steady) and request_speed(steady) == pytest.approx(50.0)
    drafted = record([0.1 + 0.03 * i for i in range(13)], [1] + [4] * 11 + [3])  # k = 3
    assert not is_burst(drafted) and request_speed(drafted) is not None
    half = record([0.1, 0.2, 0.2, 0.2], [1, 1, 1, 1])  # 3 of 4 under one stamp
    assert is_burst(half)
    assert burst_share([steady, drafted, half]) == pytest.approx(1 / 3)


def test_one_full_round_in_a_short_answer_keeps_its_speed() -> None:
    # DFlash-like: a round of 16 tokens (k + 1 at k = 15) is 0.8 of a 20-token answer.
    dflash = record([0.10, 0.15, 0.20], [1, 16, 3])
    assert merged_stamp_share(dflash, 15) == 0.0 and not is_burst(dflash, 15)
    assert request_speed(dflash, 15) == pytest.approx(19 / 0.10)
    # EAGLE-like: a round of 4 (k = 3) is most of a 7-token answer.
    eagle = record([0.10, 0.13, 0.16], [1, 4, 2])
    assert merged_stamp_share(eagle, 3) == 0.0 and not is_burst(eagle, 3)
    assert request_speed(eagle, 3) == pytest.approx(6 / 0.06)
    # Without the arm's k the rule is the one before rounds were known: both are bursts.
    assert is_burst(dflash) and is_burst(eagle) and request_speed(eagle) is None
    assert burst_share([dflash, eagle], 15) == 0.0 and burst_share([dflash, eagle]) == 1.0


def test_rounds_read_together_are_still_bursts() -> None:
    # Three separate 4-token rounds (k = 3) read under one stamp: 12 of 13 tokens.
    read_together = record([0.10, 0.50, 0.50, 0.50], [1, 4, 4, 4])
    assert merged_stamp_share(read_together, 3) == pytest.approx(12 / 13)
    assert is_burst(read_together, 3) and request_speed(read_together, 3) is None
    # The server merged three rounds into one chunk of 12: more than one round can hold.
    merged = record([0.10, 0.50], [1, 12])
    assert is_burst(merged, 3) and request_speed(merged, 3) is None
    # One token past a round is already several steps; at k + 1 it is one round.
    assert is_burst(record([0.10, 0.50], [1, 5]), 3)
    assert not is_burst(record([0.10, 0.50], [1, 4]), 3)
    # Two rounds read together in a longer answer are not most of it: 8 of 17.
    pair = record([0.10, 0.13, 0.16, 0.16, 0.19], [1, 4, 4, 4, 4])
    assert merged_stamp_share(pair, 3) == pytest.approx(8 / 17) and not is_burst(pair, 3)


def test_a_baseline_whose_steps_were_read_together_is_a_burst() -> None:
    # k = 0: every step is one token, so two tokens under one stamp are two steps.
    read_together = record([0.10] + [0.50] * 5, [1] * 6)
    assert merged_stamp_share(read_together, 0) == pytest.approx(5 / 6)
    assert is_burst(read_together, 0) and request_speed(read_together, 0) is None
    merged = record([0.10, 0.50], [1, 5])  # five steps in one chunk
    assert is_burst(merged, 0) and request_speed(merged, 0) is None
    steady = record([0.10, 0.12, 0.14], [1, 1, 1])
    assert not is_burst(steady, 0) and request_speed(steady, 0) == pytest.approx(50.0)
    # A one-token answer is one step (the rule without k called it a burst).
    single = record([0.10], [1])
    assert not is_burst(single, 0) and is_burst(single)


def test_an_arms_k_comes_from_its_drafter() -> None:
    study = load_study("examples/scripted-pass.yaml")
    assert arm_draft_tokens(study, "drafter") == 4 and arm_draft_tokens(study, "base") == 0
    assert arm_draft_tokens(study, "not-an-arm") is None  # judged without k


def test_the_analysis_judges_each_cell_with_its_arms_k(tmp_path) -> None:
    # Every figure the bars read (speedups, intervals, decomposition, the check bar) takes
    # its speeds through cell_speeds/request_speed with the cell's k, set once on loading.
    from harness.analysis.cells import cell_speeds
    from harness.analysis.load import load_run
    from tests.analysis.runfolder import RunBuilder

    builder = RunBuilder(tmp_path)
    run = load_run(builder.root)
    ks = {c.arm: c.num_draft_tokens for c in run.cells.values()}
    assert ks["sglang-dflash"] == 8 and ks["vllm-eagle3"] == 3 and ks["vllm-base"] == 0
    cell = next(c for c in run.cells.values() if c.arm == "sglang-dflash")
    cell.requests = [record([0.10, 0.15, 0.20], [1, 9, 3])]  # a full round: 9 of 13
    assert list(cell_speeds(cell)) == [pytest.approx(12 / 0.10)]
    cell.num_draft_tokens = None  # unknown k: the rule before rounds were known
    assert list(cell_speeds(cell)) == []


@pytest.mark.timing
def test_a_server_flushing_many_steps_at_once_makes_the_cell_invalid() -> None:
    # Every request's tokens are written in one write at its end: one segment, one
    # stamp, however fast or slow the client is.
    spec = ScriptedEngineSpec(weight_bytes=2e9, bandwidth_bytes_per_s=1e12, flush_every_steps=1000)
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=2, requests=6), lag_limit_ms=1000, burst_limit=0.10
        )
    measured = [r for r in records if r.phase == "measure"]
    assert len(measured) == 6 and all(r.ok and is_burst(r) for r in measured)
    health = outcome.health
    assert health is not None
    assert not health.valid and health.burst_share == 1.0 and health.burst_limit == 0.10
    assert health.reason is not None
    assert "6/6 requests arrived in bursts" in health.reason


@pytest.mark.timing
def test_one_token_chunks_a_step_apart_are_valid() -> None:
    # 30 ms steps, 12 tokens: a request is a burst only if the client stops reading for
    # more than six steps (180 ms); the lag limit is set out of the way so only bursts
    # are judged here.
    spec = ScriptedEngineSpec(weight_bytes=3e10, bandwidth_bytes_per_s=1e12)
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url,
            ClosedLoop(concurrency=2, requests=4),
            requests=prompts(max_tokens=12),
            lag_limit_ms=1000,
            burst_limit=0.10,
        )
    measured = [r for r in records if r.phase == "measure"]
    assert all(r.ok and r.chunk_tokens == [1] * 12 for r in measured)
    assert not any(is_burst(r) for r in measured)
    assert outcome.health is not None
    assert outcome.health.valid and outcome.health.burst_share == 0.0


@pytest.mark.timing
def test_cells_read_for_texts_report_late_stamps_but_stay_valid() -> None:
    # The same flushing engine: every chunk but the last is read late (a bound well over
    # 5 ms). A speed cell is invalid for it; an identity or accuracy cell, whose figures
    # are texts and scores, keeps it as a report.
    spec = ScriptedEngineSpec(weight_bytes=2e9, bandwidth_bytes_per_s=1e12, flush_every_steps=1000)
    with serve_in_thread(spec) as eng:
        judged, _ = run(eng.base_url, ClosedLoop(concurrency=1, requests=2), lag_limit_ms=5)
        texts, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=2), lag_limit_ms=5, judge_timing=False
        )
    assert judged.health is not None
    assert judged.health.reason is not None
    assert not judged.health.valid and "stamp bound p99" in judged.health.reason
    assert texts.health is not None
    assert texts.health.valid and not texts.health.timing_judged
    assert texts.health.stamp_bound_p99_ms is not None
    assert texts.health.burst_share is not None
    assert texts.health.stamp_bound_p99_ms > 5 and texts.health.burst_share == 1.0
    assert all(r.ok and r.output_text for r in records)


@pytest.mark.timing
def test_steps_written_back_to_back_mid_stream_move_no_figure() -> None:
    # 20 ms steps; from the second token on, the server writes two steps at once (an API
    # server that stalled, then wrote what was waiting): every second chunk shares its
    # read with the next, a stamp bound of a whole step. No figure reads those stamps:
    # the first token is written alone and the end is its read's last segment, so the
    # per-user speed is the engine's and no stamp check fires under a 5 ms limit.
    spec = ScriptedEngineSpec(
        weight_bytes=2e10, bandwidth_bytes_per_s=1e12, flush_every_steps=2, flush_from_token=2
    )
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url,
            ClosedLoop(concurrency=1, requests=3),
            requests=prompts(max_tokens=12),
            lag_limit_ms=5,
            burst_limit=0.10,
        )
    measured = [r for r in records if r.phase == "measure"]
    assert len(measured) == 3 and all(r.ok and not is_burst(r) for r in measured)
    for r in measured:
        # chunks 2-3, 4-5, ... 10-11 share stamps; 1 and 12 stand alone
        assert len(set(r.chunk_times)) == 7, r.chunk_times
        assert request_speed(r) == pytest.approx(50.0, rel=0.05)
    health = outcome.health
    assert health is not None
    assert health.stamp_bound_p99_ms is not None
    assert health.stamp_bound_p99_ms >= 15  # the pairs are seen and reported...
    assert health.first_token_bound_p99_ms == 0.0  # ...but no stamp of a figure is late
    # Nothing about the stamps invalidates the cell. (The user's turnaround is judged too,
    # against an engine sharing this process's interpreter: not this test's business.)
    assert "stamp" not in (health.reason or ""), health.reason


@pytest.mark.timing
def test_a_first_token_read_with_the_next_chunk_makes_the_cell_invalid() -> None:
    # The same server holding from the first token: it leaves with the second step, so
    # the first token's stamp is a step late by the bound, and TTFT and per-user speed
    # would read it. The cell is invalid under the 5 ms limit.
    spec = ScriptedEngineSpec(weight_bytes=2e10, bandwidth_bytes_per_s=1e12, flush_every_steps=2)
    with serve_in_thread(spec) as eng:
        outcome, _ = run(
            eng.base_url,
            ClosedLoop(concurrency=1, requests=3),
            requests=prompts(max_tokens=12),
            lag_limit_ms=5,
            burst_limit=0.10,
        )
    health = outcome.health
    assert health is not None
    assert health.first_token_bound_p99_ms is not None
    assert health.first_token_bound_p99_ms >= 15
    assert health.reason is not None
    assert not health.valid and "first-token stamp bound p99" in health.reason
