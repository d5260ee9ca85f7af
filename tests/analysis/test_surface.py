"""The round-cost surface's rules, without a run: the stage's arms and cells from the
registration (never stored in `arms`, so study.json read back gains none), what the
registration refuses, the break-even acceptance length from the speedup's lower bounds,
and a drafter's place on it (issue 32, parts 2 and 3)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.frame import columns
from harness.analysis.k_schedule import (
    predict,
    proposed_schedule,
    schedule_ranges,
    surface_at,
)
from harness.analysis.rows import PlacementRow, ProposedScheduleRow
from harness.analysis.surface import (
    break_even,
    break_even_table,
    drafter_placements,
    loss_of_gain,
)
from harness.engines import get_engine_kind
from harness.engines.launch.scripted import ScriptedKind
from harness.errors import InputError
from harness.plan import plan_cells
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg import load_study
from harness.prereg.schema import Study
from harness.rundir.verdict import Placement
from harness.rundir.verdict import ScheduleRow as VerdictScheduleRow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scripted-surface.yaml"


def test_the_stage_expands_into_control_arms_and_cells_after_the_registered_stages():
    study = load_study(EXAMPLE)
    arms = surface_arms(study)
    assert [a.name for a in arms] == [
        "surface-k2-L1.25",
        "surface-k2-L2.25",
        "surface-k3-L1.25",
        "surface-k3-L2.25",
        "surface-k3-L3.25",
    ]  # 3.25 > k + 1 at 2
    assert all(a.is_control and a.baseline == "base" for a in arms)
    assert arms[1].drafter is not None
    assert arms[1].drafter.synthetic is not None
    assert arms[1].drafter.synthetic.acceptance_length == 2.25
    assert arms[1].drafter.num_draft_tokens == 2
    assert study.arm("surface-k3-L3.25") == arms[-1]
    cells = plan_cells(study)
    surface = [c for c in cells if c.stage == 4]
    assert len(surface) == 10 and cells[-12:-2] == surface  # after every registered stage
    # verify_schedule: stage 5 last, the drafter arm per task at every registered level.
    assert [(c.id, c.stage) for c in cells[-2:]] == [
        ("surface-schedule-chat/chat/speed/c002", 5),
        ("surface-schedule-chat/chat/speed/c010", 5),
    ]
    (schedule_arm,) = schedule_arms(study)
    assert schedule_arm.baseline == "base" and not schedule_arm.is_control
    assert schedule_arm.drafter is not None
    assert schedule_arm.drafter.k_schedule is None  # set once stage 4 proposes one
    ranges = [(1, 2, 3), (3, None, 2)]
    (set_arm,) = schedule_arms(study, {"surface-schedule-chat": ranges})
    assert set_arm.drafter is not None
    assert set_arm.drafter.k_schedule == ranges
    assert ScriptedKind.spec(set_arm).k_schedule == ranges
    assert {c.concurrency for c in surface} == {2, 10} and {c.kind for c in surface} == {"speed"}
    # study.json holds the registration; read back, it makes the same arms and no more.
    again = Study.model_validate(study.model_dump(mode="json", by_alias=True))
    assert len(again.arms) == 3 and [a.name for a in surface_arms(again)] == [a.name for a in arms]


@pytest.mark.parametrize(
    "change, said",
    [
        ({"drafter": "base"}, "is not a drafter arm"),
        ({"drafter": "nobody"}, "no arm named 'nobody'"),
        ({"concurrency": [2, 4]}, "concurrencies [4] are not closed-loop levels"),
        ({"k": [1], "acceptance_length": [2.5, 3.5]}, "k=1: every acceptance_length is above"),
        ({"tasks": ["mmlu"]}, "no task named 'mmlu' with the speed use"),
        ({"k": [2, 2]}, "values repeat"),
    ],
)
def test_a_surface_the_registration_cannot_run_is_refused(tmp_path, change, said):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["surface"] = {**data["surface"], **change}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_study(path)
    assert said in str(err.value), err.value


@pytest.mark.parametrize(
    "ranges, said",
    [
        ([[2, None, 3]], "range 1 starts at batch 2, expected 1"),
        ([[1, 4, 3], [6, None, 2]], "range 2 starts at batch 6, expected 5"),
        ([[1, None, 3], [5, None, 2]], "range 1 is open (last null) but is not the last range"),
        ([[1, 4, 3]], "the last range must be open"),
        ([[1, 4, 4], [5, None, 2]], "range 1 drafts k=4, above num_draft_tokens 3"),
        ([[1, 4, 3], [5, 3, 2], [6, None, 1]], "range 2 ends at 3, before its first batch 5"),
    ],
)
def test_a_k_schedule_that_leaves_a_batch_size_without_a_k_is_refused(tmp_path, ranges, said):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["arms"][1]["drafter"]["k_schedule"] = ranges
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_study(path)
    assert "arms[1].drafter: k_schedule: " in str(err.value) and said in str(err.value), err.value


def test_a_k_schedule_is_run_by_vllm_and_the_scripted_engine_and_refused_elsewhere(tmp_path):
    from harness.engines.launch.vllm_engine import speculative_config

    data = yaml.safe_load(EXAMPLE.read_text())
    data["arms"][1]["drafter"]["k_schedule"] = [[1, 8, 3], [9, 31, 1], [32, None, 0]]
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    arm = load_study(path).arm("drafter")
    # vLLM 0.32 takes inclusive [start, end, k] with a positive end; it clips the open
    # one to max_num_seqs; num_speculative_tokens stays the largest k.
    config = speculative_config(arm.model_copy(update={"engine": "vllm", "scripted": None}))
    assert config is not None
    assert config["num_speculative_tokens"] == 3
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 8, 3],
        [9, 31, 1],
        [32, 65536, 0],
    ]
    spec = ScriptedKind.spec(arm)
    assert [spec.k_at(b) for b in (1, 8, 9, 31, 32, 500)] == [3, 3, 1, 1, 0, 0]
    for engine, said in (
        ("sglang", "engine 'sglang' has no per-batch-size k schedule"),
        ("vllm-cpu", "not verified vLLM 0.32's per-batch-size k schedule"),
    ):
        problem = get_engine_kind(engine).k_schedule_problem(arm)
        assert problem is not None and said in problem, engine
    # The surface's verification needs a drafter engine that can run one.
    cpu = yaml.safe_load((ROOT / "examples" / "cpu.yaml").read_text())
    cpu_arm = next(a for a in cpu["arms"] if a.get("drafter"))
    cpu_arm["drafter"]["k_schedule"] = [[1, None, 1]]
    path.write_text(yaml.safe_dump(cpu))
    with pytest.raises(InputError, match="drafter.k_schedule: specbench has not verified"):
        load_study(path)


def test_a_level_far_below_its_prediction_is_a_collapse():
    from harness.analysis.k_schedule import _verified_label, collapsed, k_in

    assert collapsed(0.79, 1.0, 0.8) and not collapsed(0.81, 1.0, 0.8)
    assert collapsed(1.4, 1.8, 0.8) and not collapsed(1.5, 1.8, 0.8)  # 0.8 x 1.8 = 1.44
    assert not collapsed(None, 1.8, 0.8) and not collapsed(0.5, None, 0.8)
    assert [k_in([(1, 8, 3), (9, None, 0)], b) for b in (1, 8, 9, 64)] == [3, 3, 0, 0]
    row = {
        "k": 0,
        "concurrency": 32,
        "threshold": True,
        "predicted_speedup": 1.0,
        "status": "ok",
        "speedup": 0.62,
        "ci_lower": 0.6,
        "ci_upper": 0.65,
        "collapse": True,
    }
    assert _verified_label(row, 0.8) == (
        "k=0 at 32 users (a threshold: k changes here): predicted x1.00, measured x0.62"
        " [0.60, 0.65]; COLLAPSE: below 0.8 x the prediction (the failure vllm#49548 reports"
        " at a schedule's threshold)"
    )


def test_the_break_even_length_is_interpolated_on_the_lower_bound():
    assert break_even([1.5, 2.5, 3.5], [0.6, 0.9, 1.2]).length == pytest.approx(2.5 + 1 / 3)
    assert break_even([1.5, 2.5], [1.1, 1.5]).status == "below_measured"
    assert break_even([1.5, 2.5], [0.5, 0.9]).status == "above_measured"
    assert break_even([1.5, 2.5], [0.5, None]).status == "incomplete"


def surface_rows(k: int, c: int, lowers: list[float], cost: float) -> list[dict]:
    """A surface measured in one session: each L's round cost `cost`, +-2 % within it."""
    return [
        {
            "task": "chat",
            "k": k,
            "concurrency": c,
            "acceptance_length": length,
            "status": "ok",
            "ci_lower": lower,
            "round_cost_ratio": cost,
            "round_cost_ratio_ci_lower": cost * 0.98,
            "round_cost_ratio_ci_upper": cost * 1.02,
            "round_cost_ratio_sessions": json.dumps([cost]),
        }
        for length, lower in zip([1.5, 2.5, 3.5], lowers, strict=True)
    ]


