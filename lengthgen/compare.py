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
from .recipes import RECIPE_FIELDS
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


# --- recipes and the extrapolation criterion (chapter 9) ---

# The bar of chapter 9: every seed, on every vocabulary and offset, at least this accuracy at each multiple.
CRITERION = {4.0: 0.99, 8.0: 0.95}


def recipe_of(config: dict) -> tuple:
    """The training recipe of a sweep record's config, as a hashable tuple of RECIPE_FIELDS values."""
    return tuple(config[k] for k in RECIPE_FIELDS)


def recipe_text(config: dict) -> str:
    """The recipe of a config dict in words (``Config.recipe``)."""
    return Config(**config).recipe()


def accuracy_at_multiple(record: dict, multiple: float) -> float:
    """A sweep record's accuracy at ``multiple`` x its training length."""
    return record["accuracy"][record["lengths"].index(round(multiple * record["config"]["train_length"]))]


@dataclass
class CriterionCheck:
    """How one recipe fares against CRITERION over every (vocab, offset) setting and seed it was run on."""

    recipe: tuple
    text: str  # the recipe in words
    settings: int  # (vocab, offset) settings
    models: int  # models (settings x seeds)
    worst: dict[float, float]  # multiple -> the lowest accuracy of any model
    failing: int  # models below the bar at some multiple
    slack: float  # min over models and multiples of accuracy - bar: >= 0 means every model passes
    seconds_per_model: float  # mean training wall time per model (batch time / members of the batch)

    @property
    def passes(self) -> bool:
        return self.slack >= 0


MODEL_FIELDS = ("rope_base",)  # model settings that a criterion check keeps apart, next to the recipe


def check_criterion(records: Sequence[dict], criterion: dict[float, float] = CRITERION) -> list[CriterionCheck]:
    """One CriterionCheck per recipe (and MODEL_FIELDS value) among ``records``, best slack first."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = recipe_of(r["config"]) + tuple(r["config"][k] for k in MODEL_FIELDS)
        groups.setdefault(key, []).append(r)
    out = []
    for recipe, rs in groups.items():
        acc = {m: np.array([accuracy_at_multiple(r, m) for r in rs]) for m in criterion}
        below = np.zeros(len(rs), dtype=bool)
        for m, bar in criterion.items():
            below |= acc[m] < bar
        seconds = [r["batch_seconds"] / r["batch_members"] for r in rs if "batch_seconds" in r]
        base = rs[0]["config"]["rope_base"]
        text = recipe_text(rs[0]["config"]) + ("" if base == Config().rope_base else f"; RoPE base {base:g}")
        out.append(CriterionCheck(
            recipe[: len(RECIPE_FIELDS)], text,
            len({(r["config"]["vocab"], r["config"]["offset"]) for r in rs}), len(rs),
            {m: float(a.min()) for m, a in acc.items()}, int(below.sum()),
            float(min((acc[m] - bar).min() for m, bar in criterion.items())),
            float(np.mean(seconds)) if seconds else float("nan"),
        ))
    return sorted(out, key=lambda c: -c.slack)


ROW_FIELDS = ("vocab", "offset", "optimizer", "lr", "steps", "batch", "target_accuracy", "weight_decay", "decay_scope")


def record_rows(records: Sequence[dict], fields: Sequence[str] = ROW_FIELDS) -> list[dict]:
    """One flat row per sweep record and evaluation length, across grids: the config ``fields``, seed,
    multiple (of the training length), accuracy, target_weight, and the kernel margins when recorded."""
    out = []
    for r in records:
        c = r["config"]
        for i, length in enumerate(r["lengths"]):
            row = {k: c[k] for k in fields}
            row.update(seed=r["seed"], multiple=length / c["train_length"], accuracy=r["accuracy"][i],
                       target_weight=r["target_weight"][i])
            row.update(r.get("kernel", {}))
            out.append(row)
    return out


def paired_records(before: Sequence[dict], after: Sequence[dict], multiple: float,
                   keys: Sequence[str] = ("vocab", "offset")) -> PairedChange:
    """Accuracy at ``multiple`` changed from ``before`` to ``after`` records, paired by seed and ``keys``
    (only pairs present in both count)."""
    index = lambda rs: {(r["seed"],) + tuple(r["config"][k] for k in keys): r for r in rs}  # noqa: E731
    a, b = index(before), index(after)
    common = [k for k in a if k in b]
    if not common:
        raise ValueError("no records to pair: before and after share no (seed, setting)")
    return paired_change(np.array([accuracy_at_multiple(a[k], multiple) for k in common]),
                         np.array([accuracy_at_multiple(b[k], multiple) for k in common]))
