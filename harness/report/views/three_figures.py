"""The three acceptance figures side by side: the engine's counters, the requests' own
figures and the client's chunks, per drafter cell, with each disagreement named."""

from __future__ import annotations

from harness.analysis.acceptance_requests import AGREE_WITHIN
from harness.analysis.tables import Analysis
from harness.numbers import is_nan, number_text
from harness.report.layout import table_lines


def three_figures_lines(a: Analysis) -> list[str]:
    """Per drafter cell, the engine's tokens per drafting round from its counters and
    from its per-request figures, and the client's tokens per decode step, side by side;
    cells where they disagree beyond AGREE_WITHIN are flagged."""
    drafters = {x.name for x in a.run.study.arms if x.drafter is not None}
    rows, flagged = [], []
    for r in a.cell_rows(arms=drafters, kinds=("speed", "open"), status=("complete",)):
        agree = r.acceptance_agree
        mark = "-" if agree is None or is_nan(agree) else ("yes" if agree else "NO")
        rows.append(
            [
                r.cell_id,
                number_text(r.accept_length_per_round_engine, ".3f"),
                number_text(r.accept_length_per_round_requests, ".3f"),
                number_text(r.tokens_per_step_client, ".3f"),
                int(r.spec_requests),
                mark,
                r.engine_round or "-",
            ]
        )
        if mark == "NO":
            flagged.append(f"  {r.cell_id}: {r.acceptance_disagreement}")
    lines = [
        "engine counters: tokens per round as its engine counts rounds (`engine round`: per drafting"
        " round, a step with drafts; per scheduled decode step under vLLM's async scheduling,"
        " drafted or not; per decode step for a drafter that always drafts), from /metrics"
        " over the cell's window (it holds the cell's warm-up requests too)",
        "per-request: the same count summed over the measured requests' own figures (vLLM"
        " metrics.speculative_decoding, SGLang sglext.spec_tokens_details)",
        "client: tokens per decode step from the streamed chunks (lower where steps ran"
        " without drafts, and for SGLang, whose count includes the prefill token)",
        f"agree: counters within {AGREE_WITHIN:.0%} of the per-request figures of the same"
        " requests (the warm-up ones too), and client not above per-request by more than"
        f" {AGREE_WITHIN:.0%}; '-': a figure is missing",
        "",
    ]
    if rows:
        lines += table_lines(
            [
                "cell",
                "engine counters",
                "per-request",
                "client",
                "requests with figures",
                "agree",
                "engine round",
            ],
            rows,
        )
    else:
        lines.append("no complete drafter speed or open-loop cell")
    lines += ["", f"disagreements beyond {AGREE_WITHIN:.0%} ({len(flagged)}):"]
    lines += flagged or ["  none"]
    return lines
