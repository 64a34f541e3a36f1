"""Comparing results across settings and seeds: the statistics the book's robustness and sweep chapters
state their verdicts with.

- sweep results as a pandas DataFrame (``Sweep.frame()``: one row per config, seed and evaluation length,
  with every config field), selected with :func:`where` and summarized with ``sweep.summary`` / :func:`at` /
  :func:`line` (mean, standard error over seeds);
- two summaries are compared by the two-standard-error rule (:func:`versus`), a paired before/after over
  the same seeds by :func:`paired_change` (arrays) or :func:`paired` (two selections of a frame);
- one model's predicted failure length (from its kernel) against its measured one (:func:`failure_multiples`,
  :func:`failure_verdict`);
- a grid's configs grouped by training recipe (a ``recipes.Recipe``) and named by the setting they change
  (:func:`settings_by_recipe`), and each recipe's models against chapter 9's bar (:func:`check_criterion`);
- baselines and per-seed spreads for ``Evaluation`` results (:func:`frequency_guess`, :func:`spread`,
  :func:`share_beyond`, :func:`accuracy_at`).

This module is not imported by ``sweep.py``, so editing it does not change the sweep cache version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from .config import Config
from .evaluate import Evaluation
from .recipes import RECIPE_FIELDS, Recipe
from .sweep import Grid, failure_length, stats, summary
from .task import eval_tokens, targets
from .thresholds import EVERY_SEED_TRANSFER
from .uncertainty import standard_error

# The outcomes of failure_verdict, in the order the book tabulates them.
VERDICTS = ("agrees", "fails earlier", "fails later", "fails, none predicted", "predicted, does not fail",
            "neither fails")


def where(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    """The rows of ``df`` whose column ``k`` equals ``v`` for every ``k=v`` (``v=None`` selects missing values);
    a KeyError names the columns when ``k`` is not one."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in eq.items():
        if k not in df:
            raise KeyError(f"no column {k!r}; the frame has {', '.join(map(str, df.columns))}")
        mask &= df[k].isna().to_numpy() if v is None else (df[k] == v).to_numpy()
    return df[mask]


def at(df: pd.DataFrame, value: str = "accuracy", **eq: Any) -> dict:
    """One summary (mean, sem, min, max, n; Python numbers) of ``value`` over the rows matching ``eq`` (e.g.
    ``multiple=4``); a ValueError when no row matches."""
    x = where(df, **eq)[value]
    if not len(x):
        raise ValueError(f"no rows with {eq}")
    return stats(x.to_numpy())


Lines = dict[str, tuple[list, list, list]]  # a figure's lines for plots.sweep_lines: name -> a :func:`line`


def line(df: pd.DataFrame, x: str, value: str = "accuracy", **eq: Any) -> tuple[list, list, list]:
    """(x values, means, standard errors) of ``value`` against column ``x`` over the rows matching ``eq``,
    for ``plots.sweep_lines``."""
    s = summary(where(df, **eq), x, value)
    return list(s.index), list(s["mean"]), list(s["sem"])


def paired(before: pd.DataFrame, after: pd.DataFrame, value: str = "accuracy",
           on: Sequence[str] = ("vocab", "offset", "seed", "multiple")) -> "PairedChange":
    """``value`` changed from ``before`` to ``after``, paired by the ``on`` columns (only pairs in both count)."""
    on = list(on)
    last = lambda d: d[on + [value]].drop_duplicates(on, keep="last")  # noqa: E731  (a run in two grids counts once)
    both = last(before).merge(last(after), on=on, suffixes=("_before", "_after"))
    if not len(both):
        raise ValueError(f"no rows to pair: before and after share no {tuple(on)}")
    return paired_change(both[f"{value}_before"].to_numpy(), both[f"{value}_after"].to_numpy())


def pm(s: dict) -> str:
    """A summary (from :func:`stats`) as ``"mean ± sem"`` with three decimals."""
    return f"{s['mean']:.3f} ± {s['sem']:.3f}"


def spread(a: np.ndarray) -> str:
    """Per-seed values (S,) as ``"mean [min, max]"`` with three decimals."""
    return f"{a.mean():.3f} [{a.min():.3f}, {a.max():.3f}]"


def two_se_rule(diff: float, err: float, up: str, down: str, same: str) -> str:
    """The two-standard-error rule: ``same`` when |diff| <= 2 err, else ``up`` or ``down`` by its sign."""
    return same if abs(diff) <= 2 * err else (up if diff > 0 else down)


def versus(a: dict, b: dict) -> str:
    """'higher' or 'lower' when mean a - mean b exceeds twice its standard error (independent groups:
    sqrt(sem_a^2 + sem_b^2)), else 'no clear difference'. ``a``, ``b``: summaries from :func:`stats`."""
    return two_se_rule(a["mean"] - b["mean"], float(np.hypot(a["sem"], b["sem"])), "higher", "lower", "no clear difference")


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
    sem = float(standard_error(d))
    mean = float(d.mean())
    verdict = two_se_rule(mean, sem, "up", "down", "no clear change")
    return PairedChange(mean, sem, int((d > 0).sum()), int((d < 0).sum()), verdict)


def _none(x: float | None) -> bool:
    return x is None or bool(np.isnan(x))