def test_each_real_drafter_is_placed_and_its_loss_of_gain_named():
    study = load_study(EXAMPLE)
    breaks = break_even_table(
        pd.DataFrame(
            surface_rows(3, 2, [1.4, 2.4, 3.4], 1.0)
            + surface_rows(3, 10, [0.7, 1.2, 1.7], 2.0)
            + surface_rows(2, 2, [1.4, 2.4, 3.4], 1.0)
            + surface_rows(2, 10, [0.2, 0.4, 0.6], 4.0)
        )
    )
    at = breaks.set_index(["k", "concurrency"])
    assert at.loc[(3, 10), "break_even_length"] == pytest.approx(2.1)
    assert at.loc[(3, 10), "round_cost_ratio"] == pytest.approx(2.0)
    assert at.loc[(2, 10), "label"] == "no round is cheap enough here (not even at L 3.5)"
    speedups = pd.DataFrame(
        [
            {"arm": "drafter", "task": "chat", "concurrency": 2, "tokens_per_round": 3.1},
            {"arm": "drafter", "task": "chat", "concurrency": 10, "tokens_per_round": 2.6},
            {"arm": "weak", "task": "chat", "concurrency": 2, "tokens_per_round": 1.36},
            {"arm": "weak", "task": "chat", "concurrency": 10, "tokens_per_round": 1.36},
        ]
    )
    placed = {(p.arm, p.concurrency): p for p in drafter_placements(study, speedups, breaks)}
    assert placed[("drafter", 2)].label == "pays: every L measured pays, from 1.5 (reaches 3.10)"
    assert placed[("drafter", 2)].needs_below == 1.5
    assert placed[("drafter", 10)].label == "pays: needs 2.10, reaches 2.60"
    assert placed[("weak", 2)].status == "unknown"  # 1.36 is below every L measured
    assert placed[("weak", 10)].status == "does_not_pay"
    # From 2 to 10 users the drafter needs 0.6 more (at most 1.5 -> 2.1) and reaches 0.5
    # less: the round's cost took more of its gain than its acceptance did.
    (line,) = loss_of_gain(list(placed.values()))  # the weak one is not placed at 2 users
    assert line == (
        "drafter / chat, c=2 -> c=10: needs at most 1.50 -> 2.10, reaches 3.10"
        " -> 2.60: the gain falls with load for the round's cost"
    )
    placed[("drafter", 10)] = replace(placed[("drafter", 10)], reaches=2.2)
    (line,) = loss_of_gain(list(placed.values()))
    assert line.endswith("reaches 3.10 -> 2.20: the gain falls with load for its acceptance")


