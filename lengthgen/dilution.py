"""The attention-dilution law: the target's attention weight (and the accuracy) at any length, predicted.

Three predictions of the mean attention weight alpha(L) on the target x_(L-K), for a one-layer model:

* simple law: alpha(L) = 1 / (1 + (L-1) rho), with rho fitted once at the training length;
* kernel law: the softmax over delta in [-(L-1), 0] of the carrier kernel c(delta), taken at -K
  (weights only, mean token vectors);
* mean-field law: the same softmax with the token content kept: for each query token a and target token t,
  alpha(a, t) = w_t / (w_t + w_self + sum_{other delta} E_b w(a,b,delta)), w = e^{logit}, averaged over a
  and t (the background sum replaced by its mean; weights only);
* content law: the exact average over the background tokens too, with no sampling. For independent
  background tokens, 1/D = int_0^inf e^{-sD} ds turns E[w_t / (w_t + w_self + sum_j w_j)] into
  w_t int_0^inf e^{-s (w_t + w_self)} prod_j E_b[e^{-s w(a,b,j)}] ds, a one-dimensional integral
  (quadrature on a log grid) of the product of each position's Laplace transform.

The accuracy prediction uses the same tables for the read-out: given (a, t) the output logits are the
attention-weighted sum of the value read-outs u(b, j) = h_(b,j) W_v W_o U plus the residual h_q U. The
target gets its exact (content-law) weight; the other keys share the rest, their sum replaced by a Gaussian
with the mean-field mean and (delta-method) covariance; the share of Gaussian draws whose argmax is t is
the predicted accuracy. Nothing is fitted on any evaluation length.

Shapes: S members, V vocabulary (a: query token, t: target token, b: background token), n lengths.
Arrays by length are (n, S), like ``Evaluation.target_weight()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .config import ConfigError, check_length
from .encodings import TRAITS
from .evaluate import evaluate
from .kernel import carrier_kernel, logit_table
from .model import Model
from .task import generator, target_index
from .train import Trained

LAWS = ("simple", "kernel", "mean_field", "content")
DRAWS = 512  # Gaussian draws per (query, target) pair in the accuracy prediction
STREAM_PREDICT = 11  # random stream of those draws, apart from the task's streams
QUAD_LOW, QUAD_HIGH = 1e-9, 40.0  # the Laplace integral's range in units of 1 / (the softmax denominator)
QUAD_PER_DECADE = 8  # its log-spaced nodes per decade of s


def check_one_layer(model: Model, readout: bool = False) -> None:
    c = model.config
    if c.layers != 1 or (readout and c.mlp):
        need = "layers=1 and mlp=False" if readout else "layers=1"
        raise ConfigError(
            f"layers={c.layers}, mlp={c.mlp}: the dilution law describes a one-layer model ({need}); "
            f"for deeper models measure attention with pinning.measure_lengths (attention by layer)"
        )


def fit_rho(alpha: np.ndarray, length: int) -> np.ndarray:
    """rho such that 1 / (1 + (length-1) rho) = alpha, elementwise."""
    if length < 2:
        raise ConfigError(f"length={length}: fitting rho needs a length of at least 2")
    return (1.0 / np.asarray(alpha, dtype=np.float64) - 1.0) / (length - 1)


def simple_law(rho: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """alpha(L) = 1 / (1 + (L-1) rho): (n, *rho.shape)."""
    L = np.asarray(lengths, dtype=np.float64).reshape((-1,) + (1,) * np.ndim(rho))
    return 1.0 / (1.0 + (L - 1) * np.asarray(rho, dtype=np.float64))


def kernel_law_from_values(kern: np.ndarray, offset: int, lengths: Sequence[int]) -> np.ndarray:
    """Softmax of c over delta in [-(L-1), 0], taken at -K. kern: (S, m), column j is delta = -j,
    m >= max(lengths). Returns (n, S)."""
    kern = np.asarray(kern, dtype=np.float64)
    if kern.shape[1] < max(lengths):
        raise ConfigError(f"the kernel covers {kern.shape[1]} offsets; the longest length needs {max(lengths)}")
    out = []
    for L in lengths:
        window = kern[:, :L]
        top = window.max(1, keepdims=True)
        out.append(np.exp(kern[:, offset] - top[:, 0]) / np.exp(window - top).sum(1))
    return np.stack(out)


def kernel_law(model: Model, lengths: Sequence[int]) -> np.ndarray:
    """The kernel law from the weights: (n, S). Absolute encodings use the kernel at each length."""
    check_one_layer(model)
    K = model.config.offset
    if not TRAITS[model.config.encoding].translation_invariant:
        return np.concatenate([
            kernel_law_from_values(carrier_kernel(model, -torch.arange(L), length=L).numpy(), K, [L]) for L in lengths
        ])
    return kernel_law_from_values(carrier_kernel(model, -torch.arange(max(lengths))).numpy(), K, lengths)


@dataclass
class MeanField:
    """The mean-field picture of one length, per member and (query token a, target token t)."""

    length: int
    alpha: torch.Tensor  # (S, V_a, V_t) target weight, exact over the background tokens (content law)
    alpha_first_order: torch.Tensor  # (S, V_a, V_t) target weight with the background sum at its mean
    mean: torch.Tensor  # (S, V_a, V_t, V) expected output logits
    cov: torch.Tensor  # (S, V_a, V_t, V, V) covariance of the output logits from the background tokens


@torch.no_grad()
def value_readout(model: Model, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(u (S, V_b, L, V): output logits from attending with weight 1 to token b at position j,
    r (S, V_a, V): the residual read-out of query token a at position L-1, zero without residual)."""
    layer = model.layers[0]
    V = model.config.vocab
    h = model.inputs(torch.arange(V, device=model.embed.device)[:, None].repeat(1, length))  # (S, V, L, d)
    u = (h @ layer.wv[:, None] @ layer.wo[:, None] @ model.unembed[:, None]).double().cpu()
    r = (h[:, :, -1] @ model.unembed).double().cpu()
    return u, (r if model.config.residual else torch.zeros_like(r))


