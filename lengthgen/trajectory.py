"""What training selects, checkpoint by checkpoint: the first layer's logit split into a positional part
(the carrier kernel c(delta)) and a content part (what the query and key tokens add), and the direction
of the query-key parameters, along one recipe.

Checkpoints are runs of the same config and seed with growing step budgets, trained as one batched
ensemble (``train.train_runs``): a member stopped at step n is exactly the run trained for n steps.

For a one-layer model the logit of the last query (token a) on a key (token b) at offset delta is
T[a, b, delta]. Its mean over uniform a, b is c(delta) (kernel.carrier_kernel: the logit is bilinear in
the two inputs); the content part is T - c, whose spread over (a, b) says how much a token pair can
move a key up or down against the position rule.

Shapes: S members (seeds), V vocabulary, n checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .config import Config, ConfigError
from .kernel import BEYOND_MULTIPLE, logit_table, pair_spectrum
from .maxmargin import MaxMargin, coefficients, cosine
from .train import Trained, train_runs


def checkpoints(c: Config, seeds: Sequence[int], budgets: Sequence[int]) -> list[Trained]:
    """One Trained per step budget (ascending, each <= c.steps is not required), the same seeds in each."""
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 0:
        raise ConfigError(f"budgets={list(budgets)}: give step counts >= 0")
    configs = [c.replace(steps=b, target_accuracy=None) for b in budgets]
    return train_runs([(cb, s) for cb in configs for s in seeds], progress=False)


@dataclass
class LogitSplit:
    """The positional and content parts of the first-layer logit at one checkpoint, per member (S,)."""

    margin_in_window: np.ndarray  # c(-K) - max c(delta) over the other offsets of the training window
    margin_beyond: np.ndarray  # c(-K) - max c(delta) over -16T <= delta <= -T
    content_target: np.ndarray  # std over (a, b) of the content part at delta = -K
    content_window: np.ndarray  # rms over (a, b) and the other in-window offsets
    content_beyond: np.ndarray  # rms over (a, b) and the beyond-window offsets
    qk_norm: np.ndarray  # |W_q W_k^T|_F

    def as_rows(self, **extra) -> list[dict]:
        """One dict per member, with ``extra`` fields (e.g. step, recipe)."""
        names = ("margin_in_window", "margin_beyond", "content_target", "content_window", "content_beyond", "qk_norm")
        return [{**extra, "member": s, **{k: float(getattr(self, k)[s]) for k in names}}
                for s in range(len(self.qk_norm))]


@torch.no_grad()
def logit_split(trained: Trained, max_multiple: int = BEYOND_MULTIPLE) -> LogitSplit:
    """Split the first layer's logit table into kernel and content, on offsets up to max_multiple x T."""
    model, c = trained.model, trained.config
    T, K = c.train_length, c.offset
    length = max_multiple * T
    table = logit_table(model, length)[0].flip(-1)  # (S, V, V, length-1); column m-1 is delta = -m
    kern = table.mean((1, 2))  # (S, length-1)
    content = table - kern[:, None, None]
    rms = content.pow(2).mean((1, 2)).sqrt()  # (S, length-1)
    others = [m - 1 for m in range(1, T) if m != K]
    target = kern[:, K - 1]
    layer = model.layers[0]
    qk = torch.linalg.matrix_norm(layer.wq @ layer.wk.transpose(-1, -2)).double().cpu()
    return LogitSplit(
        margin_in_window=(target - kern[:, others].max(1).values).numpy(),
        margin_beyond=(target - kern[:, T - 1 :].max(1).values).numpy(),
        content_target=rms[:, K - 1].numpy(),
        content_window=rms[:, others].pow(2).mean(1).sqrt().numpy(),
        content_beyond=rms[:, T - 1 :].pow(2).mean(1).sqrt().numpy(),
        qk_norm=qk.numpy(),
    )


def kernel_direction(trained: Trained) -> np.ndarray:
    """(S, d) the RoPE kernel's pair coefficients w = (Re z, Im z), normalised to unit length."""
    spec = pair_spectrum(trained.model)
    w = coefficients(spec.amplitude, spec.phase)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def qk_direction(trained: Trained) -> np.ndarray:
    """(S, d*d) W_q W_k^T of the first layer, flattened and normalised to unit Frobenius norm."""
    layer = trained.model.layers[0]
    m = (layer.wq @ layer.wk.transpose(-1, -2)).detach().double().cpu().flatten(1).numpy()
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def direction_change(path: Sequence[Trained], direction=qk_direction) -> np.ndarray:
    """(n-1, S) 1 - cosine between the directions of consecutive checkpoints: -> 0 when the direction converges."""
    dirs = [direction(t) for t in path]
    return np.stack([1 - cosine(a, b) for a, b in zip(dirs, dirs[1:])])


def alignment(trained: Trained, solution: MaxMargin) -> np.ndarray:
    """(S,) cosine between the learned kernel's pair coefficients and a max-margin solution's."""
    return cosine(kernel_direction(trained), solution.w[None])
