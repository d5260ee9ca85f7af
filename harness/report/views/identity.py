"""The greedy-identity section: each drafter's outputs against its baseline's, item by item,
and every divergence where it happened."""

from __future__ import annotations

import math

from harness.analysis.rows import IdentityRow
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines


def mismatch_where(m: dict) -> str:
    """Where an identity mismatch diverges, and how each side finished."""
    word = "-" if m.get("word_index") is None else m["word_index"]
    where = (
        f"char {m['char_index']}, word {word}; finish drafter {m.get('drafter_finish')}"
        f" ({m.get('drafter_tokens')} tokens), baseline {m.get('baseline_finish')}"
        f" ({m.get('baseline_tokens')} tokens)"
    )
    where += f"; {m['note']}" if m.get("note") else ""
    return where + (
        f"\n      first divergent token: {divergence_line(m['divergence'])}"
        if m.get("divergence")
        else ""
    )


def divergence_line(d: dict) -> str:
    """A mismatch's first divergent token: index, both tokens, both margins, kind."""

    def margin(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    if d.get("token_index") is None:
        return f"{d['kind'].upper()} ({d['why']})"
    return (
        f"#{d['token_index']} drafter {d['drafter_token']!r} (margin"
        f" {margin(d['drafter_margin'])}) vs baseline {d['baseline_token']!r} (margin"
        f" {margin(d['baseline_margin'])}): {d['kind'].upper()} ({d['why']})"
    )


def _count(n: float | None) -> int:
    """A count the table holds (as a float where its column has gaps)."""
    assert n is not None  # an ok row has every count
    return int(n)


def identity_lines(a: Analysis) -> list[str]:
    bar = a.run.study.bars.pass_.identity
    need = f"; the bar needs >= {bar.min_identical_share:.0%} identical" if bar else ""
    reading = (
        "Registered reading: beyond near-ties -- an output whose first divergent token"
        f" was a near-tie of the target's (margin < {bar.near_tie_margin:g} nats on either"
        " side, the two tokens its top two) counts as identical (NUMERIC); any other"
        " divergence is REAL."
        if bar and bar.count == "beyond_near_ties"
        else "Registered reading: exact -- every output the same text; each divergence is"
        " still classified (NUMERIC: a near-tie of the target's; REAL: it preferred its"
        " token clearly; UNKNOWN: no logprobs)."
    )
    lines = [
        (
            f"Greedy outputs at concurrency {bar.concurrency if bar else 1}, temperature"
            f" {a.run.study.sampling.temperature:g}, compared item by item with the"
            f" baseline's{need}."
        ),
        reading,
        "",
    ]
    identity = a.rows("identity", IdentityRow)
    rows = []
    for r in identity:
        share = (
            "-"
            if r.share is None or (isinstance(r.share, float) and math.isnan(r.share))
            else f"{r.share:.1%}"
        )
        rows.append(
            [
                r.task,
                r.arm,
                r.baseline,
                r.status,
                "-" if r.status != "ok" else f"{_count(r.n_identical)}/{_count(r.n_compared)}",
                "-" if r.status != "ok" else _count(r.n_numeric),
                share,
                "-" if r.status != "ok" else _count(r.n_not_compared),
            ]
        )
    lines += table_lines(
        [
            "task",
            "arm",
            "baseline",
            "status",
            "identical",
            "near-tie",
            "share",
            "not compared (request failed)",
        ],
        rows,
    )
    lines += [
        "",
        (
            "Every divergence (first divergent character and whitespace-separated word,"
            " each side's finish reason and completion tokens; the first divergent token"
            " with the target's margin, logprob of its top-1 minus its top-2, on each"
            " side; text around it):"
        ),
    ]
    any_m = False
    for r in identity:
        for m in r.mismatches or []:
            any_m = True
            lines += f"  {r.task}/{r.arm} item {m['item_id']}: {mismatch_where(m)}".split("\n")
            lines.append(f"      drafter : {m['drafter_text']!r}")
            lines.append(f"      baseline: {m['baseline_text']!r}")
    if not any_m:
        lines.append("  none")
    return lines
