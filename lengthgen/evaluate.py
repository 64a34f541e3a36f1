"""Accuracy and attention of a trained ensemble at any evaluation length, on held-out samples, and the summaries
the chapters cite from them (mean, worst and best seed by length; how training ended; worst against best seed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from .config import EVAL_CHUNK, EVAL_SAMPLES, check_length, check_samples, eval_chunk
from .model import Model, Output
from .tables import applies, fast_forward
from .task import eval_tokens, target_index, targets
from .train import Trained, cpu_threads


def forward_chunks(model: Model, tokens: torch.Tensor, budget: int = EVAL_CHUNK) -> Iterator[tuple[torch.Tensor, Output]]:
    """Run ``model`` on tokens (B, L) in chunks of sequences sized by ``config.eval_chunk`` to keep the largest
    activation under ``budget`` elements (on the plain path the S*b*L*L attention once L > d: a two-layer ensemble
    of 10 evaluated at L=512 holds about 0.1 GB per tensor instead of 2 GB).

    Yields (token chunk (b, L) on the model's device, model output for it). Runs on one CPU thread
    (``train.cpu_threads``), like training: faster here, and the same numbers on any machine.
    """
    chunk = eval_chunk(model.members, tokens.shape[-1], model.config.dim, applies(model), budget)
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

    def multiples(self, train_length: int) -> dict[int, LengthResult]:
        """The results keyed by multiple m of ``train_length`` (every evaluated length must be one)."""
        odd = [L for L in self.by_length if L % train_length]
        if odd:
            raise ValueError(f"lengths {odd} are not multiples of train_length={train_length}: evaluate at "
                             "m * train_length, or pass the training length these lengths were chosen from")
        return {L // train_length: r for L, r in self.by_length.items()}

    def summary(self, train_length: int) -> dict[str, float]:
        """Accuracy over the seeds at each multiple m of ``train_length``: ``"{m}x"`` (mean), ``"{m}x_min"``
        (worst seed) and ``"{m}x_max"`` (best seed), and the same at the longest length as ``"far"``,
        ``"far_min"`` and ``"far_max"``."""
        out: dict[str, float] = {}
        by_multiple = self.multiples(train_length)
        for m, r in by_multiple.items():
            out |= {f"{m}x": float(r.accuracy.mean()), f"{m}x_min": float(r.accuracy.min()),
                    f"{m}x_max": float(r.accuracy.max())}
        far = max(by_multiple)
        return out | {"far": out[f"{far}x"], "far_min": out[f"{far}x_min"], "far_max": out[f"{far}x_max"]}

    def describe(self, train_length: int) -> str:
        """Mean accuracy at each multiple of ``train_length`` in one line, e.g. ``"1x 1.000  2x 0.985"``."""
        return "  ".join(f"{m}x {r.accuracy.mean():.3f}" for m, r in self.multiples(train_length).items())


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
            sums.at_target[i] += last[..., target_index(length, c.offset)].sum(1).cpu()
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


def mean_attention_map(trained: Trained, length: int, samples: int, member: int = 0) -> np.ndarray:
    """Last-layer attention of one ensemble member, every query against every key, averaged over ``samples``
    held-out sequences of ``length``: (length, length)."""
    check_samples(samples)
    check_length(trained.config, length, members=trained.model.members, samples=samples)
    tokens = eval_tokens(trained.config, length, samples, seed=0)
    with torch.no_grad():
        attn = trained.model(tokens.to(trained.device), full=True).attentions[-1][member]  # (B, L, L)
    return attn.mean(0).cpu().numpy()


def final_accuracy(trained: Trained) -> np.ndarray:
    """Training-batch accuracy at each member's last step: (S,)."""
    return trained.accuracy[trained.steps - 1, np.arange(len(trained.seeds))]


def fit_summary(trained: Trained, target_accuracy: float) -> dict[str, float | int]:
    """How training ended over the members: the fewest and most steps (``steps_min``, ``steps_max``), the lowest
    final training-batch accuracy (``final_min``) and how many members ended at ``target_accuracy`` or above
    (``reached``)."""
    final = final_accuracy(trained)
    return {"steps_min": int(trained.steps.min()), "steps_max": int(trained.steps.max()),
            "final_min": float(final.min()), "reached": int((final >= target_accuracy).sum())}


def seed_contrast(accuracy: np.ndarray, target_weight: np.ndarray, weight_beyond: np.ndarray,
                  argmax_beyond: np.ndarray) -> dict[str, float | int]:
    """The worst seed against the best at one length, from per-seed values (S,) each: accuracy, the last query's
    weight on the target, its weight on keys beyond the training window and the share of argmaxes there.

    Returns ``spread`` (best minus worst accuracy), the mean and largest weight beyond the window
    (``beyond_mean``, ``beyond_max``), the largest argmax share there (``argmax_beyond_max``), the two seeds'
    indices (``worst_seed``, ``best_seed``) and, for each, ``{worst,best}_acc``, ``_target_weight``,
    ``_beyond_weight`` and ``_beyond_argmax``."""
    worst, best = int(accuracy.argmin()), int(accuracy.argmax())
    out: dict[str, float | int] = {
        "spread": float(accuracy.max() - accuracy.min()), "beyond_mean": float(weight_beyond.mean()),
        "beyond_max": float(weight_beyond.max()), "argmax_beyond_max": float(argmax_beyond.max()),
        "worst_seed": worst, "best_seed": best,
    }
    for which, s in (("worst", worst), ("best", best)):
        out |= {f"{which}_acc": float(accuracy[s]), f"{which}_target_weight": float(target_weight[s]),
                f"{which}_beyond_weight": float(weight_beyond[s]), f"{which}_beyond_argmax": float(argmax_beyond[s])}
    return out


def last_query_profile(trained: Trained, length: int, samples: int, seed: int) -> np.ndarray:
    """Mean attention weight of the last query (last layer) on each key position: (S, length) float32,
    over ``samples`` held-out sequences of ``length`` drawn with ``seed`` (each row sums to 1)."""
    check_samples(samples)
    check_length(trained.config, length, members=trained.model.members, samples=samples)
    total = torch.zeros(trained.model.members, length)
    for _, out in forward_chunks(trained.model, eval_tokens(trained.config, length, samples, seed)):
        total += out.attentions[-1][:, :, -1].sum(1).cpu()
    return (total / samples).numpy().astype(np.float32)
