"""Whether a finished cell measured something a bar can use, and if not, why.

One rule for both sides: the runner measures an unusable cell again (within
`recording.cell_retries`, every attempt kept), and analysis marks a cell that stayed
unusable invalid with this reason, so no bar uses it and the verdict names it.
Under `recording.gpu_throttle: remeasure`, a timed cell (speed, open loop) during which
the GPU throttled is unusable too; under `flag` (the default) it is only flagged.
Under `recording.host_foreign_cpu_limit`, a timed cell during which other processes and
the hypervisor took more than that share of the host's CPU time (harness.measure.host_cpu)
is unusable: another program disturbed it.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.derived.throttle import GpuThrottle
from harness.records import ClientHealth, RequestRecord

# Cells whose figure is the per-user speed; identity, accuracy and open-loop cells are
# judged on outputs, scores and latency, which a request without a TPOT still has.
NEEDS_PER_USER_SPEED = ("speed",)
# Cells whose figures are timings: a throttled GPU moves them. Identity and accuracy
# cells are texts and scores, which a slower clock does not change.
TIMED = ("speed", "open")


def unusable_reason(
    *,
    kind: str,
    requests: Sequence[RequestRecord],
    aborted: bool = False,
    abort_reason: str | None = None,
    health: ClientHealth | None = None,
    gpu_throttle: GpuThrottle | None = None,
    gpu_throttle_policy: str = "flag",
) -> str | None:
    """None for a usable cell; else one line saying why not. `requests` are the
    attempt's records (warm-up ones are ignored here); `gpu_throttle` is the attempt's
    (None: no GPU telemetry)."""
    measured = [r for r in requests if r.phase == "measure"]
    if aborted:
        return f"aborted: {abort_reason or 'error rate'}"
    if health is not None and not health.valid:
        return f"client unhealthy: {health.reason or 'lag limit'}"
    if kind in TIMED and health is not None and (busy := host_busy_reason(health)):
        return busy
    if not measured:
        return "no measured requests"
    # The error-rate limit is the driver's abort, which needs MIN_ERRORS_TO_ABORT
    # failures: one or two errors (a 32-request identity cell at a 2 % limit) keep the
    # cell, and cost only their own requests. A cell with nothing that succeeded is
    # unusable whatever its size.
    if not any(r.ok for r in measured):
        return f"none of its {len(measured)} measured requests succeeded"
    if kind in NEEDS_PER_USER_SPEED and not any(r.per_user_speed for r in measured):
        return _no_speed_reason(measured)
    if (gpu_throttle_policy == "remeasure" and kind in TIMED and gpu_throttle is not None
            and gpu_throttle.throttled):
        return f"GPU throttled: {gpu_throttle.describe()}"
    return None


def host_busy_reason(health: ClientHealth) -> str | None:
    """Why the host was too busy for the cell, against the limit recorded with it.
    Steal counts with the foreign share: both are CPU time the cell could not have."""
    limit, foreign = health.host_foreign_cpu_limit, health.host_foreign_cpu_share
    if limit is None or foreign is None:
        return None
    steal = health.host_steal_share or 0.0
    if foreign + steal <= limit:
        return None
    attached = "" if health.host_engine_counted is not False else (
        "; the engine is attached, so its own CPU, if on this host, counts as other")
    return (f"host busy: {foreign + steal:.2f} of the host's CPU time went to other processes"
            f" ({foreign:.2f}) and the hypervisor ({steal:.2f} steal), above the limit"
            f" {limit:g}{attached}")


def _no_speed_reason(measured: list[RequestRecord]) -> str:
    ok = [r for r in measured if r.ok]
    short = sum(1 for r in ok if (r.completion_tokens or 0) < 2)
    one_read = len(ok) - short  # >= 2 tokens but no time between first token and end
    why = [f"{one_read} had every token in one read (first token and end share a stamp)"]
    if short:
        why.append(f"{short} had fewer than 2 tokens")
    return f"no request with a per-user speed: of {len(ok)} successful, {', '.join(why)}"
