"""The exact rungs of the ladder: where what each update rule selects is known, and trajectories that reach it.

Two problems small enough to train to their limit in float64, full batch, with every rule of ``optim``:

* the **kernel rung** (``kernel_rung``): the logit of the key at offset delta is c(delta) = f(delta) . w with the
  RoPE features of ``maxmargin.features``; one query, keys at delta = 0, -1, ..., -(T-1), target delta = -K. Its
  geometries are those of ``maxmargin.NORMS``: ``"l2"``, ``"linf"`` and ``"pairs"``.
* the **RoPE attention rung** (``rope_attention_rung``): the attention rung's token selection (below) with RoPE's multiplicative
  structure, logit sum_p Re(q_(a,p) conj(k_(b,p)) e^(-i delta theta_p)) for query token a and key token b at offset
  delta; trained as the combined per-pair matrices (geometries ``"fro"``, ``"linf"``) or as the token tables
  (gradient descent's geometry there is non-convex; ``"pair_nuclear"`` is its convex relaxation).
* the **attention rung** (``attention_rung``): one softmax attention layer on a FIXED training set of N sequences
  of T i.i.d. tokens; the query is the last position, the target the key K back. The logit of key j is
  x_q^T W x_j with W = Wq Wk^T (d_x x d_x) and inputs x_j = [one-hot token (V) ; f(j) (d)], f(j) the RoPE
  features of the absolute position j. Why these inputs: the position block gives logits
  f(T-1)^T W_pos f(j) = u . f(j), and f(j) is f(j - (T-1)) rotated pair by pair by the fixed angle (T-1) theta_p,
  so the position block alone spans exactly the kernel rung's functions of the offset, while the token blocks
  add the content part a real model also has (its token embedding is a learned table; one-hot tokens are that
  table in its most neutral form). Its geometries (Tarzanagh et al. 2023): ``"fro"`` (the Frobenius attention-SVM,
  the limit of gradient descent on the combined W), ``"nuclear"`` (that of factorised (Wq, Wk)) and ``"linf"``
  (the largest |W_ab|, the l-infinity analogue for sign descent and Adam on W).

  The constraints are x_q^T W (x_target - x_j) >= 1 for EVERY non-target key j, also when key j holds the same
  token as the target: the loss of both rungs is the cross-entropy of the target *position* among the keys
  (written as the softplus of a logsumexp, exact in float64 at any loss), which keeps pushing a same-token key
  down, so its hard-margin limit constrains every key. Such a key stays separable through its position features.
  (A read-out would not mind a same-token key; the position-selection loss is the one the attention-SVM results
  are stated for, Tarzanagh et al. 2023.)

A rung's parameters are either the end-to-end vector itself (``"linear"``: w, or W flattened row-major) or a
factorisation (``"factorised"``: per RoPE pair z_p = q_p conj(k_p) for the kernel, whose bias is the pair norm; Wq
Wk^T with square factors for attention, whose bias is the nuclear norm). ``run`` trains one rule from several
seeded initialisations with ``optim.Optimizer`` and records, at log-spaced checkpoints, the cosine of the
end-to-end iterate to every geometry's solution, two baselines (random directions; seed-to-seed), the loss, the
norm, and the update's anatomy (gradient norm, update size, Adam's sqrt(v_hat) against eps).

Shapes: S members (seeds), N training sequences, J keys per sequence, D end-to-end parameters, C checkpoints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from numba import njit
from tqdm.auto import tqdm

from .config import ConfigError
from .encodings import rope_frequencies
from .maxmargin import NORMS, cosine, features, hard_margin, kernel_constraints, norm_of
from .optim import GEOMETRY, RULES, Optimizer, RuleArrays, schedule, update_in_place
from .task import generator, sample_tokens, target_index
from .thresholds import MAX_MARGIN, REACHED_COSINE
from .train import cpu_threads

KERNEL_GEOMETRIES = NORMS + ("factors_linf",)  # the kernel's three, and what sign descent on its factors selects
ATTENTION_GEOMETRIES = ("fro", "linf", "nuclear")
ROPE_ATTENTION_GEOMETRIES = ("fro", "linf", "pair_nuclear")  # pair_nuclear: sum over pairs of |M_p|_* (complex)
PARAMETRISATIONS = ("linear", "factorised")
SOLVER_NORM = {"l2": "l2", "linf": "linf", "pairs": "pairs", "factors_linf": "factors_linf", "fro": "l2",
               "nuclear": "nuclear", "pair_nuclear": "pair_nuclear"}
STREAM_RUNG, STREAM_INIT, STREAM_RANDOM = 20, 21, 22  # random streams apart from the task's
RANDOM_DIRECTIONS = 200  # random directions behind the random baseline
FLOAT_RANGE = 1e-150  # a sqrt(v_hat) below this: v = g^2 is near float64's smallest numbers (~1e-308)


@dataclass
class Rung:
    """One separable selection problem: logits (S, N, J) of the keys, linear in the end-to-end parameter x (D,).

    ``name``: "kernel" or "attention". ``queries`` (N, d_q) and ``keys`` (N, J, d_k) are the inputs: the logit
    of key j in sequence n is queries[n] @ X @ keys[n, j] with X = x reshaped to ``shape`` (d_q, d_k); the kernel
    rung has d_q = 1 (queries are ones) and ``shape`` (1, d). ``target`` (N,) indexes the target key.
    """

    name: str
    queries: torch.Tensor  # (N, d_q) float64
    keys: torch.Tensor  # (N, J, d_k) float64
    target: torch.Tensor  # (N,) long
    shape: tuple[int, int]  # (d_q, d_k)
    settings: dict  # offset, train_length, dim, rope_base (and vocab, sequences, seed for attention)
    _solutions: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _arrays: tuple | None = field(default=None, repr=False)  # numpy views for ``fast_gradient``

    @property
    def geometries(self) -> tuple[str, ...]:
        return {"kernel": KERNEL_GEOMETRIES, "attention": ATTENTION_GEOMETRIES,
                "rope_attention": ROPE_ATTENTION_GEOMETRIES}[self.name]

    @property
    def dim(self) -> int:
        """D, the number of end-to-end parameters."""
        return self.shape[0] * self.shape[1]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) logits of every key for end-to-end parameters x (S, D)."""
        X = x.reshape(-1, *self.shape)
        return torch.einsum("nq,sqk,njk->snj", self.queries, X, self.keys)

    def _gaps(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) z_j - z_target, with -inf at the target."""
        z = self.logits(x)
        idx = self.target.expand(x.shape[0], -1)[..., None]
        return (z - z.gather(-1, idx)).scatter(-1, idx, float("-inf"))

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """(S,) mean over sequences of the cross-entropy of the target key, log(1 + sum_(j != t) e^(z_j - z_t)),
        computed as softplus(logsumexp of the gaps): accurate in float64 even when it is far below 1e-16."""
        return torch.nn.functional.softplus(torch.logsumexp(self._gaps(x), -1)).mean(-1)

    def logit_gradient(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) d loss / d logits at x (S, D), by hand: sigmoid(s) softmax_(j != t)(z_j) for the other keys
        and -sigmoid(s) for the target, s the logsumexp of the gaps. The target's entry is not p_t - 1, which
        float64 rounds to 0 once the loss is below 1e-16 while the other keys' entries are still resolved."""
        gaps = self._gaps(x)
        s = torch.logsumexp(gaps, -1, keepdim=True)
        g = torch.sigmoid(s) * torch.softmax(gaps, -1)  # zero at the target
        return g.scatter(-1, self.target.expand(x.shape[0], -1)[..., None], -torch.sigmoid(s)) / len(self.target)

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """(S, D) gradient of ``loss`` at x (S, D), exact in float64 at any loss (``logit_gradient``)."""
        return torch.einsum("snj,nq,njk->sqk", self.logit_gradient(x), self.queries, self.keys).flatten(1)

    def fast_gradient(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``gradient`` (same formula, other rounding) for float64 x (S, D) on the CPU, written into ``out`` (S, D)
        by one compiled pass (``_bilinear_gradient``): ~1-10 us a step on these rungs against ~1 ms of torch
        operations, which is what makes 1e6 steps affordable."""
        if self._arrays is None:
            self._arrays = (self.queries.numpy(), self.keys.numpy(), self.target.numpy())
        _bilinear_gradient(*self._arrays, x.numpy().reshape(-1, *self.shape), out.numpy().reshape(-1, *self.shape))
        return out

    def margins(self, x: torch.Tensor) -> torch.Tensor:
        """(S,) the smallest logit gap target minus any other key, over sequences: >= 1 at a hard-margin point."""
        return -self._gaps(x).amax(-1).amax(-1)

    def constraints(self) -> np.ndarray:
        """(N (J-1), D) rows vec(q_n (k_target - k_j)^T) for every sequence n and non-target key j."""
        rows = []
        for n in range(len(self.target)):
            t = int(self.target[n])
            diff = self.keys[n, t][None] - torch.cat([self.keys[n, :t], self.keys[n, t + 1:]])  # (J-1, d_k)
            rows.append((self.queries[n][None, :, None] * diff[:, None, :]).flatten(1))
        return torch.cat(rows).numpy()

    def solution(self, geometry: str) -> np.ndarray:
        """(D,) the hard-margin solution of one geometry in ``geometries`` (solved once, then cached)."""
        if geometry not in self.geometries:
            raise ConfigError(f"geometry={geometry!r}: the {self.name} rung has {', '.join(self.geometries)}")
        if geometry not in self._solutions:
            self._solutions[geometry] = hard_margin(self.constraints(), SOLVER_NORM[geometry], self.shape)
        return self._solutions[geometry]


@njit(cache=True)
def _bilinear_gradient(queries: np.ndarray, keys: np.ndarray, target: np.ndarray, X: np.ndarray,
                       out: np.ndarray) -> None:
    """d loss / d X into out (S, d_q, d_k) for X (S, d_q, d_k), queries (N, d_q), keys (N, J, d_k), target (N,):
    ``Rung.logit_gradient``'s coefficients (sigmoid of the gaps' logsumexp times their softmax; minus the sigmoid at
    the target), contracted with q_n k_nj^T and averaged over sequences. Zero query entries are skipped (the
    attention rung's one-hot block)."""
    S, dq, dk = X.shape
    N, J = keys.shape[0], keys.shape[1]
    u, z, c, v = np.empty(dk), np.empty(J), np.empty(J), np.empty(dk)
    out[:] = 0.0
    for s in range(S):
        for n in range(N):
            u[:] = 0.0
            for a in range(dq):
                qa = queries[n, a]
                if qa != 0.0:
                    for k in range(dk):
                        u[k] += qa * X[s, a, k]
            t = target[n]
            for j in range(J):
                acc = 0.0
                for k in range(dk):
                    acc += u[k] * keys[n, j, k]
                z[j] = acc
            top = -np.inf
            for j in range(J):
                if j != t and z[j] - z[t] > top:
                    top = z[j] - z[t]
            total = 0.0
            for j in range(J):
                c[j] = 0.0 if j == t else np.exp(z[j] - z[t] - top)
                total += c[j]
            lse = top + np.log(total)
            sig = 1.0 / (1.0 + np.exp(-lse)) if lse > -700.0 else np.exp(lse)
            for j in range(J):
                c[j] = (-sig if j == t else sig * c[j] / total) / N
            v[:] = 0.0
            for j in range(J):
                for k in range(dk):
                    v[k] += c[j] * keys[n, j, k]
            for a in range(dq):
                qa = queries[n, a]
                if qa != 0.0:
                    for k in range(dk):
                        out[s, a, k] += qa * v[k]


class RungArrays(NamedTuple):
    """A rung's data as the compiled stretch reads it (``Rung``'s numpy views and its shape)."""

    queries: np.ndarray  # (N, d_q)
    keys: np.ndarray  # (N, J, d_k)
    target: np.ndarray  # (N,) the target key's index
    dq: int
    dk: int


@njit(cache=True)
def _stretch(code: int, kind: int, rung: RungArrays, params: np.ndarray, rule: RuleArrays, power: float, t0: int,
             n: int) -> None:
    """``n`` full-batch updates t0 + 1 .. t0 + n of rule ``optim.RULES[code]`` in one compiled loop: ``end_to_end``,
    ``_bilinear_gradient``, ``pullback`` and ``optim.update_in_place`` at step size rule.lr (t + 1)^-power (rule.lr:
    (S,) the members' base step sizes). ``kind``: 0 linear, 1 the kernel factorised per pair, 2 the attention layer
    factorised (Wq, Wk), 3 the RoPE attention layer factorised (token tables). params, rule.m, rule.v: (S, n_params).
    It compiles ``optim.update_in_place`` in; numba's cache of both is kept per version of every compiled module's
    sources (``jit_cache``), so an edit of either compiles this again."""
    queries, keys, target, dq, dk = rung
    S = params.shape[0]
    D = dq * dk
    x = np.empty((S, D))
    gx = np.empty((S, D))
    grad = np.empty(params.shape)
    rate = np.empty(S)
    P = D // 2
    for i in range(n):
        t = t0 + i + 1
        for s in range(S):
            p = params[s]
            if kind == 0:
                x[s] = p
            elif kind == 1:
                for j in range(P):
                    qr, qi, kr, ki = p[j], p[P + j], p[2 * P + j], p[3 * P + j]
                    x[s, j] = qr * kr + qi * ki
                    x[s, P + j] = qi * kr - qr * ki
            elif kind == 2:
                x[s] = np.dot(p[:D].reshape(dq, dk), p[D:].reshape(dq, dk).T).ravel()
            else:  # RoPE attention: token tables (V, d) each, x[a, b, c]
                V, d = dq, dk // dq
                h = d // 2
                for a in range(V):
                    for b in range(V):
                        for j in range(h):
                            qr, qi = p[a * d + j], p[a * d + h + j]
                            kr, ki = p[V * d + b * d + j], p[V * d + b * d + h + j]
                            x[s, a * dk + b * d + j] = qr * kr + qi * ki
                            x[s, a * dk + b * d + h + j] = qi * kr - qr * ki
        _bilinear_gradient(queries, keys, target, x.reshape(S, dq, dk), gx.reshape(S, dq, dk))
        for s in range(S):
            p, g = params[s], gx[s]
            if kind == 0:
                grad[s] = g
            elif kind == 1:
                for j in range(P):
                    qr, qi, kr, ki = p[j], p[P + j], p[2 * P + j], p[3 * P + j]
                    gre, gim = g[j], g[P + j]
                    grad[s, j] = gre * kr - gim * ki
                    grad[s, P + j] = gre * ki + gim * kr
                    grad[s, 2 * P + j] = gre * qr + gim * qi
                    grad[s, 3 * P + j] = gre * qi - gim * qr
            elif kind == 2:
                G = g.reshape(dq, dk)
                grad[s, :D] = np.dot(G, p[D:].reshape(dq, dk)).ravel()
                grad[s, D:] = np.dot(G.T, p[:D].reshape(dq, dk)).ravel()
            else:
                V, d = dq, dk // dq
                h = d // 2
                grad[s] = 0.0
                for a in range(V):
                    for b in range(V):
                        for j in range(h):
                            gre, gim = g[a * dk + b * d + j], g[a * dk + b * d + h + j]
                            qr, qi = p[a * d + j], p[a * d + h + j]
                            kr, ki = p[V * d + b * d + j], p[V * d + b * d + h + j]
                            grad[s, a * d + j] += gre * kr - gim * ki
                            grad[s, a * d + h + j] += gre * ki + gim * kr
                            grad[s, V * d + b * d + j] += gre * qr + gim * qi
                            grad[s, V * d + b * d + h + j] += gre * qi - gim * qr
            rate[s] = rule.lr[s] * schedule(t, power)
        update_in_place(code, params, grad, RuleArrays(rule.m, rule.v, rate, rule.b1, rule.b2, rule.eps), t)


def kernel_rung(offset: int, train_length: int, dim: int, rope_base: float = 10000.0) -> Rung:
    """Rung (a): c(delta) = f(delta) . w over the keys delta = 0, -1, ..., -(T-1); target delta = -K."""
    theta = rope_frequencies(dim, rope_base).double().numpy()
    kernel_constraints(offset, train_length, theta)  # checks 0 < K < T
    keys = torch.from_numpy(features(theta, -np.arange(train_length)))[None]  # (1, T, d)
    settings = {"offset": offset, "train_length": train_length, "dim": dim, "rope_base": rope_base}
    return Rung("kernel", torch.ones(1, 1, dtype=torch.float64), keys, torch.tensor([offset]), (1, dim), settings)


def _rung_tokens(offset: int, train_length: int, vocab: int, sequences: int, seed: int) -> torch.Tensor:
    """(N, T, V) float64 one-hot tokens of an attention rung's fixed seeded sequences, after checking the setting."""
    if not 0 < offset < train_length or vocab < 2 or sequences < 1:
        raise ConfigError(f"need 0 < offset ({offset}) < train_length ({train_length}), vocab >= 2 ({vocab}) "
                          f"and sequences >= 1 ({sequences})")
    tokens = sample_tokens(vocab, sequences, train_length, generator(seed, STREAM_RUNG, train_length))
    return torch.nn.functional.one_hot(tokens, vocab).double()


def attention_rung(offset: int, train_length: int, vocab: int, dim: int, sequences: int, rope_base: float = 10000.0,
                   seed: int = 0) -> Rung:
    """Rung (b): one attention layer, logit x_q^T W x_j, on a fixed seeded set of ``sequences`` token sequences.

    Inputs x_j = [one-hot(token_j) ; f(j)] (d_x = vocab + dim); keys are the positions 0..T-1 (the query, at
    T-1, included); the target is position T-1-K. D = d_x^2 parameters.
    """
    onehot = _rung_tokens(offset, train_length, vocab, sequences, seed)  # (N, T, V)
    theta = rope_frequencies(dim, rope_base).double().numpy()
    pos = torch.from_numpy(features(theta, np.arange(train_length)))  # (T, d)
    keys = torch.cat([onehot, pos[None].expand(sequences, -1, -1)], -1)  # (N, T, d_x)
    target = torch.full((sequences,), target_index(train_length, offset))
    settings = {"offset": offset, "train_length": train_length, "vocab": vocab, "dim": dim, "rope_base": rope_base,
                "sequences": sequences, "seed": seed}
    dx = vocab + dim
    return Rung("attention", keys[:, -1].clone(), keys, target, (dx, dx), settings)


def rope_attention_rung(offset: int, train_length: int, vocab: int, dim: int, sequences: int,
                        rope_base: float = 10000.0, seed: int = 0) -> Rung:
    """Rung (c): one attention layer with RoPE's multiplicative structure on a fixed seeded set of ``sequences``.

    The query is the last token a, key j holds token b_j at offset delta_j = j - (T-1), and the logit is
    sum_p Re(M_p[a, b_j] e^(-i delta_j theta_p)) = sum_p <R(delta_j theta_p) q_(a,p), k_(b_j,p)> up to RoPE's sign
    convention, with M_p[a, b] = q_(a,p) conj(k_(b,p)) for token tables q, k (V x P complex): the token-selection
    setting of Tarzanagh et al. with RoPE. Linear in X[a, b, :] = (Re M_p[a, b], Im M_p[a, b])_p, so it is a
    ``Rung`` with queries one-hot(a) (V) and keys one-hot(b_j) (x) f(delta_j) (V d): shape (V, V d), D = V^2 d.
    Trained as X itself (``"linear"``) or as the two token tables (``"factorised"``: each M_p is then a rank-one
    complex matrix). The target is position T-1-K; every other key is constrained (the module docstring)."""
    onehot = _rung_tokens(offset, train_length, vocab, sequences, seed)  # (N, T, V)
    theta = rope_frequencies(dim, rope_base).double().numpy()
    pos = torch.from_numpy(features(theta, np.arange(train_length) - (train_length - 1)))  # (T, d)
    keys = (onehot[..., None] * pos[None, :, None, :]).flatten(2)  # (N, T, V d)
    settings = {"offset": offset, "train_length": train_length, "vocab": vocab, "dim": dim, "rope_base": rope_base,
                "sequences": sequences, "seed": seed}
    return Rung("rope_attention", onehot[:, -1].clone(), keys.contiguous(),
                torch.full((sequences,), target_index(train_length, offset)), (vocab, vocab * dim), settings)


def end_to_end(rung: Rung, parametrisation: str, params: torch.Tensor) -> torch.Tensor:
    """(S, D) end-to-end parameters from the trained ones (S, n_params)."""
    if parametrisation == "linear":
        return params
    if rung.name == "kernel":  # params = (q, k), each (Re ..., Im ...) over the P pairs; z_p = q_p conj(k_p)
        qr, qi, kr, ki = params.chunk(4, 1)
        return torch.cat([qr * kr + qi * ki, qi * kr - qr * ki], 1)
    if rung.name == "rope_attention":  # params = (Q, K) token tables (V, d); M_p[a, b] = q_(a,p) conj(k_(b,p))
        V = rung.shape[0]
        (qr, qi), (kr, ki) = (t.reshape(-1, V, 2, t.shape[1] // (2 * V)).unbind(2) for t in params.chunk(2, 1))
        re = torch.einsum("sap,sbp->sabp", qr, kr) + torch.einsum("sap,sbp->sabp", qi, ki)
        im = torch.einsum("sap,sbp->sabp", qi, kr) - torch.einsum("sap,sbp->sabp", qr, ki)
        return torch.cat([re, im], 3).flatten(1)
    wq, wk = (w.reshape(-1, *rung.shape) for w in params.chunk(2, 1))  # params = (Wq, Wk), each d_x x d_x
    return (wq @ wk.transpose(1, 2)).flatten(1)


def pullback(rung: Rung, parametrisation: str, params: torch.Tensor, grad_x: torch.Tensor) -> torch.Tensor:
    """(S, n_params) the gradient with respect to the trained parameters, from grad_x (S, D) by the chain rule
    through ``end_to_end``."""
    if parametrisation == "linear":
        return grad_x
    if rung.name == "kernel":
        qr, qi, kr, ki = params.chunk(4, 1)
        gre, gim = grad_x.chunk(2, 1)
        return torch.cat([gre * kr - gim * ki, gre * ki + gim * kr, gre * qr + gim * qi, gre * qi - gim * qr], 1)
    if rung.name == "rope_attention":
        V = rung.shape[0]
        (qr, qi), (kr, ki) = (t.reshape(-1, V, 2, t.shape[1] // (2 * V)).unbind(2) for t in params.chunk(2, 1))
        gre, gim = grad_x.reshape(len(params), V, V, 2, -1).unbind(3)  # (S, V, V, P) each
        e = lambda spec, a, b: torch.einsum(spec, a, b)  # noqa: E731
        gq = [e("sabp,sbp->sap", gre, kr) - e("sabp,sbp->sap", gim, ki), e("sabp,sbp->sap", gre, ki) + e("sabp,sbp->sap", gim, kr)]
        gk = [e("sabp,sap->sbp", gre, qr) + e("sabp,sap->sbp", gim, qi), e("sabp,sap->sbp", gre, qi) - e("sabp,sap->sbp", gim, qr)]
        return torch.cat([torch.stack(gq, 2).flatten(1), torch.stack(gk, 2).flatten(1)], 1)
    wq, wk = (w.reshape(-1, *rung.shape) for w in params.chunk(2, 1))
    G = grad_x.reshape(-1, *rung.shape)
    return torch.cat([(G @ wk).flatten(1), (G.transpose(1, 2) @ wq).flatten(1)], 1)


def trained_size(rung: Rung, parametrisation: str) -> int:
    """The number of trained parameters: D for ``"linear"``; for ``"factorised"`` twice D on the kernel (q, k per
    pair) and the attention layer (square Wq, Wk), and two token tables V x d on the RoPE attention rung."""
    if parametrisation == "linear":
        return rung.dim
    return 2 * rung.shape[1] if rung.name == "rope_attention" else 2 * rung.dim


def expected_geometry(rung: Rung, rule: str, parametrisation: str = "linear") -> str | None:
    """The geometry of the parameters that are trained, carried to the end-to-end parameters, for this rule and
    parametrisation (Lyu & Li 2020; Tsilivis et al. 2025): on w or W itself the rule's own (``optim.GEOMETRY``;
    Frobenius for the attention matrix); on the kernel's factors the pair norm for L2 rules and ``"factors_linf"``
    for l-infinity ones (``maxmargin``'s derivation); on the RoPE attention rung's token tables None: gradient
    descent there minimises sum_p |M_p|_F over rank-one M_p = q_p k_p^H, a non-convex problem whose convex
    relaxation is ``"pair_nuclear"`` (exact only where that solution is rank one per pair); on the attention factors
    (Wq, Wk) the nuclear norm for L2 rules and None for l-infinity ones: an entrywise bound on Wq and Wk induces on W = Wq Wk^T the gauge of
    {Wq Wk^T : |entries| <= 1}, a projective tensor norm of l-infinity with itself, which is not derived or solved
    here. For Adam the l-infinity geometry is a theorem only on w itself, under its conditions (``conditions``)."""
    own = GEOMETRY[rule]
    if parametrisation == "factorised":
        if rung.name == "kernel":
            return "pairs" if own == "l2" else "factors_linf"
        if rung.name == "rope_attention":  # M_p = q_p k_p^H is rank one: pair_nuclear is only a relaxation
            return None
        return "nuclear" if own == "l2" else None
    return "fro" if (own == "l2" and rung.name != "kernel") else own


def conditions(rule: str, parametrisation: str, power: float, eps: float) -> str:
    """Whether a run is inside the conditions of the result behind its geometry: "theorem" (gd, ngd, sign,
    signum; Adam on w with a decaying step size and eps = 0, Zhang, Zou & Cao 2024), "outside" (Adam at a constant
    step or with eps > 0) or "analogy" (Adam on factors: sign descent's geometry, with no theorem for Adam there)."""
    if rule != "adam":
        return "theorem"
    if parametrisation == "factorised":
        return "analogy"
    return "theorem" if power > 0 and eps == 0 else "outside"


def log_steps(steps: int, count: int) -> np.ndarray:
    """About ``count`` log-spaced checkpoint steps in [1, steps], distinct, always including ``steps``."""
    return np.unique(np.round(np.geomspace(1, steps, count)).astype(int))


@dataclass
class Trajectory:
    """One rule on one rung from S seeded initialisations, at checkpoints ``steps`` (C,).

    One of three records of parameters along training, each kept apart for a reason: this one follows no
    transformer (no Config, no Model) but an update rule on a ladder rung, an exact float64 problem whose
    max-margin solutions are known, so it keeps the end-to-end iterate's cosine and margin ratio to every
    geometry's solution and the rule's own internals (gradient and update norms, Adam's sqrt(v_hat)).
    ``limit_path.DirectionPath`` follows one transformer run through its checkpoints and keeps only its kernel
    direction; ``regimes.StepPath`` keeps whole trained transformers, one separate run per checkpoint."""

    rung: str
    rule: str
    parametrisation: str
    lr: float
    seeds: list[int]
    steps: np.ndarray  # (C,) updates taken at each checkpoint
    cosine: dict[str, np.ndarray]  # geometry -> (S, C) cosine of the end-to-end iterate with that solution
    margin_ratio: dict[str, np.ndarray]  # geometry -> (S, C) normalised margin / that geometry's max margin, <= 1
    random: dict[str, np.ndarray]  # geometry -> (RANDOM_DIRECTIONS,) cosines of isotropic random directions
    seed_to_seed: np.ndarray  # (C,) mean cosine between the end-to-end iterates of different seeds
    loss: np.ndarray  # (S, C)
    norm: np.ndarray  # (S, C) |x|_2 of the end-to-end iterate
    margin: np.ndarray  # (S, C) smallest target-minus-other logit gap (Rung.margins)
    grad_norm: np.ndarray  # (S, C) |gradient|_2 of the trained parameters at the checkpoint's update
    update_max: np.ndarray  # (S, C) max |change of a parameter| / lr in that update (1 for sign; Adam: ~1 or less)
    update_norm: np.ndarray  # (S, C) |change|_2 / lr in that update
    adam_median: np.ndarray | None  # (S, C) median over entries of sqrt(v_hat) (Adam only; compare with eps)
    adam_max: np.ndarray | None  # (S, C) largest sqrt(v_hat)
    eps: float
    seconds: float
    final: np.ndarray  # (S, D) last end-to-end iterate
    power: float = 0.0  # the step size's decay exponent (0: constant lr)

    @property
    def random_level(self) -> dict[str, float]:
        """geometry -> mean |cosine| of a random direction with its solution: what a cosine means by chance."""
        return {g: float(np.abs(c).mean()) for g, c in self.random.items()}

    def final_cosine(self) -> dict[str, np.ndarray]:
        """geometry -> (S,) cosine at the last checkpoint."""
        return {g: c[:, -1] for g, c in self.cosine.items()}


def run(rung: Rung, rule: str, lr: float, steps: int, seeds=(0, 1), parametrisation: str = "linear",
        checkpoints: int = 30, init_scale: float = 0.1, betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, power: float = 0.0) -> Trajectory:
    """Train ``rule`` (``optim.RULES``) on ``rung`` in float64, full batch, for ``steps`` updates of size ``lr``
    (constant, or lr (t + 1)^-power at the t-th update: ``optim.Optimizer``'s decaying schedule).

    Each seed draws its initial parameters as Gaussian entries of norm about ``init_scale`` (a factorisation
    needs a non-zero start); the seeds train as one batched ``optim.Optimizer``. The gradient is
    ``Rung.fast_gradient`` (the cross-entropy's, exact in float64 at any loss) pulled back through ``end_to_end``.
    ``update_max`` and ``update_norm`` are in units of the step size of that update.
    """
    if rule not in RULES or parametrisation not in PARAMETRISATIONS:
        raise ConfigError(f"rule={rule!r}, parametrisation={parametrisation!r}: use a rule in {', '.join(RULES)} "
                          f"and a parametrisation in {', '.join(PARAMETRISATIONS)}")
    if steps < 1 or lr <= 0 or len(seeds) < 1 or not 0 <= power <= 1 or eps < 0:
        raise ConfigError(f"need steps >= 1 ({steps}), lr > 0 ({lr}), at least one seed, a step-size decay power "
                          f"in [0, 1] ({power}) and eps >= 0 ({eps})")
    n_params = trained_size(rung, parametrisation)
    init = [torch.randn(n_params, generator=generator(s, STREAM_INIT, n_params), dtype=torch.float64) for s in seeds]
    params = torch.stack(init) * (init_scale / np.sqrt(n_params))
    opt = Optimizer(rule, params, [lr] * len(seeds), betas=betas, eps=eps, power=power)
    solutions = {g: rung.solution(g) for g in rung.geometries}
    gen = generator(0, STREAM_RANDOM, rung.dim)
    rand = torch.randn(RANDOM_DIRECTIONS, rung.dim, generator=gen, dtype=torch.float64).numpy()
    marks = log_steps(steps, checkpoints)
    rec: dict[str, list] = {k: [] for k in ("x", "loss", "margin", "grad", "umax", "unorm", "amed", "amax")}
    grad_x = torch.empty(len(seeds), rung.dim, dtype=torch.float64)
    kind = 0 if parametrisation == "linear" else {"kernel": 1, "attention": 2, "rope_attention": 3}[rung.name]
    moments = [(torch.zeros_like(params) if a is None else a).numpy() for a in (opt.m, opt.v)]
    rung.fast_gradient(end_to_end(rung, parametrisation, opt.params), grad_x)  # sets rung's numpy views
    start = time.perf_counter()
    with cpu_threads(torch.device("cpu")):  # one thread: each step is a few tiny operations
        for mark in marks:  # compiled stretches up to each checkpoint, whose update is taken apart
            _stretch(RULES.index(rule), kind, RungArrays(*rung._arrays, *rung.shape), opt.params.numpy(),
                     RuleArrays(*moments, opt.lr[:, 0].numpy(), *betas, eps), power, opt.t, int(mark) - 1 - opt.t)
            opt.t = int(mark) - 1
            x = end_to_end(rung, parametrisation, opt.params)
            grad = pullback(rung, parametrisation, opt.params, rung.fast_gradient(x, grad_x))
            before, rec_grad = opt.params.clone(), grad.norm(dim=1)
            opt.step(grad)
            change = (opt.params - before) / opt.current_lr()
            x = end_to_end(rung, parametrisation, opt.params)
            rec["loss"].append(rung.loss(x))
            rec["margin"].append(rung.margins(x))
            rec["x"].append(x.numpy().copy())
            rec["grad"].append(rec_grad)
            rec["umax"].append(change.abs().amax(1))
            rec["unorm"].append(change.norm(dim=1))
            if rule == "adam":
                denom = opt.adam_denominator()
                rec["amed"].append(denom.median(1).values)
                rec["amax"].append(denom.amax(1))
    seconds = time.perf_counter() - start
    xs = np.stack(rec["x"], 1)  # (S, C, D)
    stack = lambda k: torch.stack(rec[k], 1).numpy() if rec[k] else None  # noqa: E731
    margin = stack("margin")
    S = len(seeds)
    pairs = [(i, j) for i in range(S) for j in range(i + 1, S)]
    seed_to_seed = (np.mean([cosine(xs[i], xs[j]) for i, j in pairs], 0) if pairs else np.full(len(marks), np.nan))
    return Trajectory(
        rung=rung.name, rule=rule, parametrisation=parametrisation, lr=lr, seeds=list(seeds), steps=marks,
        cosine={g: cosine(xs, sol) for g, sol in solutions.items()},
        margin_ratio={g: margin * norm_of(sol, SOLVER_NORM[g], rung.shape) / norm_of(xs, SOLVER_NORM[g], rung.shape)
                      for g, sol in solutions.items()},
        random={g: cosine(rand, sol) for g, sol in solutions.items()},
        seed_to_seed=seed_to_seed, loss=stack("loss"), norm=np.linalg.norm(xs, axis=-1), margin=margin,
        grad_norm=stack("grad"), update_max=stack("umax"), update_norm=stack("unorm"),
        adam_median=stack("amed"), adam_max=stack("amax"), eps=eps, seconds=seconds, final=xs[:, -1], power=power,
    )


@dataclass(frozen=True)
class RuleSettings:
    """One trajectory's settings for ``run``: the rule, its step size (constant, or lr (t + 1)^-power at the t-th
    update) and horizon, and what it trains. Not a ``recipes.Recipe``: that one sets the training fields of a
    transformer's ``Config``; this one sets how an update rule trains a ladder rung (no Config, no model)."""

    rule: str
    lr: float
    steps: int
    parametrisation: str = "linear"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    init_scale: float = 0.1
    power: float = 0.0

    @property
    def schedule(self) -> str:
        """The step size in words: "lr 0.01" or "0.01 (t+2)^-0.5" (t counted from 0, Zhang et al.'s form)."""
        return f"lr {self.lr:g}" if self.power == 0 else f"{self.lr:g} (t+2)^-{self.power:g}"

    @property
    def label(self) -> str:
        extra = "" if self.betas == (0.9, 0.999) and self.eps == 1e-8 else f", b2={self.betas[1]:g}, eps={self.eps:g}"
        fact = f", factorised, init {self.init_scale:g}" if self.parametrisation == "factorised" else ""
        return f"{self.rule} ({self.schedule}{extra}{fact}, {self.steps} steps)"


def _rung_rules(ngd_lr: float, ngd_steps: int, adam_theorem_steps: int, ngd_factorised_steps: int
                ) -> list[RuleSettings]:
    """One rung's rules, in the ladder's order; what differs between rungs is normalised gradient descent's step
    and horizons and the horizon of Adam under its theorem."""
    return [RuleSettings("gd", 1.0, 100_000), RuleSettings("ngd", ngd_lr, ngd_steps),
            RuleSettings("sign", 0.01, 10_000), RuleSettings("signum", 0.01, 10_000), RuleSettings("adam", 0.01, 100_000),
            RuleSettings("adam", 0.01, adam_theorem_steps, eps=0.0, power=0.5),
            RuleSettings("gd", 1.0, 100_000, "factorised"),
            RuleSettings("ngd", 0.001, ngd_factorised_steps, "factorised", init_scale=1e-3),
            RuleSettings("sign", 0.001, 20_000, "factorised")]


# The ladder's check, per rung: every rule at a step size and horizon where it settles (measured on this
# machine; ``ladder(..., scale=0.1)`` shortens every horizon for quick runs). The factorisations train with gradient
# descent (the rule the pair-norm and nuclear-norm results are stated for; slow, like GD's 1/log t), with
# normalised gradient descent from a small start (the same geometry reached within the budget: its end-to-end
# norm grows like t^2, so its step is small to keep the loss inside float64's range), and with sign descent (whose
# geometry on the kernel's factors is ``"factors_linf"``). Adam appears with the book's step (constant lr 0.01,
# eps 1e-8: outside its theorem's conditions) and under them: a decaying step 0.01 (t+2)^-0.5 and eps = 0
# (Zhang, Zou & Cao 2024; ``optim.Optimizer`` leaves coordinates with v = 0, such as W's rows for tokens that never
# sit at the query, where they are). Every horizon keeps the smallest margin below ~700, where float64's
# exp(-margin) and so the gradient underflow to 0.
LADDER = {"kernel": _rung_rules(0.1, 10_000, 1_000_000, 50_000),
          "attention": _rung_rules(0.05, 10_000, 1_000_000, 40_000),
          "rope_attention": _rung_rules(0.05, 20_000, 300_000, 40_000)}

# Adam under and outside its theorem on the kernel rung (``chapters.ch10_selection.adam_table``): the usual betas
# (0.9, 0.999), decaying steps eta_0 (t+2)^-a for a in {0.5, 0.7, 1} and constant steps with lr / (1 - beta2) in {0.1,
# 1, 10}, each with eps = 0 (the theorem's) and 1e-8 (the default), 1e6 steps. eta_0 per a keeps the margin inside
# float64's range at 1e6 steps while it still grows.
ADAM_TABLE = [RuleSettings("adam", lr, 1_000_000, eps=eps, power=a)
              for lr, a in [(0.01, 0.5), (0.03, 0.7), (0.3, 1.0), (1e-4, 0.0), (1e-3, 0.0), (1e-2, 0.0)]
              for eps in (0.0, 1e-8)]


def ladder(rung: Rung, recipes: list[RuleSettings] | None = None, scale: float = 1.0, seeds=(0, 1),
           checkpoints: int = 30, progress: bool = False) -> list[Trajectory]:
    """``run`` every recipe (default ``LADDER[rung.name]``) on ``rung``, horizons multiplied by ``scale``
    (``progress``: a tqdm bar over the recipes)."""
    recipes = LADDER[rung.name] if recipes is None else recipes
    return [run(rung, r.rule, r.lr, max(1, round(r.steps * scale)), seeds, r.parametrisation, checkpoints,
                r.init_scale, r.betas, r.eps, r.power)
            for r in tqdm(recipes, desc=f"{rung.name} rung", unit="rule", disable=not progress)]


def adam_runs(rung: Rung, recipes: list[RuleSettings] | None = None, scale: float = 1.0, seeds=(0, 1),
              progress: bool = False) -> list[Trajectory]:
    """``run`` every recipe (default ``ADAM_TABLE``) on ``rung``, horizons times ``scale``, with three checkpoints a
    decade, so that every power of ten up to a horizon that is one is a checkpoint (the columns of
    ``chapters.ch10_selection.adam_table``); ``progress``: a tqdm bar over the recipes."""
    recipes = ADAM_TABLE if recipes is None else recipes
    out = []
    for r in tqdm(recipes, desc="Adam table", unit="run", disable=not progress):
        steps = max(1, round(r.steps * scale))
        out.append(run(rung, r.rule, r.lr, steps, seeds, r.parametrisation, 3 * round(np.log10(steps)) + 1,
                       r.init_scale, r.betas, r.eps, r.power))
    return out


def summary(tr: Trajectory, rung: Rung) -> dict:
    """One row of the ladder's table: the last checkpoint's cosines and margin ratios per geometry (mean and
    smallest over seeds), the baselines, and whether the rule reached its own geometry: ``reached_own`` (cosine
    >= ``thresholds.REACHED_COSINE`` to the solver's solution, every seed) and ``own_margin`` (margin ratio >=
    ``thresholds.MAX_MARGIN``, every seed: the right test where the solution is a face, not a point, as
    l-infinity's can be: ``maxmargin.linf_spread``).
    ``conditions``: inside the result's conditions or not (``conditions``); ``rate``: the own geometry's margin ratio
    gained per decade of steps over the last decade (the slope against log10 t; ``rate``)."""
    own = expected_geometry(rung, tr.rule, tr.parametrisation)
    row = {"rung": tr.rung, "rule": tr.rule, "parametrisation": tr.parametrisation, "lr": tr.lr, "power": tr.power,
           "eps": tr.eps, "steps": int(tr.steps[-1]), "own": own, "seconds": tr.seconds,
           "loss": float(tr.loss[:, -1].mean()), "seed_to_seed": float(tr.seed_to_seed[-1]),
           "conditions": conditions(tr.rule, tr.parametrisation, tr.power, tr.eps)}
    for g in rung.geometries:
        row[f"cos_{g}"] = float(tr.cosine[g][:, -1].mean())
        row[f"cos_{g}_min"] = float(tr.cosine[g][:, -1].min())
        row[f"ratio_{g}"] = float(tr.margin_ratio[g][:, -1].mean())
        row[f"ratio_{g}_min"] = float(tr.margin_ratio[g][:, -1].min())
        row[f"random_{g}"] = tr.random_level[g]
    row["reached_own"] = None if own is None else bool(row[f"cos_{own}_min"] >= REACHED_COSINE)
    row["own_margin"] = None if own is None else bool(row[f"ratio_{own}_min"] >= MAX_MARGIN)
    row["rate"] = None if own is None else rate(tr, own)
    return row


def rate(tr: Trajectory, geometry: str) -> float:
    """The margin ratio to ``geometry`` gained per decade of steps over the run's last decade (mean over seeds;
    the last checkpoint against the one nearest a tenth of the steps): ~0 where it has settled, > 0 where it is
    still climbing (the 1/log t approach of gradient descent shows as a steady small gain per decade)."""
    ratio = tr.margin_ratio[geometry].mean(0)
    i = int(np.argmin(np.abs(np.log(tr.steps / (tr.steps[-1] / 10)))))
    span = np.log10(tr.steps[-1] / tr.steps[i])
    return float((ratio[-1] - ratio[i]) / span) if span > 0 else float("nan")


# Whether a rule reached its own geometry ---------------------------------------------------------------------------

def reached(row: dict) -> bool:
    """Whether a ``summary`` row's rule reached its own geometry, by the cosine or by the margin ratio."""
    return bool(row["reached_own"] or row["own_margin"])


# Adam under its theorem and outside it -----------------------------------------------------------------------------

def adam_numbers(tr: Trajectory, at: int = -1) -> dict[str, float]:
    """Adam's update at checkpoint ``at`` (default the last) of ``tr`` (means over seeds): its ``eps``, the median sqrt(v_hat) over
    eps (``median_over_eps``, inf for eps = 0), the largest update in units of that step's size (``update_max``),
    the gradient norm, and the last step size over 1 - beta2 (``lr_over_memory``: how far the iterate moves, in
    step sizes, within v's memory of ~1/(1 - beta2) steps; computed for the usual beta2 = 0.999)."""
    if tr.adam_median is None:
        raise ConfigError(f"rule {tr.rule!r}: Adam's numbers need an Adam run (rule='adam')")
    median = float(tr.adam_median[:, at].mean())
    last_lr = tr.lr * (tr.steps[at] + 1) ** -tr.power
    return {"eps": tr.eps, "median_over_eps": median / tr.eps if tr.eps else float("inf"),
            "update_max": float(tr.update_max[:, at].mean()), "grad_norm": float(tr.grad_norm[:, at].mean()),
            "lr_over_memory": float(last_lr / (1 - 0.999))}


def adam_ends(tr: Trajectory, at: int = -1) -> str:
    """What decides where an Adam run ends, read from its anatomy at the last checkpoint (``adam_numbers``):
    "eps" where eps dominates the denominator (median sqrt(v_hat) <= eps / 10: the step is ~ m_hat / eps, gradient
    descent's); "memory of v" where the largest update is below half the step size (v still holds the larger
    gradients of ~1/(1 - beta2) steps ago, so the update is well below sign descent's); otherwise "step size" (the
    update is sign-like, and how far the direction has come is set by the sum of the step sizes); "float64 range"
    where the median sqrt(v_hat) is below ``FLOAT_RANGE`` (the squared gradient, about exp(-2 x margin), reaches
    float64's smallest numbers: v stops resolving it, and with eps = 0 coordinates whose v is 0 stop moving)."""
    n = adam_numbers(tr, at)
    if n["median_over_eps"] <= 0.1:
        return "eps"
    if tr.adam_median[:, at].mean() < FLOAT_RANGE:
        return "float64 range"
    return "memory of v" if n["update_max"] < 0.5 else "step size"


def adam_course(tr: Trajectory) -> str:
    """``adam_ends`` at the last checkpoint, and where that is float64's range, also what held the update at the
    last checkpoint before it and the first step in range ("memory of v, then float64 range from step 46,416")."""
    ends = adam_ends(tr)
    if ends != "float64 range":
        return ends
    inside = np.flatnonzero(tr.adam_median.mean(0) >= FLOAT_RANGE)
    if not len(inside):
        return ends
    i = int(inside[-1])
    return f"{adam_ends(tr, i)}, then float64 range from step {int(tr.steps[i + 1]):,}"


def decades(steps: np.ndarray) -> list[int]:
    """The checkpoints of ``steps`` that are powers of ten from 100 on."""
    return [int(s) for s in steps if s >= 100 and np.isclose(np.log10(s), round(np.log10(s)))]
