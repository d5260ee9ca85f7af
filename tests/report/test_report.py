"""The PDF report from hand-made run folders: every page renders and is not blank."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.finalize import build_report
from harness.rundir.manifest import Deviation
from harness.rundir.schedule import SkippedCell, StopDecisionRecord
from tests.analysis.runfolder import PASSING_SPEEDUPS, RunBuilder, engine_start, study_dict

# verdict, evidence, speedup, speed curves, 3 x acceptance, consistency, the three
# acceptance figures, accuracy x 2, identity, open loop, environment: at least one page each
MIN_PAGES = 14


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, (
        f"{name} not found: install poppler-utils (apt-get install -y poppler-utils);"
        " the report tests render every page with it"
    )
    return path


def page_count(pdf: Path) -> int:
    out = subprocess.run([_tool("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("Pages:"))
    return int(line.split()[1])


def render(pdf: Path, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [_tool("pdftoppm"), "-r", "40", "-png", str(pdf), str(out_dir / "page")],
        check=True,
        capture_output=True,
    )
    return sorted(out_dir.glob("page-*.png"))


def ink(png: Path) -> float:
    """Share of pixels that are not (near) white."""
    img = mpimg.imread(png)[..., :3]
    return float(np.mean(img.mean(axis=2) < 0.9))


def assert_pages_render(pdf: Path, tmp: Path, expected: int) -> None:
    assert page_count(pdf) == expected
    pngs = render(pdf, tmp / "png")
    assert len(pngs) == expected
    for png in pngs:
        assert ink(png) > 0.002, f"{png.name} is blank"


def test_report_command_writes_tables_verdict_and_pdf(tmp_path, capsys):
    b = RunBuilder(tmp_path).full_passing_run()
    out = tmp_path / "reports" / "synthetic.pdf"
    assert main(["report", str(b.root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "verdict: PASS" in printed
    for name in ("cells.parquet", "cells.csv", "speedups.parquet", "speedups.csv"):
        assert (b.root / name).exists(), name
    assert json.loads((b.root / "verdict.json").read_text())["verdict"] == "PASS"
    assert len(pd.read_parquet(b.root / "speedups.parquet")) == 30
    pages = int(printed.split("(")[-1].split()[0])
    assert pages >= MIN_PAGES
    assert_pages_render(out, tmp_path, pages)
    # The HTML report beside the PDF (tests/report/test_html_report.py reads it).
    html = out.with_suffix(".html")
    assert f"html report: {html}" in printed
    assert "<h1>specbench report: synthetic-run</h1>" in html.read_text()


def test_report_defaults_to_the_reports_folder(tmp_path, monkeypatch):
    import harness.commands.report as cmd

    b = RunBuilder(tmp_path).full_passing_run()
    monkeypatch.setattr(cmd, "REPORTS_DIR", tmp_path / "reports")
    assert main(["report", "synthetic-run", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "reports" / "synthetic-run.pdf").exists()
    assert (tmp_path / "reports" / "synthetic-run.html").exists()
    assert not (b.root / "reports").exists()


def test_report_of_a_stopped_run_with_missing_and_invalid_cells(tmp_path):
    """A sparse run: stop fired, high levels skipped, an invalid cell, a check rerun,
    no accuracy or open-loop cells. Every page still renders."""
    # Stop fires on chat (fires_when: any_task); eagle3's 5.5 on gsm8k fires the check bar.
    b = RunBuilder(
        tmp_path,
        study_dict(stop={"threshold": 1.3, "concurrencies": [1, 2, 4], "fires_when": "any_task"}),
    )
    slow = {arm: {1: 1.2, 2: 1.1, 4: 1.0} for arm in PASSING_SPEEDUPS}
    b.speed_cells(slow, levels=[1, 2, 4], tasks=("chat",))
    slow["vllm-eagle3"] = {1: 5.5, 2: 0.9, 4: 0.8}
    b.speed_cells(slow, levels=[1, 2, 4], tasks=("gsm8k",))
    b.speed("vllm-base", "chat", 1, 44.0, cell_id="vllm-base/chat/speed/c001/rerun1")
    b.speed("vllm-base", "gsm8k", 1, 40.0, cell_id="vllm-base/gsm8k/speed/c001/rerun1")
    b.identity_cells({"vllm-ngram": {f"item{i}": f"other text {i}" for i in range(8)}})
    b.identity("vllm-eagle3", "chat", {"item0": "x"}, valid=False)
    b.manifest.stop = StopDecisionRecord(fired=True, judged_wall=1_700_000_100.0, evidence={})
    b.manifest.skipped = [
        SkippedCell(cell=f"{a}/{t}/speed/c{c:03d}", reason="stop bar fired")
        for a in ("vllm-base", *PASSING_SPEEDUPS, "sglang-base")
        for t in ("chat", "gsm8k")
        for c in (8, 16)
    ]
    b.manifest.deviations = [
        Deviation(
            when="2026-11-30T02:00:00",
            what="max_tokens 128 -> 64",
            old_seal="a" * 64,
            new_seal="b" * 64,
        )
    ]
    b.write_manifest()
    out = tmp_path / "stopped.pdf"
    from harness.analysis import analyse, evaluate

    a = analyse(b.root)
    verdict = evaluate(a)
    assert verdict.verdict == "STOP"
    assert [r.of for r in verdict.reruns] == ["vllm-base/gsm8k/speed/c001"]
    assert build_report(b.root, out) == out
    pages = page_count(out)
    assert pages >= MIN_PAGES
    assert_pages_render(out, tmp_path, pages)


def test_analyse_command_prints_the_verdict(tmp_path, capsys):
    b = RunBuilder(tmp_path).full_passing_run()
    assert main(["analyse", str(b.root)]) == 0
    printed = capsys.readouterr().out
    assert "verdict: PASS" in printed and "pass.speed: pass" in printed
    assert (b.root / "verdict.json").exists() and (b.root / "cells.csv").exists()


@pytest.mark.parametrize("command", ["report", "analyse"])
def test_not_a_run_folder_is_exit_2_with_one_line(tmp_path, capsys, command):
    assert main([command, str(tmp_path / "nope"), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a run folder" in err[0]


def test_finalize_run_writes_tables_verdict_and_report_from_one_analysis(tmp_path):
    from harness.finalize import finalize_run

    b = RunBuilder(tmp_path).full_passing_run()
    done = finalize_run(b.root, report=tmp_path / "r.pdf")
    assert sorted(p.name for p in done.tables) == [
        "cells.csv",
        "cells.parquet",
        "speedups.csv",
        "speedups.parquet",
    ]
    assert json.loads((b.root / "verdict.json").read_text()) == done.verdict.to_json()
    assert done.verdict.verdict == "PASS"
    assert done.report == tmp_path / "r.pdf" and page_count(tmp_path / "r.pdf") == done.pages
    cells = pd.read_csv(b.root / "cells.csv")
    assert {
        "accept_length_per_round_engine",
        "accept_length_per_round_requests",
        "tokens_per_step_client",
        "acceptance_agree",
        "acceptance_disagreement",
        "spec_requests",
        "counter_resets",
    } <= set(cells.columns)


def test_environment_page_shows_each_arms_resolved_settings(tmp_path):
    """The drafter's precision and SGLang's admission delay as each engine started
    (the manifest), else as the study resolves them for an arm never started."""
    from matplotlib.backends.backend_pdf import PdfPages

    from harness.analysis import analyse, evaluate
    from harness.report.build import PDF_PAGES

    data = study_dict()
    for arm in data["arms"]:
        if arm["engine"] == "sglang":  # launched, so the harness resolves their settings
            arm.pop("attach")
            arm.update(launch={"python": "/envs/sglang/bin/python"}, max_running_requests=64)
    data["arms"][4]["drafter"]["model"] = "z-lab/Qwen3-8B-DFlash-b16"
    b = RunBuilder(tmp_path, data).full_passing_run()
    b.manifest.engines["sglang-dflash"] = [
        engine_start(
            "sglang-dflash",
            "sglang",
            settings={
                "drafter_precision": "checkpoint's own (--speculative-draft-model-quantization unquant)",
                "min_free_slots_delay": "off (--min-free-slots-delay 1)",
            },
        )
    ]
    b.write_manifest()
    a = analyse(b.root)
    out = tmp_path / "env.pdf"
    with PdfPages(out) as pdf:
        assert PDF_PAGES["environment"](pdf, a, evaluate(a)) >= 1
    text = subprocess.run(
        [_tool("pdftotext"), "-layout", str(out), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert "arm settings the engine would otherwise pick" in text
    assert (
        "sglang-dflash: drafter precision: checkpoint's own"
        " (--speculative-draft-model-quantization unquant)"
    ) in text
    assert "sglang-dflash: min free slots delay: off (--min-free-slots-delay 1)" in text
    # Never started: resolved from the study, and said so.
    assert (
        "sglang-base: min free slots delay: off (not passed: SGLang's default) (no start recorded)"
    ) in text


def test_report_shows_the_three_acceptance_figures_and_flags_disagreement(tmp_path):
    from harness.records import RequestSpeculation

    b = RunBuilder(tmp_path)
    agreeing = RequestSpeculation(engine="vllm", rounds=10, draft_tokens=30, accepted=15)
    b.speed("vllm-ngram", "chat", 1, 100.0, speculation=agreeing)  # 2.5, as the counters
    low = RequestSpeculation(engine="vllm", rounds=10, draft_tokens=30, accepted=12)
    b.speed("vllm-eagle3", "chat", 1, 100.0, speculation=low)  # 2.2 against 2.5
    out = build_report(b.root, tmp_path / "three.pdf")
    text = subprocess.run(
        [_tool("pdftotext"), "-layout", str(out), "-"], capture_output=True, text=True, check=True
    ).stdout
    page = text[text.index("Acceptance: three figures side by side") :]
    page = page[: page.index("\f")]
    rows = {
        line.split()[0]: line.split()
        for line in page.splitlines()
        if line.startswith(("vllm-ngram/", "vllm-eagle3/"))
    }
    assert rows["vllm-ngram/chat/speed/c001"][1:3] == ["2.500", "2.500"]
    assert rows["vllm-eagle3/chat/speed/c001"][1:3] == ["2.500", "2.200"]
    # Each engine figure says what it is per: EAGLE-3 under vLLM's async scheduling counts
    # every scheduled decode step; this study's n-gram arm (no async scheduling) its
    # drafting rounds alone.
    assert rows["vllm-eagle3/chat/speed/c001"][-4:] == ["NO", "scheduled", "decode", "step"]
    assert rows["vllm-ngram/chat/speed/c001"][-2:] == ["drafting", "round"]
    assert "disagreements beyond 5% (2):" in page  # both: the hand-made chunks hold 10 tokens
    assert "vllm-eagle3/chat/speed/c001: engine counters 2.500 vs per-request 2.200" in page
