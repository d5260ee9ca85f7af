"""The speedup split into tokens per round and round cost, from the client's chunks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.decompose import decompose, factor_shift, request_rounds
from harness.analysis.intervals import draw_pair, session_ratio, session_units
from harness.analysis.load import CellData
from harness.prereg.schema import Intervals
from harness.records import RequestRecord

INTERVALS = Intervals(level=0.95, bootstrap_resamples=200, seed=1)


def request(
    cell: str, i: int, tokens_per_round: int, round_s: float, rounds: int = 10
) -> RequestRecord:
    """One request: the prefill's token, then `rounds` chunks of tokens_per_round."""
    first = 100.0 * i + 0.5
    times = [first + round_s * j for j in range(rounds + 1)]
    counts: list[int | None] = [1, *[tokens_per_round] * rounds]
    return RequestRecord(
        cell_id=cell,
        index=i,
        item_id=f"q{i}",
        scheduled_t=100.0 * i,
        sent_t=100.0 * i,
        first_token_t=first,
        end_t=times[-1],
        completion_tokens=1 + tokens_per_round * rounds,
        chunk_times=times,
        chunk_tokens=counts,
    )


def cell(cell_id: str, shapes: list[tuple[int, float]]) -> CellData:
    return CellData(
        cell_id,
        cell_id.split("/")[0],
        "chat",
        "speed",
        1,
        None,
        1,
        "complete",
        requests=[request(cell_id, i, tpr, rt) for i, (tpr, rt) in enumerate(shapes)],
    )


def split(d: CellData, b: CellData, speedup: float, tolerance: float = 0.05) -> dict:
    return decompose([d], [b], INTERVALS, speedup, tolerance)


def test_a_request_is_split_into_tokens_per_round_and_round_time():
    rec = RequestRecord(
        cell_id="c",
        index=0,
        item_id="q",
        scheduled_t=0.0,
        sent_t=0.0,
        first_token_t=1.0,
        end_t=1.3,
        completion_tokens=9,
        chunk_times=[1.0, 1.1, 1.2, 1.3],
        chunk_tokens=[1, 3, 2, 3],
    )
    r = request_rounds(rec)
    assert r is not None
    assert (r.tokens, r.rounds) == (8.0, 3)
    assert r.tokens_per_round == pytest.approx(8 / 3)
    assert r.round_time_s == pytest.approx(0.1)
    # Without per-chunk counts the tokens after the first chunk come from the usage.
    bare = rec.model_copy(update={"chunk_tokens": [None] * 4})
    bare_rounds = request_rounds(bare)
    assert bare_rounds is not None and bare_rounds.tokens == 8.0


def test_alike_requests_explain_the_speedup_exactly_with_its_intervals():
    d = cell("drafter/chat/speed/c001", [(3, 0.012)] * 6)
    b = cell("base/chat/speed/c001", [(1, 0.010)] * 6)
    row = split(d, b, speedup=2.5)
    assert row["tokens_per_round"] == 3.0 and row["baseline_tokens_per_round"] == 1.0
    assert row["round_time_s"] == pytest.approx(0.012)
    assert row["baseline_step_time_s"] == pytest.approx(0.010)
    assert row["round_cost_ratio"] == pytest.approx(1.2)
    assert row["explained_speedup"] == pytest.approx(2.5)
    assert row["round_cost_ratio_ci_lower"] == pytest.approx(1.2)
    assert row["round_cost_ratio_ci_upper"] == pytest.approx(1.2)
    assert row["explained_gap"] == pytest.approx(0.0, abs=1e-12)
    assert row["decomposition_flag"] is False and row["decomposition_note"] is None


def test_unlike_requests_part_the_medians_and_the_cell_is_flagged_naming_a_factor():
    # Speeds 300, 500, 200 tok/s: median 300, over a baseline of 100: 3.0x measured.
    # Medians of the factors: 2 tokens a round, 5 ms a round: 4.0x explained.
    d = cell("drafter/chat/speed/c001", [(3, 0.010), (2, 0.004), (1, 0.005)])
    b = cell("base/chat/speed/c001", [(1, 0.010)] * 3)
    row = split(d, b, speedup=3.0)
    assert row["explained_speedup"] == pytest.approx(4.0)
    assert row["explained_gap"] == pytest.approx(1 / 3)
    assert row["decomposition_flag"] is True
    assert row["decomposition_note"].startswith(
        "explained 4.000x vs measured 3.000x (+33.3%, tolerance 5%): "
    )
    assert "moved most" in row["decomposition_note"]
    # Inside a looser registered tolerance it is not flagged.
    assert split(d, b, speedup=3.0, tolerance=0.4)["decomposition_flag"] is False


