"""`specbench compare RUN_A RUN_B --html PATH`: the comparison's own page, from two
hand-made run folders of three sessions whose second has one drafter 10 % slower."""

from __future__ import annotations

import json
import re

from harness.cli import main
from harness.finalize import finalize_run
from harness.report.html_page import plotly_js
from tests.analysis.runfolder import PASSING_SPEEDUPS, RunBuilder, study_dict


def test_compare_writes_a_self_contained_page_with_ratios_and_differences(tmp_path, capsys):
    # 90 % intervals, read from study.json (where the resolved study is under "study").
    data = study_dict(
        sessions=3,
        sessions_for="speed_cells",
        intervals={"level": 0.9, "bootstrap_resamples": 300, "seed": 7},
    )
    a = RunBuilder(tmp_path / "a", data, run_id="run-a")
    a.speed_cells(tasks=("chat",))
    b = RunBuilder(tmp_path / "b", data, run_id="run-b")
    slower = {
        **PASSING_SPEEDUPS,
        "vllm-ngram": {c: 0.9 * s for c, s in PASSING_SPEEDUPS["vllm-ngram"].items()},
    }
    b.speed_cells(slower, tasks=("chat",))
    b.manifest.seal = "e" * 64
    b.write_manifest()
    for run in (a, b):
        finalize_run(run.root)
    page = tmp_path / "compare.html"
    capsys.readouterr()
    assert main(["compare", str(a.root), str(b.root), "--format", "json", "--html", str(page)]) == 0
    out = capsys.readouterr()
    assert f"html: {page}" in out.err
    rows = {(r["arm"], r["task"], r["concurrency"]): r for r in json.loads(out.out)["rows"]}
    assert rows[("vllm-ngram", "chat", 1)]["status"] == "B slower"
    assert rows[("vllm-eagle3", "chat", 1)]["status"] == "same within the interval"
    assert rows[("vllm-eagle3", "gsm8k", 1)]["status"] == "not compared: A missing, B missing"

    text = page.read_text()
    assert text.count(plotly_js()[:200]) == 1 and not re.search(r"<script[^>]+src=", text)
    assert re.findall(r'<section class="report-section" id="([^"]+)"', text) == [
        "ratios",
        "speedups",
        "acceptance",
        "environment",
    ]
    assert len(re.findall(r'class="plotly-graph-div"', text)) == 1
    # One table row per arm x task x level, A's and B's speedups with their intervals.
    speedups = text[text.index('id="speedups"') : text.index('id="acceptance"')]
    assert speedups.count("<tr>") == 1 + 3 * 2 * 5  # gsm8k's too, not compared
    assert "B slower" in speedups and "Student df=4" in speedups
    moved = rows[("vllm-ngram", "chat", 1)]["moved"]
    assert moved.startswith("drafter x0.90 [") and moved.endswith("the drafter moved"), moved
    assert moved in speedups
    assert "A speedup [90%]" in speedups and rows[("vllm-ngram", "chat", 1)]["level"] == 0.9
    assert "tokens/round A" in text and "round cost B" in text
    env = text[text.index('id="environment"') :]
    assert '<td class="">seal</td><td class="">' + "f" * 64 in env and "e" * 64 in env
    assert "vllm-ngram/chat c=1: B slower" in text  # the summary above the figure
    assert "rows compared over sessions differ at 90% each" in text  # its family-wise reading


def test_compare_page_of_runs_with_nothing_in_common_is_labelled_not_an_error():
    import pandas as pd

    from harness.report.html_compare import compare_page

    text = compare_page(pd.DataFrame(), [], "a", "b", 0.95)
    assert "no level compared" in text and "no shared cell" in text
    assert "nothing recorded differs" in text
