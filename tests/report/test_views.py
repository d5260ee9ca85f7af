"""Each section's view (harness/report/views/) read from a run folder whose figures are
known (tests/analysis/runfolder.py): a view that computes a figure wrongly fails here,
whichever renderer would have drawn it."""

from __future__ import annotations

import pytest

from harness.analysis import analyse, evaluate
from harness.analysis.tables import Analysis
from harness.report.layout import TableLine
from harness.rundir.verdict import Verdict
from tests.analysis.runfolder import PASSING_SPEEDUPS, RunBuilder


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, Verdict]:
    a = analyse(RunBuilder(tmp_path_factory.mktemp("full")).full_passing_run().root)
    return a, evaluate(a)


def table_rows(lines: list[str]) -> list[list[str]]:
    tables = [line.table for line in lines if isinstance(line, TableLine)]
    assert tables, "no table among the lines"
    return tables[0].rows


def test_the_decomposition_view_names_what_moved_each_speedup(full_run):
    from harness.report.views.decomposition import build_decomposition_view

    a, v = full_run
    view = build_decomposition_view(a, v)
    assert [t.title for t in view.tasks] == [
        "Why this speedup: task chat",
        "Why this speedup: task gsm8k",
    ]
    chat = view.tasks[0]
    assert chat.panel.task == "chat"
    assert chat.lines[0].startswith("roofline inputs: registered 1000 GB/s, 100 TFLOP/s")
    rows = {(r[0], int(r[1])): r for r in table_rows(chat.lines)}
    for arm, by_level in PASSING_SPEEDUPS.items():
        assert [float(rows[arm, c][2]) for c in by_level] == list(by_level.values())
    # ngram's round costs 0.4, 0.417, 0.455 of a plain step at 1, 2, 4 users (tokens per
    # round steady): 4 % moved is within the 5 % tolerance, 14 % is the round's cost.
    assert [rows["vllm-ngram", c][11] for c in (1, 2, 4)] == [
        "-",
        "steady (within 5%)",
        "round cost (100% of it)",
    ]
    assert any(
        line.startswith("measured against predicted: mean -25.9%, range -68.0% to +20.0%")
        for line in chat.lines
    )


@pytest.fixture(scope="module")
def half_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, Verdict]:
    """Task gsm8k has no speed cell; every chat speed cell keeps 2.5 tokens a round."""
    from tests.report.test_html_report import half_empty_run

    a = analyse(half_empty_run(tmp_path_factory.mktemp("half")).root)
    return a, evaluate(a)


def test_the_acceptance_view_reads_each_levels_seconds_and_positions(half_run):
    from harness.report.views.acceptance import build_acceptance_view

    a, v = half_run
    view = build_acceptance_view(a, v)
    levels = [1, 2, 4, 8, 16]
    assert view.shades == {c: 0.9 * i / 4 for i, c in enumerate(levels)}
    by_arm = {arm.arm.name: arm for arm in view.arms}
    assert list(by_arm) == ["vllm-ngram", "vllm-eagle3", "sglang-dflash"]
    assert by_arm["vllm-ngram"].heading == "vllm-ngram (vllm, ngram, k=3)"
    for arm in by_arm.values():
        assert arm.tasks["gsm8k"] == []  # no speed cell: the panel says why
        chat = arm.tasks["chat"]
        assert [level.concurrency for level in chat] == levels
        for level in chat:
            # 10 one-second scrapes, one failed: 9 seconds, each 2.5 tokens a round.
            assert level.tokens_per_round.tolist() == pytest.approx([2.5] * 9)
    # vLLM's three positions keep 0.5, 0.3 and 0.2 of the 1.5 accepted tokens a round.
    assert by_arm["vllm-eagle3"].tasks["chat"][0].position_rates == pytest.approx([0.75, 0.45, 0.3])
    assert by_arm["sglang-dflash"].tasks["chat"][0].position_rates == []
    assert by_arm["sglang-dflash"].no_positions == "per-position acceptance not exported by sglang"
    assert by_arm["vllm-ngram"].round != by_arm["vllm-eagle3"].round  # as each engine counts


def test_the_consistency_view_puts_each_cells_counters_against_each_other(half_run):
    from harness.report.views.consistency import build_consistency_view

    a, v = half_run
    counters, client = build_consistency_view(a, v).panels
    # 1 + the positions' rates (0.75 + 0.45 + 0.3) against the engine's 2.5 a round, for
    # the vLLM arms only (SGLang exports no positions): on the diagonal.
    assert [p.arm for p in counters.arms] == ["vllm-ngram", "vllm-eagle3"]
    for points in counters.arms:
        assert points.x.tolist() == pytest.approx([2.5] * 5)
        assert points.y.tolist() == pytest.approx([2.5] * 5)
        assert list(points.cells) == [f"{points.arm}/chat/speed/c{c:03d}" for c in (1, 2, 4, 8, 16)]
    assert counters.diagonal == pytest.approx((2.45, 2.55))  # padded by 0.1 x 0.5
    # The client's 10 tokens a chunk (several steps a chunk) against the engine's 2.5.
    assert [p.arm for p in client.arms] == ["vllm-ngram", "vllm-eagle3", "sglang-dflash"]
    assert all(p.x.tolist() == [10.0] * 5 for p in client.arms)
    assert client.diagonal == pytest.approx((1.75, 10.75))


