"""The hard-margin carrier kernels: constraints met, optimal on cases solvable by hand, the pair norm sparser."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError
from lengthgen import maxmargin as mm
from lengthgen.kernel import pair_spectrum
from lengthgen.model import Model


@pytest.mark.parametrize("norm", mm.NORMS)
@pytest.mark.parametrize("offset,train_length", [(1, 8), (2, 32), (8, 32)])
def test_solutions_meet_every_margin_with_some_tight(norm: str, offset: int, train_length: int) -> None:
    sol = mm.solve(offset, train_length, 32, norm=norm)
    kern = sol.kernel(-np.arange(train_length))
    margins = kern[offset] - np.delete(kern, offset)
    assert margins.min() >= 1 - 1e-6
    assert np.isclose(margins.min(), 1, atol=1e-4)  # at the optimum some constraint is active


def test_l2_solution_of_one_and_of_two_orthogonal_constraints() -> None:
    g = np.array([[3.0, 4.0, 0.0]])
    assert np.allclose(mm._l2_hard_margin(g, np.ones(3), 100, 1e-14), g[0] / 25)
    g2 = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    assert np.allclose(mm._l2_hard_margin(g2, np.ones(3), 100, 1e-14), [0.5, 0.0, 0.2])


def test_each_norm_is_smallest_for_its_own_solution() -> None:
    l2, pairs = mm.solve(2, 32, 32, norm="l2"), mm.solve(2, 32, 32, norm="pairs")
    assert np.linalg.norm(l2.w) <= np.linalg.norm(pairs.w) + 1e-6
    assert pairs.amplitude.sum() <= l2.amplitude.sum() + 1e-6
    assert (pairs.amplitude > 1e-3 * pairs.amplitude.max()).sum() <= (l2.amplitude > 1e-3 * l2.amplitude.max()).sum()


def test_features_rebuild_a_models_kernel_from_its_pair_spectrum() -> None:
    c = Config()
    spec = pair_spectrum(Model(c, [0, 1]).double())
    deltas = -np.arange(40)
    w = mm.coefficients(spec.amplitude, spec.phase)  # (S, d)
    assert np.allclose(w @ mm.features(spec.theta, deltas).T, spec.kernel(deltas), atol=1e-10)


def test_bad_problems_say_what_to_change() -> None:
    with pytest.raises(ConfigError, match="norm"):
        mm.solve(2, 32, 32, norm="l1")
    with pytest.raises(ConfigError, match="offset"):
        mm.solve(32, 32, 32)


def test_cosine() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    assert np.allclose(mm.cosine(a, np.array([1.0, 0.0])), [1.0, 1 / np.sqrt(2)])
    assert torch.is_tensor(torch.as_tensor(mm.cosine(a, a)))
