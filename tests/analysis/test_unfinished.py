"""An unfinished verdict says why and how to finish it (harness.analysis.unfinished), on
hand-made run folders: each cause with its count, the range of its cells' figures and the
limit, the cells it cost per bar, and the one command, or that none can finish it."""

from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.bars import write_verdict
from harness.rundir import cell_dirname
from harness.rundir.manifest import Deviation, RunnerRecord
from harness.rundir.shards import Sharding
from tests.analysis.runfolder import RunBuilder


def edit_health(b: RunBuilder, cell: str, **fields: object) -> None:
    path = b.root / "cells" / cell_dirname(cell) / "complete.json"
    data = json.loads(path.read_text())
    data["outcome"]["health"].update(fields)
    path.write_text(json.dumps(data))


def edit_outcome(b: RunBuilder, cell: str, **fields: object) -> None:
    path = b.root / "cells" / cell_dirname(cell) / "complete.json"
    data = json.loads(path.read_text())
    data["outcome"].update(fields)
    path.write_text(json.dumps(data))


def full_run(tmp_path: Path) -> RunBuilder:
    return RunBuilder(tmp_path).full_passing_run()


def test_host_busy_cells_are_counted_per_bar_with_their_range_and_the_command(tmp_path):
    b = full_run(tmp_path)
    assert write_verdict(b.root).verdict == "PASS"
    busy = {"vllm-eagle3/chat/speed/c001": 0.42, "vllm-base/chat/speed/c016": 0.83}
    for cell, share in busy.items():
        edit_health(
            b, cell, host_foreign_cpu_share=share, host_steal_share=0.0, host_foreign_cpu_limit=0.25
        )
    v = write_verdict(b.root)
    assert v.verdict == "INCOMPLETE" and v.unfinished is not None
    (cause,) = v.unfinished.causes
    assert cause.cause == "host_busy" and sorted(cause.cells) == sorted(busy)
    assert (cause.low, cause.high, cause.limit) == (0.42, 0.83, 0.25)
    # c=1 is a pass level: the speed bar, and identity and accuracy through the best
    # drafter it picks; c=16 only the knee.
    assert cause.per_bar == {
        "pass.speed": 1,
        "pass.identity": 1,
        "pass.accuracy": 1,
        "pass.knee": 2,
    }
    assert cause.line == (
        "host busy, 2 cells (pass.speed 1, pass.identity 1, pass.accuracy 1,"
        " pass.knee 2): 0.42-0.83 of the host's CPU time went to other"
        " processes, above the limit 0.25"
    )
    command = f"specbench run prereg.yaml --resume {b.root} --remeasure-invalid"
    assert v.unfinished.command == command
    assert v.reasons == [
        "incomplete: pass.speed, pass.identity, pass.accuracy, pass.knee",
        cause.line,
        f"to finish the run: {command}",
    ]


def test_a_cause_the_engine_owns_is_named_and_no_command_claims_to_finish_it(tmp_path):
    b = full_run(tmp_path)
    edit_outcome(b, "vllm-base/chat/speed/c002", aborted=True, reason="error rate 9% > 2%")
    v = write_verdict(b.root)
    assert v.verdict == "INCOMPLETE" and v.unfinished is not None
    (cause,) = v.unfinished.causes
    assert cause.cause == "aborted" and not cause.passes
    assert cause.line.startswith(
        "aborted for errors, 1 cell (pass.speed 1, pass.identity 1,"
        " pass.accuracy 1, pass.knee 1): aborted at the error-rate"
        " limit"
    )
    assert "not measured again by --remeasure-invalid" in cause.line
    assert v.unfinished.command is None
    assert v.reasons[-1].startswith("no command finishes the run as registered")


def test_cells_never_measured_are_finished_by_a_plain_resume_with_the_runs_own_flags(tmp_path):
    b = full_run(tmp_path)
    (b.root / "cells" / cell_dirname("sglang-dflash/gsm8k/speed/c008") / "complete.json").unlink()
    b.manifest.runner = RunnerRecord(
        pid=1, started_wall=0.0, cmdline=["specbench"], invoked_as="bash scripts/demo.sh"
    )
    b.manifest.deviations.append(Deviation(when=0.0, what="unpinned", unpinned=[{"x": "y"}]))
    b.manifest.sharding = Sharding(gpus=2, slots=2, shards=[])
    b.write_manifest()
    v = write_verdict(b.root)
    assert v.unfinished is not None
    (cause,) = v.unfinished.causes
    assert cause.cause == "not_measured" and cause.per_bar == {"pass.knee": 1}
    assert v.unfinished.command == (
        f"bash scripts/demo.sh --resume {b.root} --allow-unpinned --gpus 2"
    )


def test_a_complete_verdict_has_no_unfinished_part(tmp_path):
    b = full_run(tmp_path)
    v = write_verdict(b.root)
    assert v.verdict == "PASS" and v.unfinished is None and v.remeasured == []


def test_the_pdfs_first_page_and_the_html_report_show_the_same_lines(tmp_path):
    import html
    import shutil
    import subprocess

    from matplotlib.backends.backend_pdf import PdfPages

    from harness.analysis import analyse, evaluate
    from harness.report.html_sections import Figures, verdict_section
    from harness.report.pages_headline import verdict_page

    b = full_run(tmp_path)
    for cell, share in {
        "vllm-eagle3/chat/speed/c001": 0.42,
        "vllm-base/chat/speed/c016": 0.83,
    }.items():
        edit_health(
            b, cell, host_foreign_cpu_share=share, host_steal_share=0.0, host_foreign_cpu_limit=0.25
        )
    edit_health(
        b,
        "sglang-base/chat/speed/c004",
        lag_p99_ms=31.0,
        valid=False,
        reason="client stamp lag p99 31.00 ms exceeds the limit 5 ms",
    )
    a = analyse(b.root)
    v = evaluate(a)
    assert v.unfinished is not None and len(v.unfinished.causes) == 2
    out = tmp_path / "verdict.pdf"
    with PdfPages(out) as pdf:
        verdict_page(pdf, a, v)
    tool = shutil.which("pdftotext")
    assert tool, "pdftotext not found: install poppler-utils"
    first = subprocess.run(
        [tool, "-f", "1", "-l", "1", str(out), "-"], capture_output=True, text=True, check=True
    ).stdout
    first = " ".join(first.split())
    page = " ".join(html.unescape(verdict_section(a, v, Figures()).body).split())
    for line in v.reasons:  # each cause, and the command, whole
        assert line in first, line
        assert line in page, line
