"""lengthgen.recipes: one Recipe type; the quick variant of each recipe still learns the task."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from lengthgen import Config, evaluate, recipes, train


def test_a_recipe_sets_its_training_fields_and_nothing_else() -> None:
    base = Config(train_length=16, batch=64, decay_scope="all")
    c = recipes.SMALL_STEPS.apply(base)
    assert (c.lr, c.steps, c.target_accuracy) == (3e-4, 6667, None)
    assert (c.batch, c.decay_scope, c.train_length) == (64, "all", 16)
    assert base.replace(**recipes.SMALL_STEPS) == c  # it reads as the mapping of those fields
    assert recipes.with_recipe(base, "small steps") == c
    assert recipes.FIRST_FIT.apply(Config()) == Config()  # the first-fit recipe is the defaults
    assert list(recipes.RECIPES) == ["first fit", "small steps"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipes.SMALL_STEPS.lr = 1.0
    with pytest.raises(KeyError, match="use one of first fit, small steps"):
        recipes.with_recipe(base, "large steps")
    with pytest.raises(KeyError, match="not a field a recipe sets"):
        recipes.SMALL_STEPS["batch"]


def test_the_quick_variant_keeps_lr_times_steps_or_caps_the_early_stopped_budget() -> None:
    small = recipes.SMALL_STEPS.quick(400)
    assert small.steps == 400 and small.target_accuracy is None and small.name == "small steps (quick)"
    assert small.lr * small.steps == pytest.approx(recipes.SMALL_STEPS.lr * recipes.SMALL_STEPS.steps, rel=1e-3)
    first = recipes.FIRST_FIT.quick(100)
    assert (first.lr, first.steps, first.name) == (recipes.FIRST_FIT.lr, 100, "first fit")
    assert recipes.SMALL_STEPS.quick(10_000) is recipes.SMALL_STEPS


def test_the_quick_small_step_recipe_learns_the_task_where_the_capped_one_does_not() -> None:
    """QUICK runs used to cap the small-step recipe at 400 steps of lr 3e-4 (lr x steps = 0.12): chance at 1x.
    Its quick variant (lr x steps kept) fits the task and carries RoPE past the training length."""
    base = Config(encoding="rope")
    L = [base.train_length, 2 * base.train_length]
    quick = evaluate(train(recipes.SMALL_STEPS.quick(400).apply(base), [0, 1], progress=False), L, samples=500)
    capped = evaluate(train(base.replace(**{**recipes.SMALL_STEPS, "steps": 400}), [0, 1], progress=False), L,
                      samples=500)
    acc, old = quick.accuracy(), capped.accuracy()  # (2 lengths, 2 seeds)
    assert acc[0].min() > 0.99 and acc[1].min() > 0.85, acc
    assert old[0].max() < 0.3, old


def test_recipe_of_a_config_a_dict_or_a_frame_row_and_equality_by_fields() -> None:
    c = recipes.SMALL_STEPS.apply(Config(batch=64, decay_scope="all"))
    assert recipes.Recipe.of(c) == recipes.SMALL_STEPS  # equal by the fields it sets; the name is a label
    assert recipes.Recipe.of(c, name="mine").name == "mine" and hash(recipes.Recipe.of(c)) == hash(recipes.SMALL_STEPS)
    row = pd.Series({**c.to_dict(), "target_accuracy": float("nan"), "lr": c.lr})  # a frame stores None as NaN
    assert recipes.Recipe.of(row) == recipes.SMALL_STEPS and recipes.Recipe.of(row).target_accuracy is None
    assert recipes.Recipe.of(Config().to_dict()) == recipes.FIRST_FIT != recipes.SMALL_STEPS
    assert recipes.RECIPE_FIELDS == tuple(recipes.SMALL_STEPS)
