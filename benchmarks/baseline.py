"""The yardstick: the model and loop a PyTorch user would write for this task without lengthgen.

A standard ``nn.Module``: embedding, RoPE, ``nn.Linear`` projections, full causal attention over
every position (an L x L score matrix), residual, read-out at the last position; ``torch.optim.Adam``.
Same task and sizes as ``lengthgen.Config``: only the implementation differs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lengthgen import Config


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate pairs (x_2p, x_2p+1) of x (B, L, d) by position * base^(-2p/d)."""
    L, d = x.shape[-2:]
    angles = torch.arange(L)[:, None] * base ** (-torch.arange(0, d, 2) / d)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Baseline(nn.Module):
    """One RoPE attention layer over all positions. tokens (B, L) -> logits at the last position (B, V)."""

    def __init__(self, c: Config):
        super().__init__()
        d = c.dim
        self.base = c.rope_base
        self.embed = nn.Embedding(c.vocab, d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.unembed = nn.Linear(d, c.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)  # (B, L, d)
        L, d = h.shape[-2:]
        q, k = rope(self.q(h), self.base), rope(self.k(h), self.base)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, L, L)
        causal = torch.ones(L, L, dtype=torch.bool).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        h = h + self.o(attn @ self.v(h))
        return self.unembed(h[:, -1])


def train_baseline(c: Config, seed: int, steps: int) -> Baseline:
    """``steps`` Adam steps on fresh uniform batches (B, L); target: the token ``c.offset`` back."""
    torch.manual_seed(seed)
    model = Baseline(c)
    opt = torch.optim.Adam(model.parameters(), lr=c.lr)
    for _ in range(steps):
        tokens = torch.randint(c.vocab, (c.batch, c.train_length))
        loss = nn.functional.cross_entropy(model(tokens), tokens[:, -1 - c.offset])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def baseline_accuracy(model: Baseline, tokens: torch.Tensor, offset: int) -> float:
    """Share of sequences (B, L) whose token ``offset`` back from the last is predicted."""
    return float((model(tokens).argmax(-1) == tokens[:, -1 - offset]).float().mean())