def test_a_k_schedule_is_proposed_per_level_and_written_as_the_engines_setting():
    study = load_study(EXAMPLE)
    surface = pd.DataFrame(
        surface_rows(2, 2, [1.2, 2.2, 3.2], 1.0)
        + surface_rows(3, 2, [1.2, 2.2, 3.2], 1.0)
        + surface_rows(2, 10, [0.8, 1.5, 2.2], 1.4)
        + surface_rows(3, 10, [0.6, 1.2, 1.7], 1.9)
    )
    # The drafter's own (k = 3) per-position acceptance from the engine's counters.
    cells = pd.DataFrame(
        [
            {
                "arm": "drafter",
                "task": "chat",
                "kind": "speed",
                "concurrency": c,
                "rerun_of": None,
                "accept_rate_pos1": 0.9,
                "accept_rate_pos2": 0.7,
                "accept_rate_pos3": 0.5,
            }
            for c in (2, 10)
        ]
    )
    speedups = pd.DataFrame(
        [{"arm": "drafter", "task": "chat", "concurrency": 10, "status": "ok", "speedup": 1.65}]
    )
    rows = {r.concurrency: r for r in proposed_schedule(study, cells, surface, speedups)}
    # 2 users: every round one plain step, so the most drafts: k = 3, 3.1 tokens.
    assert rows[2].k == 3 and rows[2].predicted_speedup == pytest.approx(3.1)
    # 10 users: k = 2 gives 2.6 / 1.4 = 1.86, k = 3 gives 3.1 / 1.9 = 1.63.
    assert rows[10].k == 2 and rows[10].predicted_speedup == pytest.approx(2.6 / 1.4)
    assert rows[10].candidates == {"0": 1.0, "2": round(2.6 / 1.4, 4), "3": round(3.1 / 1.9, 4)}
    assert rows[10].own_k_measured == 1.65 and rows[2].own_k_measured is None
    assert rows[10].label == (
        "k=2: predicted x1.86 (one session: session variation not in the interval); at its"
        " own k=3: predicted x1.63, measured x1.65"
    )
    # One session: the cost's within-session interval alone divides the tokens.
    assert (rows[10].ci_lower, rows[10].ci_upper) == pytest.approx(
        (2.6 / (1.4 * 1.02), 2.6 / (1.4 * 0.98))
    )
    ranges = schedule_ranges(list(rows.values()), "chat")
    assert ranges == [(1, 2, 3), (3, None, 2)]
    vllm = get_engine_kind("vllm").k_schedule_setting(study.arm("drafter"), ranges)
    assert vllm.endswith(
        '"num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, <max_num_seqs>,'
        " 2]] (ignored with data parallelism)"
    )
    # No k pays: do not draft there; neighbours with one k are one range.
    level = replace(rows[2], k=0, predicted_speedup=1.0, ci_lower=1.0, ci_upper=1.0)
    assert schedule_ranges(
        [
            replace(level, concurrency=4),
            replace(level, concurrency=16),
            replace(rows[2], concurrency=1),
            replace(level, concurrency=32, k=None),  # not measured there: not in a range
            replace(level, task="code", concurrency=2, k=2),
        ],
        "chat",
    ) == [(1, 1, 3), (2, None, 0)]