def failure_multiples(df: pd.DataFrame) -> pd.DataFrame:
    """Per model (``run``) of a frame with the kernel recorded: ``first_accuracy`` (at its shortest evaluation
    length), ``reach`` (its longest, as a multiple of T), and its ``predicted`` failure length (from the kernel)
    and ``measured`` one (``sweep.failure_length`` against chance), in multiples of its training length;
    NaN where none is predicted / none measured within the evaluated lengths."""
    out = []
    for run, g in df.groupby("run", sort=False):  # a run's rows are in the order of its lengths
        T, predicted = g.train_length.iloc[0], g.predicted_failure_length.iloc[0]
        measured = failure_length(g.length.tolist(), g.accuracy.tolist(), g.chance.iloc[0])
        out.append(dict(run=run, first_accuracy=g.accuracy.iloc[0], reach=g.multiple.max(), predicted=predicted / T,
                        measured=np.nan if measured is None else measured / T))
    return pd.DataFrame(out).set_index("run")


def failure_verdict(predicted: float | None, measured: float | None, tol: float) -> str:
    """One of VERDICTS: measured within a factor ``tol`` of predicted "agrees"; below predicted / tol
    "fails earlier"; above predicted * tol "fails later"; or which of the two is missing (None or NaN)."""
    if tol < 1:
        raise ValueError(f"tol is a factor >= 1 (got {tol})")
    if _none(predicted) and _none(measured):
        return "neither fails"
    if _none(predicted):
        return "fails, none predicted"
    if _none(measured):
        return "predicted, does not fail"
    if measured < predicted / tol:
        return "fails earlier"
    return "fails later" if measured > predicted * tol else "agrees"


def setting_label(config: dict, base: dict) -> str:
    """The fields where ``config`` differs from ``base`` as "k=v, ..." (floats with :g), or "defaults"."""
    changed = {k: v for k, v in config.items() if v != base[k]}
    return "defaults" if not changed else ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in changed.items())


def settings_by_recipe(grid: Grid, by: Sequence[str]) -> dict[Recipe, dict[str, dict]]:
    """The grid's configs grouped by their values of the recipe fields ``by`` (those the grid's "recipes"
    change; a recipe field not in ``by``, e.g. weight decay, counts as a setting), in grid order: the Recipe of
    each group's first config (named by ``Config.recipe()``) -> its settings, each named by how it differs from
    that first config (:func:`setting_label` without the ``by`` fields: "defaults", "rope_base=100", ...) -> the
    values of the grid's varied fields, which select its rows in a sweep frame (``where(df, **fields)``)."""
    unknown = set(by) - set(RECIPE_FIELDS)
    if unknown:
        raise ValueError(f"by: {sorted(unknown)} are not recipe fields; use some of {', '.join(RECIPE_FIELDS)}")
    groups: dict[tuple, list[Config]] = {}
    for c in grid.configs:
        groups.setdefault(tuple(getattr(c, k) for k in by), []).append(c)
    strip = lambda c: {k: v for k, v in c.to_dict().items() if k not in by}  # noqa: E731
    varied = grid.varied()
    return {Recipe.of(first, name=first.recipe()):
            {setting_label(strip(c), strip(first)): {k: getattr(c, k) for k in varied} for c in configs}
            for first, configs in ((configs[0], configs) for configs in groups.values())}


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


@dataclass
class CriterionCheck:
    """How one recipe fares against a bar (``thresholds.EVERY_SEED_TRANSFER`` by default) over every (vocab, offset)
    setting and seed it was run on."""

    recipe: Recipe  # the recipe of its models (named by their Config.recipe())
    text: str  # the recipe in words, and the KEPT_APART fields where they differ from the defaults
    settings: int  # (vocab, offset) settings
    models: int  # models (settings x seeds)
    worst: dict[float, float]  # multiple -> the lowest accuracy of any model
    failing: int  # models below the bar at some multiple
    slack: float  # min over models and multiples of accuracy - bar: >= 0 means every model passes
    seconds_per_model: float  # mean training wall time per model (batch time / members of the batch)

    @property
    def passes(self) -> bool:
        return self.slack >= 0


KEPT_APART = ("batch", "decay_scope", "rope_base")  # fields a criterion check keeps apart, next to the recipe


def check_criterion(df: pd.DataFrame, criterion: dict[float, float] = EVERY_SEED_TRANSFER) -> list[CriterionCheck]:
    """One CriterionCheck per recipe (and KEPT_APART values) among the models of frame ``df`` (every model
    evaluated at each multiple of ``criterion``), best slack first."""
    out = []
    for _, g in df.groupby(list(RECIPE_FIELDS + KEPT_APART), sort=False, dropna=False):
        acc = {m: where(g, multiple=m).accuracy.to_numpy() for m in criterion}  # (models,) each, in one order
        below = np.any([acc[m] < bar for m, bar in criterion.items()], axis=0)
        models = where(g, multiple=next(iter(criterion)))
        first = g.iloc[0]
        base = float(first.rope_base)
        text = first.recipe + ("" if base == Config().rope_base else f"; RoPE base {base:g}")
        out.append(CriterionCheck(
            Recipe.of(first, name=first.recipe), text, len(set(zip(g.vocab, g.offset))), len(models),
            {m: float(a.min()) for m, a in acc.items()}, int(below.sum()),
            float(min((acc[m] - bar).min() for m, bar in criterion.items())), float(models.seconds.mean()),
        ))
    return sorted(out, key=lambda c: -c.slack)
