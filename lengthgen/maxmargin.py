"""The hard-margin problems the implicit-bias account points at, for the RoPE carrier kernel.

The positional part of a RoPE logit is c(delta) = sum_p Re(z_p exp(-i delta theta_p)) (kernel.pair_spectrum):
linear in the pair coefficients w = (Re z, Im z) in R^d, with features f(delta) = (cos delta theta_p,
sin delta theta_p). Retrieval at offset K asks the target offset to beat every other offset the model
saw in training, delta in {0, -1, ..., -(T-1)} \\ {-K}. The hard-margin problem is

    minimise  R(w)   subject to   w . (f(-K) - f(delta)) >= 1  for every such delta,

with R = |w|^2 (``norm="l2"``: gradient descent on a linear model in w converges in direction to this) or
R = sum_p |z_p| (``norm="pairs"``: the group norm that a factorised bilinear form q . R k favours, since
|q_p|^2 + |k_p|^2 >= 2 |q_p||k_p| = 2 |z_p|). Only numpy is used: dual coordinate ascent (Hildreth's
method) for the L2 problem, and reweighted L2 problems for the pair norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ConfigError
from .encodings import rope_frequencies

NORMS = ("l2", "pairs")


def features(theta: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """(n, d) rows (cos delta theta_p ..., sin delta theta_p ...) for each delta: c = features @ w."""
    turn = np.asarray(deltas, dtype=np.float64)[:, None] * theta[None]
    return np.concatenate([np.cos(turn), np.sin(turn)], 1)


def coefficients(amplitude: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """w = (A cos phi, A sin phi) from a pair spectrum's amplitude and phase, (..., P) -> (..., 2P)."""
    return np.concatenate([amplitude * np.cos(phase), amplitude * np.sin(phase)], -1)


def _l2_hard_margin(g: np.ndarray, weight: np.ndarray, sweeps: int, tol: float) -> np.ndarray:
    """argmin sum_i w_i^2 / weight_i subject to g @ w >= 1 (rows of g: constraints), by dual coordinate ascent."""
    gs = g * np.sqrt(weight)[None]  # in u = w / sqrt(weight) the objective is |u|^2
    lam = np.zeros(len(g))
    u = np.zeros(g.shape[1])
    norms = (gs**2).sum(1)
    for _ in range(sweeps):
        worst = 0.0
        for i in range(len(g)):
            step = max(-lam[i], (1 - gs[i] @ u) / norms[i])
            lam[i] += step
            u += step * gs[i]
            worst = max(worst, abs(step) * norms[i])
        if worst < tol:
            break
    return u * np.sqrt(weight)


@dataclass
class MaxMargin:
    """The hard-margin kernel for one (offset, training length, frequencies, norm)."""

    w: np.ndarray  # (d,) pair coefficients, margin exactly 1 on the active offsets
    theta: np.ndarray  # (P,)
    offset: int
    train_length: int
    norm: str

    def kernel(self, deltas) -> np.ndarray:
        """(n,) c(delta) of the max-margin solution."""
        return features(self.theta, np.asarray(deltas)) @ self.w

    @property
    def amplitude(self) -> np.ndarray:
        """(P,) |z_p| of the solution."""
        P = len(self.theta)
        return np.hypot(self.w[:P], self.w[P:])

    def beyond_margin(self, max_delta: int) -> float:
        """c(-K) - max over beyond-window offsets delta in [-max_delta, -T]: < 0 means an aliased peak wins."""
        kern = self.kernel(-np.arange(max_delta + 1))
        return float(kern[self.offset] - kern[self.train_length :].max())


def solve(offset: int, train_length: int, dim: int, rope_base: float = 10000.0, norm: str = "l2",
          iterations: int = 60, sweeps: int = 2000, tol: float = 1e-12) -> MaxMargin:
    """The hard-margin carrier kernel (see the module docstring)."""
    if norm not in NORMS:
        raise ConfigError(f"norm={norm!r}: use one of {', '.join(NORMS)}")
    if not 0 < offset < train_length:
        raise ConfigError(f"need 0 < offset ({offset}) < train_length ({train_length})")
    theta = rope_frequencies(dim, rope_base).double().numpy()
    others = np.array([-m for m in range(train_length) if m != offset])
    g = features(theta, np.array([-offset])) - features(theta, others)  # (T-1, d)
    P = len(theta)
    weight = np.ones(2 * P)
    w = _l2_hard_margin(g, weight, sweeps, tol)
    if norm == "pairs":  # sum_p |z_p| = min_eta sum_p (|z_p|^2 / eta_p + eta_p) / 2, eta_p = |z_p|
        for _ in range(iterations):
            eta = np.maximum(np.hypot(w[:P], w[P:]), 1e-9)
            w = _l2_hard_margin(g, np.concatenate([eta, eta]), sweeps, tol)
    return MaxMargin(w, theta, offset, train_length, norm)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity along the last axis (broadcasting)."""
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
