"""The hard-margin solvers and kernels: constraints met, optimal on cases solved by hand, each norm smallest for its
own solution, and the prediction before training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError
from lengthgen import maxmargin as mm
from lengthgen.dilution import gaussian_accuracy
from lengthgen.kernel import pair_spectrum
from lengthgen.model import Model


@pytest.mark.parametrize("norm", mm.NORMS)
@pytest.mark.parametrize("offset,train_length", [(1, 8), (2, 32), (8, 32)])
def test_solutions_meet_every_margin_with_some_tight(norm: str, offset: int, train_length: int) -> None:
    sol = mm.solve(offset, train_length, 32, norm=norm)
    kern = sol.kernel(-np.arange(train_length))
    margins = kern[offset] - np.delete(kern, offset)
    assert margins.min() >= 1 - 1e-9
    assert np.isclose(margins.min(), 1, atol=1e-9)  # at the optimum some constraint is active
    assert np.isclose(sol.in_window_margin(), 1)


@pytest.mark.parametrize("norm,g,expected", [
    ("l2", [[3.0, 4.0, 0.0]], [3 / 25, 4 / 25, 0.0]),  # one constraint: w = g / |g|^2
    ("l2", [[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]], [0.5, 0.0, 0.2]),  # orthogonal constraints: each on its own
    ("linf", [[3.0, 4.0]], [1 / 7, 1 / 7]),  # max|w| = t with 3t + 4t = 1
    ("linf", [[1.0, 1.0], [1.0, -1.0]], [1.0, 0.0]),  # the sum gives w1 >= 1; at w1 = 1 both force w2 = 0
    ("pairs", [[2.0, 1.0, 0.0, 0.0]], [0.5, 0.0, 0.0, 0.0]),  # |(w1,w3)| + |(w2,w4)| >= |w1| + |w2|: all on w1
    ("pairs", [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]], [1.0, 0.0, 0.0, 1.0]),
    # w = (Re z1, Re z2, Im z1, Im z2); w1 + w2 >= 1 at the smallest max(|w1| + |w3|, |w2| + |w4|): half on each pair
    ("factors_linf", [[1.0, 1.0, 0.0, 0.0]], [0.5, 0.5, 0.0, 0.0]),
    # both parts of pair 1 needed: |Re z1| + |Im z1| >= 2, pair 2 takes it with |Re z2| = 1 and pair 1 with 1
    ("factors_linf", [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], [1.0, 0.0, 1.0, 0.0]),
])
def test_hard_margin_on_problems_solved_by_hand(norm: str, g: list, expected: list) -> None:
    assert np.allclose(mm.hard_margin(np.array(g), norm), expected, atol=1e-7)


def test_nuclear_and_frobenius_on_a_diagonal_matrix() -> None:
    # <W, diag(2, 1)> >= 1: the nuclear norm puts everything on the top singular direction, Frobenius spreads it
    g = np.array([[2.0, 0.0, 0.0, 1.0]])
    assert np.allclose(mm.hard_margin(g, "nuclear", shape=(2, 2)), [0.5, 0.0, 0.0, 0.0], atol=1e-6)
    assert np.allclose(mm.hard_margin(g, "l2"), [0.4, 0.0, 0.0, 0.2], atol=1e-7)


def test_pair_nuclear_is_the_pair_norm_for_one_token_and_frobenius_for_rank_one() -> None:
    """V = 1: each M_p is one complex number, so the pair-nuclear norm is the pair norm; a rank-one M_p has
    nuclear norm equal to its Frobenius norm."""
    g = np.array([[3.0, 0.0, 4.0, 0.0], [0.0, 1.0, 0.0, 0.0]])  # pair 1 along (3, 4), pair 2's real part >= 1
    for norm in ("pair_nuclear", "pairs"):
        assert np.allclose(mm.hard_margin(g, norm, (1, 4)), [0.12, 1.0, 0.16, 0.0], atol=1e-6), norm
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 2, 3)) + 1j * rng.normal(size=(2, 2, 3))  # two pairs' token factors, V = 3
    M = q[:, :, None] * np.conj(k[:, None, :])  # (P, V, V)
    w = np.concatenate([M.real[..., None], M.imag[..., None]], -1).transpose(1, 2, 3, 0).ravel()  # X[a, b, (re, im), p]
    assert mm.norm_of(w, "pair_nuclear", (3, 12)) == pytest.approx(np.linalg.norm(M, axis=(1, 2)).sum())


def test_linf_spread_is_zero_for_a_unique_solution_and_not_for_a_face() -> None:
    unique = np.array([[3.0, 4.0]])
    assert np.allclose(mm.linf_spread(unique, mm.hard_margin(unique, "linf")), 0.0, atol=1e-7)
    face = np.array([[3.0, 4.0, 0.0]])  # the third coordinate is free in [-1/7, 1/7]
    assert np.allclose(mm.linf_spread(face, mm.hard_margin(face, "linf")), [0, 0, 2 / 7], atol=1e-7)


def test_unseparable_constraints_say_so() -> None:
    for norm in ("l2", "linf"):
        with pytest.raises(ConfigError, match="separable"):
            mm.hard_margin(np.array([[1.0, 0.0], [-1.0, 0.0]]), norm)


def test_factors_linf_is_the_image_of_the_factors_box() -> None:
    """The derivation of ``factors_linf``: z = q conj(k) for q, k in the box [-1, 1]^2 stays in the diamond
    |Re z| + |Im z| <= 2, sampled factors (corners included) reach its boundary, and every boundary point is the
    image of box factors (q = 1 + i, k = ((x + y) / 2, (x - y) / 2))."""
    rng = np.random.default_rng(0)
    q, k = (rng.uniform(-1, 1, (20000, 2)) for _ in range(2))
    q[:4], k[:4] = [[1, 1], [1, -1], [-1, 1], [1, 1]], [[1, -1], [1, 1], [1, 1], [-1, 1]]  # corner pairs
    z = (q[:, 0] + 1j * q[:, 1]) * np.conj(k[:, 0] + 1j * k[:, 1])
    w = np.stack([z.real, z.imag], 1)  # one pair: (Re z, Im z)
    size = mm.norm_of(w, "factors_linf")
    assert size.max() <= 2 + 1e-12 and np.isclose(size.max(), 2)
    angle = rng.uniform(0, 2 * np.pi, 1000)
    edge = np.stack([np.cos(angle), np.sin(angle)], 1)
    edge *= 2 / np.abs(edge).sum(1, keepdims=True)  # points with |x| + |y| = 2
    kk = np.stack([edge.sum(1), edge[:, 0] - edge[:, 1]], 1) / 2
    assert np.abs(kk).max() <= 1 + 1e-12
    image = (1 + 1j) * np.conj(kk[:, 0] + 1j * kk[:, 1])
    assert np.allclose(np.stack([image.real, image.imag], 1), edge)


def test_each_norm_is_smallest_for_its_own_solution() -> None:
    sol = {n: mm.solve(2, 32, 32, norm=n) for n in mm.NORMS}
    size = {"l2": lambda s: np.linalg.norm(s.w), "linf": lambda s: np.abs(s.w).max(),
            "pairs": lambda s: s.amplitude.sum()}
    for own in mm.NORMS:
        for other in mm.NORMS:
            assert size[own](sol[own]) <= size[own](sol[other]) + 1e-6, (own, other)
    g = mm.kernel_constraints(2, 32, sol["l2"].theta)
    factors = mm.hard_margin(g, "factors_linf")
    assert (g @ factors).min() == pytest.approx(1)
    for other in sol.values():
        assert mm.norm_of(factors, "factors_linf") <= mm.norm_of(other.w, "factors_linf") + 1e-7
    pairs, l2 = sol["pairs"], sol["l2"]
    assert (pairs.amplitude > 1e-3 * pairs.amplitude.max()).sum() <= (l2.amplitude > 1e-3 * l2.amplitude.max()).sum()


def test_peaks_are_the_best_beyond_window_offsets() -> None:
    sol = mm.solve(2, 16, 16, norm="l2")
    peaks = sol.peaks(255, 3)
    kern = sol.kernel(-np.arange(256))
    assert np.allclose([p["value"] for p in peaks], sorted(kern[16:], reverse=True)[:3])
    assert np.isclose(-peaks[0]["gap"], sol.beyond_margin(255))
    assert np.isclose(mm.far_field(sol, 16), sol.beyond_margin(255))  # the in-window margin is 1


def test_prediction_sharpens_with_the_norm_and_dilutes_with_length() -> None:
    sol = mm.solve(2, 16, 16, norm="l2")
    pred = mm.predict(sol, [1.0, 30.0], [16, 64, 256], vocab=8, draws=256)
    assert pred.target_weight.shape == pred.accuracy.shape == (3, 2)
    assert np.allclose(pred.in_window_margin, [1 / np.linalg.norm(sol.w), 30 / np.linalg.norm(sol.w)])
    assert (pred.target_weight[:, 1] > pred.target_weight[:, 0]).all()  # a larger norm: a sharper softmax
    assert (np.diff(pred.target_weight[:, 0]) < 0).all()  # a small norm: the weight dilutes with length
    assert pred.accuracy[0, 1] > 0.99 and pred.accuracy[-1, 0] < pred.accuracy[0, 0]
    with pytest.raises(ConfigError, match="norms"):
        mm.predict(sol, [0.0], [16], vocab=8)


def test_ideal_readout_accuracy_matches_sampled_tokens() -> None:
    """The Gaussian of the dilution arithmetic against the argmax of token masses over sampled sequences."""
    rng = np.random.default_rng(0)
    V, L, K, n = 8, 40, 2, 20000
    logits = rng.normal(0, 1.5, L)
    logits[K] += 2.0
    weights = np.exp(logits) / np.exp(logits).sum()
    predicted = gaussian_accuracy(mm.ideal_readout_field(weights[None], K, V), draws=4000)[0]
    tokens = rng.integers(V, size=(n, L))
    mass = np.zeros((n, V))
    np.add.at(mass, (np.arange(n)[:, None], tokens), weights[None])
    sampled = (mass.argmax(1) == tokens[:, K]).mean()
    assert abs(predicted - sampled) < 0.03, (predicted, sampled)


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
    with pytest.raises(ConfigError, match="nuclear"):
        mm.hard_margin(np.ones((1, 4)), "nuclear", shape=(3, 3))


def test_cosine() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    assert np.allclose(mm.cosine(a, np.array([1.0, 0.0])), [1.0, 1 / np.sqrt(2)])
    assert torch.is_tensor(torch.as_tensor(mm.cosine(a, a)))