def test_the_verdict_view_gives_page_one_its_word_reasons_notice_and_panels(tmp_path):
    from harness.report.views.verdict import build_verdict_view
    from harness.rundir.manifest import Deviation

    b = RunBuilder(tmp_path).full_passing_run()
    b.manifest.deviations = [Deviation(when="2026-11-30T02:00:00", what="max_tokens 128 -> 64")]
    b.write_manifest()
    a = analyse(b.root)
    view = build_verdict_view(a, evaluate(a))
    assert (view.title, view.word, view.colour) == ("Verdict: PASS", "PASS", "#1a7f37")
    assert view.about == ["synthetic study", "run synthetic-run", "seal ffffffffffffffff..."]
    assert view.reasons == ["every registered bar passes"]
    assert dict(view.statuses) == {
        "pass.speed": "pass",
        "pass.identity": "pass",
        "pass.accuracy": "pass",
        "pass.knee": "pass",
        "stop": "not_fired",
        "check": "not_fired",
    }
    # The deviation is on page one, not only on the bars' page.
    assert view.notice == [
        "Deviations from the registered study (manifest.json):",
        "  2026-11-30T02:00:00: max_tokens 128 -> 64",
    ]
    assert view.notice[1] in view.bar_lines
    # One panel a speed task, each drafter's speedups the run's.
    assert [p.task for p in view.panels] == ["chat", "gsm8k"]
    for arm in view.panels[0].arms:
        assert list(arm.speedup.value) == pytest.approx(list(PASSING_SPEEDUPS[arm.arm].values()))
    assert view.bar_lines[0] == "[          PASS]  pass.speed"
    assert view.evidence_lines[0] == "== pass.speed: pass"


def test_the_speedups_view_reads_each_drafters_speedups_and_knee(full_run):
    from harness.report.views.speedups import build_speedups_view

    a, v = full_run
    view = build_speedups_view(a, v)
    assert view.title == "Speedup vs concurrency"
    assert view.subtitle.startswith("median per-user speed ratio vs the same-engine baseline")
    assert "sessions" not in view.subtitle  # one session: no interval over sessions
    assert [p.task for p in view.panels] == ["chat", "gsm8k"]
    arms = {arm.arm: arm for arm in view.panels[0].arms}
    assert list(arms) == list(PASSING_SPEEDUPS)
    for name, by_level in PASSING_SPEEDUPS.items():
        assert list(arms[name].speedup.value) == pytest.approx(list(by_level.values()))
        # Each crosses 1.0 between 8 users (above) and 16 (below).
        knee = arms[name].knee
        assert knee is not None and 8 < knee < 16, name
    assert [b.name for b in view.panels[0].bars] == ["pass", "stop"]  # 3.0 is far from check's


def test_the_open_loop_and_accuracy_views_hand_each_arm_its_series(full_run):
    """Each engine group's arms with their offered rates and objective latencies by rate;
    each task's arms with their accuracy and Wilson interval (70 of 100 right)."""
    from harness.report.views.accuracy import build_accuracy_view
    from harness.report.views.open_loop import build_open_loop_view
    from harness.workloads.stats import wilson_interval

    a, v = full_run
    groups = build_open_loop_view(a, v).groups
    assert {b: [c.arm for c in curves] for b, curves in groups.items()} == {
        "vllm-base": ["vllm-base", "vllm-ngram", "vllm-eagle3"],
        "sglang-base": ["sglang-base", "sglang-dflash"],
    }
    dflash = groups["sglang-base"][1]
    assert dflash.rate_rps.tolist() == [1.0, 2.0, 3.0]  # 0.5, 1.0, 1.5 x the 2 req/s
    assert dflash.objective_s.tolist() == pytest.approx([0.2, 0.5, 1.0])
    assert len(dflash.queue_p99_s) == 3
    panels = build_accuracy_view(a, v).panels
    assert [(p.task, p.title) for p in panels] == [
        ("gsm8k", "task: gsm8k (judged)"),
        ("mmlu", "task: mmlu (judged)"),
    ]
    lo, hi = wilson_interval(70, 100, 0.95)
    for p in panels:
        assert p.arms == ("vllm-base", "vllm-ngram", "vllm-eagle3", "sglang-base", "sglang-dflash")
        assert p.accuracy.tolist() == pytest.approx([0.7] * 5)
        assert p.lower.tolist() == pytest.approx([lo] * 5)
        assert p.upper.tolist() == pytest.approx([hi] * 5)
