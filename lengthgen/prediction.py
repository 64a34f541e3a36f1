"""What training selects on the real one-layer model, and the prediction made before training.

Rung (c) of the ladder: the real one-layer RoPE model, trained with one update rule. Along training
(log-spaced checkpoints) its carrier kernel's pair coefficients w = (Re z, Im z) in R^d
(``kernel.pair_spectrum``) are compared with each geometry's max-margin kernel by the cosine, next to two
baselines: random directions (what a cosine means by chance in d dimensions) and seed-to-seed (how
reproducible the direction is). ``max_abs`` records the largest parameter, which AdamW's weight decay
bounds by 1/lambda.

The prediction table joins, per setting (vocabulary, offset, RoPE base) and rule, the accuracy predicted
before training from the rule's own geometry with the accuracy the trained models reach (sweep records),
and ranks them (Spearman).

Shapes: S members (seeds), d model width (= 2 x the number of RoPE pairs), n checkpoints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .compare import CRITERION
from .config import Config, ConfigError
from .kernel import BEYOND_MULTIPLE, pair_spectrum
from .maxmargin import MaxMargin, coefficients, cosine, far_field, predict, solve
from .model import Model
from .optim import GEOMETRY
from .train import Trained, cpu_threads, train


def kernel_coefficients(model: Model) -> np.ndarray:
    """(S, d) the carrier kernel's pair coefficients w = (Re z, Im z), unit length per member."""
    spec = pair_spectrum(model)
    w = coefficients(spec.amplitude, spec.phase)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


@torch.no_grad()
def max_abs_parameter(model: Model) -> np.ndarray:
    """(S,) the largest |entry| over every parameter of each member (AdamW bounds it by 1/lambda)."""
    return torch.stack([p.detach().abs().flatten(1).amax(1) for p in model.parameters()]).amax(0).double().cpu().numpy()