def test_requests_without_chunks_leave_the_split_empty_not_wrong():
    d = cell("drafter/chat/speed/c001", [(3, 0.012)] * 3)
    for r in d.requests:
        r.chunk_times, r.chunk_tokens = [], []
    b = cell("base/chat/speed/c001", [(1, 0.010)] * 3)
    row = split(d, b, speedup=2.5)
    assert row["explained_speedup"] is None and row["decomposition_flag"] is None
    assert row["tokens_per_round_ci_lower"] is None


def test_which_factor_moved_the_speedup_between_levels():
    # From 2.5/1.0 tokens at cost 1.25 (2.0x) to the same tokens at cost 2.5 (1.0x):
    # all of the fall is the round's cost.
    assert factor_shift(2.5, 1.25, 2.5, 2.5) == pytest.approx((0.0, 1.0))
    # Tokens per round halved, cost unchanged: all of it is the tokens.
    assert factor_shift(2.5, 1.25, 1.25, 1.25) == pytest.approx((1.0, 0.0))
    # Both: log shares.
    shares = factor_shift(2.5, 1.25, 2.0, 1.5)
    assert shares is not None
    tok, cost = shares
    total = math.log(2.0 / 2.5) - math.log(1.5 / 1.25)
    assert tok == pytest.approx(math.log(2.0 / 2.5) / total) and tok + cost == pytest.approx(1)
    assert factor_shift(2.5, 1.25, 2.5, 1.25) is None  # nothing moved
    assert np.isfinite(tok)


def test_the_formula_predicts_from_the_roofline_and_the_engine_counters():
    from harness.analysis.predict import predicted
    from harness.prereg.schema import Study
    from tests.analysis.runfolder import study_dict

    data = study_dict()
    # 1e9 params x 2 B over 1000 GB/s: 2 ms a target pass while memory-bound; compute
    # 2e9 FLOP a token over 100 TFLOP/s = 0.02 ms a token, so it binds from 100 tokens.
    eagle = next(a for a in data["arms"] if a["name"] == "vllm-eagle3")
    eagle["drafter"].update(params_billion=0.1, draft_steps=3)
    study = Study.model_validate(data)
    speed, cost = predicted(study, "vllm-eagle3", 1, 2.8)
    # Three 0.2 ms draft passes + one 2 ms verification over a 2 ms step: 1.3.
    assert cost == pytest.approx(1.3) and speed == pytest.approx(2.8 / 1.3)
    # At 64 users verifying 4 positions each is compute-bound: 256 x 0.02 ms = 5.12 ms.
    speed, cost = predicted(study, "vllm-eagle3", 64, 2.8)
    assert cost == pytest.approx((3 * 0.2 + 5.12) / 2.0)
    # n-gram has no draft weights: the round costs the verification alone.
    assert predicted(study, "vllm-ngram", 1, 2.0) == pytest.approx((2.0, 1.0))


def test_ngram_gpu_is_model_free_like_ngram():
    # vLLM's GPU n-gram proposer has no draft weights either: its prediction carries no
    # "register the draft model's size" note (analysis/predict.py MODEL_FREE).
    import pandas as pd

    from harness.analysis.predict import add_predictions
    from harness.prereg.schema import Study
    from tests.analysis.runfolder import study_dict

    data = study_dict()
    ngram = next(a for a in data["arms"] if a["name"] == "vllm-ngram")
    notes = {}
    for method in ("ngram", "ngram_gpu", "eagle3"):
        ngram["drafter"]["method"] = method
        study = Study.model_validate(data)
        speedups = pd.DataFrame(
            [
                {
                    "arm": "vllm-ngram",
                    "concurrency": 1,
                    "status": "ok",
                    "drafter_cell": "d",
                    "speedup": 1.5,
                }
            ]
        )
        cells = pd.DataFrame([{"cell_id": "d", "accept_rate_sum": 0.8}])
        notes[method] = add_predictions(study, speedups, cells)["prediction_note"][0]
    assert notes["ngram"] is None and notes["ngram_gpu"] is None
    assert notes["eagle3"].startswith("draft cost counted as 0")


