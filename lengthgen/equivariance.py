"""The shift test: does a trained model's first-layer attention logit change when the whole sequence moves?

RoPE's logit between positions i and j depends on j - i only, so prepending ``shift`` tokens leaves every logit
between the moved tokens unchanged up to rounding; APE's logit depends on the absolute positions and changes.

Shapes: S members, B sequences, L positions.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from .model import Model
from .task import eval_tokens
from .train import Trained


def layer1_logits(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """First-layer attention logits for every query: tokens (B, L) -> (S, B, L, L), -inf above the diagonal."""
    return model.layers[0].scores(model.inputs(tokens), model.encoding, torch.arange(tokens.shape[-1]))


def shift_error(trained: Trained, shift: int, dtype: torch.dtype = torch.float64, samples: int = 32) -> np.ndarray:
    """Per member (S,), the largest |logit(i, j) - logit(i + shift, j + shift)| over the causal pairs of
    ``samples`` held-out sequences of the training length when ``shift`` random tokens are prepended; the model
    is copied to ``dtype`` on the CPU first (float64: what is left is rounding)."""
    if shift < 1:
        raise ValueError(f"shift={shift}: prepend at least one token")
    model = copy.deepcopy(trained.model).cpu().to(dtype)
    T = trained.config.train_length
    tokens = eval_tokens(trained.config, T, samples, seed=1)
    prefix = eval_tokens(trained.config, shift, samples, seed=2)
    with torch.no_grad():
        plain = layer1_logits(model, tokens)
        moved = layer1_logits(model, torch.cat([prefix, tokens], dim=1))[..., shift:, shift:]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (plain - moved)[..., causal].abs().amax(-1).amax(-1).numpy()  # (S, B, pairs) -> (S,)
