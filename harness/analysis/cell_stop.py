"""A request-level stop within a speed cell (issue 51): a cell stops measuring once an
anytime-valid confidence sequence on its mean log per-user speed is narrower than a
registered share of the session-to-session variation the bars' t intervals already carry.

The sequence is Robbins' two-sided normal mixture (Howard et al. 2021, eq. 3.7): for
observations of sd sigma and mixing precision m (in requests), with S_n the sum of n
deviations from the mean, P(some n has |S_n| >= sqrt(sigma^2 (n + m) (log((n + m) / m)
+ 2 log(1 / alpha)))) <= alpha, so its half-width on the mean at n holds at whichever n
the cell stops. sigma is the requests' own sd so far (a plug-in: the bars never read the
cell's interval, the sessions' t interval carries the cell's noise whatever n is, and a
stop that reads the spread, not the mean, leaves the mean unbiased). A closed loop deals
request i to user i % c, so a cell stops only at the end of a round of its users.
"""

from __future__ import annotations

import math

import numpy as np


def cs_half_width(n: int, sd: float, alpha: float, mixing: float) -> float:
    """The normal-mixture confidence sequence's half-width on the mean after n requests."""
    v = n + mixing
    return sd * math.sqrt(v * (math.log(v / mixing) + 2.0 * math.log(1.0 / alpha))) / n


def cell_stop(
    log_speeds: np.ndarray | list[float],
    users: int,
    target: float,
    alpha: float = 0.05,
    least: int = 8,
) -> int:
    """How many of a cell's requests (in the order measured) it measures: the first end of
    a round of `users` requests, at least `least` in all, where the confidence sequence's
    half-width (alpha, mixing precision `least`) is at or below `target` (log); all of
    them where none is."""
    x = np.asarray(log_speeds, dtype=float)
    first = max(least, users)
    first += -first % users  # the end of a round
    for n in range(first, len(x) + 1, users):
        if cs_half_width(n, float(np.std(x[:n], ddof=1)), alpha, least) <= target:
            return n
    return len(x)
