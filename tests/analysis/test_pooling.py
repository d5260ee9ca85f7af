"""Session variance pooled over the cells one engine start measures, where it holds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import analyse
from harness.analysis.intervals import t_quantile
from harness.analysis.pooling import pool, pool_session_variance
from harness.prereg.schema import Study

from .runfolder import RunBuilder, study_dict


def test_a_small_table_by_hand():
    # sessions x cells; column variances 1, 1, 0 (mean 2/3); session means 1, 1, 2 (SS 2
    # with 3 cells, 2 df); residuals -2/3, 1/3, 1/3 by turns (SS 2, 4 df), alike in every
    # cell (equal spread, p ~ 1). Pooled 2/3; df with the session mean square counted
    # twice: (2/3 + 1/3)^2 / ((2/3)^2 / 2 + (1/3)^2 / 4) = 4.
    p = pool(np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 2.0], [2.0, 2.0, 2.0]]), 0.95)
    assert p.pooled and p.variance == pytest.approx(2 / 3) and p.df == pytest.approx(4.0)
    assert p.spread_p is not None
    assert p.spread_p > 0.99
    assert p.note == "pooled over 3 cells, 4.0 df; equal spread p=1.00"


def test_unequal_spread_is_rejected_and_too_little_is_never_pooled():
    rng = np.random.default_rng(0)
    table = rng.normal(0.0, 0.01, size=(3, 6))
    table[:, 5] = [0.4, -0.3, -0.1]  # one cell far noisier than the others
    p = pool(table, 0.95)
    assert p.spread_p is not None
    assert not p.pooled and p.spread_p < 0.05
    assert p.note.startswith("equal spread rejected (p=")
    # A table whose sessions differ by one shared effect alone has no residual to test.
    shared = np.array([[0.1] * 4, [-0.05] * 4, [0.02] * 4]) + np.arange(4)
    assert pool(shared, 0.95).note == "no residual spread to test"
    # Two cells' residuals mirror each other; two sessions give the session term 1 df.
    assert pool(table[:, :2], 0.95).note.startswith("2 cells: too few to test")
    assert pool(table[:2], 0.95).note.startswith("fewer than 3 sessions")


@pytest.mark.parametrize(
    "shared_sd, cell_sd, df_range",
    [
        (0.12, 0.02, (2.0, 2.5)),  # the lab's engine-start effect dominates: ~n - 1 df
        (0.05, 0.05, (3.5, 7.0)),  # between
        (0.0, 0.12, (14.0, 18.0)),  # independent cells: up to J (n - 1) = 18 df
    ],
)
def test_the_pooled_interval_covers_and_its_df_follow_what_is_shared(shared_sd, cell_sd, df_range):
    """Simulated tables of 3 sessions x 9 cells: the pooled t interval covers each cell's
    true mean at its level, its test of equal spread rejects at its level, and its
    degrees of freedom are those of what varies independently. (Plain Satterthwaite,
    the session term counted once, covered 0.93 between.)"""
    rng = np.random.default_rng(1)
    mu = np.linspace(0.9, -0.3, 9)
    covered, rejected, dfs = [], [], []
    for _ in range(2000):
        table = mu + rng.normal(0, shared_sd, size=(3, 1)) + rng.normal(0, cell_sd, (3, 9))
        p = pool(table, 0.95)
        rejected.append(not p.pooled)
        if p.variance is not None and p.df is not None:  # pooled
            dfs.append(p.df)
            half = t_quantile(0.95, max(2, math.floor(p.df))) * math.sqrt(p.variance / 3)
            covered.append(np.abs(table.mean(axis=0) - mu) <= half)
    assert 0.035 <= np.mean(rejected) <= 0.065  # a test at 5 %, its null simulated
    assert 0.94 <= np.mean(covered) <= 0.965
    assert df_range[0] <= np.median(dfs) <= df_range[1]


def test_the_test_of_equal_spread_catches_a_noisier_cell_and_pooling_then_costs_it():
    """With 3 sessions the test is weak: one cell three times noisier than eight others
    (no shared effect) is caught about a quarter of the time, and where it is not, that
    cell's pooled interval covers far less than 0.95. Why prereg.yaml registers per_level."""
    rng = np.random.default_rng(2)
    scale = np.ones(9)
    scale[-1] = 3.0
    caught, odd = [], []
    for _ in range(2000):
        table = rng.normal(0, 0.05, (3, 9)) * scale
        p = pool(table, 0.95)
        caught.append(not p.pooled)
        if p.variance is not None and p.df is not None:  # pooled
            half = t_quantile(0.95, max(2, math.floor(p.df))) * math.sqrt(p.variance / 3)
            odd.append(abs(table[:, -1].mean()) <= half)
    assert 0.15 <= np.mean(caught) <= 0.35
    assert np.mean(odd) < 0.75


