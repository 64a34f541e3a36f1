"""The hard-margin problems the implicit-bias account points at, and the prediction they make before training.

The positional part of a RoPE logit is c(delta) = sum_p Re(z_p exp(-i delta theta_p)) (kernel.pair_spectrum):
linear in the pair coefficients w = (Re z, Im z) in R^d, with features f(delta) = (cos delta theta_p,
sin delta theta_p). Retrieval at offset K asks the target offset to beat every other offset the model
saw in training, delta in {0, -1, ..., -(T-1)} \\ {-K}. The hard-margin problem is

    minimise  R(w)   subject to   w . (f(-K) - f(delta)) >= 1  for every such delta,

one geometry R per update rule (``optim.GEOMETRY``), each the limit direction of that rule on a separable
problem (book/bibliography.md):

* ``"l2"``: R = |w|_2, gradient descent and normalised gradient descent (Soudry et al. 2018; Nacson et al. 2019);
* ``"linf"``: R = max_i |w_i|, sign descent, Signum and full-batch Adam (Gunasekar et al. 2018; Zhang, Zou &
  Cao 2024). A linear program: its solution set can be a face rather than a point, and the solver returns one
  vertex of it (``linf_spread`` measures how large that face is);
* ``"pairs"``: R = sum_p |z_p|, the group norm over RoPE pairs that gradient descent on a factorised product
  q_p conj(k_p) per pair favours, since |q_p|^2 + |k_p|^2 >= 2 |q_p||k_p| = 2 |z_p|.
* ``"factors_linf"``: R = max_p (|Re z_p| + |Im z_p|), the geometry that an l-infinity geometry on the factors
  (q_p, k_p) (sign descent on them) induces on w. Derivation: with q = a + ib and k = c + ie in the unit box
  (|a|, |b|, |c|, |e| <= 1), z = q conj(k) has Re z +- Im z = c (a +- b) + e (b -+ a), so
  |Re z| + |Im z| = max(|Re z + Im z|, |Re z - Im z|) <= |a + b| + |a - b| = 2 max(|a|, |b|) <= 2; and the bound
  is met: q = 1 + i gives z = (c + e) + i (c - e), which runs over the whole boundary |Re z| + |Im z| = 2 as k
  runs over the box's boundary (scaling q fills the inside). So the factors' box maps onto the product over pairs of
  the diamonds |Re z_p| + |Im z_p| <= 2, and since w is quadratic in the factors, the smallest l-infinity norm of
  factors giving w is sqrt(R(w) / 2). The margin problem on the factors (largest smallest margin over
  |factor|_inf <= 1) is therefore R's hard-margin problem on w: a linear program, solved here like l-infinity's
  (its solution set can be a face too). In the same way the L2 norm on the factors gives ``"pairs"``.

The steepest-descent results hold for the parameters that are trained (Lyu & Li 2020 for gradient descent on
homogeneous models, Tsilivis, Gronich, Vardi & Kempe 2025 for any norm): ``"pairs"`` and ``"factors_linf"`` are
what the L2 and l-infinity geometries become on w when the factors are trained instead of w.

``hard_margin`` solves any such problem from its constraint rows (also for the attention layer of
``selection.py``, with the Frobenius (``"l2"``), entrywise max (``"linf"``) and nuclear norms), in float64 with
maintained solvers: cvxpy's Clarabel for the quadratic and second-order cone problems, SCS for the nuclear norm's
semidefinite one, scipy's HiGHS for the linear program; ``norm_of`` evaluates each R.
Each solution is rescaled so that its smallest margin is exactly 1.

``predict`` turns a geometry's solution into the prediction made before training: the kernel at the norm
training reaches, its margins in and beyond the window, and the target weight and accuracy by evaluation
length from the dilution arithmetic of ``dilution.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .config import ConfigError
from .dilution import DRAWS, MeanField, gaussian_accuracy, kernel_law_from_values
from .encodings import rope_frequencies
from .kernel import BEYOND_MULTIPLE

NORMS = ("l2", "linf", "pairs")  # the kernel's geometries
SOLVER_NORMS = ("l2", "linf", "pairs", "factors_linf", "nuclear", "pair_nuclear")  # what hard_margin solves
PEAKS = 5  # beyond-window peaks a MaxMargin reports by default


def features(theta: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """(n, d) rows (cos delta theta_p ..., sin delta theta_p ...) for each delta: c = features @ w."""
    turn = np.asarray(deltas, dtype=np.float64)[:, None] * theta[None]
    return np.concatenate([np.cos(turn), np.sin(turn)], 1)


def coefficients(amplitude: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """w = (A cos phi, A sin phi) from a pair spectrum's amplitude and phase, (..., P) -> (..., 2P)."""
    return np.concatenate([amplitude * np.cos(phase), amplitude * np.sin(phase)], -1)


