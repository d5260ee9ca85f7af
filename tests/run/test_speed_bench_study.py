"""A scripted study on a SPEED-Bench-schema parquet in a scratch hub cache (a qualitative
task with a two-turn item, sent as sessions with `turns: all`, and a throughput one
registered for one category): its run writes the by-category table (speedup, tokens per
round and acceptance, with intervals, per category; the throughput task's input length),
the report has the by-category and by-input-length pages, and the two-turn item's second
turn carries the first answer (issue 33, parts 1 and 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from tests.measure.cells import scripted_text
from tests.run.conftest import (
    pdf_text,
    scripted_arms,
    scripted_bars,
    scripted_recording,
    specbench,
    write_scripted_study,
)
from tests.workloads.speedbench import (
    build_speed_bench_cache,
    offline_env,
    run_offline,
    speed_bench_task,
)


def test_a_scripted_study_breaks_speed_bench_down_by_category(tmp_path: Path) -> None:
    cache = build_speed_bench_cache(tmp_path, configs=("qualitative", "throughput_1k"))
    study = write_scripted_study(
        tmp_path,
        "speed",
        "SPEED-Bench by category",
        arms=scripted_arms([0.8, 0.7, 0.6]),
        loads={
            "closed_loop": {
                "concurrency": [1, 2],
                "requests": {"min": 16, "per_user": 8},
                "warmup_per_user": 1,
                "stagger_warmup": True,
            }
        },
        tasks=[
            speed_bench_task(cache.commit, max_tokens=16, turns="all"),
            speed_bench_task(
                cache.commit,
                name="long",
                config="throughput_1k",
                categories=["math"],
                max_tokens=16,
            ),
        ],
        recording=scripted_recording(),
        bars=scripted_bars(identity=None),
    )
    run = run_offline(study, cache.root, tmp_path)
    env = offline_env(cache.root, tmp_path)

    table = pd.read_csv(run / "categories.csv")
    # The throughput configuration (its one registered category) says its input length.
    long = table[table["task"] == "long"]
    assert set(long["category"]) == {"math"} and set(long["input_length"]) == {"1k"}
    assert (long["status"] == "ok").all() and len(long) == 2
    table = table[table["task"] == "speed"]
    assert table["input_length"].isna().all()
    assert set(table["category"]) == {"coding", "math"}
    assert set(table["concurrency"]) == {1, 2} and set(table["arm"]) == {"drafter"}
    assert (table["n_items"] == 4).all() and (table["config"] == "qualitative").all()
    ok = table[table["status"] == "ok"]
    assert len(ok) == 4, table[["category", "concurrency", "status", "reason"]]
    for col in ("speedup", "tokens_per_round", "acceptance_rate"):
        low, high = (
            ("ci_lower", "ci_upper")
            if col == "speedup"
            else (f"{col}_ci_lower", f"{col}_ci_upper")
            if col == "tokens_per_round"
            else ("acceptance_ci_lower", "acceptance_ci_upper")
        )
        assert (ok[low] <= ok[col]).all() and (ok[col] <= ok[high]).all(), col
    assert (ok["speedup"] > 1).all() and (ok["tokens_per_round"] > 1).all()
    # Each category's requests are its own items' (four each, cycled by the users).
    assert (ok["n_drafter"] >= 8).all()
    assert (run / "categories.parquet").exists()

    reports = list((tmp_path / "reports").glob("*.pdf"))
    assert len(reports) == 1
    text = pdf_text(reports[0])
    assert "SPEED-Bench by category: speed (qualitative)" in text
    assert "SPEED-Bench by category: speed, the figures" in text
    assert "SPEED-Bench by category: long (throughput_1k)" in text
    assert "SPEED-Bench by input length" in text
    html = (tmp_path / "reports" / reports[0].name.replace(".pdf", ".html")).read_text()
    assert 'id="categories"' in html and "SPEED-Bench by input length" in html
    assert "every turn of a multi-turn item, sent as one session (turns: all)" in html

    # The two-turn item (coding-3, `turns: all`) was one user's session: its second turn
    # was sent after the first answer arrived, with that answer in its messages (the
    # scripted engine's text is a function of the messages it was sent).
    sessions = 0
    for path in (run / "cells").glob("*speed*/requests.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for first in (r for r in records if r["item_id"] == "speed_bench:coding-3"):
            (second,) = [
                r
                for r in records
                if r["index"] == first["index"]
                and r["attempt"] == first["attempt"]
                and r["turn"] == 2
            ]
            assert first["turn"] == 1 and second["item_id"] == "speed_bench:coding-3#turn2"
            assert second["user"] == first["user"] and second["sent_t"] >= first["end_t"]
            messages = [
                {"role": "user", "content": "Write a stack class."},
                {"role": "assistant", "content": first["output_text"]},
                {"role": "user", "content": "Now add a peek method."},
            ]
            assert second["output_text"] == scripted_text(messages, 16)
            sessions += 1
    assert sessions >= 4  # in every speed cell of both arms, at least once

    # Reported where the dataset is not in the cache: the categories the run recorded
    # when it started are used, the same table.
    before = pd.read_csv(run / "categories.csv")
    specbench(
        "report",
        str(run),
        "--out",
        str(tmp_path / "elsewhere.pdf"),
        env={**env, "HF_HUB_CACHE": str(tmp_path / "empty")},
        timeout=120,
    )
    pd.testing.assert_frame_equal(pd.read_csv(run / "categories.csv"), before)
    # A folder without that record, where the dataset is absent: said per task.
    shutil.rmtree(run / "items")
    specbench(
        "report",
        str(run),
        "--out",
        str(tmp_path / "elsewhere.pdf"),
        env={**env, "HF_HUB_CACHE": str(tmp_path / "empty")},
        timeout=120,
    )
    table = pd.read_csv(run / "categories.csv")
    assert list(table["status"]) == ["unavailable", "unavailable"]
    assert table["reason"].str.contains("is not in the hub cache").all()
