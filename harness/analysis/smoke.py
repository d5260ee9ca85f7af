"""The smoke stage's checks as text: one line each, as progress shows it while the
smoke runs (harness.run.smoke) and the report lists it after (harness.report.views.verdict).

Here rather than beside the stage so that the report reads the smoke's records
without importing the stage, and with it the engine lifecycle and the load driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.records import SmokeArmCheck, SmokeIdentityCheck

if TYPE_CHECKING:
    from harness.prereg.schema import Arm


def compares(arm: Arm) -> bool:
    """Whether the smoke compares this arm's text with its baseline's: every drafter but a
    control arm (drafter.synthetic), whose drafts are kept whatever they say."""
    return not arm.is_baseline and not arm.is_control


def value_text(v: float | None) -> str:
    """A scraped counter's value; None is a series the engine did not export."""
    return "absent" if v is None else f"{v:g}"


def margin_text(v: float | None) -> str:
    """The target's logprob margin at a token; None is an engine that sent none."""
    return "none sent" if v is None else f"{v:.3g}"


def smoke_line(rec: SmokeArmCheck | SmokeIdentityCheck) -> str:
    """One line per check, as progress shows it and the report lists it."""
    if isinstance(rec, SmokeIdentityCheck):
        if rec.status == "passed":
            if rec.near_ties:
                ties = "; ".join(
                    f"{t.item_id} token {t.token_index} {t.drafter_token!r} vs"
                    f" {t.baseline_token!r} (margins {margin_text(t.drafter_margin)},"
                    f" {margin_text(t.baseline_margin)})"
                    for t in rec.near_ties
                )
                return (
                    f"smoke: {rec.arm} gives {rec.baseline}'s greedy text on"
                    f" {rec.compared - len(rec.near_ties)} of {rec.compared} prompts and"
                    f" diverges at a near-tie of the target's on {len(rec.near_ties)}"
                    f" (numerics, below {rec.near_tie_margin:g} nats; the run goes on): {ties}"
                )
            return f"smoke: {rec.arm} gives {rec.baseline}'s greedy text on {rec.compared} prompts"
        return f"smoke FAILED: {rec.reason}"
    if rec.status == "failed":
        return f"smoke FAILED ({rec.failed_check}): {rec.reason}"
    tokens = sum(a.completion_tokens or 0 for a in rec.answers)
    line = (
        f"smoke: {rec.arm} {rec.engine} and answered {len(rec.answers)} prompts"
        f" ({tokens} tokens) in {rec.ended_wall - rec.started_wall:.0f} s"
    )
    if rec.counter is not None:
        line += (
            f"; {rec.counter.name} {value_text(rec.counter.before)} ->"
            f" {value_text(rec.counter.after)}"
        )
    if rec.acceptance is not None and rec.acceptance.tokens_per_round is not None:
        line += (
            f"; {rec.acceptance.tokens_per_round:.2f} tokens per round (floor"
            f" {rec.acceptance.floor:g}{', BELOW: allowed' if rec.acceptance.allowed else ''})"
        )
    return line
