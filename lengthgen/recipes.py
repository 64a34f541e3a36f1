"""The training recipes the book compares, in one place: each is a set of Config training fields.

``FIRST_FIT`` is the fast recipe the early chapters were written with (the Config defaults): Adam at a
large step, stopped at the first 99.5% training accuracy. ``SMALL_STEPS`` is the regime the implicit-bias
account is about: a thirty times smaller step and a fixed budget (lr x steps = 2) with no early stop, so that
training goes on well past the first fit. Chapter 9 measures the choice: of the Adam recipes run on every offset
and both vocabularies it came closest to keeping every seed above 0.99 at 4x and 0.95 at 8x (lr 1e-4, run on
V = 16 only, does a little better at three times the cost), and the chapter checks on every build whether this
recipe is still the closest.
"""

from __future__ import annotations

from .config import Config

# The Config fields that make up a training recipe (what a result must be stated with).
RECIPE_FIELDS = ("optimizer", "lr", "steps", "batch", "target_accuracy", "weight_decay", "decay_scope")
_SET = ("optimizer", "lr", "steps", "target_accuracy", "weight_decay")  # the fields the two recipes set

FIRST_FIT = {k: getattr(Config(), k) for k in _SET}  # the Config defaults: lr 0.01, <= 400 steps, stop at 0.995
SMALL_STEPS = {"optimizer": "adam", "lr": 3e-4, "steps": 6667, "target_accuracy": None, "weight_decay": 0.0}
RECIPES = {"first fit": FIRST_FIT, "small steps": SMALL_STEPS}


def with_recipe(c: Config, name: str) -> Config:
    """``c`` with the training fields of recipe ``name`` (a key of RECIPES)."""
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; use one of {', '.join(RECIPES)}")
    return c.replace(**RECIPES[name])
