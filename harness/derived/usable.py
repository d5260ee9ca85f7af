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
from dataclasses import dataclass
from typing import Any, Literal

from harness.derived.throttle import GpuThrottle
from harness.records import ClientHealth, RequestRecord

# Cells whose figure is the per-user speed; identity, accuracy and open-loop cells are
# judged on outputs, scores and latency, which a request without a TPOT still has.
NEEDS_PER_USER_SPEED = ("speed",)
# Cells whose figures are timings: a throttled GPU moves them. Identity and accuracy
# cells are texts and scores, which a slower clock does not change.
TIMED = ("speed", "open")

# Why an attempt is unusable, by kind. The first six pass with the moment (another
# program, a client that fell behind, a dead engine, a hot GPU): `specbench run --resume
# --remeasure-invalid` measures such a cell again. The others are the engine's or the
# study's, and a new measurement would meet them again.
CauseKind = Literal[
    "host_busy",
    "client_lag",
    "delivered_short",
    "bursts",
    "engine_died",
    "gpu_throttled",
    "aborted",
    "nothing_succeeded",
    "no_per_user_speed",
    "not_measured",
]
PASSING: frozenset[str] = frozenset(
    {"host_busy", "client_lag", "delivered_short", "bursts", "engine_died", "gpu_throttled"}
)


@dataclass(frozen=True)
class Cause:
    """One reason an attempt is unusable, with the cell's figure for it and the limit it
    was judged against (None where the cause has no figure)."""

    kind: CauseKind
    value: float | None = None
    limit: float | None = None

    @property
    def passes(self) -> bool:
        return self.kind in PASSING


@dataclass(frozen=True)
class Unusable:
    reason: str  # one line, as cell.json and the verdict's excluded cells keep it
    causes: tuple[Cause, ...]

    @property
    def passes(self) -> bool:
        """Every cause passes with the moment: measuring again can make the cell valid."""
        return all(c.passes for c in self.causes)


def unusable(
    *,
    kind: str,
    requests: Sequence[RequestRecord],
    aborted: bool = False,
    abort_reason: str | None = None,
    health: ClientHealth | None = None,
    gpu_throttle: GpuThrottle | None = None,
    gpu_throttle_policy: str = "flag",
) -> Unusable | None:
    """None for a usable cell; else why not, the first rule that fails in this order: one
    line and its typed causes. `requests` are the attempt's records (warm-up ones are
    ignored here); `gpu_throttle` is the attempt's (None: no GPU telemetry)."""
    measured = [r for r in requests if r.phase == "measure"]
    if aborted:
        return Unusable(f"aborted: {abort_reason or 'error rate'}", (Cause("aborted"),))
    if health is not None and not health.valid:
        return Unusable(f"client unhealthy: {health.reason or 'lag limit'}", client_causes(health))
    if kind in TIMED and health is not None and (busy := host_busy_reason(health)):
        share = (health.host_foreign_cpu_share or 0.0) + (health.host_steal_share or 0.0)
        return Unusable(busy, (Cause("host_busy", share, health.host_foreign_cpu_limit),))
    if not measured:
        return Unusable("no measured requests", (Cause("nothing_succeeded"),))
    # The error-rate limit is the driver's abort, which needs MIN_ERRORS_TO_ABORT
    # failures: one or two errors (a 32-request identity cell at a 2 % limit) keep the
    # cell, and cost only their own requests. A cell with nothing that succeeded is
    # unusable whatever its size.
    if not any(r.ok for r in measured):
        return Unusable(
            f"none of its {len(measured)} measured requests succeeded",
            (Cause("nothing_succeeded"),),
        )
    if kind in NEEDS_PER_USER_SPEED and not any(r.per_user_speed for r in measured):
        return Unusable(_no_speed_reason(measured), (Cause("no_per_user_speed"),))
    if (
        gpu_throttle_policy == "remeasure"
        and kind in TIMED
        and gpu_throttle is not None
        and gpu_throttle.throttled
    ):
        share = gpu_throttle.throttled_ticks / gpu_throttle.ticks
        return Unusable(
            f"GPU throttled: {gpu_throttle.describe()}", (Cause("gpu_throttled", share),)
        )
    return None


def unusable_reason(**judged: Any) -> str | None:
    """unusable's one line alone (None: usable), as cell.json keeps it."""
    found = unusable(**judged)
    return found.reason if found else None


def client_causes(health: ClientHealth) -> tuple[Cause, ...]:
    """What made the client's health invalid (harness.measure.health), by kind: the
    worst lag figure over its limit, a delivered load below its floor, bursts over theirs."""
    causes = []
    lags = [
        x
        for x in (
            health.lag_p99_ms,
            health.first_token_bound_p99_ms,
            health.send_lag_p99_ms,
            health.turnaround_p99_ms,
        )
        if x is not None
    ]
    if health.timing_judged:
        over = [x for x in lags if x > health.lag_limit_ms]
        if over:
            causes.append(Cause("client_lag", max(over), health.lag_limit_ms))
        floor, share = health.min_delivered_share, health.delivered_share
        if floor is not None and share is not None and share < floor:
            causes.append(Cause("delivered_short", share, floor))
    limit, bursts = health.burst_limit, health.burst_share
    if limit is not None and bursts is not None and bursts > limit:
        causes.append(Cause("bursts", bursts, limit))
    # An invalid health none of whose figures names its cause (a send lag judged on an
    # open loop's schedule): the client fell behind.
    return tuple(causes) or (Cause("client_lag", max(lags, default=None), health.lag_limit_ms),)


def host_busy_reason(health: ClientHealth) -> str | None:
    """Why the host was too busy for the cell, against the limit recorded with it.
    Steal counts with the foreign share: both are CPU time the cell could not have."""
    limit, foreign = health.host_foreign_cpu_limit, health.host_foreign_cpu_share
    if limit is None or foreign is None:
        return None
    steal = health.host_steal_share or 0.0
    if foreign + steal <= limit:
        return None
    attached = (
        ""
        if health.host_engine_counted is not False
        else ("; the engine is attached, so its own CPU, if on this host, counts as other")
    )
    return (
        f"host busy: {foreign + steal:.2f} of the host's CPU time went to other processes"
        f" ({foreign:.2f}) and the hypervisor ({steal:.2f} steal), above the limit"
        f" {limit:g}{attached}"
    )


def _no_speed_reason(measured: list[RequestRecord]) -> str:
    ok = [r for r in measured if r.ok]
    short = sum(1 for r in ok if (r.completion_tokens or 0) < 2)
    one_read = len(ok) - short  # >= 2 tokens but no time between first token and end
    why = [f"{one_read} had every token in one read (first token and end share a stamp)"]
    if short:
        why.append(f"{short} had fewer than 2 tokens")
    return f"no request with a per-user speed: of {len(ok)} successful, {', '.join(why)}"
