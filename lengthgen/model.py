"""A causal attention model with a leading ensemble axis: S seeds train as one batched model.

Every parameter has shape (S, ...); member s is initialised from its own seed, so a member of an
ensemble starts exactly where the same seed trained alone would start. Shapes below use
S members, B sequences, L positions, d width, V vocabulary.

Only the last position's output is read (the query), so the last layer computes attention for
that one query: the plain path costs O(L d^2) per sequence for one layer, not O(L^2 d). A one-layer
model goes further (``Model.forward_tables``): its logits are entries of a table over
(query token, key token, key position), so a sequence costs O(L) table reads.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple, Sequence

import torch
from torch import nn

from .config import Config
from .encodings import Encoding, build_encoding, stacked_normal
from .task import STREAM_INIT, generator


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each member's rows times its own matrix: x (S, ..., d) @ w (S, d, e) -> (S, ..., e).

    x may have a member axis of 1 (rows shared by all members). One batched matmul over S (a
    broadcast ``x @ w[:, None]`` would copy w once per sequence).
    """
    return (x.flatten(1, -2) @ w).view(-1, *x.shape[1:-1], w.shape[-1])


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
        q = enc.rotate(project(h[:, :, q_pos], self.wq), q_pos)
        k = enc.rotate(project(h, self.wk), pos)
        s = q @ k.transpose(-1, -2) / math.sqrt(h.shape[-1])
        bias = enc.bias(q_pos, pos)
        if bias is not None:
            s = s + bias
        return s.masked_fill(pos[None, :] > q_pos[:, None], float("-inf"))

    def forward(self, h: torch.Tensor, enc: Encoding, q_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: (S, B, L, d) -> (output at the query positions (S, B, Lq, d), attention (S, B, Lq, L))."""
        attn = self.scores(h, enc, q_pos).softmax(-1)
        return self.output(attn @ h, h[:, :, q_pos]), attn

    def output(self, attended: torch.Tensor, h_query: torch.Tensor) -> torch.Tensor:
        """The layer output from the attention-weighted input sum_j attn_j h_j and the query's own input.

        attended, h_query: (S, B, Lq, d). Returns (S, B, Lq, d). The value and output projections are
        linear, so they are applied once to the weighted sum instead of to every key position.
        """
        out = project(project(attended, self.wv), self.wo)
        if self.residual:
            out = out + h_query
        if self.w1 is not None:
            hidden = project(torch.relu(project(out, self.w1)), self.w2)
            out = out + hidden if self.residual else hidden
        return out


class Model(nn.Module):
    """Token embedding, positional encoding, ``layers`` attention layers, linear read-out."""

    def __init__(self, c: Config, seeds: Sequence[int]):
        super().__init__()
        if len(seeds) == 0:
            raise ValueError("give at least one seed")
        self.config, self.seeds = c, list(seeds)
        gens = [generator(s, STREAM_INIT) for s in self.seeds]
        self.embed = nn.Parameter(stacked_normal(gens, (c.vocab, c.dim), c.embed_std))
        self.encoding = build_encoding(c, gens)
        self.layers = nn.ModuleList(Layer(c, gens) for _ in range(c.layers))
        self.unembed = nn.Parameter(stacked_normal(gens, (c.dim, c.vocab), 1.0 / math.sqrt(c.dim)))

    # One-layer models take forward_tables; tests set this False to compare with the plain path.
    use_tables: bool = True

    def uses_tables(self, full: bool = False) -> bool:
        """Whether ``forward`` takes ``forward_tables``: one layer, last query only. Its memory per
        sequence is O(L), not O(L d), and its tables cost O(V^2 L d) per call: run it on big batches."""
        return self.use_tables and len(self.layers) == 1 and not full

    @property
    def members(self) -> int:
        return len(self.seeds)

    def subset(self, members: Sequence[int], config: Config | None = None) -> "Model":
        """A new model holding only the given members (indices into the ensemble axis), detached copies
        of their parameters; ``config`` replaces the config (runs trained together may differ in recipe)."""
        new = copy.deepcopy(self)
        index = torch.as_tensor(list(members), dtype=torch.long, device=self.embed.device)
        for p in new.parameters():
            p.grad = None
            p.data = p.data.index_select(0, index).clone()
        new.seeds = [self.seeds[i] for i in members]
        new.config = config if config is not None else self.config
        return new

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
        """tokens: (B, L) or (S, B, L) int64. ``full`` computes every query row of the last layer too.

        A one-layer model read at its last query takes the exact shortcut ``forward_tables``.
        """
        if self.uses_tables(full):
            return self.forward_tables(tokens)
        return self.forward_positions(tokens, full)

    def forward_positions(self, tokens: torch.Tensor, full: bool = False) -> Output:
        """The plain path: every layer runs on every position of every sequence. Arguments as ``forward``."""
        h = self.inputs(tokens)
        length = tokens.shape[-1]
        every = torch.arange(length, device=tokens.device)
        attentions = []
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            h, attn = layer(h, self.encoding, every if full or not last else every[-1:])
            attentions.append(attn)
        logits = project(h[:, :, -1], self.unembed)
        return Output(logits, attentions)

    def forward_tables(self, tokens: torch.Tensor) -> Output:
        """A one-layer model at its last query, computed on tables over the vocabulary.

        tokens: (B, L) or (S, B, L) int64. Returns what ``forward_positions`` returns, up to float rounding.

        The input at position j holding token b is E_b + P_j (P: additive position rows, if any), and
        projections are linear, so the key k(b, j) = E_b Wk + P_j Wk and the last query
        q(a) = E_a Wq + P_{L-1} Wq depend on a token and a position only. Rotations compose
        (rotate(q, L-1) . rotate(k, j) = q . rotate(k, j - (L-1)): RoPE sees offsets only), so every
        attention logit is an entry of one table, read at (x_L, x_j, j):

            T[a, b, j] = q(a) . rotate(k(b, j), j - (L-1)) / sqrt(d) + bias(L-1, j)     (S, V, V, L)

        and the attention-weighted input is  sum_j attn_j (E_(x_j) + P_j) = mass @ E + attn @ P,
        where mass_b is the attention on the positions holding token b. Per sequence this costs O(L)
        (a gather, a softmax, a scatter) instead of O(L d^2); the tables cost O(V^2 L d) once per call.
        """
        if len(self.layers) != 1:
            raise ValueError(f"forward_tables needs a one-layer model (this one has {len(self.layers)}); use forward")
        layer, enc, V = self.layers[0], self.encoding, self.config.vocab
        B, L = tokens.shape[-2:]
        S = self.members
        tokens = tokens.expand(S, B, L)
        pos = torch.arange(L, device=tokens.device)
        rows = enc.add(L)  # (S or 1, L, d) or None
        key_in = project(self.embed, layer.wk)[:, :, None]  # (S, V, 1, d): E_b Wk
        query_in = self.embed  # (S, V, d): the input of token a at the last position
        if rows is not None:
            rows = rows.to(self.embed.dtype)  # the sinusoidal table is float32 even in a float64 model
            key_in = key_in + project(rows, layer.wk)[:, None]  # (S, V, L, d)
            query_in = query_in + rows[:, -1:]
        k = enc.rotate(key_in.expand(S, V, L, -1), pos - (L - 1))  # (S, V, L, d), turned by j - (L-1)
        q = project(query_in, layer.wq)  # (S, V, d), unrotated
        table = (q @ k.flatten(1, 2).transpose(1, 2) / math.sqrt(self.config.dim)).view(S, V, V, L)
        bias = enc.bias(pos[-1:], pos)  # (1, L) or None
        if bias is not None:
            table = table + bias[0]
        last = tokens[..., -1:]  # (S, B, 1)
        index = (last * V + tokens) * L + pos  # (S, B, L): flat position of T[x_L, x_j, j]
        attn = table.flatten(1).gather(1, index.flatten(1)).view(S, B, L).softmax(-1)
        mass = torch.zeros(S, B, V, dtype=attn.dtype, device=attn.device).scatter_add(-1, tokens, attn)
        attended = mass @ self.embed  # (S, B, d)
        if rows is not None:
            attended = attended + attn @ rows
        h_query = query_in.gather(1, last.expand(S, B, query_in.shape[-1]))  # (S, B, d)
        out = layer.output(attended[:, :, None], h_query[:, :, None])  # (S, B, 1, d)
        return Output(project(out[:, :, 0], self.unembed), [attn[:, :, None]])
