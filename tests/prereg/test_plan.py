"""`specbench plan`: every cell in run order, low concurrency first, with an estimate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.plan import cell_seconds, engine_blocks, estimate, expected_seconds, plan_cells
from harness.prereg import load_study
from harness.prereg.operating import stored_costs

ROOT = Path(__file__).resolve().parents[2]


def test_registered_plan_has_every_cell_low_concurrency_first():
    study = load_study(ROOT / "prereg.yaml")
    cells = plan_cells(study)
    speed = [c for c in cells if c.kind == "speed" and c.session in (None, 1)]
    arms = {a.name for a in study.arms}
    speed_tasks = {t.name for t in study.tasks if "speed" in t.uses}
    assert len(arms) == 5 and speed_tasks == {"chat", "gsm8k", "humaneval"}
    assert {(c.arm, c.task, c.concurrency) for c in speed} == {
        (a, t, c) for a in arms for t in speed_tasks for c in (1, 2, 4, 8, 16, 32, 64)
    }
    assert len(speed) == 5 * 3 * 7
    identity = [c for c in cells if c.kind == "identity"]
    accuracy = [c for c in cells if c.kind == "accuracy"]
    assert {(c.arm, c.task) for c in identity} == {(a, t) for a in arms for t in speed_tasks}
    assert {(c.arm, c.task) for c in accuracy} == {
        (a, t) for a in arms for t in ("gsm8k", "humaneval", "mmlu")
    }
    assert next(c for c in accuracy if c.task == "mmlu").requests == 1000
    assert next(c for c in accuracy if c.task == "gsm8k").requests == 1319
    # Every arm's concurrency 1, 2, 4 cells come before any higher level.
    levels_at = [
        (i, c.concurrency)
        for i, c in enumerate(cells)
        if c.kind == "speed" and c.concurrency is not None
    ]
    last_low = max(i for i, c in levels_at if c <= 4)
    first_high = min(i for i, c in levels_at if c > 4)
    assert last_low < first_high
    # Within an arm, levels never go down; open-loop cells come last.
    for arm in arms:
        levels = [c.concurrency or 0 for c in speed if c.arm == arm]  # a speed cell has one
        assert levels == sorted(levels)
    assert all(c.kind == "open" for c in cells[-25:])
    # Request counts follow max(min, per_user x c).
    c64 = next(c for c in speed if c.concurrency == 64)
    assert c64.requests == 512 and c64.warmup == 64
    assert len({c.id for c in cells}) == len(cells)
    # Every closed-loop speed cell is measured in 3 sessions (the registration:
    # sessions_for speed_cells, so the knee's curve has one kind of interval).
    again = [c for c in cells if c.session is not None]
    assert {(c.arm, c.task, c.concurrency, c.session) for c in again} == {
        (a, t, c, s)
        for a in arms
        for t in speed_tasks
        for c in (1, 2, 4, 8, 16, 32, 64)
        for s in (1, 2, 3)
    }


def test_estimate_follows_the_roofline():
    study = load_study(ROOT / "prereg.yaml")
    cells = plan_cells(study)
    est = estimate(study, cells)
    # 8.19e9 B of FP8 weights at 2000 GB/s: 4.1 ms per decode step at batch 1.
    assert any("4.1 ms per step" in a for a in est.assumptions)
    base_c1 = next(c for c in cells if c.id == "vllm-base/chat/speed/c001")
    from harness.plan import cell_seconds

    # (64 measured + 1 warm-up) requests x 512 tokens, one token per 4.095 ms step.
    assert abs(cell_seconds(study, base_c1) - 65 * 512 * 8.19e9 / 2000e9) < 1e-6
    eagle_c1 = next(c for c in cells if c.id == "vllm-eagle3/chat/speed/c001")
    # At one user a round costs one step: the speedup is the arm's assumed acceptance length
    # (2.26 at k = 3: vLLM's regression test for this head, arms/vllm-eagle3.yaml).
    assert abs(cell_seconds(study, base_c1) / cell_seconds(study, eagle_c1) - 2.26) < 1e-9
    assert est.seconds > 3600


def test_plan_command_prints_cells_and_estimate(capsys):
    assert main(["plan", str(ROOT / "prereg.yaml")]) == 0
    out = capsys.readouterr().out
    # 105 speed cells, each twice more (3 sessions each: sessions_for speed_cells).
    assert "370 cells" in out and "315 speed" in out
    assert re.search(r"estimated GPU time: [\d.]+ h", out)
    assert "105 cells (speed_cells) are measured in 3 sessions each" in " ".join(out.split())
    assert "an estimate, not a measurement" in out


def _study(**recording):
    import yaml

    from harness.prereg.schema import Study

    data = yaml.safe_load((ROOT / "examples" / "scripted-sessions.yaml").read_text())
    data["arms"].append({**data["arms"][1], "name": "drafter2"})  # two drafters on one base
    data["recording"].update(recording)
    return Study.model_validate(data)


def test_sessions_interleave_the_arms_and_each_is_a_fresh_engine_start():
    from harness.plan import engine_blocks

    cells = plan_cells(_study(sessions=3), sizes={"chat": 8})
    order = [(c.arm, c.session) for c in cells if c.concurrency == 1]
    assert order == [
        ("base", 1),
        ("drafter", 1),
        ("drafter2", 1),
        ("drafter2", 2),
        ("drafter", 2),
        ("base", 2),
        ("base", 3),
        ("drafter", 3),
        ("drafter2", 3),
    ]
    assert [c.id for c in cells if c.arm == "base" and c.concurrency == 1] == [
        "base/chat/speed/c001",
        "base/chat/speed/c001/s2",
        "base/chat/speed/c001/s3",
    ]
    # One start per arm per session, drafter2 twice in a row included: 9, not 7.
    blocks = engine_blocks(cells)
    assert [(b[0].arm, b[0].session) for b in blocks] == [(a, s) for a, s in order]
    study = _study(sessions=3, smoke=False)
    once = _study(sessions=1, smoke=False)
    extra = (
        estimate(study, plan_cells(study, {"chat": 8})).seconds
        - estimate(once, plan_cells(once, {"chat": 8})).seconds
    )
    # 6 more engine starts at 180 s, and twice more every cell (12 cells of ~0.2 s each).
    per_cell = sum(cell_seconds(once, c) for c in plan_cells(once, {"chat": 8}))
    assert extra == pytest.approx(6 * 180 + 2 * per_cell)


def test_sessions_for_speed_cells_repeats_the_stage_2_levels_too():
    data = _study(sessions=2, sessions_for="speed_cells").model_dump(by_alias=True)
    data["loads"]["closed_loop"]["concurrency"] = [1, 2, 4]
    data["bars"]["stop"]["concurrencies"] = [1, 2]
    from harness.prereg.schema import Study

    cells = plan_cells(Study.model_validate(data), sizes={"chat": 8})
    c4 = [(c.stage, c.arm, c.session) for c in cells if c.concurrency == 4]
    # Stage 1 ended on base (session 2 ran the arms backwards); stage 2 begins with it.
    assert c4 == [
        (2, "base", 1),
        (2, "drafter", 1),
        (2, "drafter2", 1),
        (2, "drafter2", 2),
        (2, "drafter", 2),
        (2, "base", 2),
    ]
    pass_only = plan_cells(_study(sessions=2), sizes={"chat": 8})
    assert all(c.session is not None for c in pass_only)  # c = 1, 2 are the pass levels


def test_tables_stay_whole_in_a_narrow_pipe_and_come_as_csv_or_json(capsys, monkeypatch):
    import csv
    import io
    import json

    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal; capsys is a pipe, not a tty
    assert main(["validate", str(ROOT / "prereg.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    # Each arm is one line with every cell whole, however narrow the terminal.
    row = next(line for line in out if line.startswith("vllm-eagle3 "))
    assert row.split() == [
        "vllm-eagle3",
        "vllm",
        "eagle3",
        "RedHatAI/Qwen3-8B-speculator.eagle3",
        "3",
        "vllm-base",
        "launch",
    ]
    assert any(
        line.startswith("bars: pass speedup >= 2 at c in [1, 2, 4]")
        and line.endswith("(agree within 10% or the sessions' spread)")
        for line in out
    )
    assert main(["plan", str(ROOT / "prereg.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    first = next(line for line in out if line.split()[:1] == ["1"])
    assert first.split() == [
        "1",
        "1",
        "vllm-base",
        "chat",
        "identity",
        "closed",
        "c=1",
        "32",
        "0",
    ]  # an identity cell repeats in no session: its column is empty
    # For scripts: CSV with one row per cell, JSON with the estimate beside the cells.
    assert main(["plan", str(ROOT / "prereg.yaml"), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 370 and rows[0] == {
        "#": "1",
        "stage": "1",
        "session": "",
        "arm": "vllm-base",
        "task": "chat",
        "cell": "identity",
        "load": "closed c=1",
        "requests": "32",
        "warmup": "0",
    }
    assert main(["plan", str(ROOT / "prereg.yaml"), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["cells"]) == 370 and plan["estimated_gpu_seconds"] > 3600
    assert main(["validate", str(ROOT / "prereg.yaml"), "--format", "json"]) == 0
    study = json.loads(capsys.readouterr().out)
    assert [a["arm"] for a in study["arms"]] == [
        "vllm-base",
        "sglang-dflash",
        "sglang-base",
        "vllm-eagle3",
        "vllm-ngram",
    ]
    assert re.fullmatch(r"[0-9a-f]{64}", study["seal"])


def test_expected_gpu_time_counts_each_cell_and_start_at_its_chance():
    study = load_study(ROOT / "examples" / "scripted-sequential.yaml")
    cells = plan_cells(study)
    most = estimate(study, cells).seconds
    assert expected_seconds(study, cells, most, {}, {}) == most
    fourth = [c for c in cells if c.session == 4 and c.arm == "steady"]
    blocks = [b for b in engine_blocks(cells) if b[0] in fourth]
    assert len(fourth) == 2 and len(blocks) == 1
    gone = expected_seconds(study, cells, most, {c.id: 0.0 for c in fourth}, {blocks[0][0].id: 0.0})
    assert gone == pytest.approx(
        most - sum(cell_seconds(study, c) for c in fourth) - study.plan_estimate.engine_start_s
    )
    half = expected_seconds(study, cells, most, {c.id: 0.5 for c in fourth}, {blocks[0][0].id: 0.5})
    assert half == pytest.approx((most + gone) / 2)


def test_plan_prints_both_designs_expected_and_most_gpu_time(capsys):
    """The expected hours at the registered assumed acceptance come from the chances
    benchmarks/sequential_design.py --write stored for prereg.yaml; recomputed here they
    must give what the benchmark averaged over its simulated runs."""
    assert main(["plan", str(ROOT / "prereg.yaml"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    d = out["designs"]
    fixed, seq = d["designs"]["fixed"], d["designs"]["group_sequential"]
    assert d["registered"] == "fixed"
    assert fixed["max_s"] == seq["max_s"] == out["estimated_gpu_seconds"]
    assert [(x["sessions"], round(x["level"], 4), round(x["t"], 1)) for x in seq["looks"]] == [
        (2, 0.9836, 38.9),
        (3, 0.9562, 4.6),
    ]
    record = stored_costs(load_study(ROOT / "prereg.yaml"))
    assert record is not None, f"no stored chances for prereg.yaml: `{d['measure']}`"
    for name, entry in d["designs"].items():
        assert entry["expected_s"] == pytest.approx(record["designs"][name]["expected_s"], rel=2e-3)
    assert seq["expected_s"] <= fixed["expected_s"] <= fixed["max_s"]
    assert main(["plan", str(ROOT / "examples" / "cpu.yaml")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "fixed (registered): at most" in text
    assert (
        "group_sequential: not possible here: a group-sequential design needs at least"
        " two looks" in text
    )
