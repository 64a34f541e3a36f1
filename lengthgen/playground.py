"""The static playground's grid: RoPE and APE trained at every (training length T, offset K) of a grid,
in each training recipe, and measured when the book is built, so that a page without a kernel can show
any pair the reader picks (``plots.playground_grid`` draws it; chapter 7 shows it; what the chapter states about
it is built in ``lengthgen.chapters.ch07_playground``).

Every (T, encoding) column of the grid (all offsets x all recipes x all seeds) trains as one batched
ensemble (``train.train_runs``), split only where the recipes differ in a setting an ensemble must share
(e.g. the optimizer). Each trained (recipe, T, K, encoding) is evaluated at multiples of T, and the last
query's mean attention over keys is measured at one evaluation length (``profile_multiple`` x T).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .config import Config, ConfigError, check_samples
from .evaluate import evaluate, last_query_profile
from .optim import Optimizer
from .recipes import RECIPES, SMALL_STEPS, Recipe
from .train import STOP_WINDOW, Trained, shape_key, train_runs

COMPARED = ("rope", "ape")  # the two encodings the playground sets side by side
PROFILE_SEED = 1  # held-out sample seed of the attention profile (accuracy uses evaluate's default, 0)


@dataclass
class PlaygroundGrid:
    """Accuracy by evaluation length and the last query's attention, for every grid point.

    Axes: nR recipes, nT training lengths, nK offsets, nE encodings, nM evaluation multiples, S seeds.
    """

    recipes: dict[str, str]  # (nR,) recipe name -> its training settings in words (Config.recipe())
    train_lengths: list[int]  # (nT,)
    offsets: list[int]  # (nK,)
    encodings: list[str]  # (nE,)
    seeds: list[int]  # (S,)
    multiples: list[int]  # (nM,) evaluation lengths are m * T
    samples: int  # held-out sequences per evaluation length
    profile_multiple: int  # the attention profile is measured at L = profile_multiple * T
    profile_samples: int  # held-out sequences the attention profile averages over
    chance: float  # 1 / V
    accuracy: np.ndarray  # (nR, nT, nK, nE, nM, S) float32, fraction correct
    steps: np.ndarray  # (nR, nT, nK, nE, S) int32, steps each member trained
    profiles: dict[int, np.ndarray]  # T -> (nR, nK, nE, S, profile_multiple * T) float32: mean attention of
    # the last query on each key position (0-indexed), at L = profile_multiple * T
    configs: dict[tuple[str, int, int, str], Config] = field(repr=False)  # (recipe, T, K, encoding) -> config
    seconds: float = 0.0  # wall-clock time to train and measure the grid

    def index(self, recipe: str, T: int, K: int) -> tuple[int, int, int]:
        """(recipe, T, K) as indices into the grid's axes (KeyError naming the known values)."""
        for value, known in ((recipe, list(self.recipes)), (T, self.train_lengths), (K, self.offsets)):
            if value not in known:
                raise KeyError(f"{value!r} is not on the grid; it has {known}")
        return list(self.recipes).index(recipe), self.train_lengths.index(T), self.offsets.index(K)

    def pair(self, recipe: str, T: int, K: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """encoding -> (accuracy (nM, S), attention profile (S, profile_multiple * T)) at one grid point."""
        r, t, k = self.index(recipe, T, K)
        return {enc: (self.accuracy[r, t, k, e], self.profiles[T][r, k, e]) for e, enc in enumerate(self.encodings)}

    def peak_back(self) -> np.ndarray:
        """(nR, nT, nK, nE) int: how many positions behind the last query its mean attention (over seeds)
        peaks, at L = profile_multiple * T. The target is K back; APE's training target x_(T-K) is
        (profile_multiple - 1) * T + K back."""
        out = np.zeros(self.steps.shape[:4], np.int32)
        for t, T in enumerate(self.train_lengths):
            L = self.profile_multiple * T
            out[:, t] = L - 1 - self.profiles[T].mean(3).argmax(-1)
        return out

    def summary(self) -> str:
        """One line per (recipe, T, K): mean accuracy over seeds at each multiple, per encoding (3 decimals)."""
        lines = [f"accuracy at {', '.join(f'{m}x' for m in self.multiples)} T (mean of {len(self.seeds)} seeds)"]
        for r, name in enumerate(self.recipes):
            for t, T in enumerate(self.train_lengths):
                for k, K in enumerate(self.offsets):
                    cells = "  ".join(f"{enc}: " + " ".join(f"{a:.3f}" for a in self.accuracy[r, t, k, e].mean(-1))
                                      for e, enc in enumerate(self.encodings))
                    lines.append(f"{name:11s} T={T:3d} K={K:2d}  {cells}")
        return "\n".join(lines)


def _distinct(name: str, values: Sequence[object]) -> list:
    values = list(values)
    if not values or len(set(values)) != len(values):
        raise ConfigError(f"{name}={values}: give at least one value, each once")
    return values


def compute_grid(
    base: Config,
    train_lengths: Sequence[int],
    offsets: Sequence[int],
    seeds: Sequence[int],
    multiples: Sequence[int] = (1, 2, 4, 8),
    samples: int = 500,
    recipes: Mapping[str, Mapping[str, object]] = RECIPES,
    encodings: Sequence[str] = COMPARED,
    profile_multiple: int = 2,
    profile_samples: int = 200,
    progress: bool | None = False,
) -> PlaygroundGrid:
    """Train and measure every (recipe, T, K, encoding) of the grid, each from ``seeds``.

    ``recipes``: name -> the training settings it puts on ``base`` (default: ``recipes.RECIPES``; a quick
    run may shorten ``steps``). Every (T, K) must be a valid task (K < T): the configs are checked before
    any training. Evaluation lengths are ``multiples`` x T; the attention profile is taken at
    ``profile_multiple`` x T on ``profile_samples`` other held-out sequences (a mean over samples: fewer
    suffice).
    """
    Ts, Ks = _distinct("train_lengths", train_lengths), _distinct("offsets", offsets)
    names, encs = _distinct("recipes", recipes), _distinct("encodings", encodings)
    seeds, multiples = _distinct("seeds", [int(s) for s in seeds]), _distinct("multiples", multiples)
    check_samples(samples)
    check_samples(profile_samples)
    if profile_multiple < 1:
        raise ConfigError(f"profile_multiple={profile_multiple}: use a whole multiple of T, at least 1")
    configs = {(name, T, K, enc): base.replace(encoding=enc, train_length=T, offset=K, **recipes[name])
               for name in names for T in Ts for K in Ks for enc in encs}
    shape = (len(names), len(Ts), len(Ks), len(encs))
    accuracy = np.zeros(shape + (len(multiples), len(seeds)), np.float32)
    steps = np.zeros(shape + (len(seeds),), np.int32)
    profiles = {T: np.zeros((len(names), len(Ks), len(encs), len(seeds), profile_multiple * T), np.float32) for T in Ts}
    start = time.perf_counter()
    for t, T in enumerate(Ts):
        for e, enc in enumerate(encs):
            column = dict.fromkeys(configs[name, T, K, enc] for name in names for K in Ks)  # distinct, in order
            groups: dict[str, list[Config]] = {}
            for c in column:
                groups.setdefault(shape_key(c), []).append(c)
            for group in groups.values():
                for tr in train_runs([(c, s) for c in group for s in seeds], progress=progress):
                    acc = evaluate(tr, [m * T for m in multiples], samples=samples).accuracy()
                    prof = last_query_profile(tr, profile_multiple * T, profile_samples, seed=PROFILE_SEED)
                    k = Ks.index(tr.config.offset)
                    for r, name in enumerate(names):  # every recipe that gives this config (usually one)
                        if configs[name, T, tr.config.offset, enc] == tr.config:
                            accuracy[r, t, k, e], steps[r, t, k, e], profiles[T][r, k, e] = acc, tr.steps, prof
    recipe_text = {name: configs[name, Ts[0], Ks[0], encs[0]].recipe() for name in names}
    return PlaygroundGrid(recipe_text, Ts, Ks, encs, seeds, multiples, samples, profile_multiple, profile_samples,
                          base.chance, accuracy, steps, profiles, configs, time.perf_counter() - start)


# The settings the in-page trainer (plots/trainer.js) reads; it trains what the table step trains (one layer,
# residual, no MLP, fresh batches, Adam, float64), and ``trainer_config`` refuses anything else.
TRAINER_FIELDS = ("vocab", "dim", "train_length", "offset", "encoding", "rope_base", "max_length", "init_scale",
                  "batch", "lr", "steps", "target_accuracy", "weight_decay", "decay_scope")


def trainer_config(c: Config) -> dict[str, object]:
    """``c`` as the in-page trainer reads it (JSON-ready): its ``TRAINER_FIELDS``, Adam's betas and eps as
    ``optim.Optimizer`` uses them, and the early stop's window (``train.STOP_WINDOW``), so that the page trains
    the package's recipe from one source. ConfigError for what the trainer does not cover."""
    unsupported = {"encoding": c.encoding not in COMPARED, "layers": c.layers != 1, "residual": not c.residual,
                   "mlp": c.mlp, "optimizer": c.optimizer != "adam", "min_train_length": c.min_train_length is not None,
                   "train_set": c.train_set is not None}
    bad = [name for name, off in unsupported.items() if off]
    if bad:
        raise ConfigError(f"the in-page trainer covers one layer with a residual stream, no MLP, Adam on fresh batches "
                          f"and {' or '.join(COMPARED)}; change {', '.join(f'{n}={getattr(c, n)!r}' for n in bad)}")
    defaults = inspect.signature(Optimizer).parameters
    return {**{name: getattr(c, name) for name in TRAINER_FIELDS}, "betas": list(defaults["betas"].default),
            "eps": defaults["eps"].default, "stop_window": STOP_WINDOW}


# Chapter 7's "train here": the controls' ranges, the small-step recipe sized for a browser, what the page shows.
HERE_LENGTHS = (4, 64)  # the training lengths the page offers (T slider); 16 T stays within max_length = 1024
HERE_SEEDS = (0, 9999)  # the seeds the page offers
HERE_MULTIPLES = (1, 2, 4, 8, 16)  # evaluation lengths, multiples of T
BROWSER_STEPS = 2000  # the browser's small-step recipe: SMALL_STEPS within this budget (the same lr x steps)
BROWSER_SMALL_STEPS = Recipe(f"{SMALL_STEPS.name}, sized for the browser", **SMALL_STEPS.quick(BROWSER_STEPS))
_T_MARK, _K_MARK = 4000001, 5000003  # values no control gives, to read the package's messages as templates


def refusals() -> dict[str, str]:
    """The package's own ConfigError messages for the settings the page's controls set (training length T,
    offset K), as templates with "{T}" and "{K}" where the values go: "T_whole", "T_low" (T < 1), "K_whole",
    "K_low" (K < 1) and "K_high" (K >= T). Read from ``config.validate`` itself, so the page refuses a setting
    with the words the package uses."""
    cases = {"T_whole": (dict(train_length=_T_MARK + 0.5), {_T_MARK + 0.5: "{T}"}),
             "T_low": (dict(train_length=-_T_MARK), {-_T_MARK: "{T}"}),
             "K_whole": (dict(offset=_K_MARK + 0.5), {_K_MARK + 0.5: "{K}"}),
             "K_low": (dict(offset=-_K_MARK), {-_K_MARK: "{K}"}),
             "K_high": (dict(train_length=_T_MARK, offset=_K_MARK), {_T_MARK: "{T}", _K_MARK: "{K}"})}
    out = {}
    for name, (fields, marks) in cases.items():
        try:
            Config(**fields)
        except ConfigError as e:
            text = str(e)
        else:
            raise AssertionError(f"Config({fields}) was accepted; refusals() expected a ConfigError")
        for value, slot in marks.items():
            text = text.replace(repr(value), slot)
        out[name] = text
    return out


def grid_points(grid: PlaygroundGrid) -> dict[str, dict[str, dict[str, list[list[float]]]]]:
    """The grid's accuracies as the page reads them: recipe -> "T,K" -> encoding -> (nM, S) per seed."""
    return {name: {f"{T},{K}": {enc: grid.accuracy[r, t, k, e].round(4).tolist() for e, enc in enumerate(grid.encodings)}
                   for t, T in enumerate(grid.train_lengths) for k, K in enumerate(grid.offsets)}
            for r, name in enumerate(grid.recipes)}


def train_here(grid: PlaygroundGrid, base: Config, recipes: Mapping[str, Recipe], samples: int,
               start: tuple[str, int, int] | None = None) -> dict[str, object]:
    """What the page's "train here" panel needs (JSON-ready): the trainer's settings (``trainer_config`` of
    ``base``), the recipes it offers (``recipes``, those of the grid, then ``BROWSER_SMALL_STEPS``; each with its
    settings in words), the controls' ranges and first values (``start``: recipe, T, K; default: the first recipe
    at ``base``'s T and K), the package's refusals, the evaluation multiples and held-out ``samples``, chance, and
    the grid's per-seed accuracies to set beside the reader's run where (recipe, T, K) is on the grid."""
    offered = {**{name: Recipe.of(base.replace(**r), name) for name, r in recipes.items()},
               BROWSER_SMALL_STEPS.name: BROWSER_SMALL_STEPS}
    check_samples(samples)
    recipe, T, K = start or (next(iter(offered)), base.train_length, base.offset)
    if recipe not in offered:
        raise ConfigError(f"start recipe {recipe!r}: use one of {', '.join(offered)}")
    return {
        "config": trainer_config(base),
        "recipes": {name: {"fields": {k: r[k] for k in ("lr", "steps", "target_accuracy", "weight_decay")},
                           "text": r.apply(base).recipe(), "on_grid": name in grid.recipes}
                    for name, r in offered.items()},
        "start": {"recipe": recipe, "T": T, "K": K, "seed": 0},
        "lengths": list(HERE_LENGTHS), "seeds": list(HERE_SEEDS), "multiples": list(HERE_MULTIPLES),
        "samples": samples, "chance": base.chance, "refusals": refusals(),
        "grid": {"multiples": grid.multiples, "seeds": grid.seeds, "samples": grid.samples, "points": grid_points(grid)},
    }
