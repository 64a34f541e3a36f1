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

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .config import Config, ConfigError
from .kernel import pair_spectrum
from .maxmargin import coefficients, cosine
from .model import Model
from .train import Trained, train


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