def log_checkpoints(steps: int, every: int, per_decade: int = 4) -> list[int]:
    """Multiples of ``every`` up to ``steps``, about ``per_decade`` per decade, log-spaced (always ``steps``)."""
    if every < 1 or steps < every or steps % every:
        raise ConfigError(f"steps={steps}, every={every}: give every >= 1 dividing steps")
    n = max(2, int(np.ceil(per_decade * np.log10(steps / every))) + 1)
    picks = np.unique(np.round(np.geomspace(1, steps // every, n)).astype(int)) * every
    return [int(s) for s in picks]


@dataclass
class DirectionPath:
    """One rule's run with its kernel direction and largest parameter at each checkpoint."""

    steps: np.ndarray  # (n,) steps done at each checkpoint (0: the initialisation)
    w: np.ndarray  # (n, S, d) unit kernel coefficients
    max_abs: np.ndarray  # (n, S) largest |parameter|
    trained: Trained  # the run at its end

    def cosines(self, solution: np.ndarray) -> np.ndarray:
        """(n, S) cosine of each checkpoint's kernel with a max-margin kernel's coefficients (d,)."""
        return cosine(self.w, np.asarray(solution)[None, None])

    def turning(self) -> np.ndarray:
        """(n-1, S) 1 - cosine between consecutive checkpoints: -> 0 when the direction stops turning."""
        return 1 - cosine(self.w[1:], self.w[:-1])


def direction_path(c: Config, seeds: Sequence[int], every: int, per_decade: int = 4) -> DirectionPath:
    """Train ``c`` (no early stop) and record the kernel direction at ``log_checkpoints(c.steps, every)``."""
    if c.encoding != "rope" or c.layers != 1:
        raise ConfigError(f"encoding={c.encoding!r}, layers={c.layers}: the kernel direction is defined for "
                          f"a one-layer RoPE model (encoding='rope', layers=1)")
    c = c.replace(target_accuracy=None)
    wanted = set(log_checkpoints(c.steps, every, per_decade))
    start = Model(c, seeds)
    steps, ws, big = [0], [kernel_coefficients(start)], [max_abs_parameter(start)]

    def record(done: int, model: Model) -> None:
        if done in wanted:
            steps.append(done)
            ws.append(kernel_coefficients(model))
            big.append(max_abs_parameter(model))

    trained = train(c, seeds, progress=False, on_checkpoint=record, checkpoint_every=every)
    return DirectionPath(np.array(steps), np.stack(ws), np.stack(big), trained)


def seed_agreement(w: np.ndarray) -> np.ndarray:
    """(S (S-1) / 2,) cosines between the directions (S, d) of every pair of seeds."""
    S = len(w)
    return np.array([float(cosine(w[i], w[j])) for i in range(S) for j in range(i + 1, S)])


def random_cosines(reference: np.ndarray, draws: int = 10000, seed: int = 0) -> np.ndarray:
    """(draws,) cosines of isotropic random directions with ``reference`` (d,): the chance level of a cosine."""
    gen = np.random.default_rng(seed)
    return cosine(gen.standard_normal((draws, len(reference))), np.asarray(reference)[None])


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of two equal-length sequences: the Pearson correlation of their ranks
    (ties get their mean rank); nan when either is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise ConfigError(f"spearman needs two 1-D sequences of equal length >= 3; got {x.shape} and {y.shape}")
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")  # a constant sequence has no order
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    """(n,) ranks 1..n of x, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


# The prediction table -------------------------------------------------------------------------------------------

FIT_ACCURACY = 0.99  # the kernel "fits" the training length when its predicted accuracy there reaches this
# Gaussian draws per (target token) class in this module's predictions: V x 128 samples per length, a standard
# error of at most 0.011 at V = 16 (0.002 near accuracy 0.99); a quarter of maxmargin's default, for speed.
PREDICT_DRAWS = 128


def one_thread(fn: Callable) -> Callable:
    """Run ``fn`` with one intra-op CPU thread (``train.cpu_threads``): the predictions are many small tensor
    operations, several times slower when split over threads on a busy machine."""
    @functools.wraps(fn)
    def wrapped(*args: object, **kwargs: object) -> object:
        with cpu_threads(torch.device("cpu")):
            return fn(*args, **kwargs)
    return wrapped
EXTRAPOLATES = (8, CRITERION[8.0])  # "extrapolates to 8x": accuracy at 8x the training length >= 0.95


@one_thread
def fit_norm(solution: MaxMargin, vocab: int, accuracy: float = FIT_ACCURACY, low: float = 0.1, high: float = 1e3,
             iterations: int = 10) -> float:
    """The smallest kernel norm |w|_2 at which ``solution``'s predicted accuracy (``maxmargin.predict``: kernel
    law, ideal read-out) at the training length reaches ``accuracy``: the scale at which the kernel alone first
    fits the training length. Bisection in log norm on [low, high]; needs nothing trained."""
    at = lambda n: float(predict(solution, [n], [solution.train_length], vocab, PREDICT_DRAWS).accuracy[0, 0])  # noqa: E731
    if at(high) < accuracy:
        raise ConfigError(f"the {solution.norm} kernel does not reach accuracy {accuracy} at the training length "
                          f"even at norm {high}; lower the accuracy or raise high")
    for _ in range(iterations):
        mid = float(np.sqrt(low * high))
        low, high = (low, mid) if at(mid) >= accuracy else (mid, high)
    return high


@functools.lru_cache(maxsize=None)
def fitted_solution(offset: int, train_length: int, dim: int, rope_base: float, geometry: str,
                    vocab: int) -> tuple[MaxMargin, float]:
    """(the max-margin kernel of ``geometry``, its ``fit_norm`` at ``vocab``), solved once per process."""
    sol = solve(offset, train_length, dim, rope_base, geometry)
    return sol, fit_norm(sol, vocab)


def setting_of(config: dict) -> tuple:
    """(vocab, offset, rope_base, optimizer): a prediction-table row's key, from a sweep record's config."""
    return config["vocab"], config["offset"], config["rope_base"], config["optimizer"]


@one_thread
def prediction_table(records: Sequence[dict], multiples: Sequence[int] = (2, 4, 8, 16),
                     geometry: dict[str, str] = GEOMETRY) -> list[dict]:
    """One row per (vocab, offset, rope_base, optimizer) of ``records`` (sweep records of one-layer RoPE runs
    with the "kernel" extra, evaluated at the training length and at ``multiples`` of it).

    Each row holds, at every multiple m: ``predicted[m]``, the accuracy the rule's geometry (``geometry[rule]``)
    predicts before training at the norm where it first fits the training length (``fit_norm``);
    ``at_trained[m]``, the same kernel shape at the trained models' own in-window kernel margin (mean over
    seeds; a check of the shape alone, not a prediction before training); ``measured[m]`` and ``sem[m]``,
    the trained models' accuracy over seeds. Also ``fit`` (measured accuracy at 1x), ``far_field`` (the
    geometry's beyond-window margin to 16x in units of its in-window margin), and ``predicted_extrapolates``
    and ``measured_extrapolates`` (accuracy at EXTRAPOLATES[0] x >= EXTRAPOLATES[1]).
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(setting_of(r["config"]), []).append(r)
    rows = []
    for (V, K, base, rule), recs in groups.items():
        c = recs[0]["config"]
        T, geo = c["train_length"], geometry[rule]
        sol, norm = fitted_solution(K, T, c["dim"], base, geo, V)
        lengths = [T * m for m in multiples]
        index = [recs[0]["lengths"].index(L) for L in [T] + lengths]
        acc = np.array([[r["accuracy"][i] for i in index] for r in recs])  # (seeds, 1 + len(multiples))
        margin = float(np.mean([r["kernel"]["margin_in_window"] for r in recs]))
        before = predict(sol, [norm], lengths, V, PREDICT_DRAWS).accuracy[:, 0]
        trained = predict(sol, [max(margin, 1e-6) * np.linalg.norm(sol.w)], lengths, V, PREDICT_DRAWS).accuracy[:, 0]
        sem = acc.std(0, ddof=1) / np.sqrt(len(acc)) if len(acc) > 1 else np.zeros(acc.shape[1])
        m8, bar = EXTRAPOLATES
        rows.append({
            "vocab": V, "offset": K, "rope_base": base, "optimizer": rule, "geometry": geo, "seeds": len(recs),
            "fit": float(acc[:, 0].mean()), "norm": norm, "far_field": far_field(sol),
            "trained_margin": margin,
            "predicted": dict(zip(multiples, before.tolist())), "at_trained": dict(zip(multiples, trained.tolist())),
            "measured": dict(zip(multiples, acc[:, 1:].mean(0).tolist())), "sem": dict(zip(multiples, sem[1:].tolist())),
            "predicted_extrapolates": bool(before[list(multiples).index(m8)] >= bar),
            "measured_extrapolates": bool(acc[:, 1 + list(multiples).index(m8)].mean() >= bar),
        })
    return rows


def rank_agreement(rows: Sequence[dict], multiple: int, predicted: str = "predicted") -> float:
    """Spearman's rank correlation over the rows of ``prediction_table`` between ``row[predicted][multiple]``
    and the measured mean accuracy at that multiple."""
    return spearman([r[predicted][multiple] for r in rows], [r["measured"][multiple] for r in rows])


@one_thread
def explore(offsets: Sequence[int], bases: Sequence[float], geometries: Sequence[str], train_length: int, dim: int,
            vocab: int, lengths: Sequence[int], reach: int = BEYOND_MULTIPLE) -> dict[tuple[str, int, float], dict]:
    """The explorer's grid, all before training: for every (geometry, offset, base), the max-margin kernel c(delta)
    at delta = 0, -1, ..., -(reach T - 1) (in units of its in-window margin, which is 1), its ``PEAKS`` highest
    beyond-window offsets, its far-field margin (``maxmargin.far_field``), the norm where it first fits
    (``fit_norm``) and the accuracy it predicts there at ``lengths`` (``maxmargin.predict``)."""
    out = {}
    for g in geometries:
        for K in offsets:
            for base in bases:
                sol, norm = fitted_solution(K, train_length, dim, base, g, vocab)
                out[g, K, base] = {
                    "kernel": sol.kernel(-np.arange(reach * train_length)), "peaks": sol.peaks(reach * train_length - 1),
                    "far_field": far_field(sol, reach), "norm": norm, "lengths": list(lengths),
                    "accuracy": predict(sol, [norm], lengths, vocab, PREDICT_DRAWS).accuracy[:, 0],
                }
    return out


def selection_verdict(best: dict[str, tuple[str, float, float]], threshold: float = 0.9) -> str:
    """A sentence on which geometry each rule's kernel approaches. best: rule -> (closest geometry, its mean
    cosine, seed-to-seed cosine); a rule "approaches" a geometry when that cosine is >= ``threshold``."""
    near = [f"{rule} ({g}, cosine {cos:.2f})" for rule, (g, cos, _) in best.items() if cos >= threshold]
    if not near:
        top = max(best, key=lambda r: best[r][1])
        return (f"No rule's kernel comes within a cosine of {threshold:g} of any geometry's max-margin kernel; the "
                f"closest is {top} to {best[top][0]}, at {best[top][1]:.2f}.")
    return f"Within a cosine of {threshold:g} of a geometry's max-margin kernel: {', '.join(near)}; the other rules are not."


def decay_verdict(ratios: Sequence[float], tolerance: float = 0.1) -> str:
    """A sentence on whether the largest parameter sits at AdamW's bound 1/lambda: ``ratios`` are the final
    max |p| x lambda per decay setting; within ``tolerance`` of 1 counts as on the bound."""
    r = np.asarray(ratios, dtype=np.float64)
    on, above = int((np.abs(r - 1) <= tolerance).sum()), int((r > 1 + tolerance).sum())
    below = len(r) - on - above
    parts = [f"{n} of {len(r)} settings {what}" for n, what in
             ((on, f"sit on the bound (within {tolerance:.0%})"), (above, "exceed it"), (below, "stay below it")) if n]
    return "; ".join(parts).capitalize() + "."
