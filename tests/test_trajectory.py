"""Checkpoints along one recipe and the kernel/content split of the first-layer logit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, train
from lengthgen import maxmargin as mm
from lengthgen import trajectory as tj
from lengthgen.kernel import logit_table, target_margin

SMALL = Config(vocab=8, dim=16, train_length=12, offset=2, batch=64, lr=1e-2, target_accuracy=None)


@pytest.fixture(scope="module")
def path():
    return tj.checkpoints(SMALL, [0, 1], [5, 20, 60])


def test_a_checkpoint_is_the_run_trained_for_that_many_steps(path) -> None:
    assert [t.config.steps for t in path] == [5, 20, 60] and all(t.seeds == [0, 1] for t in path)
    alone = train(SMALL.replace(steps=20), [1], progress=False)
    for a, b in zip(path[1].model.parameters(), alone.model.parameters()):
        assert torch.allclose(a[1], b[0], atol=1e-5, rtol=0)


def test_the_split_agrees_with_the_kernel_module(path) -> None:
    t = path[-1]
    split = tj.logit_split(t, max_multiple=4)
    margin = target_margin(t.model, SMALL.offset, SMALL.train_length, max_delta=4 * SMALL.train_length - 1)
    assert np.allclose(split.margin_beyond, margin.beyond, atol=1e-4)
    table = logit_table(t.model, 4 * SMALL.train_length)[0]  # (S, V, V, L-1)
    content = table - table.mean((1, 2), keepdim=True)
    at_target = content[..., -SMALL.offset]  # key at delta = -K
    assert np.allclose(split.content_target, at_target.pow(2).mean((1, 2)).sqrt().numpy(), atol=1e-6)
    assert (split.content_window > 0).all() and len(split.as_rows(step=60)) == 2


def test_directions_stop_changing_only_when_the_parameters_do(path) -> None:
    same = tj.direction_change([path[-1], path[-1]])
    assert np.allclose(same, 0, atol=1e-12)
    assert (tj.direction_change(path) > 1e-6).all()  # early on, training still turns the query-key matrix


def test_alignment_with_a_solution_built_from_the_models_own_kernel(path) -> None:
    t = path[-1]
    own = mm.MaxMargin(tj.kernel_direction(t)[0], np.zeros(SMALL.dim // 2), SMALL.offset, SMALL.train_length, "l2")
    assert np.isclose(tj.alignment(t, own)[0], 1.0)


def test_budgets_must_be_step_counts() -> None:
    with pytest.raises(ConfigError, match="budgets"):
        tj.checkpoints(SMALL, [0], [])
