"""Comparing results across settings and seeds: the statistics the book's robustness and sweep chapters
state their verdicts with.

- sweep rows (``Sweep.rows()``, one dict per model and length) are selected with :func:`select` and
  summarized per group with :func:`stats` / :func:`line` (mean, standard error over seeds);
- two summaries are compared by the two-standard-error rule (:func:`versus`), a paired before/after over
  the same seeds by :func:`paired_change`;
- one model's predicted failure length (from its kernel) against its measured one (:func:`failure_multiples`,
  :func:`failure_verdict`);
- baselines and per-seed spreads for ``Evaluation`` results (:func:`frequency_guess`, :func:`spread`,
  :func:`share_beyond`, :func:`accuracy_at`).

This module is not imported by ``sweep.py``, so editing it does not change the sweep cache version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .config import Config
from .evaluate import Evaluation
from .sweep import failure_length, summarize
from .task import eval_tokens, targets

# The outcomes of failure_verdict, in the order the book tabulates them.
VERDICTS = ("agrees", "fails earlier", "fails later", "fails, none predicted", "predicted, does not fail",
            "neither fails")


def select(rows: Sequence[dict], **where: Any) -> list[dict]:
    """The rows whose field ``k`` equals ``v`` for every ``k=v`` in ``where`` (a missing field reads as None)."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def records_with(records: Sequence[dict], **config: Any) -> list[dict]:
    """The sweep records (``Sweep.records``) whose config has ``k == v`` for every ``k=v`` in ``config``."""
    return [r for r in records if all(r["config"][k] == v for k, v in config.items())]


def stats(rows: Sequence[dict], value: str, by: list[str], **where: Any) -> list[dict]:
    """``summarize`` (mean, sem, min, max, n of ``value`` over seeds, per group of ``by``) of the rows
    matching ``where``."""
    return summarize(select(rows, **where), by, value)


def line(rows: Sequence[dict], value: str, x: str, **where: Any) -> tuple[list, list, list]:
    """(x values, means, standard errors) of ``value`` against field ``x``, for ``plots.sweep_lines``."""
    s = stats(rows, value, [x], **where)
    return [r[x] for r in s], [r["mean"] for r in s], [r["sem"] for r in s]


def pm(s: dict) -> str:
    """A summary (from :func:`stats`) as ``"mean ± sem"`` with three decimals."""
    return f"{s['mean']:.3f} ± {s['sem']:.3f}"


def spread(a: np.ndarray) -> str:
    """Per-seed values (S,) as ``"mean [min, max]"`` with three decimals."""
    return f"{a.mean():.3f} [{a.min():.3f}, {a.max():.3f}]"


def _two_se(diff: float, err: float, up: str, down: str, same: str) -> str:
    """The two-standard-error rule: ``same`` when |diff| <= 2 err, else ``up`` or ``down`` by its sign."""
    return same if abs(diff) <= 2 * err else (up if diff > 0 else down)


def versus(a: dict, b: dict) -> str:
    """'higher' or 'lower' when mean a - mean b exceeds twice its standard error (independent groups:
    sqrt(sem_a^2 + sem_b^2)), else 'no clear difference'. ``a``, ``b``: summaries from :func:`stats`."""
    return _two_se(a["mean"] - b["mean"], float(np.hypot(a["sem"], b["sem"])), "higher", "lower", "no clear difference")


@dataclass(frozen=True)
class PairedChange:
    """after - before over the same seeds: mean, standard error (ddof=1; 0 for one seed), the number of
    seeds that went up and down, and the verdict 'up' / 'down' / 'no clear change' (two standard errors)."""

    mean: float
    sem: float
    up: int
    down: int
    verdict: str


def paired_change(before: np.ndarray, after: np.ndarray) -> PairedChange:
    """The paired change after - before; ``before``, ``after``: (S,) values of the same seeds, in the same order."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape or before.ndim != 1 or len(before) == 0:
        raise ValueError(f"paired_change needs two non-empty (S,) arrays of the same seeds; got shapes "
                         f"{before.shape} and {after.shape}")
    d = after - before
    sem = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    mean = float(d.mean())
    verdict = _two_se(mean, sem, "up", "down", "no clear change")
    return PairedChange(mean, sem, int((d > 0).sum()), int((d < 0).sum()), verdict)


def failure_multiples(record: dict) -> tuple[float | None, float | None]:
    """(predicted, measured) failure length of one RoPE sweep record with a "kernel" entry, in multiples of
    its training length; None where none is predicted / none measured within the evaluated lengths
    (measured: ``sweep.failure_length`` against chance 1/vocab)."""
    c = record["config"]
    predicted = record["kernel"]["predicted_failure_length"]
    measured = failure_length(record["lengths"], record["accuracy"], 1 / c["vocab"])
    return (None if predicted is None else predicted / c["train_length"],
            None if measured is None else measured / c["train_length"])


def failure_verdict(predicted: float | None, measured: float | None, tol: float) -> str:
    """One of VERDICTS: measured within a factor ``tol`` of predicted "agrees"; below predicted / tol
    "fails earlier"; above predicted * tol "fails later"; or which of the two is None."""
    if tol < 1:
        raise ValueError(f"tol is a factor >= 1 (got {tol})")
    if predicted is None and measured is None:
        return "neither fails"
    if predicted is None:
        return "fails, none predicted"
    if measured is None:
        return "predicted, does not fail"
    if measured < predicted / tol:
        return "fails earlier"
    return "fails later" if measured > predicted * tol else "agrees"


def setting_label(config: dict, base: dict) -> str:
    """The fields where ``config`` differs from ``base`` as "k=v, ..." (floats with :g), or "defaults"."""
    changed = {k: v for k, v in config.items() if v != base[k]}
    return "defaults" if not changed else ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in changed.items())


def frequency_guess(c: Config, length: int, samples: int, seed: int = 0) -> float:
    """Accuracy of guessing the most frequent token of each evaluation sequence (ties split evenly): the
    best a model can do with no position information, on ``eval_tokens(c, length, samples, seed)``."""
    tokens = eval_tokens(c, length, samples, seed=seed)  # (samples, length)
    counts = torch.nn.functional.one_hot(tokens, c.vocab).sum(1)  # (samples, V)
    top = counts.max(1).values
    hit = counts.gather(1, targets(tokens, c.offset)[:, None])[:, 0] == top
    return float((hit / (counts == top[:, None]).sum(1)).mean())


def share_beyond(argmax_counts: np.ndarray, train_length: int) -> np.ndarray:
    """Per seed, the share of the last query's attention argmax at keys at least ``train_length`` back.
    ``argmax_counts``: (S, L) counts per key position at evaluation length L; returns (S,)."""
    length = argmax_counts.shape[1]
    if not 0 < train_length <= length:
        raise ValueError(f"train_length must be in 1..{length} (the evaluation length of argmax_counts); "
                         f"got {train_length}")
    return argmax_counts[:, : length - train_length].sum(1) / argmax_counts.sum(1)


def accuracy_at(evaluation: Evaluation, lengths: Sequence[int]) -> np.ndarray:
    """Per-seed accuracy at the given evaluated lengths: (len(lengths), S)."""
    missing = [L for L in lengths if L not in evaluation.by_length]
    if missing:
        raise ValueError(f"lengths {missing} were not evaluated (evaluated: {evaluation.lengths})")
    return np.stack([evaluation.by_length[L].accuracy for L in lengths])
