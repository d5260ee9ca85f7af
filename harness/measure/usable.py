"""Whether a finished cell measured something a bar can use, and if not, why.

One rule for both sides: the runner measures an unusable cell again (within
`recording.cell_retries`, every attempt kept), and analysis marks a cell that stayed
unusable invalid with this reason, so no bar uses it and the verdict names it.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.records import ClientHealth, RequestRecord

# Cells whose figure is the per-user speed; identity, accuracy and open-loop cells are
# judged on outputs, scores and latency, which a request without a TPOT still has.
NEEDS_PER_USER_SPEED = ("speed",)


def unusable_reason(
    *,
    kind: str,
    requests: Sequence[RequestRecord],
    aborted: bool = False,
    abort_reason: str | None = None,
    health: ClientHealth | None = None,
    error_rate_limit: float | None = None,
) -> str | None:
    """None for a usable cell; else one line saying why not. `requests` are the
    attempt's records (warm-up ones are ignored here)."""
    measured = [r for r in requests if r.phase == "measure"]
    if aborted:
        return f"aborted: {abort_reason or 'error rate'}"
    if health is not None and not health.valid:
        return f"client unhealthy: {health.reason or 'lag limit'}"
    if not measured:
        return "no measured requests"
    errors = sum(1 for r in measured if not r.ok)
    # The registered rate judged on the whole cell: an early abort needs several
    # errors, so a short cell can end over the limit without being aborted.
    if error_rate_limit is not None and errors / len(measured) > error_rate_limit:
        return (f"error rate {errors}/{len(measured)} measured requests ="
                f" {errors / len(measured):.1%} passed the limit {error_rate_limit:.1%}")
    if kind in NEEDS_PER_USER_SPEED and not any(r.per_user_speed for r in measured):
        return _no_speed_reason(measured)
    return None


def _no_speed_reason(measured: list[RequestRecord]) -> str:
    ok = [r for r in measured if r.ok]
    short = sum(1 for r in ok if (r.completion_tokens or 0) < 2)
    one_read = len(ok) - short  # >= 2 tokens but no time between first token and end
    why = [f"{one_read} had every token in one read (first token and end share a stamp)"]
    if short:
        why.append(f"{short} had fewer than 2 tokens")
    return f"no request with a per-user speed: of {len(ok)} successful, {', '.join(why)}"
