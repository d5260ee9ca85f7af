"""Accuracy with intervals and paired comparisons; greedy identity."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save, table_lines, text_pages
from harness.report.pages_speed import arm_colours


def accuracy_pages(pdf: PdfPages, a: Analysis) -> int:
    acc = a.accuracy[a.accuracy["status"] == "complete"]
    tasks = list(dict.fromkeys(a.accuracy["task"])) or ["(none)"]
    colours = arm_colours(a)
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    fig = new_page(
        "Accuracy",
        f"each arm's accuracy with its Wilson {level:.0%} interval;"
        " bar-judged tasks: " + (", ".join(judged.tasks) if judged else "none"),
    )
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.28, wspace=0.3)
    for ax, task in zip(axes, tasks, strict=True):
        rows = acc[acc["task"] == task]
        if rows.empty:
            empty_axes(ax, "no usable accuracy cells")
            ax.set_title(f"task: {task}", fontsize=11)
            continue
        xs = range(len(rows))
        for x, r in zip(xs, rows.itertuples(), strict=True):
            ax.errorbar(
                [x],
                [r.accuracy],
                yerr=[[r.accuracy - r.ci_lower], [r.ci_upper - r.accuracy]],
                fmt="o",
                color=colours.get(r.arm, "black"),
                capsize=4,
            )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(rows["arm"], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("accuracy (share correct)")
        mark = " (judged)" if judged and task in judged.tasks else " (reported)"
        ax.set_title(f"task: {task}{mark}", fontsize=11)
        ax.grid(alpha=0.3, axis="y")
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_ylim(
            max(0, rows["ci_lower"].min() - 0.1) - 0.02, min(1, rows["ci_upper"].max() + 0.1) + 0.02
        )
    save(pdf, fig)
    return 1 + text_pages(pdf, "Accuracy: paired comparisons", paired_lines(a))


def paired_lines(a: Analysis) -> list[str]:
    """Each drafter against its baseline on the same items (exact McNemar)."""
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    lines = [
        (
            "Paired comparisons, each drafter arm (A) against its baseline (B) on the same items;"
            " exact McNemar p over the discordant pairs."
        ),
        "",
    ]
    rows_out = []
    for arm, baseline in (
        (x, x.baseline) for x in a.run.study.arms if x.baseline is not None and not x.is_control
    ):
        for task in dict.fromkeys(a.accuracy["task"]):
            d, b = a.run.find(arm.name, task, "accuracy"), a.run.find(baseline, task, "accuracy")
            if not (d.usable and b.usable and d.scores is not None and b.scores is not None):
                rows_out.append(
                    [
                        task,
                        arm.name,
                        arm.baseline,
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "cells not usable",
                    ]
                )
                continue
            cmp = compare_accuracy(d, b, level)
            p = cmp.paired
            lo, hi = cmp.baseline_interval
            rows_out.append(
                [
                    task,
                    arm.name,
                    arm.baseline,
                    cmp.n,
                    f"{cmp.accuracy:.3f}",
                    f"{cmp.baseline_accuracy:.3f}",
                    f"[{lo:.3f}, {hi:.3f}]",
                    p.both_right,
                    p.only_a,
                    p.only_b,
                    p.both_wrong,
                    f"{p.mcnemar_p:.3g}" + ("" if cmp.within else "  OUTSIDE"),
                ]
            )
    lines += table_lines(
        [
            "task",
            "arm A",
            "baseline B",
            "n",
            "acc A",
            "acc B",
            "B interval",
            "both right",
            "only A",
            "only B",
            "both wrong",
            "McNemar p",
        ],
        rows_out,
    )
    return lines


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


def identity_pages(pdf: PdfPages, a: Analysis) -> int:
    return text_pages(pdf, "Greedy identity", identity_lines(a))


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
    rows = []
    for r in a.identity.itertuples():
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
                "-" if r.status != "ok" else f"{int(r.n_identical)}/{int(r.n_compared)}",
                "-" if r.status != "ok" else int(r.n_numeric),
                share,
                "-" if r.status != "ok" else int(r.n_not_compared),
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
    for r in a.identity.itertuples():
        for m in r.mismatches or []:
            any_m = True
            lines += f"  {r.task}/{r.arm} item {m['item_id']}: {mismatch_where(m)}".split("\n")
            lines.append(f"      drafter : {m['drafter_text']!r}")
            lines.append(f"      baseline: {m['baseline_text']!r}")
    if not any_m:
        lines.append("  none")
    return lines