def kernel_constraints(offset: int, train_length: int, theta: np.ndarray) -> np.ndarray:
    """(T-1, d) rows f(-K) - f(delta) for every in-window delta != -K, in the order delta = 0, -1, ..."""
    if not 0 < offset < train_length:
        raise ConfigError(f"need 0 < offset ({offset}) < train_length ({train_length})")
    others = np.array([-m for m in range(train_length) if m != offset])
    return features(theta, np.array([-offset])) - features(theta, others)


def _linf_program(g: np.ndarray) -> np.ndarray:
    """argmin max_i |w_i| subject to g @ w >= 1, as a linear program in (w, t) solved by HiGHS."""
    from scipy.optimize import linprog

    M, D = g.shape
    eye, ones = np.eye(D), np.ones((D, 1))
    a_ub = np.block([[-g, np.zeros((M, 1))], [eye, -ones], [-eye, -ones]])
    b_ub = np.concatenate([-np.ones(M), np.zeros(2 * D)])
    cost = np.zeros(D + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * D + [(0, None)], method="highs")
    if res.status != 0:
        raise ConfigError(f"the linear program found no solution ({res.message}): the constraints cannot all hold; "
                          f"check that the target is separable (e.g. offset < train_length, enough RoPE pairs)")
    return res.x[:D]


