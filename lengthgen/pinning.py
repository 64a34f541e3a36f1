"""Where attention lands, by absolute position and by layer: APE pinning, and the same view for deep models.

A learned-absolute (APE) model trained at length L_train can solve the task by attending to the absolute
position L_train - K (1-indexed; index L_train-1-K in tensors) instead of the offset -K. At a longer length
the two part ways: the model keeps reading the pinned position and outputs the token found there.

Shapes: S members, L positions, d width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .config import Config, ConfigError, check_length
from .evaluate import EVAL_SAMPLES, attention_sums
from .model import Model
from .train import Trained


def pinned_index(c: Config) -> int:
    """0-indexed position of the target at the (longest) training length: L_train - 1 - K."""
    return c.train_length - 1 - c.offset


@dataclass
class LayerAttention:
    """The last query's attention in one layer at one length, per member."""

    argmax_counts: np.ndarray  # (S, L) how often the argmax lands on absolute position p (0-indexed)
    target_weight: np.ndarray  # (S,) mean weight on the target x_(L-K)
    pinned_weight: np.ndarray  # (S,) mean weight on the pinned position (nan when L <= pinned index)

    def share_at(self, index: int) -> np.ndarray:
        """(S,) share of samples whose argmax is position ``index`` (0-indexed)."""
        if not 0 <= index < self.argmax_counts.shape[1]:
            return np.full(self.argmax_counts.shape[0], np.nan)
        return self.argmax_counts[:, index] / self.argmax_counts.sum(1)


@dataclass
class PinningResult:
    """Attention by layer and what the model outputs, at one evaluation length."""

    length: int
    offset: int
    pinned: int  # 0-indexed pinned position
    layers: list[LayerAttention]  # one per layer, first to last
    accuracy: np.ndarray  # (S,)
    predicts_pinned: np.ndarray  # (S,) share of predictions equal to the token at the pinned position

    @property
    def target_index(self) -> int:
        return self.length - 1 - self.offset

    def summary(self, layer: int = -1) -> dict:
        """Means over members, JSON-ready."""
        a = self.layers[layer]
        mean = lambda x: float(np.nanmean(x)) if np.isfinite(x).any() else None  # noqa: E731
        return {
            "accuracy": mean(self.accuracy),
            "argmax_at_pinned": mean(a.share_at(self.pinned)),
            "argmax_at_target": mean(a.share_at(self.target_index)),
            "weight_at_pinned": mean(a.pinned_weight),
            "weight_at_target": mean(a.target_weight),
            "predicts_pinned_token": mean(self.predicts_pinned),
        }


def measure(trained: Trained, length: int, samples: int = EVAL_SAMPLES, seed: int = 0) -> PinningResult:
    """Attention of the last query in every layer, and the predictions, on held-out samples."""
    c = trained.config
    pin = pinned_index(c)
    watch = pin if pin < length else None
    sums = attention_sums(trained, length, samples, seed, watch)
    nan = np.full(trained.model.members, np.nan)
    layers = [
        LayerAttention(sums.argmax_counts[i].numpy(), (sums.at_target[i] / samples).numpy(),
                       (sums.at_watch[i] / samples).numpy() if watch is not None else nan)
        for i in range(len(trained.model.layers))
    ]
    return PinningResult(length, c.offset, pin, layers, (sums.correct / samples).numpy(),
                         (sums.predicts_watch / samples).numpy() if watch is not None else nan)


def measure_lengths(
    trained: Trained, lengths: Sequence[int], samples: int = EVAL_SAMPLES, seed: int = 0
) -> dict[int, PinningResult]:
    """``measure`` at every length (each checked first, so a bad length fails before any work)."""
    for L in lengths:
        check_length(trained.config, L)
    return {int(L): measure(trained, int(L), samples, seed) for L in lengths}


@dataclass
class TableNorms:
    """Row norms of the APE table: rows of training positions against rows never trained."""

    trained: np.ndarray  # (S,) mean norm of rows 0..L_train-1
    untrained: np.ndarray  # (S,) mean norm of rows L_train..max_length-1
    moved_trained: np.ndarray  # (S,) mean norm of (row - its initial value) over trained rows
    moved_untrained: np.ndarray  # (S,) the same over untrained rows: 0 when they never got gradient


@torch.no_grad()
def table_norms(model: Model, train_length: int) -> TableNorms:
    """Norms of trained against untrained APE rows, and how far each moved from its initialisation."""
    c = model.config
    if c.encoding != "ape":
        raise ConfigError(f"encoding={c.encoding!r}: table norms need a learned table (encoding='ape')")
    if not 0 < train_length < c.max_length:
        raise ConfigError(f"train_length={train_length} must lie in (0, max_length={c.max_length})")
    table = model.encoding.table.detach().cpu()
    initial = Model(c, model.seeds).encoding.table.detach()  # same seeds, same initial table
    norms, moved = table.norm(dim=-1), (table - initial).norm(dim=-1)
    return TableNorms(
        trained=norms[:, :train_length].mean(1).numpy(),
        untrained=norms[:, train_length:].mean(1).numpy(),
        moved_trained=moved[:, :train_length].mean(1).numpy(),
        moved_untrained=moved[:, train_length:].mean(1).numpy(),
    )
