"""The reference model: a causal attention model with a leading ensemble axis (S seeds as one batch).

Every parameter has shape (S, ...); member s is initialised from its own seed, so a member of an
ensemble starts exactly where the same seed trained alone would start. Shapes below use
S members, B sequences, L positions, d width, V vocabulary.

``Model.forward`` is the definition a reader studies: every layer on every position. Only the last
position's output is read (the query), so the last layer computes attention for that one query: a
layer costs O(L d^2) per sequence, not O(L^2 d). The fast one-layer computation on vocabulary tables
(evaluation and training) lives in ``tables.py`` and is checked against this one.

Also here: the training objective (``log_likelihood``, numerically stable, with its gradient by hand
for the tables) and ``Layout``, an ensemble's parameters as one flat (S, P) buffer (what the
optimiser updates).
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple, Sequence

import torch
from torch import nn

from .config import Config
from .encodings import build_encoding, stacked_normal
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
        self.to(getattr(torch, c.dtype))  # drawn in float32 in every dtype: a float64 model starts where float32 does

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
            h = self.embed[torch.arange(self.embed.shape[0], device=tokens.device)[:, None, None], tokens]
        rows = self.encoding.add(tokens.shape[-1])
        return h if rows is None else h + rows[:, None]


    def forward(self, tokens: torch.Tensor, full: bool = False) -> Output:
        """The reference computation: every layer runs on every position of every sequence.

        tokens: (B, L) shared by all members, or (S, B, L), int64. ``full`` computes every query row of
        the last layer too (attentions[-1] is then (S, B, L, L)); otherwise the last layer computes its
        last query only, which changes no number (tests/test_fast_paths.py).
        """
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


# -log p_t = softplus(r) = log(1 + e^r); softplus returns r itself above this r, off by log1p(e^-r) < 1e-13
SOFTPLUS_THRESHOLD = 30.0


def log_likelihood(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each member's mean log-probability of its targets (what training maximises), numerically stable.

    logits: (S, B, V); target: (S, B, 1) int64. Returns (S,). With r = log sum_(j != t) exp(z_j - z_t),
    -log p_t = log(1 + e^r) = softplus(r): to the last bits even when p_t is within 1e-300 of 1, where
    log_softmax rounds 1 + e^r to 1 and returns 0. Differentiable by autograd (no NaN anywhere).
    """
    r = logits.scatter(-1, target, float("-inf")).logsumexp(-1, keepdim=True) - logits.gather(-1, target)
    return -torch.nn.functional.softplus(r, threshold=SOFTPLUS_THRESHOLD).mean((1, 2))


def log_likelihood_gradient(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_likelihood`` (S,) and the gradient of the mean cross-entropy (its negative) by the logits,
    by hand and in few operations (the tables' training step).

    logits: (S, B, V); target: (S, B, 1). The gradient (S, B, V) is (softmax - onehot(target)) / B with
    its target entry p_t - 1 written as -(sum s of the other probabilities): still exact where p_t rounds
    to 1 (there p_t - 1 would be 0 while the other entries are not). The same r as ``log_likelihood``
    is log s - log p_t (r = -inf where s underflows: a loss of 0 there).
    """
    logp = logits.log_softmax(-1)
    logp_t = logp.gather(-1, target)
    grad = logp.exp_().scatter_(-1, target, 0.0)
    others = grad.sum(-1, keepdim=True)  # s
    r = others.log().sub_(logp_t)
    grad.scatter_(-1, target, others.neg_()).mul_(1.0 / logits.shape[1])
    return torch.nn.functional.softplus(r, threshold=SOFTPLUS_THRESHOLD).sum((1, 2)).mul_(-1.0 / logits.shape[1]), grad


class Layout:
    """An ensemble's parameters in one flat (S, P) buffer, member s in row s: what the optimiser updates.

    This layout holds every parameter of ``model.named_parameters()`` flattened in turn (the APE table
    only in its first ``table_rows`` rows, if given); ``tables.TableStep`` arranges its own blocks.
    """

    def __init__(self, model: Model, table_rows: int | None = None):
        self.shapes = {}
        for name, p in model.named_parameters():
            shape = tuple(p.shape[1:])
            if name == "encoding.table" and table_rows is not None:
                shape = (table_rows,) + shape[1:]
            self.shapes[name] = shape
        self.size = sum(math.prod(shape) for shape in self.shapes.values())

    def views(self, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter (by ``named_parameters`` name) as a view of ``buf`` (n, P): (n, *shape)."""
        out, at = {}, 0
        for name, shape in self.shapes.items():
            size = math.prod(shape)
            out[name] = buf[:, at:at + size].view(buf.shape[0], *shape)
            at += size
        return out

    def pack(self, model: Model) -> torch.Tensor:
        """A new (S, P) buffer holding the model's parameters."""
        params = dict(model.named_parameters())
        buf = torch.empty(model.members, self.size, dtype=model.embed.dtype, device=model.embed.device)
        with torch.no_grad():
            for name, view in self.views(buf).items():
                view.copy_(params[name][:, :view.shape[1]] if name == "encoding.table" else params[name])
        return buf

    def unpack(self, buf: torch.Tensor, model: Model, members: torch.Tensor) -> None:
        """Write the rows of ``buf`` into the model's members ``members`` (indices, one per row)."""
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, view in self.views(buf).items():
                target = params[name][:, :view.shape[1]] if name == "encoding.table" else params[name]
                target.index_copy_(0, members, view)