def test_a_surface_on_the_cpu_build_is_refused_with_its_reason(tmp_path):
    """vLLM's CPU build has no synthetic acceptance: the demo's pair cannot carry one."""
    data = yaml.safe_load((ROOT / "examples" / "cpu.yaml").read_text())
    data["surface"] = {
        "drafter": "cpu-draft",
        "k": [2],
        "acceptance_length": [1.5, 2.5],
        "concurrency": [1, 2],
    }
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        InputError, match="surface.drafter: vLLM 0.32's CPU build has no synthetic acceptance"
    ):
        load_study(path)


def test_the_schedules_interval_is_a_t_over_sessions_of_tokens_over_cost():
    """Three sessions: session s's tokens a round (the drafter's own acceptance in its
    session-s cell) over session s's round cost (the geometric mean over L of the surface's
    session-s cells over the baseline's session s); a t interval on their logs, df 2."""
    study = load_study(EXAMPLE)
    rates = {1: [0.90, 0.70, 0.5], 2: [0.85, 0.65, 0.5], 3: [0.95, 0.75, 0.5]}
    cells = pd.DataFrame(
        [
            {
                "arm": "drafter",
                "task": "chat",
                "kind": "speed",
                "concurrency": 10,
                "rerun_of": None,
                "session": s,
                **{f"accept_rate_pos{i}": r for i, r in enumerate(rates[s], 1)},
            }
            for s in (3, 1, 2)
        ]
    )  # in any order: read in session order
    costs = {
        (2, 1.25): [1.40, 1.45, 1.35],
        (2, 2.25): [1.42, 1.38, 1.40],
        (3, 1.25): [2.0, 2.1, 1.9],
        (3, 2.25): [2.0, 1.95, 2.05],
        (3, 3.25): [1.9, 2.0, 2.1],
    }
    surface = pd.DataFrame(
        [
            {
                "task": "chat",
                "k": k,
                "concurrency": 10,
                "acceptance_length": length,
                "status": "ok",
                "round_cost_ratio_sessions": json.dumps(by_session),
                "round_cost_ratio_ci_lower": 1.0,
                "round_cost_ratio_ci_upper": 3.0,
            }
            for (k, length), by_session in costs.items()
        ]
    )
    (row,) = [
        r
        for r in proposed_schedule(
            study,
            cells,
            surface,
            pd.DataFrame(columns=["arm", "task", "concurrency", "status", "speedup"]),
        )
        if r.concurrency == 10
    ]
    # By hand: E_s(2) = 1 + p1 + p2 = 2.6, 2.5, 2.7; C_s = sqrt(cost at L 1.25 x at 2.25).
    logs = [
        math.log(e) - (math.log(a) + math.log(b)) / 2
        for e, a, b in zip([2.6, 2.5, 2.7], costs[(2, 1.25)], costs[(2, 2.25)], strict=True)
    ]
    half = 4.302652729749464 * statistics.stdev(logs) / math.sqrt(3)  # t_{0.975, 2}
    mean = statistics.mean(logs)
    assert row.k == 2 and row.predicted_speedup == pytest.approx(math.exp(mean))
    assert (row.ci_lower, row.ci_upper) == pytest.approx(
        (math.exp(mean - half), math.exp(mean + half))
    )
    assert row.ci_lower is not None and row.ci_upper is not None
    assert (round(row.ci_lower, 3), round(row.ci_upper, 3)) == (1.627, 2.118)
    assert "session variation not in" not in row.label
    # k = 3: E_s(3) = 3.1, 3.0, 3.2 over the mean log cost of three L.
    k3 = [
        math.log(e) - statistics.mean(math.log(costs[(3, L)][s]) for L in (1.25, 2.25, 3.25))
        for s, e in enumerate([3.1, 3.0, 3.2])
    ]
    assert row.candidates["3"] == round(math.exp(statistics.mean(k3)), 4)
    # Sessions that do not pair (the surface measured once): the within-session rule.
    at = surface_at(surface)[("chat", 2, 10)]
    one = predict([2.6, 2.5, 2.7], [[1.4], [1.42]], at, 0.95)
    assert (
        one is not None
        and one.interval_method == "within"
        and one.ci_lower == pytest.approx(2.6 / 3.0)
    )


