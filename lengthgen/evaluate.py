"""Accuracy and attention of a trained ensemble at any evaluation length, on held-out samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from .config import EVAL_CHUNK, EVAL_SAMPLES, check_length, check_samples
from .model import Model, Output
from .tables import applies, fast_forward
from .task import eval_tokens, targets
from .train import Trained, cpu_threads


def forward_chunks(model: Model, tokens: torch.Tensor, budget: int = EVAL_CHUNK) -> Iterator[tuple[torch.Tensor, Output]]:
    """Run ``model`` on tokens (B, L) in chunks of sequences sized to keep the largest activation
    (S*b*L floats on the table path, S*b*L*d on the plain path) under ``budget``.

    Yields (token chunk (b, L) on the model's device, model output for it). Runs on one CPU thread
    (``train.cpu_threads``), like training: faster here, and the same numbers on any machine.
    """
    S, L = model.members, tokens.shape[-1]
    per_sequence = S * L if applies(model) else S * L * model.config.dim
    chunk = max(1, budget // per_sequence)
    device = model.embed.device
    with torch.no_grad(), cpu_threads(device):
        for start in range(0, tokens.shape[0], chunk):
            part = tokens[start : start + chunk].to(device)
            yield part, fast_forward(model, part)


@dataclass
class LengthResult:
    """What one evaluation length measured, per ensemble member (S)."""

    length: int
    offset: int
    accuracy: np.ndarray  # (S,) share of correct predictions
    target_weight: np.ndarray  # (S,) mean last-layer attention weight on the target x_(L-K)
    argmax_counts: np.ndarray  # (S, L) how often the attention argmax lands on key position p (0-indexed)

    @property
    def argmax_at_target(self) -> np.ndarray:
        """(S,) share of samples whose attention argmax is the target position."""
        return self.argmax_counts[:, -1 - self.offset] / self.argmax_counts.sum(1)


@dataclass
class Evaluation:
    """Accuracy and attention by evaluation length for every member of a trained ensemble."""

    seeds: list[int]
    chance: float
    samples: int
    by_length: dict[int, LengthResult]

    @property
    def lengths(self) -> list[int]:
        return list(self.by_length)

    def accuracy(self) -> np.ndarray:
        """(n_lengths, S) accuracy."""
        return np.stack([r.accuracy for r in self.by_length.values()])

    def target_weight(self) -> np.ndarray:
        """(n_lengths, S) mean attention weight on the target."""
        return np.stack([r.target_weight for r in self.by_length.values()])

    def mean_accuracy(self) -> dict[int, float]:
        return {L: float(r.accuracy.mean()) for L, r in self.by_length.items()}


@dataclass
class AttentionSums:
    """Sums over one pass of held-out samples: per member (S) and, for attention, per layer (n)."""

    samples: int
    correct: torch.Tensor  # (S,) correct predictions
    argmax_counts: torch.Tensor  # (n, S, L) last query's attention argmax per key position
    at_target: torch.Tensor  # (n, S) attention weight on the target x_(L-K)
    at_watch: torch.Tensor  # (n, S) attention weight on the watched position (zeros without one)
    predicts_watch: torch.Tensor  # (S,) predictions equal to the token at the watched position


@torch.no_grad()
def attention_sums(trained: Trained, length: int, samples: int = EVAL_SAMPLES, seed: int = 0,
                   watch: int | None = None) -> AttentionSums:
    """One pass of ``samples`` held-out sequences of ``length``: predictions and every layer's last-query
    attention, summed. ``watch``: a 0-indexed position whose weight and token are also tallied."""
    c, model = trained.config, trained.model
    check_samples(samples)
    check_length(c, length, members=model.members, samples=samples)
    tokens = eval_tokens(c, length, samples, seed)
    S, n = model.members, len(model.layers)
    sums = AttentionSums(samples, torch.zeros(S), torch.zeros(n, S, length), torch.zeros(n, S),
                         torch.zeros(n, S), torch.zeros(S))
    for part, out in forward_chunks(model, tokens):
        pred = out.logits.argmax(-1)
        sums.correct += (pred == targets(part, c.offset)).float().sum(1).cpu()
        if watch is not None:
            sums.predicts_watch += (pred == part[:, watch]).float().sum(1).cpu()
        for i, attn in enumerate(out.attentions):
            last = attn[:, :, -1]  # (S, b, L): the last query's attention
            sums.argmax_counts[i] += torch.nn.functional.one_hot(last.argmax(-1), length).sum(1).cpu().float()
            sums.at_target[i] += last[..., -1 - c.offset].sum(1).cpu()
            if watch is not None:
                sums.at_watch[i] += last[..., watch].sum(1).cpu()
    return sums


def evaluate_length(trained: Trained, length: int, samples: int = EVAL_SAMPLES, seed: int = 0) -> LengthResult:
    """Measure accuracy, the last layer's target attention and argmax positions at one length on fresh samples."""
    sums = attention_sums(trained, length, samples, seed)
    return LengthResult(
        length=length,
        offset=trained.config.offset,
        accuracy=(sums.correct / samples).numpy(),
        target_weight=(sums.at_target[-1] / samples).numpy(),
        argmax_counts=sums.argmax_counts[-1].numpy(),
    )


def evaluate(trained: Trained, lengths: Sequence[int], samples: int = EVAL_SAMPLES, seed: int = 0) -> Evaluation:
    """Evaluate at every length in ``lengths`` (each checked first, so a bad length fails before any work)."""
    for length in lengths:
        check_length(trained.config, length)
    results = {int(L): evaluate_length(trained, int(L), samples, seed) for L in lengths}
    return Evaluation(trained.seeds, trained.config.chance, samples, results)
