"""The request-level stop within a cell (harness.analysis.cell_stop): its boundary, worked
by hand, and where a cell stops on known speeds."""

import math

import numpy as np
import pytest

from harness.analysis.cell_stop import cell_stop, cs_half_width


def test_half_width_is_robbins_normal_mixture_worked_by_hand() -> None:
    # n 64, sd 0.1, alpha 0.05, mixing 8: 0.1 x sqrt(72 x (ln 9 + 2 ln 20)) / 64
    # = 0.1 x sqrt(72 x (2.19722 + 5.99146)) / 64 = 0.1 x 24.2814 / 64 = 0.037940
    assert cs_half_width(64, 0.1, 0.05, 8) == pytest.approx(0.037940, abs=2e-6)
    # wider than the fixed-n 95 % interval (1.96 x 0.1 / 8 = 0.0245): it holds at every n
    assert cs_half_width(64, 0.1, 0.05, 8) > 1.96 * 0.1 / 8


def alternating(n: int, a: float) -> np.ndarray:
    """log speeds +-a about 0: after an even count m their sd is a sqrt(m / (m - 1))."""
    return np.array([a if i % 2 == 0 else -a for i in range(n)])


def test_stops_at_the_first_round_end_inside_the_target() -> None:
    x = alternating(64, 0.1)
    # half-widths at the rounds of 8: n 40 -> 0.04894, n 48 -> 0.04439, n 56 -> 0.04095
    widths = {n: cs_half_width(n, 0.1 * math.sqrt(n / (n - 1)), 0.05, 8) for n in (40, 48, 56)}
    assert widths[40] > 0.045 > widths[48] > 0.042 > widths[56]
    assert cell_stop(x, users=8, target=0.045) == 48
    assert cell_stop(x, users=8, target=0.042) == 56
    # one user: any count from `least` on; n 46 -> 0.04540, n 47 -> 0.04487
    assert cell_stop(x, users=1, target=0.045) == 47


def test_a_round_is_never_cut_and_a_cell_too_noisy_runs_whole() -> None:
    x = alternating(96, 0.1)
    # three users: the first look is at 9 (least 8, rounded up to a round), then 12, ...
    assert cell_stop(x, users=3, target=1.0) == 9
    assert cell_stop(x, users=32, target=1.0) == 32
    assert cell_stop(x, users=1, target=0.01) == 96
    assert cell_stop(x[:5], users=1, target=1.0) == 5  # fewer than `least`: all of them
