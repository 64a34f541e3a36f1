"""The training recipes the book compares, in one place: each is a set of Config training fields.

``FIRST_FIT`` is the fast recipe the early chapters were written with (the Config defaults): Adam at a
large step, stopped at the first 99.5% training accuracy. ``SMALL_STEPS`` is the regime the implicit-bias
account is about: a thirty times smaller step and a fixed budget (lr x steps = 2) with no early stop, so that
training goes on well past the first fit. Chapter 9 measures the choice: of the Adam recipes run on every offset
and both vocabularies it came closest to keeping every seed above the bar ``thresholds.EVERY_SEED_TRANSFER``
(lr 1e-4, run on V = 16 only, does a little better at three times the cost), and the chapter checks on every build
whether this recipe is still the closest.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace

from .config import Config

@dataclass(frozen=True)
class Recipe(Mapping):
    """A named training recipe: the Config training fields it sets (every other field stays as given).

    It reads as a mapping of those fields, so ``config.replace(**recipe)`` works like ``recipe.apply(config)``.
    Two recipes are equal when they set the same values (the name is a label): ``Recipe.of(config) ==
    SMALL_STEPS`` asks whether ``config`` was trained with the small-step recipe.
    """

    name: str = field(compare=False)
    optimizer: str
    lr: float
    steps: int
    target_accuracy: float | None  # None: no early stop, the whole budget of ``steps``
    weight_decay: float

    @classmethod
    def of(cls, source: Config | Mapping, name: str = "") -> Recipe:
        """The recipe a config was trained with: the RECIPE_FIELDS values of a ``Config``, a config dict or a
        row of ``Sweep.frame()`` (a missing early stop, NaN in a frame, as None), under ``name``."""
        get = (lambda k: getattr(source, k)) if isinstance(source, Config) else source.__getitem__
        stop = get("target_accuracy")
        return cls(name, optimizer=str(get("optimizer")), lr=float(get("lr")), steps=int(get("steps")),
                   target_accuracy=None if stop is None or math.isnan(stop) else float(stop),
                   weight_decay=float(get("weight_decay")))

    def apply(self, c: Config) -> Config:
        """``c`` trained with this recipe."""
        return c.replace(**self)

    def quick(self, max_steps: int) -> Recipe:
        """This recipe within ``max_steps`` steps, for quick runs. A fixed budget (no early stop) keeps its
        lr x steps (the step to three significant digits), with a larger step over fewer steps, so that it still
        trains as far; an early-stopped recipe
        keeps its step and stops by ``max_steps`` at the latest. Unchanged when it already fits."""
        if self.steps <= max_steps:
            return self
        if self.target_accuracy is None:
            return replace(self, name=f"{self.name} (quick)", lr=float(f"{self.lr * self.steps / max_steps:.3g}"),
                           steps=max_steps)
        return replace(self, steps=max_steps)

    def __getitem__(self, key: str) -> object:
        if key not in RECIPE_FIELDS:
            raise KeyError(f"{key!r} is not a field a recipe sets; those are {', '.join(RECIPE_FIELDS)}")
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(RECIPE_FIELDS)

    def __len__(self) -> int:
        return len(RECIPE_FIELDS)


# The Config fields a recipe sets (batch and decay_scope stay as the config has them).
RECIPE_FIELDS = tuple(f.name for f in fields(Recipe) if f.compare)

FIRST_FIT = Recipe("first fit", **{k: getattr(Config(), k) for k in RECIPE_FIELDS})  # the defaults: lr 0.01, early stop
SMALL_STEPS = Recipe("small steps", optimizer="adam", lr=3e-4, steps=6667, target_accuracy=None, weight_decay=0.0)
RECIPES: dict[str, Recipe] = {r.name: r for r in (FIRST_FIT, SMALL_STEPS)}


def with_recipe(c: Config, name: str) -> Config:
    """``c`` with the training fields of recipe ``name`` (a key of RECIPES)."""
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; use one of {', '.join(RECIPES)}")
    return RECIPES[name].apply(c)
