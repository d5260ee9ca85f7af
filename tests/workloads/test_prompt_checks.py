"""What `validate` checks of the prompts before any GPU time (issue 47, parts 2 and 3):
SPEED-Bench rows the hub publishes as a placeholder sentence are never sent, counted per
category, dropped or refused as the task registers; every prompt plus max_tokens is held
against the model's context, with the tokenizer where it is at hand, else an estimate
that says so, and the items that do not fit are named."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.prereg.schema import TaskSpec
from harness.workloads import DataIntegrityError, load_items
from harness.workloads.speed_bench import PLACEHOLDER
from tests.run.conftest import (
    pdf_text,
    scripted_arms,
    scripted_bars,
    scripted_recording,
    write_scripted_study,
)
from tests.workloads.speedbench import (
    ROWS,
    build_speed_bench_cache,
    row,
    run_offline,
    speed_bench_task,
)
from tests.workloads.test_speed_bench import _line_of, study, write

# As the hub publishes them: the sentence alone, or with a template whose holes the
# external dataset fills (NeMo Skills prepare.py TURNS_PLACEHOLDER). Every summary row
# a placeholder: the category is left empty when dropped.
PLACEHOLDER_ROWS = [
    *ROWS,
    row("coding-9", "coding", [PLACEHOLDER + "\n\n{question}"]),
    row("summary-0", "summary", [PLACEHOLDER + "\n\nSummarise:\n{article}"]),
    row("summary-1", "summary", [PLACEHOLDER]),
]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = build_speed_bench_cache(tmp_path, rows=PLACEHOLDER_ROWS)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache.root))
    return cache


def test_a_placeholder_row_is_never_loaded_and_refused_unless_dropped(hub):
    refused = TaskSpec.model_validate(speed_bench_task(hub.commit))
    with pytest.raises(
        DataIntegrityError,
        match=r"by category: coding 1 of 5, math 0 of 4,"
        r" summary 2 of 2; never sent: register `placeholders: drop`",
    ):
        load_items("speed_bench", source=refused.source)
    dropped = TaskSpec.model_validate(speed_bench_task(hub.commit, placeholders="drop"))
    items = load_items("speed_bench", source=dropped.source)
    assert [it.id for it in items] == [f"speed_bench:{r['question_id']}" for r in ROWS]
    assert not any(PLACEHOLDER in m["content"] for it in items for m in it.messages)
    only = TaskSpec.model_validate(
        speed_bench_task(hub.commit, placeholders="drop", categories=["summary"])
    )
    with pytest.raises(DataIntegrityError, match="no row is left"):
        load_items("speed_bench", source=only.source)


def test_validate_counts_them_per_category_and_refuses_unless_dropped(hub, tmp_path, capsys):
    path = write(tmp_path / "study.yaml", study(hub.commit))
    assert main(["validate", str(path)]) == 2
    line = _line_of(path, "name: speed")  # the task (the field is unset)
    assert capsys.readouterr().err.splitlines() == [
        f"specbench: {path}:{line}: tasks[0].placeholders: task speed: 3 rows are SPEED-Bench"
        " placeholders (coding 1 of 5, math 0 of 4, summary 2 of 2), whose text lives in"
        " other datasets: register `placeholders: drop` to measure the rest (specbench does"
        " not resolve them)"
    ]
    path = write(tmp_path / "drop.yaml", study(hub.commit, placeholders="drop"))
    assert main(["validate", str(path)]) == 0
    assert (
        "task speed: SPEED-Bench placeholder rows (never sent), by category: coding 1 of"
        " 5, math 0 of 4, summary 2 of 2: dropped (placeholders: drop); categories left"
        " empty: summary"
    ) in capsys.readouterr().out


def test_fetch_counts_them_too(hub, tmp_path):
    path = write(tmp_path / "study.yaml", study(hub.commit))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub.root),
        "SPECBENCH_CACHE": str(tmp_path / "c"),
    }
    proc = subprocess.run(
        [".venv/bin/specbench", "fetch", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "placeholder rows (never sent), by category: coding 1 of 5, math 0 of 4, summary 2 of 2"
    ) in proc.stdout


def test_a_dropping_study_sends_none_and_counts_them_in_its_manifest_and_report(hub, tmp_path):
    study_path = write_scripted_study(
        tmp_path,
        "drop",
        "SPEED-Bench with placeholder rows",
        arms=scripted_arms([0.8, 0.7, 0.6]),
        loads={
            "closed_loop": {
                "concurrency": [1],
                "requests": {"min": 9, "per_user": 9},
                "warmup_per_user": 1,
            }
        },
        tasks=[speed_bench_task(hub.commit, max_tokens=8, placeholders="drop")],
        recording=scripted_recording(sessions=3),  # the schema's default
        bars=scripted_bars(identity=None, knee={"required": False}),
    )
    run = run_offline(study_path, hub.root, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["speed_bench_placeholders"] == {
        "speed": {"coding": [1, 5], "math": [0, 4], "summary": [2, 2]}
    }
    sent = [
        json.loads(line)
        for p in (run / "cells").glob("*/requests.jsonl")
        for line in p.read_text().splitlines()
    ]
    assert sent and not {r["item_id"] for r in sent} & {
        "speed_bench:coding-9",
        "speed_bench:summary-0",
        "speed_bench:summary-1",
    }
    (pdf,) = (tmp_path / "reports").glob("*.pdf")
    text = " ".join(pdf_text(pdf).split())
    assert (
        "Placeholder rows dropped, never sent (placeholders: drop): coding 1 of 5, summary"
        " 2 of 2; categories left empty: summary"
    ) in text


def tiny_model(folder: Path) -> Path:
    from harness.engines.tiny.tiny_model import build_tiny_model

    build_tiny_model(folder)
    return folder


def test_a_prompt_longer_than_the_context_is_refused_naming_its_items(hub, tmp_path, capsys):
    from tokenizers import Tokenizer

    # With the tokenizer at hand (a local model folder): counted exactly.
    model = tiny_model(tmp_path / "model")
    data = study(hub.commit, placeholders="drop", max_tokens=8)
    data["model"] = {**data["model"], "id": str(model), "max_model_len": 40}
    path = write(tmp_path / "study.yaml", data)
    assert main(["validate", str(path)]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    counts = {
        f"speed_bench:{r['question_id']}": len(
            Tokenizer.from_file(str(model / "tokenizer.json"))
            .encode(r["turns"][0], add_special_tokens=False)
            .ids
        )
        + 8
        + 16
        + 8
        for r in ROWS
    }
    over = [k for k, v in counts.items() if v > 40]
    assert over, counts
    assert (
        f"tasks[0].max_tokens: task speed: {len(over)} of 8 items need more than the"
        " context, 40 tokens (model.max_model_len), with max_tokens 8 (counted with"
        " tokenizer.json" in err
    )
    assert err.endswith(": " + ", ".join(f"{k} ({counts[k]})" for k in over))
    # Enough room: validate passes and says what it counted.
    data["model"]["max_model_len"] = 4096
    assert main(["validate", str(write(tmp_path / "fits.yaml", data))]) == 0
    assert "  task speed: at most" in capsys.readouterr().out
    # No tokenizer here: an estimate, and it says it is one.
    data["model"] = {**data["model"], "id": "org/not-fetched", "max_model_len": 40}
    assert main(["validate", str(write(tmp_path / "estimate.yaml", data))]) == 2
    assert "ESTIMATED at 4 characters a token" in capsys.readouterr().err


def test_a_task_read_from_the_hub_at_run_time_is_not_fetched_by_validate(monkeypatch):
    from harness.prereg import load_study
    from harness.prereg.schema import Study
    from harness.workloads import fit

    data = load_study(Path(__file__).parents[2] / "prereg.yaml").model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    data["tasks"][1]["source"] = {
        "dataset": "openai/gsm8k",
        "config": "main",
        "revision": "e53f048856ff4f594e959d75785d2c2d37b678ee",
    }
    lines, problems = fit.context_report(Study.model_validate(data), skip=set())
    assert "  task gsm8k: not checked (read from the hub when the run starts)" in lines
    assert problems == [] and any(ln.startswith("  task chat: at most") for ln in lines)
