"""The real model's kernel direction along training, its baselines, and the rank statistics of the prediction table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, train
from lengthgen import prediction as pr

SMALL = Config(vocab=8, dim=16, train_length=12, offset=2, batch=64, lr=1e-2, steps=40, target_accuracy=None)


@pytest.fixture(scope="module")
def path() -> pr.DirectionPath:
    return pr.direction_path(SMALL, [0, 1], every=5, per_decade=3)


def test_log_checkpoints_are_log_spaced_multiples_that_end_at_the_budget() -> None:
    picks = pr.log_checkpoints(1000, 10, per_decade=4)
    assert picks[0] == 10 and picks[-1] == 1000 and all(p % 10 == 0 for p in picks)
    ratios = np.diff(np.log10(picks))
    assert len(picks) == 9 and ratios.max() < 0.4  # 2 decades, 4 per decade
    with pytest.raises(ConfigError, match="dividing"):
        pr.log_checkpoints(1000, 30)


def test_a_checkpoint_is_the_run_trained_for_that_many_steps(path) -> None:
    assert path.steps[0] == 0 and path.steps[-1] == SMALL.steps and list(path.steps) == sorted(set(path.steps))
    assert np.allclose(np.linalg.norm(path.w, axis=-1), 1)
    k = int(np.flatnonzero(path.steps == 10)[0])
    alone = train(SMALL.replace(steps=10), [1], progress=False)
    assert np.allclose(path.w[k, 1], pr.kernel_coefficients(alone.model)[0], atol=1e-4)
    assert np.allclose(path.w[-1], pr.kernel_coefficients(path.trained.model), atol=1e-6)


def test_cosines_turning_and_the_largest_parameter(path) -> None:
    cos = path.cosines(path.w[-1, 0])
    assert cos.shape == (len(path.steps), 2) and cos[-1, 0] == pytest.approx(1.0)
    assert path.turning().shape == (len(path.steps) - 1, 2) and (path.turning() >= -1e-9).all()
    model = path.trained.model
    by_hand = max(float(p.detach()[1].abs().max()) for p in model.parameters())
    assert pr.max_abs_parameter(model)[1] == pytest.approx(by_hand)


def test_direction_path_needs_a_one_layer_rope_model() -> None:
    with pytest.raises(ConfigError, match="one-layer RoPE"):
        pr.direction_path(SMALL.replace(encoding="ape"), [0], every=5)


def test_seed_agreement_and_random_baseline() -> None:
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert np.allclose(pr.seed_agreement(w), [0.0, 2**-0.5, 2**-0.5])
    d = 32
    cos = pr.random_cosines(np.ones(d), draws=20000, seed=1)
    assert abs(cos.mean()) < 0.01 and cos.std() == pytest.approx(d**-0.5, rel=0.05)


def test_spearman_on_hand_ranked_cases() -> None:
    x = [0.1, 0.5, 0.3, 0.9, 0.7]
    assert pr.spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert pr.spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    y = [2, 1, 4, 3, 5]  # ranks of x are 1 3 2 5 4: d = (-1, 2, -2, 2, -1), sum d^2 = 14
    assert pr.spearman(x, y) == pytest.approx(1 - 6 * 14 / (5 * 24))
    scipy_stats = pytest.importorskip("scipy.stats")
    ties = ([1, 2, 2, 3, 5, 5], [3, 1, 4, 1, 5, 9])
    assert pr.spearman(*ties) == pytest.approx(scipy_stats.spearmanr(*ties).statistic)
    assert np.isnan(pr.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ConfigError, match="equal length"):
        pr.spearman([1, 2, 3], [1, 2])
