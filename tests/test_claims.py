"""The paper's headline claims, asserted on small fast configurations with real thresholds.

The default task (V=16, d=32, T=32, K=2), three seeds, 1000 held-out samples, under the book's two recipes
(lengthgen.recipes): FIRST_FIT (the Config defaults: Adam lr 0.01, early stop at the first fit) and
SMALL_STEPS (a small Adam step, no early stop: the regime chapter 9 measures).
"""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, evaluate, train
from lengthgen.recipes import with_recipe
from lengthgen.train import train_runs

SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def rope():
    c = Config(encoding="rope")
    return evaluate(train(c, SEEDS), [32, 64, 128])


@pytest.fixture(scope="module")
def ape():
    c = Config(encoding="ape")
    return evaluate(train(c, SEEDS), [32, 128, 256, 512])


def test_rope_learns_the_task(rope) -> None:
    assert rope.by_length[32].accuracy.min() >= 0.99


def test_rope_stays_well_above_chance_at_twice_the_training_length(rope) -> None:
    acc2x = rope.by_length[64].accuracy
    assert acc2x.mean() >= 0.8 and acc2x.min() >= 10 * rope.chance


def test_ape_learns_the_task(ape) -> None:
    assert ape.by_length[32].accuracy.min() >= 0.99


@pytest.mark.parametrize("length", [128, 256, 512])
def test_ape_is_at_chance_from_four_times_the_training_length(ape, length: int) -> None:
    assert np.abs(ape.by_length[length].accuracy - ape.chance).max() <= 0.05


def test_rope_beats_ape_beyond_the_training_length(rope, ape) -> None:
    assert rope.by_length[128].accuracy.mean() > ape.by_length[128].accuracy.mean() + 0.2


# --- the recipe (chapter 9): what the step size changes ---


@pytest.fixture(scope="module")
def rope_small_steps():
    c = with_recipe(Config(encoding="rope"), "small steps")
    return evaluate(train(c, SEEDS), [32, 128, 256], samples=1000)


def test_small_steps_keep_every_seed_above_the_bar_at_4x_and_8x(rope_small_steps) -> None:
    """Chapter 9's bar (0.99 at 4x, 0.95 at 8x for every seed) on the default task."""
    assert rope_small_steps.by_length[32].accuracy.min() >= 0.99
    assert rope_small_steps.by_length[128].accuracy.min() >= 0.99
    assert rope_small_steps.by_length[256].accuracy.min() >= 0.95


def test_small_steps_carry_rope_further_than_the_first_fit(rope, rope_small_steps) -> None:
    assert rope_small_steps.by_length[128].accuracy.mean() >= rope.by_length[128].accuracy.mean() + 0.2


def test_more_steps_at_the_large_step_do_not_close_the_gap(rope_small_steps) -> None:
    """Four times the small-step recipe's lr x steps at lr 0.01 (800 steps, no early stop) stays far below it at 4x."""
    c = Config(encoding="rope", lr=1e-2, steps=800, target_accuracy=None)
    long_big = evaluate(train(c, SEEDS), [128], samples=1000).by_length[128].accuracy
    assert long_big.mean() <= 0.8 and long_big.mean() <= rope_small_steps.by_length[128].accuracy.mean() - 0.15


@pytest.fixture(scope="module")
def ape_small_steps():
    return evaluate(train(with_recipe(Config(encoding="ape"), "small steps"), SEEDS), [32, 128, 256], samples=1000)


@pytest.mark.parametrize("length", [128, 256])
def test_ape_stays_at_chance_with_small_steps(ape_small_steps, length: int) -> None:
    """No step size trains position rows that training never uses."""
    assert ape_small_steps.by_length[32].accuracy.min() >= 0.99
    assert np.abs(ape_small_steps.by_length[length].accuracy - ape_small_steps.chance).max() <= 0.05


def test_small_steps_with_a_small_rope_base_clear_the_bar_at_every_offset() -> None:
    """Chapter 9's regime with fast-turning pairs (base 100): every seed >= 0.99 at 4x and >= 0.95 at 8x, K = 1 and 8."""
    base = Config(encoding="rope", rope_base=100.0, lr=1e-3, steps=2000, target_accuracy=None)
    for trained in train_runs([(base.replace(offset=K), s) for K in (1, 8) for s in SEEDS], progress=False):
        ev = evaluate(trained, [128, 256], samples=1000)
        assert ev.by_length[128].accuracy.min() >= 0.99, trained.config.offset
        assert ev.by_length[256].accuracy.min() >= 0.95, trained.config.offset
