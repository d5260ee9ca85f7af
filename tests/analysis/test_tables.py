"""Cell table, speedup intervals, knee interpolation, open-loop reference and fleet figure."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import analyse, locate_knee, open_loop_reference_rps, write_tables
from harness.analysis.identity import first_divergence, first_word_divergence
from harness.analysis.intervals import Units, session_ratio
from harness.errors import InputError
from harness.prereg.schema import Intervals
from harness.records import RequestSpeculation

from .runfolder import BASE_SPEED, PASSING_SPEEDUPS, RunBuilder, study_dict

# --- the knee ------------------------------------------------------------------------


def test_knee_is_read_on_the_point_and_interpolated_in_log2_concurrency():
    # points 1.5 at c=4, 0.5 at c=8: halfway in the speedup -> 2^2.5
    k = locate_knee([1, 2, 4, 8], [3.0, 2.0, 1.5, 0.5])
    assert k.status == "located" and k.bracket == (4, 8)
    assert k.concurrency == pytest.approx(5.656854, rel=1e-6)
    k = locate_knee([16, 64], [1.2, 0.4])  # a quarter of the way in log2: 2^(4 + 0.5)
    assert k.concurrency == pytest.approx(22.627417, rel=1e-6)
    # exactly 1.0 at a level: the knee is that level
    assert locate_knee([1, 2, 4], [2.0, 1.5, 1.0]).concurrency == pytest.approx(4.0)


def test_the_knee_follows_the_effect_not_the_width_of_its_interval():
    """A gain that never goes, measured noisily, keeps its knee beyond the top level however
    low its lower bounds reach; the interval says where 1.0 is inside the band."""
    levels = [1, 2, 4, 8, 16, 32, 64]
    point = [1.5] * 7
    lower = [1.2, 1.1, 0.95, 0.9, 0.85, 0.8, 0.9]  # the old rule located a knee at c=3.4
    upper = [1.9] * 7
    k = locate_knee(levels, point, lower, upper)
    assert (k.status, k.label(), k.bound) == ("beyond", "> 64", 64)
    # lower bound crosses 1.0 a third of the way from 2 to 4 (1.1 -> 0.95): 2^(1 + 2/3)
    assert k.low is not None
    assert k.low.at == pytest.approx(3.174802, rel=1e-6)
    assert k.high is not None
    assert k.high.at is None and k.high.above == 64
    assert k.interval_label() == "3.2 to > 64"
    # A curve crossing between 16 and 32: point 1.12 -> 0.91 at 4/7 of the way: 2^(4 + 4/7)
    point = [2.6, 2.1, 1.7, 1.38, 1.12, 0.91, 0.74]
    lower = [2.2, 1.8, 1.4, 1.1, 0.95, 0.78, 0.6]  # crosses at 2^(3 + 2/3) = 12.70
    upper = [3.0, 2.5, 2.0, 1.7, 1.3, 1.05, 0.8]  # falls below 1.0 at 2^(5 + 1/5) = 36.76
    k = locate_knee(levels, point, lower, upper)
    assert k.status == "located" and k.bracket == (16, 32)
    assert k.concurrency == pytest.approx(23.775909, rel=1e-6)
    assert k.low is not None
    assert k.high is not None
    assert (k.low.at, k.high.at) == (
        pytest.approx(12.699208, rel=1e-6),
        pytest.approx(36.758347, rel=1e-6),
    )
    assert k.interval_label() == "12.7 to 36.8"


def test_knee_edge_cases():
    below = locate_knee([1, 2, 4], [0.9, 0.8, 0.7], [0.8, 0.7, 0.6], [1.1, 0.95, 0.8])
    assert below.status == "below_first" and below.concurrency == 1.0
    assert below.label() == "<= 1" and below.interval_label() == "<= first level to 1.6"
    beyond = locate_knee([1, 2, 4], [2.0, 1.8, 1.1])
    assert beyond.status == "beyond" and beyond.concurrency is None
    assert beyond.label() == "> 4" and beyond.bound == 4 and "top level" in beyond.note
    gap = locate_knee([1, 2, 4], [2.0, None, 0.8])
    assert gap.status == "incomplete"
    skipped = locate_knee([1, 2, 4, 8], [2.0, 1.8, 1.5, None], skipped_after=4)
    assert skipped.status == "beyond_skipped" and "stop bar" in skipped.note
    assert skipped.label() == "> 4"
    again = locate_knee([1, 2, 4, 8], [2.0, 0.9, 1.2, 0.8])
    assert again.bracket == (1, 2) and again.note.endswith("above 1.0 again at c=4")


def test_knee_table_from_a_run(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    a = analyse(b.root)
    rows = {(r.arm, r.task): r for r in a.knees.itertuples()}
    # PASSING_SPEEDUPS: ngram's points 1.5 at c=8, 0.8 at c=16 -> 2^(3 + 0.5 / 0.7)
    ngram = rows[("vllm-ngram", "chat")]
    assert ngram.knee_concurrency == pytest.approx(13.125366, rel=1e-6)
    assert (ngram.status, ngram.bracket_low, ngram.bracket_high) == ("located", 8, 16)
    # dflash 1.6 at c=8, 0.9 at c=16 -> 2^(3 + 0.6 / 0.7)
    dflash = rows[("sglang-dflash", "chat")]
    assert dflash.knee_concurrency == pytest.approx(14.491579, rel=1e-6)
    sp = a.speedups.set_index(["arm", "task", "concurrency"])
    lb8, lb16 = (sp.loc[("vllm-ngram", "chat", c), "ci_lower"] for c in (8, 16))
    assert ngram.interval_low < ngram.knee_concurrency and lb8 > 1 > lb16


def test_a_gain_left_at_the_top_level_is_a_bound(tmp_path):
    lasting = dict(PASSING_SPEEDUPS)
    lasting["sglang-dflash"] = {1: 3.0, 2: 2.8, 4: 2.5, 8: 1.6, 16: 1.2}
    b = RunBuilder(tmp_path)
    b.speed_cells(lasting)
    rows = {(r.arm, r.task): r for r in analyse(b.root).knees.itertuples()}
    k = rows[("sglang-dflash", "chat")]
    assert (k.status, k.label) == ("beyond", "> 16")
    assert math.isnan(k.knee_concurrency)


# --- speedups and their intervals --------------------------------------------------------


def test_bootstrap_is_seeded_and_brackets_the_point():
    rng = np.random.default_rng(1)

    def units(values: np.ndarray) -> Units:  # one session, each request its own unit
        return Units(np.sort(values), np.arange(len(values)), len(values), "request")

    d, s = units(rng.normal(80, 8, 64)), units(rng.normal(40, 4, 64))
    iv = Intervals(level=0.95, bootstrap_resamples=500, seed=3)
    one, two = session_ratio([d], [s], iv, "k"), session_ratio([d], [s], iv, "k")
    assert one is not None
    assert one == two and one.method == "within"
    assert one.ci_lower < one.point < one.ci_upper
    other = session_ratio([d], [s], Intervals(level=0.95, bootstrap_resamples=500, seed=4), "k")
    assert other is not None
    assert other.ci_lower != one.ci_lower
    wider = session_ratio([d], [s], Intervals(level=0.99, bootstrap_resamples=500, seed=3), "k")
    assert wider is not None
    assert wider.ci_upper - wider.ci_lower > one.ci_upper - one.ci_lower


def test_speedups_use_measured_requests_of_the_completed_attempt(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    a = analyse(b.root)
    sp = a.speedups.set_index(["arm", "task", "concurrency"])
    # warm-up and other-attempt requests (1e6 tok/s) would wreck these exact medians
    assert sp.loc[("vllm-ngram", "gsm8k", 2), "speedup"] == pytest.approx(2.4)
    assert sp.loc[("vllm-ngram", "gsm8k", 2), "speed_baseline"] == pytest.approx(BASE_SPEED)
    assert sp.loc[("vllm-ngram", "gsm8k", 2), "n_drafter"] == 21
    assert (a.speedups["status"] == "ok").all()
    assert len(a.speedups) == 3 * 2 * 5


def test_cell_table_figures(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    cells = analyse(b.root).cells.set_index("cell_id")
    ngram = cells.loc["vllm-ngram/chat/speed/c001"]
    assert ngram["per_user_speed"] == pytest.approx(BASE_SPEED * 2.5)
    assert ngram["n_measured"] == 21 and ngram["n_errors"] == 0
    # counters: 100 drafting rounds/s at 2.5 tokens a round, plus 50 tokens/s from steps
    # without drafts (vLLM counts no round there): generation / drafts would say 3.0.
    assert ngram["accept_length_per_round_engine"] == pytest.approx(2.5)
    assert ngram["accept_rate_sum"] == pytest.approx(1.5)
    assert ngram["accept_rate_pos1"] == pytest.approx(0.75)
    assert "tokens_per_verification" not in cells.columns
    assert ngram["scrape_gaps"] == 1 and ngram["counter_resets"] == 0
    # per decode step, from the client's chunks (1 prefill token, then 10 chunks of 10)
    assert ngram["tokens_per_step_client"] == pytest.approx(10.0)
    columns = list(cells.columns)
    # The three acceptance figures side by side: counters, per-request, client.
    engine_at = columns.index("accept_length_per_round_engine")
    assert columns[engine_at : engine_at + 4] == [
        "accept_length_per_round_engine",
        "accept_length_per_round_requests",
        "tokens_per_step_client",
        "acceptance_agree",
    ]
    assert ngram["spec_requests"] == 0 and pd.isna(ngram["accept_length_per_round_requests"])
    assert pd.isna(ngram["acceptance_agree"])  # no per-request figures: nothing to judge
    dflash = cells.loc["sglang-dflash/chat/speed/c004"]
    assert dflash["accept_length_per_round_engine"] == pytest.approx(2.5)
    assert math.isnan(dflash["accept_rate_sum"])  # SGLang has no per-position series
    base = cells.loc["vllm-base/chat/speed/c001"]
    assert base["tpot_p50_s"] == pytest.approx(1 / BASE_SPEED)
    assert base["ttft_p50_s"] == pytest.approx(0.1)
    assert base["request_throughput_rps"] > 0
    assert cells.loc["vllm-base/chat/identity", "status"] == "missing"


def test_tables_are_written_for_pandas(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    a = analyse(b.root)
    paths = write_tables(a)
    assert sorted(p.name for p in paths) == [
        "cells.csv",
        "cells.parquet",
        "speedups.csv",
        "speedups.parquet",
    ]
    cells = pd.read_parquet(b.root / "cells.parquet")
    assert len(cells) == len(a.cells)
    sp = pd.read_csv(b.root / "speedups.csv")
    assert list(sp.columns)[:4] == ["arm", "baseline", "task", "concurrency"]
    assert sp["speedup"].max() == pytest.approx(3.0)


def test_identity_divergence_helpers():
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("ab", "abc") == 2
    assert first_word_divergence("a b c", "a  b d") == 2
    assert first_word_divergence("a b", "a b") is None


# --- open loop -----------------------------------------------------------------------------


def test_open_loop_reference_is_shared_within_an_engine_group(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    refs = open_loop_reference_rps(b.root, b.study)
    a = analyse(b.root)
    cells = a.cells.set_index("cell_id")
    # vLLM group: smallest knee (eagle3, ~12.3) snaps up to c=16
    assert refs["vllm-ngram"] == refs["vllm-eagle3"] == refs["vllm-base"]
    assert refs["vllm-base"] == pytest.approx(
        cells.loc["vllm-base/chat/speed/c016", "request_throughput_rps"]
    )
    # SGLang group: DFlash's knee lies between c=8 and c=16, snapped up to c=16
    assert refs["sglang-dflash"] == pytest.approx(
        cells.loc["sglang-base/chat/speed/c016", "request_throughput_rps"]
    )


def test_open_loop_reference_snaps_to_the_next_measured_level(tmp_path):
    b = RunBuilder(tmp_path)
    early_knee = dict(PASSING_SPEEDUPS)
    early_knee["vllm-ngram"] = {1: 2.0, 2: 1.5, 4: 0.5, 8: 0.5, 16: 0.5}  # knee in (2, 4)
    b.speed_cells(early_knee)
    refs = open_loop_reference_rps(b.root, b.study)
    cells = analyse(b.root).cells.set_index("cell_id")
    assert refs["vllm-eagle3"] == pytest.approx(
        cells.loc["vllm-base/chat/speed/c004", "request_throughput_rps"]
    )


def test_fleet_figure(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    fleet = analyse(b.root).fleet.set_index("arm")
    # objective: p99 TTFT <= 2 s; rates offered 1, 2, 3 req/s
    assert fleet.loc["vllm-base", "sustainable_rps"] == pytest.approx(2.0)
    assert fleet.loc["vllm-base", "gpus"] == 50
    assert fleet.loc["sglang-dflash", "sustainable_rps"] == pytest.approx(3.0)
    assert fleet.loc["sglang-dflash", "gpus"] == 34
    assert fleet.loc["sglang-dflash", "gpus_saved"] == 16


def test_open_loop_reports_client_queueing_inside_the_objective(tmp_path):
    b = RunBuilder(tmp_path, study_dict())
    # An engine that cannot keep up: each arrival waits 100 ms longer than the one before
    # for a connection slot; the engine's own TTFT stays 0.5 s.
    cell = b.open_cell("vllm-base", 1.5, 3.0, ttft_s=0.5, n=30, queue_growth_s=0.1)
    row = analyse(b.root).open_loop.set_index("cell_id").loc[cell]
    assert row["queue_p50_s"] == pytest.approx(0.1 * 14.5)
    assert row["queue_p99_s"] == pytest.approx(0.1 * 28.71)
    # The objective (p99 TTFT) runs from the schedule: the queueing is inside it.
    assert row["objective_value_s"] == pytest.approx(0.5 + 0.1 * 29)
    assert not row["objective_holds"]


def test_fleet_counts_failed_requests_against_the_objective(tmp_path):
    b = RunBuilder(tmp_path, study_dict())
    b.open_cells()
    folder = b.root / "cells" / "sglang-dflash__chat__open__x1.5"
    lines = (folder / "requests.jsonl").read_text().splitlines()
    broken = [json.loads(x) for x in lines]
    for rec in broken[:3]:  # 10% errors: the p99 is an error
        rec.update(error="HTTP 500", error_kind="http", first_token_t=None)
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    fleet = analyse(b.root).fleet.set_index("arm")
    assert fleet.loc["sglang-dflash", "sustainable_rps"] == pytest.approx(2.0)


# --- bad input -------------------------------------------------------------------------------


def test_a_bad_record_line_is_an_input_error_naming_file_and_line(tmp_path):
    b = RunBuilder(tmp_path)
    cell = b.speed("vllm-base", "chat", 1, BASE_SPEED)
    path = b.root / "cells" / cell.replace("/", "__") / "requests.jsonl"
    with path.open("a") as fh:
        fh.write('{"cell_id": "x", "index": "not a number"}\n')
    with pytest.raises(InputError) as err:
        analyse(b.root)
    assert "requests.jsonl: line 26" in str(err.value)


def test_not_a_run_folder(tmp_path):
    with pytest.raises(InputError, match="not a run folder"):
        analyse(tmp_path / "nope")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match=r"manifest.json: line 1"):
        analyse(tmp_path / "run")


def test_cells_csv_shows_the_delivered_load_beside_the_registered_users(tmp_path):
    a = analyse(RunBuilder(tmp_path).full_passing_run().root)
    write_tables(a)
    cells = pd.read_csv(tmp_path / "synthetic-run" / "cells.csv")
    closed = cells[cells["kind"] == "speed"]
    assert not closed.empty
    assert (closed["delivered_concurrency"] == 0.99 * closed["concurrency"]).all()
    assert (closed["delivered_share"] == 0.99).all() and (closed["turnaround_p99_ms"] == 2.0).all()
    assert cells[cells["kind"] == "open"]["delivered_concurrency"].isna().all()


def test_cell_table_sums_per_request_figures_and_flags_disagreement(tmp_path):
    b = RunBuilder(tmp_path)
    # 20 rounds keeping 30 drafts a request: 1 + 30/20 = 2.5, the counters' figure; the
    # rounds keeping 1, 2, 3 drafts (6, 3, 6) give the counters' per-position rates too:
    # 15, 9 and 6 of 20 kept positions 1, 2 and 3 (0.75, 0.45, 0.30).
    agreeing = RequestSpeculation(
        engine="vllm", rounds=20, draft_tokens=60, accepted=30, histogram=[5, 6, 3, 6]
    )
    b.speed("vllm-ngram", "chat", 1, BASE_SPEED * 2, speculation=agreeing)
    # 12 kept of 10 rounds: 2.2, 12% below the counters' 2.5.
    low = RequestSpeculation(engine="vllm", rounds=10, draft_tokens=30, accepted=12)
    b.speed("vllm-eagle3", "chat", 1, BASE_SPEED * 2, speculation=low)
    # SGLang: completion tokens (101) per verify call (40), as its counters count.
    sg = RequestSpeculation(engine="sglang", rounds=40, draft_tokens=320, accepted=60)
    b.speed("sglang-dflash", "chat", 1, BASE_SPEED * 2, speculation=sg, accept_length=2.5)
    b.speed("vllm-base", "chat", 1, BASE_SPEED)
    cells = analyse(b.root).cells.set_index("cell_id")
    ngram = cells.loc["vllm-ngram/chat/speed/c001"]
    assert ngram["spec_requests"] == 21  # the measured ones: warm-up and attempt 2 left out
    assert ngram["accept_length_per_round_requests"] == pytest.approx(2.5)
    assert ngram["accept_rate_requests"] == pytest.approx(0.5)
    assert json.loads(ngram["accept_histogram_requests"]) == [105, 126, 63, 126]
    # Counters agree; the hand-made chunks carry 10 tokens each, which no engine's
    # rounds explain: the client's figure is flagged.
    assert not ngram["acceptance_agree"]
    assert ngram["acceptance_disagreement"] == "client 10.000 above per-request 2.500 (+300.0%)"
    eagle = cells.loc["vllm-eagle3/chat/speed/c001"]
    assert eagle["accept_length_per_round_requests"] == pytest.approx(2.2)
    assert (
        "engine counters 2.500 vs per-request 2.200 over the same requests (warm-up"
        " included) (+13.6%)"
    ) in eagle["acceptance_disagreement"]
    dflash = cells.loc["sglang-dflash/chat/speed/c001"]
    assert dflash["accept_length_per_round_requests"] == pytest.approx(101 / 40)
    assert "engine counters" not in dflash["acceptance_disagreement"]  # 2.5 vs 2.525: 1%
    base = cells.loc["vllm-base/chat/speed/c001"]
    assert base["spec_requests"] == 0 and pd.isna(base["acceptance_agree"])


def test_per_position_counters_are_checked_against_the_request_histograms(tmp_path):
    """The counters' per-position rates (0.75, 0.45, 0.30 in the hand-made scrapes) are
    the rounds keeping at least i drafts; per-request histograms with the same total
    (1.5 drafts a round) but another split (0.80, 0.50, 0.20) are a disagreement."""
    b = RunBuilder(tmp_path)
    split = RequestSpeculation(
        engine="vllm", rounds=10, draft_tokens=30, accepted=15, histogram=[2, 3, 3, 2]
    )
    b.speed("vllm-ngram", "chat", 1, BASE_SPEED * 2, speculation=split)
    b.speed("vllm-base", "chat", 1, BASE_SPEED)
    row = analyse(b.root).cells.set_index("cell_id").loc["vllm-ngram/chat/speed/c001"]
    assert row["accept_length_per_round_requests"] == pytest.approx(2.5)  # the totals agree
    assert not row["acceptance_agree"]
    assert (
        "per-position counters vs per-request histograms at position 1: 0.750 vs 0.800,"
        " 2: 0.450 vs 0.500, 3: 0.300 vs 0.200"
    ) in row["acceptance_disagreement"]