def _table(arm: str, logs_by_c: dict[int, list[float]]) -> list[dict]:
    return [
        {
            "arm": arm,
            "task": "chat",
            "concurrency": c,
            "status": "ok",
            "sessions": 3,
            "interval_method": "t_sessions",
            "ci_lower": 0.5,
            "ci_upper": 2.0,
            "session_speeds_drafter": json.dumps([100.0 * math.exp(v) for v in logs]),
            "session_speeds_baseline": json.dumps([100.0] * 3),
            "pooling": None,
        }
        for c, logs in logs_by_c.items()
    ]


def test_the_table_pools_each_arm_and_stage_apart_and_keeps_each_level_interval():
    study = Study.model_validate(
        study_dict(
            sessions=3,
            sessions_for="speed_cells",
            intervals={
                "level": 0.95,
                "bootstrap_resamples": 300,
                "seed": 7,
                "pooling": "stage_cells",
            },
        )
    )
    # The hand table above (variance 2/3, 4 df) at c = 1, 2, 4 (by columns); stage 2's two
    # cells are too few to test.
    stage1 = {1: [0.0, 1.0, 2.0], 2: [1.0, 0.0, 2.0], 4: [2.0, 2.0, 2.0]}
    stage2 = {8: [0.1, 0.2, 0.3], 16: [0.3, 0.2, 0.1]}
    sp = pd.DataFrame(
        _table("vllm-ngram", stage1 | stage2) + _table("vllm-eagle3", {1: [0.1, 0.2, 0.3]})
    )
    out = pool_session_variance(sp, study).set_index(["arm", "concurrency"])
    half = t_quantile(0.95, 4) * math.sqrt(2 / 3 / 3)  # 4.0 df: t = 2.776
    for c, mean in ((1, 1.0), (2, 1.0), (4, 2.0)):
        row = out.loc[("vllm-ngram", c)]
        assert row["interval_method"] == "t_pooled" and row["interval_df"] == pytest.approx(4.0)
        assert (row["ci_lower"], row["ci_upper"]) == (
            pytest.approx(math.exp(mean - half)),
            pytest.approx(math.exp(mean + half)),
        )
        assert (row["ci_lower_level"], row["ci_upper_level"]) == (0.5, 2.0)
        assert row["pooling"] == "stage 1: pooled over 3 cells, 4.0 df; equal spread p=1.00"
    stage2_row = out.loc[("vllm-ngram", 8)]
    assert stage2_row["interval_method"] == "t_sessions" and stage2_row["ci_lower"] == 0.5
    assert stage2_row["pooling"].startswith("stage 2: 2 cells: too few to test")
    eagle = out.loc[("vllm-eagle3", 1)]  # its own stage-1 table: one cell
    assert eagle["interval_method"] == "t_sessions" and eagle["interval_df"] == 2.0
    assert eagle["pooling"] == (
        "stage 1: 1 cell: too few to test their spread equal, each level keeps its own interval"
    )
    # Registered per level (the schema's default): nothing changes but the columns.
    plain = pool_session_variance(sp, Study.model_validate(study_dict(sessions=3)))
    assert (plain["ci_lower"] == sp["ci_lower"]).all() and plain["pooling"].isna().all()


def test_a_run_whose_sessions_differ_only_together_keeps_its_level_intervals(tmp_path):
    """The hand-made folder's sessions swing every cell of an arm alike (one engine start's
    effect): nothing is left to test the cells' spread on, so nothing is pooled."""
    study = study_dict(
        sessions=3,
        sessions_for="speed_cells",
        intervals={"level": 0.95, "bootstrap_resamples": 300, "seed": 7, "pooling": "stage_cells"},
    )
    b = RunBuilder(tmp_path, study)
    b.speed_cells()
    sp = analyse(b.root).speedups
    ok = sp[sp["status"] == "ok"]
    assert set(ok["interval_method"]) == {"t_sessions"}
    assert set(ok["pooling"]) == {
        "stage 1: no residual spread to test",
        "stage 2: no residual spread to test",
    }
    assert (ok["ci_lower"] == ok["ci_lower_level"]).all() and (ok["interval_df"] == 2).all()


@pytest.mark.parametrize("sessions, cells", [(3, 3), (3, 12), (5, 9)])
def test_the_pooled_interval_covers_at_other_shapes_where_satterthwaite_alone_did_not(
    sessions, cells
):
    """Where the cells' own noise is 0.4 of the shared effect, the hardest case for the
    degrees of freedom (plain Satterthwaite: 0.93 at 3 x 9)."""
    rng = np.random.default_rng(3)
    covered = []
    for _ in range(2000):
        table = rng.normal(0, 0.1, (sessions, 1)) + rng.normal(0, 0.04, (sessions, cells))
        p = pool(table, 0.95)
        sd = table.std(axis=0, ddof=1) / math.sqrt(sessions)
        if p.variance is not None and p.df is not None:  # pooled
            df, spread = math.floor(p.df), math.sqrt(p.variance / sessions)
        else:
            df, spread = sessions - 1, sd
        half = t_quantile(0.95, max(sessions - 1, df)) * spread
        covered.append(np.abs(table.mean(axis=0)) <= half)
    assert 0.94 <= np.mean(covered) <= 0.97
