"""Synthetic measurements of a registered design, for the benchmarks that drive the
analysis through the harness's own functions (interval_coverage.py, bar_characteristics.py).

A request's per-user speed is exp(session effect + user effect + request noise) times the
arm's true speed. The session effect is the engine start's: each arm's session its own
draw of log sd `session_sd` (the lab's plain reference swung 3,496 to 2,907 tok/s over
occasions: LAB_SD). Within a session, users differ by `user_sd` and requests by
`request_sd` (log), as a closed loop deals request i to user i % c.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.intervals import Units, _blocks  # noqa: E402
from harness.prereg.schema import Intervals, Study  # noqa: E402

SESSION_SDS = (0.0, 0.03, 0.086)
LAB_SD = 0.086
USER_SD = 0.03  # log sd between users of a cell
REQUEST_SD = 0.10  # log sd between requests of a user


@dataclass(frozen=True)
class Design:
    sessions: int
    levels: list[int]
    requests_min: int
    requests_per_user: int
    pass_levels: list[int]
    sessions_for: str
    intervals: Intervals

    def requests(self, c: int) -> int:
        return max(self.requests_min, self.requests_per_user * c)

    def sessions_at(self, c: int) -> int:
        """The plan's rule (harness.plan.repeats)."""
        repeats = self.sessions > 1 and (
            self.sessions_for == "speed_cells" or c in self.pass_levels
        )
        return self.sessions if repeats else 1


def design_of(study: Study, resamples: int | None) -> Design:
    closed = study.loads.closed_loop
    iv = study.bars.intervals
    if resamples:
        iv = iv.model_copy(update={"bootstrap_resamples": resamples})
    return Design(
        study.recording.sessions,
        list(closed.concurrency),
        closed.requests.min,
        closed.requests.per_user,
        list(study.bars.pass_.speed.concurrencies),
        study.recording.sessions_for,
        iv,
    )


def speeds(
    rng: np.random.Generator,
    c: int,
    n: int,
    session_shift: float,
    user_sd: float = USER_SD,
    request_sd: float = REQUEST_SD,
) -> np.ndarray:
    """n requests' per-user speeds over c users, at exp(session_shift) the arm's speed."""
    users = rng.normal(0.0, user_sd, size=c)
    return np.exp(session_shift + users[np.arange(n) % c] + rng.normal(0.0, request_sd, size=n))


def units(values: np.ndarray, c: int) -> Units:
    """A cell's speeds grouped as harness.analysis.intervals.session_units groups a closed
    loop's (users; time blocks for one user), without building its request records."""
    n = len(values)
    unit = np.arange(n) % c if c > 1 else _blocks(n).astype(int)
    order = np.argsort(values, kind="stable")
    return Units(
        values[order], unit[order], int(unit.max()) + 1, "user" if c > 1 else "time block", order
    )


def session_medians(
    rng: np.random.Generator,
    d: Design,
    c: int,
    sessions: int,
    session_sd: float,
    shift: float,
    user_sd: float = USER_SD,
    request_sd: float = REQUEST_SD,
) -> list[float]:
    """A baseline's session medians at `shift` its speed, simulated as its cells' (the
    medians of the same user and request noise)."""
    n = d.requests(c)
    return [
        float(
            np.median(
                speeds(rng, c, n, math.log(shift) + rng.normal(0, session_sd), user_sd, request_sd)
            )
        )
        for _ in range(sessions)
    ]
