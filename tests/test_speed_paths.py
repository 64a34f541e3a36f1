"""The speed work on the table step keeps its numbers: what it caches per call (the lookup index of a fixed
training set) gives bitwise the same gradient as computing it afresh, and is recomputed for new tokens."""

from __future__ import annotations

import pytest
import torch

from lengthgen import Config
from lengthgen.model import Model
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream


@pytest.mark.parametrize("encoding", ["rope", "ape", "nope"])
def test_cached_index_same_numbers_and_renewed(encoding: str) -> None:
    c = Config(encoding=encoding, train_set=64, batch=64, dtype="float64", target_accuracy=None)
    model = Model(c, [0, 1])
    stream = TrainStream(c, [0, 1])
    fixed = stream.next()
    assert stream.next() is fixed  # the fixed set is one tensor: the case the cache is for
    other = torch.randint(c.vocab, fixed.shape, generator=torch.Generator().manual_seed(5))

    def grad(step: TableStep, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return step(step.pack(model), x, x[..., -1 - c.offset:-c.offset])[2]

    cached = TableStep(c, model.encoding, c.train_length)
    first, again = grad(cached, fixed), grad(cached, fixed)  # the second call reads the cached index
    assert torch.equal(first, again)
    assert torch.equal(first, grad(TableStep(c, model.encoding, c.train_length), fixed.clone()))
    # new tokens after the cached ones: the index follows them (a stale index would give fixed's gradient)
    assert torch.equal(grad(cached, other), grad(TableStep(c, model.encoding, c.train_length), other))
    assert not torch.equal(grad(cached, other), first)
