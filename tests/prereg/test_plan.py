"""`specbench plan`: every cell in run order, low concurrency first, with an estimate."""

from __future__ import annotations

import re
from pathlib import Path

from harness.cli import main
from harness.plan import estimate, plan_cells
from harness.prereg import load_study

ROOT = Path(__file__).resolve().parents[2]


def test_registered_plan_has_every_cell_low_concurrency_first():
    study = load_study(ROOT / "prereg.yaml")
    cells = plan_cells(study)
    speed = [c for c in cells if c.kind == "speed"]
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
    last_low = max(i for i, c in enumerate(cells) if c.kind == "speed" and c.concurrency <= 4)
    first_high = min(i for i, c in enumerate(cells) if c.kind == "speed" and c.concurrency > 4)
    assert last_low < first_high
    # Within an arm, levels never go down; open-loop cells come last.
    for arm in arms:
        levels = [c.concurrency for c in speed if c.arm == arm]
        assert levels == sorted(levels)
    assert all(c.kind == "open" for c in cells[-25:])
    # Request counts follow max(min, per_user x c).
    c64 = next(c for c in speed if c.concurrency == 64)
    assert c64.requests == 512 and c64.warmup == 64
    assert len({c.id for c in cells}) == len(cells)


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
    assert abs(cell_seconds(study, base_c1) / cell_seconds(study, eagle_c1) - 2.9) < 1e-9
    assert est.seconds > 3600


def test_plan_command_prints_cells_and_estimate(capsys):
    assert main(["plan", str(ROOT / "prereg.yaml")]) == 0
    out = capsys.readouterr().out
    assert "160 cells" in out and "105 speed" in out
    assert re.search(r"estimated GPU time: [\d.]+ h", out)
    assert "an estimate, not a measurement" in out