def test_the_surface_and_the_schedule_are_measured_in_the_baselines_sessions():
    data = yaml.safe_load(EXAMPLE.read_text())
    data["recording"] |= {"sessions": 3, "sessions_for": "pass_cells"}  # pass level c=2
    study = Study.model_validate(data)
    cells = plan_cells(study)
    surface = [c for c in cells if c.stage == 4]
    # c=2 repeats (3 sessions, each a fresh start of every arm, their order alternating),
    # c=10 is measured once, with the first session: 5 arms x (3 + 1) cells.
    assert len(surface) == 20 and {c.session for c in surface if c.concurrency == 10} == {None}
    assert [c.id for c in surface if c.arm == "surface-k2-L1.25"] == [
        "surface-k2-L1.25/chat/speed/c002",
        "surface-k2-L1.25/chat/speed/c010",
        "surface-k2-L1.25/chat/speed/c002/s2",
        "surface-k2-L1.25/chat/speed/c002/s3",
    ]
    assert [c.arm for c in surface if c.session == 2][0] == "surface-k3-L3.25"  # reversed
    from harness.plan import engine_blocks

    assert len(engine_blocks(surface)) == 15  # 5 arms x 3 sessions
    verify = [c for c in cells if c.stage == 5]
    assert [(c.concurrency, c.session) for c in verify] == [(2, 1), (10, None), (2, 2), (2, 3)]
    assert len(engine_blocks(verify)) == 3
    # Measured once (sessions: 1): one cell each, as before.
    assert len([c for c in plan_cells(load_study(EXAMPLE)) if c.stage == 4]) == 10


def test_the_surfaces_rows_are_the_verdicts():
    """A placement and a proposed level are written into verdict.json as they are
    (surface_summary: dataclasses.asdict): each row model holds the verdict model's keys."""
    assert set(columns(PlacementRow)) == set(Placement.model_fields)
    assert set(columns(ProposedScheduleRow)) == set(VerdictScheduleRow.model_fields)
