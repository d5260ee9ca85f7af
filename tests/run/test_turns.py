"""Multi-turn items as sessions (issue 33 part 2): with `turns: all` a chat task sends
each MT-Bench question as one session of its two turns; by default, its first turn only.
The driver's side (each later turn sent after the answer before it, carrying it) is
tests/measure/test_driver.py; a whole study with a multi-turn item is
tests/run/test_speed_bench_study.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import InputError
from harness.plan import plan_cells
from harness.prereg import load_study
from harness.prereg.schema import Study
from harness.run.cell_requests import cell_request_specs, task_items

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scripted-surface.yaml"  # one chat task, speed only


def study_with(tmp_path: Path, **task) -> Study:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["tasks"][0].update(task)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study(path)


def test_turns_all_sends_each_mt_bench_question_as_a_session_of_its_turns(tmp_path):
    first = study_with(tmp_path)
    cell = next(c for c in plan_cells(first) if c.kind == "speed")
    assert all(spec.later_turns == () for spec in cell_request_specs(first, cell))
    every = study_with(tmp_path, turns="all")
    specs = cell_request_specs(every, cell)
    items = task_items(every.task("chat"))
    assert len(specs) == len(items) == 20
    # MT-Bench: every question has a second turn, sent as the session's turn 2.
    assert all(len(spec.later_turns) == 1 and spec.later_turns[0].strip() for spec in specs)
    assert [s.later_turns for s in specs] == [i.later_turns for i in items]
    assert [s.messages for s in specs] == [i.messages for i in items]


def test_turns_all_on_a_single_turn_task_is_refused(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["tasks"].append(
        {"name": "math", "kind": "gsm8k", "uses": ["speed"], "max_tokens": 32, "turns": "all"}
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"tasks\[1\]: turns: all is for multi-turn tasks"):
        load_study(path)
