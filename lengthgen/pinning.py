"""Where attention lands, by absolute position and by layer: APE pinning, and the same view for deep models.

A learned-absolute (APE) model trained at length L_train can solve the task by attending to the absolute
position L_train - K (1-indexed; index L_train-1-K in tensors) instead of the offset -K. At a longer length
the two part ways: the model keeps reading the pinned position and outputs the token found there.

Shapes: S members, L positions, d width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .config import Config, ConfigError, check_length
from .encodings import TRAITS
from .evaluate import EVAL_SAMPLES, Evaluation, attention_sums
from .model import Model
from .task import target_index
from .train import Trained


def pinned_index(c: Config) -> int:
    """0-indexed position of the target at the (longest) training length: L_train - 1 - K."""
    return target_index(c.train_length, c.offset)


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
        return target_index(self.length, self.offset)

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


def summary_frame(pins: Mapping[str, Mapping[int, PinningResult]]) -> pd.DataFrame:
    """The ``summary`` of every recipe and length (recipe name -> length -> result) as one frame indexed by
    (recipe, L): accuracy, argmax on the pinned position x_(T-K), argmax on the target x_(L-K), and how often the
    answer is the token at x_(T-K); NaN where x_(T-K) lies outside the sequence."""
    rows = {(name, L): p.summary() for name, by_length in pins.items() for L, p in by_length.items()}
    columns = {"accuracy": "accuracy", "argmax_at_pinned": "argmax at x_(T-K)", "argmax_at_target": "argmax at x_(L-K)",
               "predicts_pinned_token": "predicts token at x_(T-K)"}
    frame = pd.DataFrame.from_dict(rows, orient="index")[list(columns)].rename(columns=columns).astype(float)
    return frame.rename_axis(["recipe", "L"])


def beyond_training(pins: Mapping[int, PinningResult], train_length: int) -> dict[str, float]:
    """Pinning at the training length against the longer lengths (length -> result, means over members):
    the argmax share on x_(T-K) at the training length (``pinned_T``); over the longer lengths, its mean
    (``pinned_longer_mean``) and its highest for any member and length (``pinned_longer_max``), the argmax
    share on the real target (``target_longer_mean``), the share of answers that are the token at x_(T-K)
    (``predicts_pinned_longer``), and the share one position would get by luck, 1/L (``uniform_share``)."""
    longer = [L for L in pins if L > train_length]
    if train_length not in pins or not longer:
        raise ValueError(f"beyond_training: measure at train_length={train_length} and at least one longer length "
                         f"(measured: {sorted(pins)})")
    summary = {L: pins[L].summary() for L in [train_length] + longer}
    mean = lambda key: float(np.mean([summary[L][key] for L in longer]))  # noqa: E731
    return {
        "pinned_T": summary[train_length]["argmax_at_pinned"],
        "pinned_longer_mean": mean("argmax_at_pinned"),
        "pinned_longer_max": float(max(np.nanmax(pins[L].layers[-1].share_at(pins[L].pinned)) for L in longer)),
        "predicts_pinned_longer": mean("predicts_pinned_token"),
        "target_longer_mean": mean("argmax_at_target"),
        "uniform_share": float(np.mean([1 / L for L in longer])),
    }


def length_spike(ev: Evaluation, train_length: int) -> dict[str, float]:
    """Accuracy at exactly the training length against every other evaluated length: the mean over members at
    ``train_length`` (``acc_T``), and over the other lengths the best member at any of them (``acc_others_max``)
    and the mean over lengths and members (``acc_others_mean``)."""
    if train_length not in ev.lengths:
        raise ValueError(f"length_spike: evaluate at train_length={train_length} too (evaluated: {ev.lengths})")
    acc = ev.accuracy()  # (n_lengths, S)
    at = ev.lengths.index(train_length)
    others = np.delete(acc, at, axis=0)
    return {"acc_T": float(acc[at].mean()), "acc_others_max": float(others.max()),
            "acc_others_mean": float(others.mean())}


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
    if not TRAITS[c.encoding].learned_table:
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
