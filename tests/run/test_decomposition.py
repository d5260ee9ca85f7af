"""One small scripted study whose speedup has a declared split (examples/scripted-decompose.yaml):
tokens per round 2.5 in 10 ms rounds over a baseline of one token every 8 ms, and a stale
drafter whose first draft agrees 7 % of the time. Several assertions share one run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.run.conftest import run_folder, specbench, verdict_of

LEVELS = [1, 2, 4]
# Round and step times are the scripted engine's wall-clock steps (kept on their declared
# grid, so a loaded host moves them little): scripts/flaky.sh runs this file too.
pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def decompose_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("decompose")
    specbench(
        "run",
        "examples/scripted-decompose.yaml",
        "--results",
        str(out / "results"),
        "--reports",
        str(out / "reports"),
    )
    return run_folder(out / "results")


def test_the_speedup_splits_into_2_5_tokens_a_round_at_1_25_times_the_step(decompose_run):
    df = pd.read_csv(decompose_run / "speedups.csv")
    rows = df[df["arm"] == "drafter"].set_index("concurrency")
    assert list(rows.index) == LEVELS and set(rows["status"]) == {"ok"}
    for c in LEVELS:
        r = rows.loc[c]
        assert r["tokens_per_round"] == pytest.approx(2.5, rel=0.02), c
        assert r["baseline_tokens_per_round"] == pytest.approx(1.0, rel=0.02), c
        assert r["round_time_s"] == pytest.approx(0.010, rel=0.02), c
        assert r["baseline_step_time_s"] == pytest.approx(0.008, rel=0.02), c
        assert r["round_cost_ratio"] == pytest.approx(1.25, rel=0.02), c
        assert r["explained_speedup"] == pytest.approx(2.0, rel=0.02), c
        # Alike requests: the two factors explain the measured speedup, not flagged.
        assert abs(r["explained_gap"]) < 0.01 and not r["decomposition_flag"], c
        # Each factor has the interval the speedup has, around its point.
        for name in ("tokens_per_round", "round_cost_ratio", "explained_speedup"):
            assert r[f"{name}_ci_lower"] <= r[name] <= r[f"{name}_ci_upper"], (c, name)
        # The formula, from the roofline (8 ms target pass, 2 ms draft pass) and the
        # engine's per-position counters (1 + 1.0 + 0.5): 2.5 / 1.25 = 2.0.
        assert r["engine_tokens_per_round"] == pytest.approx(2.5, rel=0.01), c
        assert r["predicted_round_cost_ratio"] == pytest.approx(1.25), c
        assert r["predicted_speedup"] == pytest.approx(2.0, rel=0.01), c
        assert abs(r["prediction_gap"]) < 0.02 and pd.isna(r["tokens_per_round_note"]), c
    # The parquet carries the same columns.
    pq = pd.read_parquet(decompose_run / "speedups.parquet")
    assert "explained_speedup_ci_upper" in pq.columns and len(pq) == len(df)


def test_a_stale_drafter_shows_its_7_percent_first_position_not_the_bonus_token(decompose_run):
    cells = pd.read_csv(decompose_run / "cells.csv").set_index("cell_id")
    stale = cells.loc[[f"stale/chat/speed/c{c:03d}" for c in LEVELS]]
    # Pooled over the three cells' rounds: the declared 7 % (seeded draws, within three
    # binomial standard deviations); a column counting the target's own token reads 1.0.
    drafts = stale["drafts"].sum()
    kept = (stale["accept_rate_pos1"] * stale["drafts"]).sum()
    sd = (0.07 * 0.93 / drafts) ** 0.5
    assert drafts > 900 and abs(kept / drafts - 0.07) < 3 * sd, (kept, drafts)
    # The good drafter's first position is kept every round, its second every other one.
    good = cells.loc["drafter/chat/speed/c001"]
    assert (good["accept_rate_pos1"], good["accept_rate_pos2"]) == (1.0, 0.5)
    # Tokens per round from the client's chunks are the engine's own per-request count
    # over the same requests (1 + kept / rounds); the counters' window also holds the
    # warm-up requests, so 1 + p1 + p2 is near it, not equal.
    for c in LEVELS:
        row = cells.loc[f"stale/chat/speed/c{c:03d}"]
        assert row["tokens_per_step_client"] == pytest.approx(
            row["accept_length_per_round_requests"], rel=1e-9
        ), c
        assert row["tokens_per_step_client"] == pytest.approx(
            1 + row["accept_rate_pos1"] + row["accept_rate_pos2"], abs=0.1
        ), c
    # Speculation never pays for it: 1.07 tokens a round at 1.25 times the step.
    sp = pd.read_csv(decompose_run / "speedups.csv")
    assert (sp[sp["arm"] == "stale"]["ci_upper"] < 1.0).all()


def test_the_report_leads_with_the_headline_figure_and_explains_each_task(decompose_run):
    pdf = decompose_run.parent.parent / "reports" / f"{decompose_run.name}.pdf"
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    pages = text.split("\f")
    # Page one: the verdict, the speedup against users with its bars, and the two
    # factors beneath it.
    first = pages[0]
    verdict = verdict_of(decompose_run)
    assert verdict["verdict"] == "PASS", verdict["reasons"]  # 2.0x against a 1.8x bar
    for said in (
        "Verdict: PASS",
        "task: chat",
        "pass bar (1.8x)",
        "stop bar (1.3x)",
        "why: speedup = tokens factor / cost factor",
        "tokens per round / baseline's (lower panel)",
    ):
        assert said in first, said
    # A decomposition page for every speed task, with the formula beside the measurement.
    (why,) = [p for p in pages if "Why this speedup: task chat" in p]
    assert "measured against predicted: mean" in why
    assert re.search(r"drafter\s+1\s+1\.9\d|drafter\s+1\s+2(\.0\d)?\s", why), why
    # Where speculation pays and where its gain is gone, in verdict.json and on the bars page.
    pays = {r["arm"]: r for r in verdict_of(decompose_run)["speculation_pays"]}
    assert (pays["drafter"]["status"], pays["drafter"]["pays_up_to"]) == ("pays_at_every_level", 4)
    assert (pays["stale"]["status"], pays["stale"]["pays_up_to"]) == ("never", None)
    bars_page = next(p for p in pages if "Where speculation pays" in p)
    assert "stale / chat: never pays: at 1 users the upper bound is already below 1.0" in bars_page
