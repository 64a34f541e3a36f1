"""The shift test (lengthgen.equivariance): RoPE's first-layer logits do not move with the sequence, APE's do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lengthgen as lg
from lengthgen.equivariance import layer1_logits, shift_error

TINY = lg.Config(vocab=8, dim=16, train_length=8, offset=2, batch=64, steps=40)


@pytest.fixture(scope="module")
def trained() -> dict[str, lg.Trained]:
    return {enc: lg.train(TINY.replace(encoding=enc), seeds=[0, 1], progress=False) for enc in ("rope", "ape")}


def test_rope_is_exact_and_ape_is_not(trained) -> None:
    for shift in (1, 5, 40):
        rope = shift_error(trained["rope"], shift)
        assert rope.shape == (2,) and rope.dtype == np.float64 and rope.max() < 1e-12
        assert shift_error(trained["ape"], shift).min() > 1e-3
    fp32 = shift_error(trained["rope"], 40, torch.float32)
    assert fp32.dtype == np.float32 and 0 <= fp32.max() < 1e-4
    with pytest.raises(ValueError, match="at least one token"):
        shift_error(trained["rope"], 0)


def test_layer1_logits_are_causal(trained) -> None:
    logits = layer1_logits(trained["rope"].model, lg.eval_tokens(TINY, 8, 3))
    assert logits.shape == (2, 3, 8, 8)
    assert torch.isinf(logits[..., 0, 1:]).all() and torch.isfinite(logits[..., -1, :]).all()