def test_the_split_over_sessions_takes_the_speedups_own_draws_and_rule():
    """Three paired sessions whose drafter rounds cost 12, 13 and 11 ms (the baseline's
    steps 10 ms): with requests alike within a session, each session's explained speedup
    is its measured one (odd request counts: a median of 1/x is 1/median), so the split's
    interval is the speedup's own, t rule included."""
    rng = np.random.default_rng(2)

    def session(name: str, tpr: int, rt: float, s: int) -> CellData:
        c = cell(
            f"{name}/chat/speed/c001" + (f"/s{s}" if s > 1 else ""),
            [(tpr, rt * f) for f in rng.normal(1.0, 0.02, size=13)],
        )
        for i, r in enumerate(c.requests):
            r.user = i % 3  # three users: the unit the draws resample
        return c

    d = [session("drafter", 3, rt, s) for s, rt in enumerate((0.012, 0.013, 0.011), 1)]
    b = [session("base", 1, 0.010, s) for s in (1, 2, 3)]
    units = ([session_units(c) for c in d], [session_units(c) for c in b])
    draws = draw_pair(*units, INTERVALS, "k")
    ratio = session_ratio(*units, INTERVALS, "k", draws)
    assert ratio is not None
    assert ratio.method == "t_sessions" and draws.method == "t_sessions"
    row = decompose(d, b, INTERVALS, ratio.point, 0.05, units, draws)
    assert row["explained_speedup_ci_lower"] == pytest.approx(ratio.ci_lower, rel=1e-6)
    assert row["explained_speedup_ci_upper"] == pytest.approx(ratio.ci_upper, rel=1e-6)
    # The baseline's steps agree across sessions; the drafter's rounds do not: the round
    # cost's interval spans the sessions' 1.1-1.3.
    assert row["round_cost_ratio_ci_lower"] < 1.1 < 1.3 < row["round_cost_ratio_ci_upper"]
    assert row["tokens_per_round"] == 3.0 and row["decomposition_flag"] is False
    # The same sessions under the two-level bootstrap: the same session draws too.
    boot = INTERVALS.model_copy(update={"method": "bootstrap"})
    draws = draw_pair(*units, boot, "k")
    ratio = session_ratio(*units, boot, "k", draws)
    assert ratio is not None
    row = decompose(d, b, boot, ratio.point, 0.05, units, draws)
    assert ratio.method == "bootstrap"
    assert row["explained_speedup_ci_lower"] == pytest.approx(ratio.ci_lower, rel=0.01)
    assert row["explained_speedup_ci_upper"] == pytest.approx(ratio.ci_upper, rel=0.01)


def test_each_engine_figure_says_what_its_round_is_under_async_scheduling():
    """vLLM 0.32 counts a draft on every scheduled decode step under async scheduling
    (v1/core/sched/async_scheduler.py:25-50, scheduler.py:2110-2135): the ngram_gpu and
    EAGLE-3 arms' acceptance is per decode step, drafted or not, like the client's; an
    n-gram arm without it counts its drafting rounds only."""
    import pandas as pd

    from harness.analysis.predict import add_predictions, engine_tokens
    from harness.engines import get_engine_kind
    from harness.prereg.schema import Study
    from tests.analysis.runfolder import study_dict

    data = study_dict()
    ngram = next(a for a in data["arms"] if a["name"] == "vllm-ngram")
    kind = get_engine_kind("vllm")
    rounds = {}
    for method in ("ngram", "ngram_gpu"):
        ngram["drafter"]["method"] = method
        study = Study.model_validate(data)
        rounds[method] = kind.engine_round(study.arm("vllm-ngram"))
    eagle = study.arm("vllm-eagle3")
    assert rounds == {"ngram": "drafting round", "ngram_gpu": "scheduled decode step"}
    assert kind.engine_round(eagle) == "scheduled decode step"
    # As its engine chose at start (the manifest's settings win over the paper).
    assert kind.engine_round(eagle, "off (engine log: ...)") == "decode step"
    assert get_engine_kind("vllm-cpu").engine_round(study.arm("vllm-ngram")) == "drafting round"
    # The prediction's source says it, and a client figure below the engine's is not
    # put down to steps without drafts where every step is a round.
    cell = pd.Series({"accept_rate_sum": 1.2, "engine_round": "scheduled decode step"})
    assert engine_tokens(cell)[1] == (
        "1 + sum(p_i), per-position counters, per scheduled decode step"
    )
    speedups = pd.DataFrame(
        [
            {
                "arm": "vllm-ngram",
                "concurrency": 1,
                "status": "ok",
                "drafter_cell": "d",
                "speedup": 1.5,
                "tokens_per_round": 1.6,
            }
        ]
    )
    notes = {
        r: add_predictions(
            study,
            speedups,
            pd.DataFrame([{"cell_id": "d", "accept_rate_sum": 1.2, "engine_round": r}]),
        )["tokens_per_round_note"][0]
        for r in ("drafting round", "scheduled decode step")
    }
    assert "no n-gram match" in notes["drafting round"]
    assert "both count per scheduled decode step" in notes["scheduled decode step"]
