"""The carrier kernel of many trained RoPE models at once: what chapter 4 measures of each trained ensemble
(``KernelRun``) and of each model's margin beyond the window (``margin_by_length``).

Runs are keyed by (recipe name, offset K), in the order they were trained; what is taken over one recipe's runs
takes them in that order and concatenates their members (offsets, then seeds: ``over_recipe``). A model "learned
the task" when its kernel has a clear peak at the target: c(-K) beats every other offset of the training window
by ``PEAK``. The statistics chapter 4 states over recipes, offsets and seeds (its table, figure frames and cited
numbers) are built in ``lengthgen.chapters.ch04_carrier_kernel``.

Shapes: S members (seeds) per run, V vocabulary, P rotation pairs, n offsets back (the run's reach).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from . import kernel
from .analyze import ALIAS_MARGIN
from .evaluate import Evaluation
from .kernel import Margin, PairSpectrum, Peak
from .train import Trained

PEAK = ALIAS_MARGIN  # c(-K) must beat every other in-window offset by this much (logit units) for a clear peak

Key = tuple[str, int]  # (recipe name, offset K)
Points = tuple[np.ndarray, np.ndarray, list[str]]  # (kernel margin (n,), accuracy (n,), hover text (n,))


@dataclass
class KernelRun:
    """Everything measured of one trained RoPE ensemble's first-layer kernel (one recipe, one offset)."""

    trained: Trained
    evaluation: Evaluation  # accuracy by evaluation length
    kern: np.ndarray  # (S, n) c(delta), column j is j positions back
    spectrum: PairSpectrum
    pairs: np.ndarray  # (S, P, n) each pair's contribution to the kernel
    margin: Margin  # of the target over the window and beyond it, up to n - 1 back
    peaks: list[list[Peak]]  # per member: beyond-window offsets within ALIAS_MARGIN of c(-K)
    failure: list[int | None]  # per member: the kernel's predicted failure length, or None within reach
    sv: np.ndarray  # (S, V) singular values of the logit matrix at the target offset

    @property
    def seeds(self) -> list[int]:
        return list(self.trained.seeds)

    @property
    def train_length(self) -> int:
        return self.trained.config.train_length

    @property
    def learned(self) -> np.ndarray:
        """(S,) bool: the kernel has a clear peak at the target (margin over the window >= PEAK)."""
        return self.margin.in_window >= PEAK

    @property
    def agreement(self) -> np.ndarray:
        """Cosines between every two seeds' centred kernels beyond the window (``kernel.seed_agreement``)."""
        return kernel.seed_agreement(self.kern[:, self.train_length:])


def keys_of(runs: Mapping[Key, KernelRun], recipe: str) -> list[Key]:
    """The keys of ``recipe``'s runs, in training order; a KeyError naming the recipes there are when none."""
    keys = [key for key in runs if key[0] == recipe]
    if not keys:
        raise KeyError(f"no run with recipe {recipe!r}; the runs hold {sorted({key[0] for key in runs})}")
    return keys


def over_recipe(runs: Mapping[Key, KernelRun], recipe: str, values) -> np.ndarray:
    """values(run) -> (S,) for every run of ``recipe``, concatenated."""
    return np.concatenate([np.atleast_1d(values(runs[key])) for key in keys_of(runs, recipe)])


def recipes_of(runs: Mapping[Key, KernelRun]) -> list[str]:
    """The recipe names of ``runs``, in training order."""
    return list(dict.fromkeys(key[0] for key in runs))


def margin_by_length(runs: Mapping[Key, KernelRun], lengths: Sequence[int]) -> dict[tuple[str, int], Points]:
    """(recipe, L) -> (the kernel's margin of the target over the offsets T .. L-1 back, accuracy at L, hover text),
    one entry per model of the recipe (offsets, then seeds)."""
    out = {}
    for name in recipes_of(runs):
        keys = keys_of(runs, name)
        for L in lengths:
            margin = np.concatenate([kernel.target_margin(runs[key].trained.model, key[1], runs[key].train_length,
                                                          L - 1).beyond for key in keys])
            acc = np.concatenate([runs[key].evaluation.by_length[L].accuracy for key in keys])
            out[name, L] = (margin, acc, [f"K={key[1]}, seed {seed}" for key in keys for seed in runs[key].seeds])
    return out