def hard_margin(g: np.ndarray, norm: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    """argmin R(w) subject to g @ w >= 1, float64: g (M, D) constraint rows -> w (D,), smallest margin exactly 1.

    norm: ``"l2"`` (Euclidean; the Frobenius norm for a matrix), ``"linf"`` (largest |entry|), ``"pairs"``
    (sum over p < D/2 of |(w_p, w_(p + D/2))|, the RoPE pair layout of ``features``), ``"factors_linf"`` (the
    largest over p < D/2 of |w_p| + |w_(p + D/2)|), ``"pair_nuclear"`` (w as X[a, b, c] of ``shape`` (V, V d), c the
    RoPE layout of ``features``: the sum over pairs p of the nuclear norm of the complex V x V matrix
    M_p = X[:, :, p] + i X[:, :, p + d/2]; gradient descent on token tables q, k with M_p = q_p k_p^H, rank one per
    pair, favours it, since (|q_p|^2 + |k_p|^2) / 2 >= |q_p| |k_p| = |M_p|_* there) or ``"nuclear"`` (sum of
    singular values of w reshaped row-major to ``shape``). Raises ConfigError when the constraints cannot all
    hold (the data are not separable).
    """
    if norm not in SOLVER_NORMS:
        raise ConfigError(f"norm={norm!r}: use one of {', '.join(SOLVER_NORMS)}")
    g = np.asarray(g, dtype=np.float64)
    D = g.shape[1]
    if norm == "linf":
        w = _linf_program(g)
    else:
        import cvxpy as cp

        x = cp.Variable(D)
        if norm in ("pairs", "factors_linf") and D % 2:
            raise ConfigError(f"the {norm} norm needs an even number of coefficients (RoPE pairs), got {D}")
        if norm == "l2":
            objective = cp.sum_squares(x)
        elif norm == "pairs":
            objective = cp.sum(cp.norm(cp.vstack([x[: D // 2], x[D // 2:]]), 2, axis=0))
        elif norm == "factors_linf":
            objective = cp.max(cp.abs(x[: D // 2]) + cp.abs(x[D // 2:]))
        elif norm == "pair_nuclear":
            objective = sum(cp.normNuc(cp.bmat([[re, -im], [im, re]])) / 2 for re, im in _pair_matrices(x, shape, D))
        else:
            if shape is None or shape[0] * shape[1] != D:
                raise ConfigError(f"the nuclear norm needs shape=(rows, cols) with rows x cols = {D}, got {shape}")
            objective = cp.normNuc(cp.reshape(x, shape, order="C"))
        problem = cp.Problem(cp.Minimize(objective), [np.unique(g, axis=0) @ x >= 1])
        if norm in ("nuclear", "pair_nuclear"):  # Clarabel stops short of its own tolerance on these semidefinite programs; SCS does not
            problem.solve(solver=cp.SCS, eps_abs=1e-10, eps_rel=1e-10, max_iters=200_000)
        else:
            problem.solve(solver=cp.CLARABEL)
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise ConfigError(f"the {norm} hard-margin problem is {problem.status}: the constraints cannot all hold; "
                              f"check that the target is separable (e.g. offset < train_length, enough RoPE pairs)")
        w = np.asarray(x.value, dtype=np.float64)
    return w / (g @ w).min()


def _pair_matrices(x, shape: tuple[int, int] | None, D: int) -> list:
    """For ``"pair_nuclear"``: the (Re M_p, Im M_p) V x V pairs of cvxpy expressions from x (D,) laid out as
    X[a, b, c] of ``shape`` (V, V d)."""
    import cvxpy as cp

    if shape is None or shape[0] * shape[1] != D or shape[1] % (2 * shape[0]):
        raise ConfigError(f"the pair_nuclear norm needs shape=(V, V d) with d even and V x V d = {D}, got {shape}")
    V, d = shape[0], shape[1] // shape[0]
    base = (np.arange(V)[:, None] * V * d + np.arange(V)[None] * d).ravel()  # X[a, b, 0], row-major over (a, b)
    return [tuple(cp.reshape(x[base + j + part * d // 2], (V, V), order="C") for part in (0, 1))
            for j in range(d // 2)]


def norm_of(w: np.ndarray, norm: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    """R(w) along the last axis for a norm of ``hard_margin`` (w: (..., D); ``shape`` for the nuclear norm)."""
    w = np.asarray(w, dtype=np.float64)
    if norm == "l2":
        return np.linalg.norm(w, axis=-1)
    if norm == "linf":
        return np.abs(w).max(-1)
    if norm == "pairs":
        half = w.shape[-1] // 2
        return np.hypot(w[..., :half], w[..., half:]).sum(-1)
    if norm == "factors_linf":
        half = w.shape[-1] // 2
        return (np.abs(w[..., :half]) + np.abs(w[..., half:])).max(-1)
    if norm == "nuclear":
        return np.linalg.svd(w.reshape(*w.shape[:-1], *shape), compute_uv=False).sum(-1)
    if norm == "pair_nuclear":
        V = shape[0]
        X = w.reshape(*w.shape[:-1], V, V, 2, shape[1] // (2 * V))
        M = np.moveaxis(X[..., 0, :] + 1j * X[..., 1, :], -1, -3)  # (..., P, V, V)
        return np.linalg.svd(M, compute_uv=False).sum((-1, -2))
    raise ConfigError(f"norm={norm!r}: use one of {', '.join(SOLVER_NORMS)}")


def linf_spread(g: np.ndarray, w: np.ndarray, slack: float = 1e-9) -> np.ndarray:
    """(D,) how far each coordinate can move within the l-infinity solution set of ``hard_margin(g, "linf")``.

    For each i, max w_i - min w_i over {v : g @ v >= 1, max|v| <= (1 + slack) max|w|}: all zeros when the
    solution is unique. Two linear programs per coordinate.
    """
    from scipy.optimize import linprog

    bound = (1 + slack) * np.abs(w).max()
    D = len(w)
    out = np.empty(D)
    for i in range(D):
        cost = np.zeros(D)
        cost[i] = 1.0
        ends = [linprog(s * cost, A_ub=-g, b_ub=-np.ones(len(g)), bounds=[(-bound, bound)] * D, method="highs")
                for s in (1.0, -1.0)]
        out[i] = ends[1].x[i] - ends[0].x[i]
    return out


@dataclass
class MaxMargin:
    """The hard-margin kernel for one (offset, training length, frequencies, norm): c(delta) = f(delta) . w."""

    w: np.ndarray  # (d,) pair coefficients (Re z, Im z), margin exactly 1 on the active offsets
    theta: np.ndarray  # (P,) RoPE frequencies, P = d / 2
    offset: int
    train_length: int
    norm: str

    def kernel(self, deltas) -> np.ndarray:
        """(n,) c(delta) of the max-margin solution at offsets ``deltas`` (integers <= 0)."""
        return features(self.theta, np.asarray(deltas)) @ self.w

    @property
    def amplitude(self) -> np.ndarray:
        """(P,) |z_p| of the solution."""
        P = len(self.theta)
        return np.hypot(self.w[:P], self.w[P:])

    def in_window_margin(self) -> float:
        """c(-K) minus the best other in-window offset: 1 for a hard-margin solution."""
        kern = self.kernel(-np.arange(self.train_length))
        return float(kern[self.offset] - np.delete(kern, self.offset).max())

    def beyond_margin(self, max_delta: int) -> float:
        """c(-K) - max over beyond-window offsets delta in [-max_delta, -T]: < 0 means an aliased peak wins."""
        kern = self.kernel(-np.arange(max_delta + 1))
        return float(kern[self.offset] - kern[self.train_length :].max())

    def peaks(self, max_delta: int, count: int = PEAKS) -> list[dict]:
        """The ``count`` beyond-window offsets in [-max_delta, -T] with the largest c(delta), best first:
        dicts with ``delta``, ``value`` c(delta) and ``gap`` c(delta) - c(-K) (>= 0: it beats the target)."""
        kern = self.kernel(-np.arange(max_delta + 1))
        order = np.argsort(-kern[self.train_length :])[:count] + self.train_length
        return [{"delta": -int(m), "value": float(kern[m]), "gap": float(kern[m] - kern[self.offset])} for m in order]


def solve(offset: int, train_length: int, dim: int, rope_base: float = 10000.0, norm: str = "l2") -> MaxMargin:
    """The hard-margin carrier kernel of one geometry ``norm`` in NORMS (see the module docstring)."""
    if norm not in NORMS:
        raise ConfigError(f"norm={norm!r}: use one of {', '.join(NORMS)}")
    theta = rope_frequencies(dim, rope_base).double().numpy()
    w = hard_margin(kernel_constraints(offset, train_length, theta), norm)
    return MaxMargin(w, theta, offset, train_length, norm)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity along the last axis (broadcasting)."""
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@dataclass
class Prediction:
    """What a geometry's max-margin kernel predicts before training, at the kernel norms ``norms``.

    Arrays by length are (n, S) like ``dilution``'s, S = len(norms): one column per norm.
    """

    norm: str  # the geometry
    norms: np.ndarray  # (S,) |w|_2 of the scaled kernel
    lengths: list[int]
    vocab: int
    in_window_margin: np.ndarray  # (S,) c(-K) - best other in-window offset, at that scale
    far_margin: np.ndarray  # (S,) c(-K) - best beyond-window offset out to the longest length, at that scale
    target_weight: np.ndarray  # (n, S) softmax weight on the target (dilution.kernel_law_from_values)
    accuracy: np.ndarray  # (n, S) accuracy with an ideal read-out (dilution.gaussian_accuracy)


def ideal_readout_field(weights: np.ndarray, offset: int, vocab: int) -> MeanField:
    """The dilution law's output picture for a kernel-only model with an ideal read-out, at one length.

    weights: (S, L) attention weights, column j on the key at delta = -j. The output is the weighted sum of
    the keys' one-hot tokens; the target token t gets its weight, every other key (the query itself
    included) holds a uniform random token: mean alpha e_t + (1 - alpha) / V, covariance
    sum_(j != target) alpha_j^2 (I / V - 1 1^T / V^2). One query class (V_a = 1), V target classes.
    """
    w = torch.as_tensor(weights, dtype=torch.float64)
    S, V = w.shape[0], vocab
    alpha = w[:, offset]  # (S,)
    rest = (w**2).sum(1) - alpha**2  # (S,)
    eye = torch.eye(V, dtype=torch.float64)
    mean = alpha[:, None, None] * eye + ((1 - alpha) / V)[:, None, None]  # (S, V_t, V)
    cov = rest[:, None, None] * (eye / V - 1.0 / V**2)  # (S, V, V)
    alpha_at = alpha[:, None, None].expand(S, 1, V)
    return MeanField(w.shape[1], alpha_at, alpha_at, mean[:, None], cov[:, None, None].expand(S, 1, V, V, V))


def predict(solution: MaxMargin, norms: Sequence[float] | np.ndarray, lengths: Sequence[int], vocab: int,
            draws: int = DRAWS, seed: int = 0) -> Prediction:
    """The prediction made before training, from one geometry's max-margin kernel scaled to ``norms``.

    The kernel is w * norm / |w|_2 for each norm: "the norm training reaches" is the Euclidean norm of a
    trained model's pair coefficients, ``np.linalg.norm(coefficients(s.amplitude, s.phase), axis=-1)`` with
    ``s = kernel.pair_spectrum(model)`` (one per member), which grows along training while the direction
    settles; a norm can also be chosen by hand to see how the prediction sharpens with it.

    The target weight at each length is the kernel law (``dilution.kernel_law_from_values``: the softmax of
    c over delta in [-(L-1), 0]); the accuracy is ``dilution.gaussian_accuracy`` for an ideal read-out
    (``ideal_readout_field``). It is a kernel-only prediction: the content part of the logit (which token
    the query and keys hold) is absent, so every key other than the target weighs by its offset alone.
    """
    norms = np.atleast_1d(np.asarray(norms, dtype=np.float64))
    lengths = [int(L) for L in lengths]
    if (norms <= 0).any() or not lengths or min(lengths) <= solution.offset or vocab < 2:
        raise ConfigError(f"need norms > 0 (got {norms.tolist()}), lengths > offset ({solution.offset}) "
                          f"and vocab >= 2 (got {vocab})")
    reach = max(max(lengths), solution.train_length + 1)
    kern = norms[:, None] * solution.kernel(-np.arange(reach))[None] / np.linalg.norm(solution.w)  # (S, reach)
    target = kern[:, solution.offset]
    inside = np.delete(kern[:, : solution.train_length], solution.offset, axis=1).max(1)
    weight = kernel_law_from_values(kern, solution.offset, lengths)  # (n, S)
    accuracy = []
    for L in lengths:
        top = kern[:, :L].max(1, keepdims=True)
        alpha = np.exp(kern[:, :L] - top)
        accuracy.append(gaussian_accuracy(ideal_readout_field(alpha / alpha.sum(1, keepdims=True),
                                                              solution.offset, vocab), draws, seed))
    return Prediction(solution.norm, norms, lengths, vocab, target - inside,
                      target - kern[:, solution.train_length:].max(1), weight, np.stack(accuracy))


def far_field(solution: MaxMargin, multiple: int = BEYOND_MULTIPLE) -> float:
    """The beyond-window margin out to ``multiple`` x the training length, in units of the in-window margin."""
    return solution.beyond_margin(multiple * solution.train_length - 1) / solution.in_window_margin()


def report(solution: MaxMargin, multiple: int = BEYOND_MULTIPLE, peaks: int = PEAKS) -> dict:
    """JSON-ready summary of one max-margin kernel (``python -m lengthgen maxmargin``): the kernel on the window,
    its margins in and beyond it (out to ``multiple`` x the training length) and the best beyond-window peaks."""
    T = solution.train_length
    max_delta = multiple * T - 1
    return {
        "norm": solution.norm, "offset": solution.offset, "train_length": T, "dim": 2 * len(solution.theta),
        "w": solution.w.tolist(), "pair_amplitude": solution.amplitude.tolist(),
        "kernel": {str(-m): float(v) for m, v in enumerate(solution.kernel(-np.arange(T)))},
        "in_window_margin": solution.in_window_margin(), "max_delta": max_delta,
        "beyond_margin": solution.beyond_margin(max_delta), "beyond_over_in_window": far_field(solution, multiple),
        "peaks": solution.peaks(max_delta, peaks),
    }


def format_report(rep: dict) -> str:
    """The terminal text of ``report``."""
    K, T = rep["offset"], rep["train_length"]
    kern = "  ".join(f"{d}:{v:+.3f}" for d, v in rep["kernel"].items())
    lines = [f"max-margin carrier kernel, geometry {rep['norm']}: offset K={K}, training length T={T}, d={rep['dim']}",
             f"c(delta) on the window (delta: value): {kern}",
             f"in-window margin c(-K) - best other in-window offset: {rep['in_window_margin']:.4f}",
             f"beyond-window margin (delta in [-{rep['max_delta']}, -{T}]): {rep['beyond_margin']:+.4f} "
             f"= {rep['beyond_over_in_window']:+.3f} x the in-window margin "
             f"({'the target still wins' if rep['beyond_margin'] > 0 else 'a far offset beats the target'})",
             "predicted far-field peaks (best beyond-window offsets; gap = c(delta) - c(-K), >= 0 beats the target):"]
    lines += [f"  delta {p['delta']:>6}: c = {p['value']:+.4f}, gap {p['gap']:+.4f}" for p in rep["peaks"]]
    return "\n".join(lines)