def mean_field(model: Model, length: int) -> MeanField:
    """The target weight and the output-logit distribution for every (a, t) at one length (weights only)."""
    check_one_layer(model, readout=True)
    c = model.config
    check_length(c, length)
    tpos = target_index(length, c.offset)
    table, self_logit = logit_table(model, length)  # (S, A, B, J), (S, A)
    top = torch.maximum(table.amax((2, 3)), self_logit)
    w, w_self = (table - top[..., None, None]).exp(), (self_logit - top).exp()
    u, r = value_readout(model, length)
    V = c.vocab
    w_t, u_t = w[..., tpos], u[:, :, tpos]  # (S, A, T), (S, T, V)
    keep = [j for j in range(length - 1) if j != tpos]
    wb, ub = w[..., keep], u[:, :, keep]  # background keys: (S, A, B, J'), (S, B, J', V)
    f = wb.mean(2)  # (S, A, J') E_b w
    e = torch.einsum("sabj,sbjv->sajv", wb, ub) / V  # E_b w u
    D = w_t + w_self[..., None] + f.sum(-1)[..., None]  # (S, A, T)
    u_self = u[:, :, -1]  # (S, A, V): the query token's own value
    N = w_t[..., None] * u_t[:, None] + (w_self[..., None] * u_self)[:, :, None] + e.sum(2)[:, :, None]
    m = N / D[..., None]  # (S, A, T, V) attention output
    w2 = wb**2
    G2 = torch.einsum("sabj,sbjv,sbjw->savw", w2, ub, ub) / V
    g1 = torch.einsum("sabj,sbjv->sav", w2, ub) / V - torch.einsum("saj,sajv->sav", f, e)
    g0 = w2.mean(2).sum(-1) - (f**2).sum(-1)  # (S, A)
    H = G2 - torch.einsum("sajv,sajw->savw", e, e)  # (S, A, V, V)
    g1 = g1[:, :, None]
    outer = lambda x, y: x[..., :, None] * y[..., None, :]  # noqa: E731
    cov = H[:, :, None] - outer(m, g1) - outer(g1, m) + g0[..., None, None, None] * outer(m, m)
    cov = cov / (D**2)[..., None, None]
    # The first-order target weight misses Jensen's gap when a few keys carry heavy, token-dependent weight;
    # keep the exact one and give the non-target keys the rest, with their covariance rescaled to match.
    first, exact = w_t / D, exact_target_weight(table, self_logit, tpos)
    others = (1 - first).clamp(min=1e-12)  # exact >= first (Jensen), so both vanish together
    rest = (m - first[..., None] * u_t[:, None]) / others[..., None]  # mean output of the non-target keys
    mean = exact[..., None] * u_t[:, None] + (1 - exact)[..., None] * rest + r[:, :, None]
    cov = cov * (((1 - exact) / others) ** 2)[..., None, None]
    return MeanField(length, exact, first, mean, cov)


