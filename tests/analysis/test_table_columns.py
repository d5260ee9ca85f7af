"""Every analysis table's columns derive from its row model (harness/analysis/rows.py),
and are still, name for name and in order, the lists the tables were written with before
the models (written out here as they were, not read from the models)."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.cell_rows import CellRow, cell_frame, cell_rows_of
from harness.analysis.compare import compare_speedups, read_run
from harness.analysis.frame import columns, framed, rows_of
from harness.analysis.rows import KneeRow, MeasuredSpeedup, SpeedupRow
from harness.analysis.tables import analyse, write_tables
from tests.analysis.runfolder import PASSING_SPEEDUPS, RunBuilder
from tests.analysis.test_compare import A_CELLS, B_CELLS, tiny_run

OLD_COLUMNS = {
    "cells": (
        "cell_id arm task kind concurrency rate_relative rate_rps stage session rerun_of "
        "shard host gpu status reason attempt n_measured n_ok n_errors n_invalid_tpot "
        "burst_share aborted client_valid client_lag_p99_ms client_stamp_bound_p99_ms "
        "client_first_token_bound_p99_ms client_send_lag_p99_ms client_kernel_stamped "
        "delivered_concurrency delivered_share turnaround_p50_ms turnaround_p99_ms "
        "turnaround_max_ms host_foreign_cpu_share host_steal_share per_user_speed e2e_tok_s "
        "ttft_p50_s ttft_p90_s ttft_p99_s tpot_p50_s tpot_p90_s tpot_p99_s itl_p50_s "
        "itl_p90_s itl_p99_s latency_p50_s latency_p90_s latency_p99_s queue_p50_s "
        "queue_p90_s queue_p99_s span_s request_throughput_rps output_throughput_tok_s "
        "accept_length_per_round_engine accept_length_per_round_requests "
        "tokens_per_step_client acceptance_agree acceptance_disagreement spec_requests "
        "accept_rate_requests accept_histogram_requests drafts scrape_gaps counter_resets "
        "accept_rate_sum gpu_samples gpu_throttled gpu_throttle_reasons gpu_throttled_samples "
        "gpu_sm_clock_mhz_p50 gpu_sm_clock_mhz_min gpu_power_w_p50 gpu_power_w_max "
        "gpu_power_limit_w gpu_temperature_c_max gpu_util_pct_p50 gpu_memory_used_mib_max "
        "gpu_gaps accept_rate_pos1 accept_rate_pos2 accept_rate_pos3 n_scored accuracy "
        "engine_round"
    ).split(),
    "speedups": (
        "arm baseline task concurrency drafter_cell baseline_cell status reason speed_drafter "
        "speed_baseline n_drafter n_baseline speedup ci_lower ci_upper baseline_rerun_cell "
        "baseline_rerun_status baseline_rerun_speed baseline_rerun_ratio gpu_throttled_cells "
        "sessions interval_method ci_lower_within ci_upper_within session_speeds_drafter "
        "session_speeds_baseline session_spread_drafter session_spread_baseline resample_unit "
        "interval_caveat ci_lower_level ci_upper_level interval_df pooling tokens_per_round "
        "tokens_per_round_ci_lower tokens_per_round_ci_upper baseline_tokens_per_round "
        "baseline_tokens_per_round_ci_lower baseline_tokens_per_round_ci_upper round_time_s "
        "round_time_s_ci_lower round_time_s_ci_upper baseline_step_time_s "
        "baseline_step_time_s_ci_lower baseline_step_time_s_ci_upper round_cost_ratio "
        "round_cost_ratio_ci_lower round_cost_ratio_ci_upper explained_speedup "
        "explained_speedup_ci_lower explained_speedup_ci_upper explained_gap "
        "decomposition_flag decomposition_note round_cost_ratio_sessions "
        "engine_tokens_per_round engine_tokens_source predicted_speedup "
        "predicted_round_cost_ratio prediction_gap round_cost_gap prediction_note "
        "tokens_per_round_note"
    ).split(),
    "knees": (
        "arm task status knee_concurrency bracket_low bracket_high label interval_low "
        "interval_high interval note"
    ).split(),
    "identity": (
        "arm baseline task drafter_cell baseline_cell status n_compared n_identical n_numeric "
        "share n_not_compared mismatches"
    ).split(),
    "accuracy": ("arm task cell_id status level n correct accuracy ci_lower ci_upper").split(),
    "open_loop": (
        "arm cell_id status rate_relative rate_rps reference_rps throughput_rps "
        "objective_value_s objective_holds per_user_speed queue_p50_s queue_p99_s"
    ).split(),
    "fleet": (
        "arm baseline sustainable_rps gpus traffic_rps baseline_sustainable_rps baseline_gpus "
        "gpus_saved cells_usable cells_planned"
    ).split(),
    "surface_cells": (
        "arm baseline task concurrency k acceptance_length status reason speedup ci_lower "
        "ci_upper tokens_per_round tokens_per_round_ci_lower tokens_per_round_ci_upper "
        "round_cost_ratio round_cost_ratio_ci_lower round_cost_ratio_ci_upper "
        "round_cost_ratio_sessions sessions interval_method speed_drafter speed_baseline "
        "drafter_cell baseline_cell"
    ).split(),
    "surface": (
        "task k concurrency status break_even_length round_cost_ratio "
        "round_cost_ratio_ci_lower round_cost_ratio_ci_upper lengths label"
    ).split(),
    "schedule": (
        "arm baseline task concurrency k threshold predicted_speedup predicted_ci_lower "
        "predicted_ci_upper status reason speedup ci_lower ci_upper tokens_per_round "
        "round_cost_ratio collapse label drafter_cell baseline_cell"
    ).split(),
    "categories": (
        "arm baseline task config input_length category concurrency drafter_cell "
        "baseline_cell n_items status reason sessions n_drafter n_baseline speedup ci_lower "
        "ci_upper interval_method tokens_per_round tokens_per_round_ci_lower "
        "tokens_per_round_ci_upper baseline_tokens_per_round round_cost_ratio "
        "round_cost_ratio_ci_lower round_cost_ratio_ci_upper acceptance_rate "
        "acceptance_ci_lower acceptance_ci_upper accept_length spec_requests"
    ).split(),
    "compare": (
        "arm task concurrency status_a speedup_a ci_lower_a ci_upper_a tokens_per_round_a "
        "round_cost_ratio_a engine_tokens_per_round_a status_b speedup_b ci_lower_b "
        "ci_upper_b tokens_per_round_b round_cost_ratio_b engine_tokens_per_round_b level "
        "sessions_a sessions_b ratio ratio_lower ratio_upper interval_method df p_value "
        "equal_spread_p family_p family_wise drafter_speed_ratio drafter_ratio_lower "
        "drafter_ratio_upper baseline_speed_ratio baseline_ratio_lower baseline_ratio_upper "
        "moved status warning"
    ).split(),
}


# The cell table of a run no drafter cell of which has per-position counters (SGLang's
# drafter only): no accept_rate_pos columns, as today's code wrote it.
CELLS_WITHOUT_POSITIONS = (
    "cell_id arm task kind concurrency rate_relative rate_rps stage session rerun_of shard "
    "host gpu status reason attempt n_measured n_ok n_errors n_invalid_tpot burst_share "
    "aborted client_valid client_lag_p99_ms client_stamp_bound_p99_ms "
    "client_first_token_bound_p99_ms client_send_lag_p99_ms client_kernel_stamped "
    "delivered_concurrency delivered_share turnaround_p50_ms turnaround_p99_ms "
    "turnaround_max_ms host_foreign_cpu_share host_steal_share per_user_speed e2e_tok_s "
    "ttft_p50_s ttft_p90_s ttft_p99_s tpot_p50_s tpot_p90_s tpot_p99_s itl_p50_s itl_p90_s "
    "itl_p99_s latency_p50_s latency_p90_s latency_p99_s queue_p50_s queue_p90_s "
    "queue_p99_s span_s request_throughput_rps output_throughput_tok_s "
    "accept_length_per_round_engine accept_length_per_round_requests tokens_per_step_client "
    "acceptance_agree acceptance_disagreement spec_requests accept_rate_requests "
    "accept_histogram_requests drafts scrape_gaps counter_resets accept_rate_sum "
    "gpu_samples gpu_throttled gpu_throttle_reasons gpu_throttled_samples "
    "gpu_sm_clock_mhz_p50 gpu_sm_clock_mhz_min gpu_power_w_p50 gpu_power_w_max "
    "gpu_power_limit_w gpu_temperature_c_max gpu_util_pct_p50 gpu_memory_used_mib_max "
    "gpu_gaps n_scored accuracy engine_round"
).split()


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory):
    a = analyse(RunBuilder(tmp_path_factory.mktemp("cols")).full_passing_run().root)
    write_tables(a)
    return a


@pytest.mark.parametrize("name", [n for n in OLD_COLUMNS if n != "compare"])
def test_each_table_keeps_its_columns_in_order(analysed, name: str) -> None:
    assert list(getattr(analysed, name).columns) == OLD_COLUMNS[name]


def test_the_written_tables_keep_their_columns(analysed) -> None:
    root: Path = analysed.run.run_dir
    for name in ("cells", "speedups"):
        assert list(pd.read_parquet(root / f"{name}.parquet").columns) == OLD_COLUMNS[name]
        assert list(pd.read_csv(root / f"{name}.csv").columns) == OLD_COLUMNS[name]


def test_the_comparison_keeps_its_columns(tmp_path: Path) -> None:
    a, b = tiny_run(tmp_path, "a", 3, A_CELLS), tiny_run(tmp_path, "b", 3, B_CELLS)
    assert list(compare_speedups(read_run(a), read_run(b)).columns) == OLD_COLUMNS["compare"]


def test_a_table_is_framed_in_its_models_order_whatever_its_rows_hold() -> None:
    # The rows name the columns in another order and leave some out: the model decides.
    df = framed([{"note": "n", "arm": "x", "task": "chat", "status": "located"}], KneeRow)
    assert list(df.columns) == columns(KneeRow) == OLD_COLUMNS["knees"]
    assert df.iloc[0]["arm"] == "x" and df.iloc[0]["knee_concurrency"] is None
    assert columns(SpeedupRow) == OLD_COLUMNS["speedups"]


def test_each_speedup_query_answers_the_row_the_table_holds_there(analysed) -> None:
    table = analysed.speedups
    assert len(table) > 3 and table["concurrency"].nunique() > 1
    for r in table.to_dict("records"):
        got = analysed.speedup(r["arm"], r["task"], r["concurrency"])
        assert got is not None
        assert (got.arm, got.task, got.concurrency) == (r["arm"], r["task"], r["concurrency"])
        assert (got.drafter_cell, got.baseline_cell) == (r["drafter_cell"], r["baseline_cell"])
        assert got.speedup == pytest.approx(r["speedup"], nan_ok=True)
        assert got.predicted_speedup == pytest.approx(r["predicted_speedup"], nan_ok=True)
    assert analysed.speedup(r["arm"], r["task"], 999) is None
    assert analysed.speedup("no-such-arm", r["task"], r["concurrency"]) is None


def test_speedups_of_keeps_the_tables_order_and_only_what_was_asked(analysed) -> None:
    table = analysed.speedups
    arm, task = table.iloc[0]["arm"], table.iloc[0]["task"]
    levels = sorted(table["concurrency"].unique())[:2]
    want = table[(table["arm"] == arm) & (table["task"] == task)]
    assert [r.drafter_cell for r in analysed.speedups_of(arm, task)] == list(want["drafter_cell"])
    some = want[want["concurrency"].isin(levels)]
    got = analysed.speedups_of([arm], task, levels)
    assert [r.drafter_cell for r in got] == list(some["drafter_cell"]) and len(got) == 2
    assert len(analysed.speedups_of()) == len(table)


def test_a_replaced_table_is_read_again(analysed) -> None:
    # The sequential design's reading replaces the speedups on a copy of the analysis.
    a = copy.copy(analysed)
    first = a.speedups.iloc[0]
    a.speedups = a.speedups.assign(speedup=0.5)
    assert a.speedup(first["arm"], first["task"], first["concurrency"]).speedup == 0.5
    assert analysed.speedup(first["arm"], first["task"], first["concurrency"]).speedup != 0.5


def test_the_knee_query_answers_each_arm_and_task(analysed) -> None:
    for r in analysed.knees.to_dict("records"):
        knee = analysed.knee(r["arm"], r["task"])
        assert knee is not None and (knee.arm, knee.task, knee.label) == (
            r["arm"],
            r["task"],
            r["label"],
        )
    assert analysed.knee("no-such-arm", "chat") is None


def test_a_hand_made_table_reads_as_rows_with_its_missing_columns_none() -> None:
    (row,) = rows_of(pd.DataFrame([{"arm": "a", "task": "t", "concurrency": 2}]), SpeedupRow)
    assert (row.arm, row.concurrency, row.speedup, row.pooling) == ("a", 2, None, None)


def test_compare_pairs_the_runs_rows_by_arm_task_and_level_whatever_their_order(
    tmp_path: Path,
) -> None:
    a, b = tiny_run(tmp_path, "a", 3, A_CELLS), tiny_run(tmp_path, "b", 3, B_CELLS)
    want = compare_speedups(read_run(a), read_run(b))
    table = pd.read_csv(b / "speedups.csv")
    table.iloc[::-1].to_csv(b / "speedups.csv", index=False)  # B's rows in another order
    got = compare_speedups(read_run(a), read_run(b))
    pd.testing.assert_frame_equal(got, want)
    keys = list(zip(got["arm"], got["task"], got["concurrency"], strict=True))
    assert keys == [(r.arm, r.task, r.concurrency) for r in read_run(a).speedups]  # A's order
    # A run written before a column existed is read with that figure None, A's kept.
    table.drop(columns=["engine_tokens_per_round"]).to_csv(b / "speedups.csv", index=False)
    older = compare_speedups(read_run(a), read_run(b))
    assert older["engine_tokens_per_round_b"].isna().all()
    for kept in ("engine_tokens_per_round_a", "ratio"):
        pd.testing.assert_series_equal(older[kept], want[kept])


def test_a_table_read_as_another_model_is_not_handed_back_as_the_first(analysed) -> None:
    measured = analysed.rows("speedups", MeasuredSpeedup)
    typed = analysed.rows("speedups", SpeedupRow)
    assert type(measured[0]) is MeasuredSpeedup and type(typed[0]) is SpeedupRow


@pytest.fixture(scope="module")
def without_positions(tmp_path_factory: pytest.TempPathFactory):
    b = RunBuilder(tmp_path_factory.mktemp("nopos"))
    b.speed_cells(speedups={"sglang-dflash": PASSING_SPEEDUPS["sglang-dflash"]})
    b.identity_cells()
    b.accuracy_cells()
    a = analyse(b.root)
    write_tables(a)
    return a


def test_the_cell_table_without_per_position_rates_keeps_its_columns(without_positions) -> None:
    root: Path = without_positions.run.run_dir
    assert list(without_positions.cells.columns) == CELLS_WITHOUT_POSITIONS
    assert list(pd.read_parquet(root / "cells.parquet").columns) == CELLS_WITHOUT_POSITIONS
    assert list(pd.read_csv(root / "cells.csv").columns) == CELLS_WITHOUT_POSITIONS
    assert all(r.accept_rate_by_position == () for r in without_positions.cell_rows())


def test_the_cell_models_fields_are_the_tables_columns_the_rates_spread_at_their_place() -> None:
    model = columns(CellRow)
    where = model.index("accept_rate_by_position")
    spread = [*model[:where], *(f"accept_rate_pos{i}" for i in (1, 2, 3)), *model[where + 1 :]]
    assert spread == OLD_COLUMNS["cells"]


def test_a_group_no_cell_has_stays_out_of_the_cell_table(tmp_path: Path) -> None:
    # Speed cells only: no accuracy cell, so no n_scored / accuracy, as before the model.
    b = RunBuilder(tmp_path)
    b.speed_cells()
    cells = analyse(b.root).cells
    assert "n_scored" not in cells and "accuracy" not in cells
    assert [c for c in OLD_COLUMNS["cells"] if c not in cells] == ["n_scored", "accuracy"]


def test_the_cell_rows_read_back_frame_the_same_table(analysed) -> None:
    rows = cell_rows_of(analysed.cells)
    pd.testing.assert_frame_equal(cell_frame(rows), analysed.cells)
    drafter = next(r for r in rows if r.arm == "vllm-eagle3" and r.kind == "speed")
    table = analysed.cells.set_index("cell_id").loc[drafter.cell_id]
    assert drafter.accept_rate_by_position == pytest.approx(
        [table[f"accept_rate_pos{i}"] for i in (1, 2, 3)]
    )
    assert drafter.accept_rate_sum == pytest.approx(sum(drafter.accept_rate_by_position))


def test_each_cell_query_answers_the_row_the_table_holds(analysed) -> None:
    table = analysed.cells
    for r in table.to_dict("records"):
        got = analysed.cell(r["cell_id"])
        assert got is not None and (got.arm, got.status) == (r["arm"], r["status"])
        assert got.per_user_speed == pytest.approx(r["per_user_speed"], nan_ok=True)
    assert analysed.cell("no/such/cell") is None
    speed = analysed.cell_rows(arms=("vllm-base",), kinds=("speed",))
    want = table[(table["kind"] == "speed") & (table["arm"] == "vllm-base")]
    assert [r.cell_id for r in speed] == list(want["cell_id"])
    complete = analysed.cell_rows(status=("complete",))
    assert [r.cell_id for r in complete] == list(table[table["status"] == "complete"]["cell_id"])
    assert all(r.concurrency is None or isinstance(r.concurrency, int) for r in complete)
