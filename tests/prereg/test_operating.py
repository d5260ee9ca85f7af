"""Each bar's operating characteristic, as the verdict page states it: stored for the
registered design by benchmarks/bar_characteristics.py, never borrowed by another design."""

from __future__ import annotations

from pathlib import Path

from harness.analysis import analyse, evaluate
from harness.prereg import load_study
from harness.prereg.operating import (
    characteristics,
    design_fingerprint,
    multiplicity,
    operating_lines,
)
from harness.prereg.schema import Study
from harness.report.html_build import html_report
from harness.report.html_text import escape
from harness.report.views.verdict import bar_lines
from tests.analysis.runfolder import RunBuilder, study_dict

ROOT = Path(__file__).resolve().parents[2]


def test_the_registered_design_has_its_figures_stored_with_their_provenance():
    """Fails when prereg.yaml's design changes and the benchmark was not rerun (--write)."""
    study = load_study(ROOT / "prereg.yaml")
    oc = characteristics(study)
    assert oc is not None, (
        "no operating characteristic for prereg.yaml's design: run"
        " benchmarks/bar_characteristics.py --write"
    )
    pv, lab = oc["provenance"], oc["lab"]
    assert pv["benchmark"] == "benchmarks/bar_characteristics.py" and pv["reps"] >= 40
    assert lab["sd"] == 0.086
    lines = operating_lines(study)
    assert lines[0].startswith(
        "Operating characteristic of this design, at session log sd 0.086 (the lab's)"
    )
    assert f"commit {pv['commit']}" in lines[0] and f"{pv['reps']} simulated runs" in lines[0]
    assert lines[1].startswith(
        f"  pass.speed passes 95 % of the time at a true"
        f" {lab['pass_95']:.2f}x at every pass level and task, 5 % at"
        f" {lab['pass_05']:.2f}x"
    )
    assert f"located within one level {100 * lab['knee_within_one']:.0f} %" in lines[3]
    assert not pv["dirty"]  # measured on committed code
    # The must-show: a drafter flat at 1.5x is never given a located knee, one crossing at
    # about 23 users is located within one level of it.
    assert lab["knee_flat_located"] == 0.0 and lab["knee_within_one"] >= 0.95


def test_a_design_never_measured_says_so_and_how_to_measure_it():
    study = Study.model_validate(study_dict())
    assert characteristics(study) is None
    first = operating_lines(study, "mine.yaml")[0]
    assert first == (
        "Operating characteristic: not measured for this design (fingerprint"
        f" {design_fingerprint(study)}); `nice -n 19 .venv/bin/python"
        " benchmarks/bar_characteristics.py --study mine.yaml --write` measures it."
    )


def test_the_fingerprint_follows_what_the_figures_depend_on():
    study = load_study(ROOT / "prereg.yaml")
    key = design_fingerprint(study)
    renamed = study.model_copy(update={"title": "another title"})
    assert design_fingerprint(renamed) == key
    rec = study.recording.model_copy(update={"sessions": 5})
    assert design_fingerprint(study.model_copy(update={"recording": rec})) != key
    stop = study.bars.stop.model_copy(update={"threshold": 1.2})
    bars = study.bars.model_copy(update={"stop": stop})
    assert design_fingerprint(study.model_copy(update={"bars": bars})) != key


def test_the_rows_behind_each_bar_are_counted_from_the_study():
    m = multiplicity(load_study(ROOT / "prereg.yaml"))
    # 3 drafters x 3 speed tasks; pass and stop at c = 1, 2, 4; 7 levels in all
    assert m == {
        "drafters": 3,
        "tasks": 3,
        "pass_figures": 9,
        "pass_candidates": 27,
        "stop_figures": 27,
        "check_figures": 63,
        "intervals": 63,
    }


def test_the_verdict_page_states_it(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    a = analyse(b.root)
    lines = bar_lines(a, evaluate(a))
    said = [ln for ln in lines if ln.startswith("Operating characteristic")]
    assert said == [operating_lines(a.run.study)[0]]
    assert any(
        ln.startswith(
            "Multiplicity: the speed bar reads 6 figures of the chosen drafter, chosen among 18;"
        )
        for ln in lines
    )
    # The HTML report's verdict section prints the same lines.
    html = html_report(a, evaluate(a))
    verdict = html[html.index('id="verdict"') : html.index('id="speedups"')]
    assert escape(said[0]) in verdict and "Multiplicity: the speed bar reads 6" in verdict
