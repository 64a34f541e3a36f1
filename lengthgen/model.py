"""A causal attention model with a leading ensemble axis: S seeds train as one batched model.

Every parameter has shape (S, ...); member s is initialised from its own seed, so a member of an
ensemble starts exactly where the same seed trained alone would start. Shapes below use
S members, B sequences, L positions, d width, V vocabulary.

Only the last position's output is read (the query), so the last layer computes attention for
that one query: a one-layer model costs O(L * d) per sequence, not O(L^2 * d).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import torch
from torch import nn

from .config import Config
from .encodings import Encoding, build_encoding, stacked_normal
from .task import STREAM_INIT, generator


class Output(NamedTuple):
    logits: torch.Tensor  # (S, B, V): prediction for the target token
    attentions: list[torch.Tensor]  # one per layer: (S, B, Lq, L); Lq = 1 for the last layer unless full


class Layer(nn.Module):
    """Single-head causal self-attention, optional residual stream and ReLU MLP."""

    def __init__(self, c: Config, gens: list[torch.Generator]):
        super().__init__()
        d, std = c.dim, 1.0 / math.sqrt(c.dim)
        self.wq = nn.Parameter(stacked_normal(gens, (d, d), std))
        self.wk = nn.Parameter(stacked_normal(gens, (d, d), std))
        self.wv = nn.Parameter(stacked_normal(gens, (d, d), std))
        self.wo = nn.Parameter(stacked_normal(gens, (d, d), std))
        self.residual = c.residual
        if c.mlp:
            self.w1 = nn.Parameter(stacked_normal(gens, (d, 4 * d), std))
            self.w2 = nn.Parameter(stacked_normal(gens, (4 * d, d), 1.0 / math.sqrt(4 * d)))
        else:
            self.w1 = self.w2 = None

    def scores(self, h: torch.Tensor, enc: Encoding, q_pos: torch.Tensor) -> torch.Tensor:
        """Attention logits before softmax, causal positions masked with -inf.

        h: (S, B, L, d) layer input; q_pos: (Lq,) the query positions. Returns (S, B, Lq, L).
        """
        pos = torch.arange(h.shape[2], device=h.device)
        q = enc.rotate(h[:, :, q_pos] @ self.wq[:, None], q_pos)
        k = enc.rotate(h @ self.wk[:, None], pos)
        s = q @ k.transpose(-1, -2) / math.sqrt(h.shape[-1])
        bias = enc.bias(q_pos, pos)
        if bias is not None:
            s = s + bias
        return s.masked_fill(pos[None, :] > q_pos[:, None], float("-inf"))

    def forward(self, h: torch.Tensor, enc: Encoding, q_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: (S, B, L, d) -> (output at the query positions (S, B, Lq, d), attention (S, B, Lq, L))."""
        attn = self.scores(h, enc, q_pos).softmax(-1)
        out = (attn @ (h @ self.wv[:, None])) @ self.wo[:, None]
        if self.residual:
            out = out + h[:, :, q_pos]
        if self.w1 is not None:
            hidden = torch.relu(out @ self.w1[:, None]) @ self.w2[:, None]
            out = out + hidden if self.residual else hidden
        return out, attn


class Model(nn.Module):
    """Token embedding, positional encoding, ``layers`` attention layers, linear read-out."""

    def __init__(self, c: Config, seeds: Sequence[int]):
        super().__init__()
        if len(seeds) == 0:
            raise ValueError("give at least one seed")
        self.config, self.seeds = c, list(seeds)
        gens = [generator(s, STREAM_INIT) for s in self.seeds]
        self.embed = nn.Parameter(stacked_normal(gens, (c.vocab, c.dim), 1.0))
        self.encoding = build_encoding(c, gens)
        self.layers = nn.ModuleList(Layer(c, gens) for _ in range(c.layers))
        self.unembed = nn.Parameter(stacked_normal(gens, (c.dim, c.vocab), 1.0 / math.sqrt(c.dim)))

    @property
    def members(self) -> int:
        return len(self.seeds)

    def inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Layer-1 input: token embeddings plus any additive position rows.

        tokens: (B, L) shared by all members, or (S, B, L). Returns (S, B, L, d).
        """
        if tokens.dim() == 2:
            h = self.embed[:, tokens]
        else:
            h = self.embed[torch.arange(self.members, device=tokens.device)[:, None, None], tokens]
        rows = self.encoding.add(tokens.shape[-1])
        return h if rows is None else h + rows[:, None]

    def forward(self, tokens: torch.Tensor, full: bool = False) -> Output:
        """tokens: (B, L) or (S, B, L) int64. ``full`` computes every query row of the last layer too."""
        h = self.inputs(tokens)
        length = tokens.shape[-1]
        every = torch.arange(length, device=tokens.device)
        attentions = []
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            h, attn = layer(h, self.encoding, every if full or not last else every[-1:])
            attentions.append(attn)
        logits = h[:, :, -1] @ self.unembed
        return Output(logits, attentions)