def mean_field_law(model: Model, lengths: Sequence[int]) -> np.ndarray:
    """The mean-field content law: mean over (a, t) of the first-order target weight, (n, S)."""
    return np.stack([mean_field(model, L).alpha_first_order.mean((1, 2)).numpy() for L in lengths])


def exact_target_weight(table: torch.Tensor, self_logit: torch.Tensor, tpos: int) -> torch.Tensor:
    """E over background tokens of the softmax weight on the target, for each (a, t): (S, V_a, V_t).

    table: (S, V_a, V_b, J) logits on key position j < L-1 (``kernel.logit_table``); self_logit (S, V_a);
    tpos: the target's key position. Exact up to the quadrature of the Laplace integral (module docstring):
    the denominator D lies in [d_min, d_max], so s runs log-spaced over [QUAD_LOW / d_max, QUAD_HIGH / d_min]
    (the parts left out weigh below 1e-9 alpha and e^-40).
    """
    top = torch.maximum(table.amax((2, 3)), self_logit)
    w, w_self = (table - top[..., None, None]).exp(), (self_logit - top).exp()
    w_t = w[..., tpos]  # (S, A, T)
    keep = [j for j in range(table.shape[-1]) if j != tpos]
    wb = w[..., keep]  # (S, A, B, J')
    out = torch.empty_like(w_t)
    for s in range(w.shape[0]):
        for a in range(w.shape[1]):
            bg, wt, ws = wb[s, a], w_t[s, a], w_self[s, a]
            d_max = float(wt.max() + ws + bg.amax(0).sum())
            d_min = float(wt.min() + ws + bg.amin(0).sum())
            lo, hi = np.log(QUAD_LOW / d_max), np.log(QUAD_HIGH / d_min)
            y = torch.linspace(lo, hi, int(np.ceil(QUAD_PER_DECADE * (hi - lo) / np.log(10))) + 1, dtype=torch.float64)
            sv = y.exp()  # the integration variable s, log-spaced: ds = s dy
            log_prod = (torch.logsumexp(-sv * bg[..., None], dim=0) - np.log(bg.shape[0])).sum(0)  # (n,)
            integrand = wt[:, None] * (log_prod - sv * (wt + ws)[:, None]).exp() * sv
            out[s, a] = torch.trapezoid(integrand, y, dim=-1)
    return out


def content_law(model: Model, lengths: Sequence[int]) -> np.ndarray:
    """The exact content-averaged law: mean over (a, t) of ``exact_target_weight``, (n, S). Weights only."""
    check_one_layer(model)
    out = []
    for L in lengths:
        check_length(model.config, L)
        table, self_logit = logit_table(model, L)
        out.append(exact_target_weight(table, self_logit, target_index(L, model.config.offset)).mean((1, 2)).numpy())
    return np.stack(out)


