"""The paper's headline claims, asserted on small fast configurations with real thresholds.

RoPE: width 64, 600 steps without early stop (at width 32 some seeds plateau near 0.55 at the training length; the book's
robustness chapter shows this). APE: the default task. Three seeds each, 1000 held-out samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, evaluate, train

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
