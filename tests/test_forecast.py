"""The prediction before training (lengthgen.forecast): the limit prediction on hand-solved kernels."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import ConfigError
from lengthgen import forecast as fc
from lengthgen.maxmargin import MaxMargin, hard_margin, kernel_constraints, solve


def _one_pair(theta: float, offset: int, train_length: int) -> MaxMargin:
    """The L2 max-margin kernel of one RoPE pair, solved by hand: c(delta) = r cos((delta + K) theta), peaked at
    the target; the nearest in-window offsets sit at cos(theta) r, so the margin is r (1 - cos theta) = 1."""
    r = 1 / (1 - np.cos(theta))
    w = r * np.array([np.cos(offset * theta), -np.sin(offset * theta)])  # (cos, sin) . w = r cos((delta + K) theta)
    return MaxMargin(w, np.array([theta]), offset, train_length, "l2")


def test_the_hand_solved_kernel_is_the_solvers() -> None:
    for theta, K, T in ((2 * np.pi / 10, 2, 5), (1.0, 1, 3)):
        hand = _one_pair(theta, K, T)
        assert hand.in_window_margin() == pytest.approx(1.0)
        assert np.allclose(hard_margin(kernel_constraints(K, T, np.array([theta])), "l2"), hand.w, atol=1e-6)


def test_first_reach_on_hand_solved_kernels() -> None:
    # period 10: the target's value returns at delta = -12, seen first by a sequence of length 13
    assert fc.first_reach(_one_pair(2 * np.pi / 10, 2, 5)) == 13
    assert fc.first_reach(_one_pair(2 * np.pi / 10, 2, 5), max_multiple=2) is None  # 12 > 2 x 5 - 1
    # theta = 1 rad never returns to the peak at a whole offset: cos(m) < 1 - 1e-9 for every m < 64 x 3
    assert fc.first_reach(_one_pair(1.0, 1, 3)) is None
    # the d = 2 solver's kernel (theta = 1 at any base) gives the same answer
    assert fc.first_reach(solve(1, 3, 2, 10000.0, "l2")) is None
    with pytest.raises(ConfigError, match="max_multiple"):
        fc.first_reach(_one_pair(1.0, 1, 3), max_multiple=0)


def test_first_reach_is_where_a_beyond_window_offset_first_reaches_the_target() -> None:
    sol = solve(2, 8, 8, 100.0, "l2")
    L = fc.first_reach(sol, max_multiple=64)
    kern = sol.kernel(-np.arange(64 * 8))
    if L is None:
        assert kern[8:].max() < kern[2]
    else:
        assert kern[L - 1] >= kern[2] - 1e-9 > kern[8 : L - 1].max()