def gaussian_accuracy(mf: MeanField, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """(S,) mean over (a, t) of P(argmax of N(mean, cov) = t), by seeded Monte Carlo."""
    S, A, T, V = mf.mean.shape
    gen = generator(seed, STREAM_PREDICT, mf.length)
    evals, evecs = torch.linalg.eigh((mf.cov + mf.cov.transpose(-1, -2)) / 2)
    root = evecs * evals.clamp(min=0).sqrt()[..., None, :]  # cov = root root^T
    truth = torch.arange(T)[None, None, :, None]
    out = []
    for s in range(S):
        z = torch.randn((A, T, draws, V), generator=gen, dtype=torch.float64)
        logits = mf.mean[s][:, :, None] + z @ root[s].transpose(-1, -2)
        out.append((logits.argmax(-1) == truth[0]).double().mean().item())
    return np.array(out)


def predict_accuracy(model: Model, lengths: Sequence[int], draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """Predicted accuracy (n, S) from the kernel and the read-out alone."""
    return np.stack([gaussian_accuracy(mean_field(model, L), draws, seed) for L in lengths])


def r_squared(predicted: np.ndarray, measured: np.ndarray) -> float:
    """1 - SS_res / SS_tot over all entries (nan when the measurements do not vary)."""
    p, m = np.asarray(predicted, dtype=np.float64).ravel(), np.asarray(measured, dtype=np.float64).ravel()
    total = ((m - m.mean()) ** 2).sum()
    return float(1 - ((p - m) ** 2).sum() / total) if total > 0 else float("nan")


@dataclass
class Comparison:
    """Predicted against measured target weight and accuracy for one trained ensemble (one offset)."""

    offset: int
    train_length: int
    seeds: list[int]
    lengths: list[int]
    rho: np.ndarray  # (S,) fitted at the training length
    measured_weight: np.ndarray  # (n, S)
    measured_accuracy: np.ndarray  # (n, S)
    predicted_weight: dict[str, np.ndarray]  # law -> (n, S)
    predicted_accuracy: np.ndarray  # (n, S)

    def r2(self, law: str) -> float:
        return r_squared(self.predicted_weight[law], self.measured_weight)

    def accuracy_error(self) -> tuple[float, float]:
        """(mean, worst) absolute error of the accuracy prediction."""
        err = np.abs(self.predicted_accuracy - self.measured_accuracy)
        return float(err.mean()), float(err.max())


def compare_laws(
    trained: Trained, lengths: Sequence[int], samples: int = 1000, seed: int = 0, draws: int = DRAWS
) -> Comparison:
    """Measure target weight and accuracy at ``lengths`` and predict them with every law."""
    model, c = trained.model, trained.config
    check_one_layer(model, readout=True)
    lengths = [int(L) for L in lengths]
    ev = evaluate(trained, sorted(set(lengths) | {c.train_length}), samples, seed)
    rho = fit_rho(ev.by_length[c.train_length].target_weight, c.train_length)
    fields = [mean_field(model, L) for L in lengths]
    return Comparison(
        offset=c.offset,
        train_length=c.train_length,
        seeds=list(trained.seeds),
        lengths=lengths,
        rho=rho,
        measured_weight=np.stack([ev.by_length[L].target_weight for L in lengths]),
        measured_accuracy=np.stack([ev.by_length[L].accuracy for L in lengths]),
        predicted_weight={
            "simple": simple_law(rho, lengths),
            "kernel": kernel_law(model, lengths),
            "mean_field": np.stack([f.alpha_first_order.mean((1, 2)).numpy() for f in fields]),
            "content": np.stack([f.alpha.mean((1, 2)).numpy() for f in fields]),
        },
        predicted_accuracy=np.stack([gaussian_accuracy(f, draws, seed) for f in fields]),
    )


def pooled(comparisons: Sequence[Comparison]) -> dict:
    """R^2 per law and accuracy error pooled over several comparisons (e.g. offsets)."""
    weight = np.concatenate([x.measured_weight.ravel() for x in comparisons])
    acc = np.concatenate([x.measured_accuracy.ravel() for x in comparisons])
    pred_acc = np.concatenate([x.predicted_accuracy.ravel() for x in comparisons])
    err = np.abs(pred_acc - acc)
    return {
        "r2": {
            law: r_squared(np.concatenate([x.predicted_weight[law].ravel() for x in comparisons]), weight)
            for law in LAWS
        },
        "accuracy_mae": float(err.mean()),
        "accuracy_worst": float(err.max()),
        "points": int(weight.size),
    }
