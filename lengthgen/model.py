"""A causal attention model with a leading ensemble axis: S seeds train as one batched model.

Every parameter has shape (S, ...); member s is initialised from its own seed, so a member of an
ensemble starts exactly where the same seed trained alone would start. Shapes below use
S members, B sequences, L positions, d width, V vocabulary.

Only the last position's output is read (the query), so the last layer computes attention for
that one query: the plain path costs O(L d^2) per sequence for one layer, not O(L^2 d). A one-layer
model goes further (``Model.forward_tables``): its logits are entries of a table over
(query token, key token, key position), so a sequence costs O(L) table reads. Training a one-layer
model takes ``TableStep``: the same tables with a hand-written backward pass, on parameters held in one
flat buffer per ensemble.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple, Sequence

import torch
from torch import nn

from .config import Config
from .encodings import Encoding, LearnedAbsolute, Sinusoidal, build_encoding, stacked_normal
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
        (rotate(q, L-1) . rotate(k, j) = rotate(q, (L-1) - j) . k: RoPE sees offsets only), so every
        attention logit is an entry of one table, read at (x_L, j, x_j):

            T[a, j, b] = q(a) . rotate(k(b, j), j - (L-1)) / sqrt(d) + bias(L-1, j)     (S, V, L, V)

        and the attention-weighted input is  sum_j attn_j (E_(x_j) + P_j) = mass @ E + attn @ P,
        where mass_b is the attention on the positions holding token b. The value, output and (without
        an MLP) read-out projections are linear too, so they are folded into small tables:
        logits = mass @ (E Wv Wo U) + attn @ (P Wv Wo U) + (residual) (E + P_{L-1}) U read at x_L.
        Per sequence this costs O(L + V^2) (a gather, a softmax, a scatter, a (V x V) product) instead of
        O(L d^2); the tables cost O(V^2 L d) once per call. ``TableStep`` trains on it with a hand-written backward.
        """
        logits, attn = self.table_forward(tokens)
        return Output(logits, [attn[:, :, None]])

    def table_forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The table path (see ``forward_tables``): logits (S, B, V) and attention (S, B, L), through
        ordinary torch operations (differentiable by autograd; training uses ``TableStep``)."""
        if len(self.layers) != 1:
            raise ValueError(f"forward_tables needs a one-layer model (this one has {len(self.layers)}); use forward")
        layer, enc = self.layers[0], self.encoding
        E, U = self.embed, self.unembed
        S, V, d = E.shape
        B, L = tokens.shape[-2:]
        x = tokens.expand(S, B, L)
        const = table_constants(enc, V, d, L, E.dtype, E.device)
        rows = enc.add(L)  # (S or 1, L, d) or None
        if rows is not None:
            rows = rows.to(E.dtype)  # the sinusoidal table is float32 even in a float64 model
            if const.rotates:
                raise NotImplementedError("the table path has no encoding that both adds rows and rotates")
        K0 = project(E, layer.wk)  # (S, V, d): keys before any rotation
        QI = E if rows is None else E + rows[:, -1:]  # (S, V, d): the input of token a at the last position
        Q = project(QI, layer.wq) * (1.0 / math.sqrt(d))
        if const.rotates:  # q(a) turned back by (L-1) - j
            QR = enc.rotate(Q[:, :, None].expand(S, V, L, d), const.back).reshape(S, V * L, d)
            T = (QR @ K0.transpose(1, 2)).view(S, V, L, V)  # rows (a, j), columns b
        else:
            T = (Q @ K0.transpose(1, 2))[:, :, None]  # (S, V, 1, V)
            if rows is not None:
                T = T + (Q @ project(rows, layer.wk).transpose(1, 2))[..., None]  # + q(a) . P_j Wk
        if const.bias is not None:
            T = T + const.bias[:, None]
        T = T.expand(S, V, L, V).reshape(S, V * L * V)
        last = x[..., -1]  # (S, B): the query token
        index = (const.offsets[last] + x).view(S, B * L)  # flat position of T[x_L, j, x_j]
        attn = T.gather(1, index).view(S, B, L).softmax(-1)
        mass = torch.zeros(S, B, V, dtype=attn.dtype, device=attn.device).scatter_add_(-1, x, attn)
        mlp = layer.w1 is not None
        H = layer.wv @ layer.wo if mlp else layer.wv @ layer.wo @ U  # applied to the attended input
        y = mass @ (E @ H)  # (S, B, d with an MLP, else V)
        if rows is not None:
            y = y + attn @ (rows @ H)
        if self.config.residual:
            R = QI if mlp else QI @ U  # the query's own input (read out, without an MLP)
            y = y + R.gather(1, last[..., None].expand(S, B, H.shape[-1]))
        if mlp:
            hidden = project(torch.relu(project(y, layer.w1)), layer.w2)
            y = (y + hidden if self.config.residual else hidden) @ U
        return y, attn


class TableConstants(NamedTuple):
    """What the table path needs per (encoding, sizes, length): fixed rows, rotation, bias, index offsets."""

    rows: torch.Tensor | None  # (1, L, d) fixed additive rows (sinusoidal), else None
    rotates: bool  # the encoding rotates queries and keys
    trig: torch.Tensor | None  # (L, d): (cos, sin) of pair p's angle at offset j - (L-1), for pairwise rotations
    back: torch.Tensor  # (L,) (L-1) - j, the angle a query is turned back by for key position j
    bias: torch.Tensor | None  # (L,) additive logit bias of the last query on key position j
    offsets: torch.Tensor  # (V, L) int64: (a L + j) V, so T[a, j, b] sits at offsets[a, j] + b


def table_constants(enc: Encoding, V: int, d: int, L: int, dtype: torch.dtype, device: torch.device) -> TableConstants:
    """The constants of ``Model.table_forward`` (cached for the last few shapes: training reuses one)."""
    key = (type(enc).__name__, getattr(enc, "base", None), getattr(enc, "slope", None), V, d, L, dtype, str(device))
    hit = _CONSTANTS.get(key)
    if hit is not None:
        return hit
    pos = torch.arange(L, device=device)
    back = (L - 1) - pos
    rows = enc.add(L) if isinstance(enc, Sinusoidal) else None
    rows = None if rows is None else rows.to(dtype)
    rotates = type(enc).rotate is not Encoding.rotate
    trig = None
    if rotates:  # turn pairs (1, 0) and (0, 1) by j - (L-1): a pairwise rotation gives (cos, sin) and (-sin, cos)
        unit = torch.zeros(2, L, d, dtype=torch.float64, device=device)
        unit[0, :, 0::2], unit[1, :, 1::2] = 1.0, 1.0
        turned = enc.rotate(unit, -back)
        cos, sin = turned[0, :, 0::2], turned[0, :, 1::2]
        if torch.allclose(turned[1, :, 0::2], -sin) and torch.allclose(turned[1, :, 1::2], cos):
            trig = turned[0].to(dtype)
    bias = enc.bias(pos[-1:], pos)
    bias = None if bias is None else bias[0].to(dtype)
    offsets = (torch.arange(V, device=device)[:, None] * L + pos) * V
    const = TableConstants(rows, rotates, trig, back, bias, offsets)
    if len(_CONSTANTS) >= 8:
        _CONSTANTS.pop(next(iter(_CONSTANTS)))
    _CONSTANTS[key] = const
    return const


_CONSTANTS: dict[tuple, TableConstants] = {}


class TableStep:
    """One training step of a one-layer model on the table path, with a hand-written backward pass.

    The parameters of S members live in one (S, P) buffer (member-major; see ``views``), laid out so
    that the step needs few and large products: per member, the block [E; APE rows] (V + R, d), the
    block [Wq | Wk | Wv | U] (d, 3d + V), then Wo (and W1, W2 with an MLP). One product
    [E; P] @ [Wq | Wk | Wv | U] gives the queries, keys, values and read-outs of every token and
    position at once. ``step`` returns each member's mean log-likelihood, its correct predictions and
    the gradient of its mean cross-entropy in the same (S, P) layout: what autograd would give through
    ``forward_tables`` (tests/test_fast_paths.py checks it against the plain path in float64).
    """

    def __init__(self, c: Config, encoding: Encoding, table_rows: int | None = None):
        V, d = c.vocab, c.dim
        self.c, self.enc, self.V, self.d = c, encoding, V, d
        self.learned = isinstance(encoding, LearnedAbsolute)
        self.fixed_rows = isinstance(encoding, Sinusoidal)
        self.rotates = type(encoding).rotate is not Encoding.rotate
        if self.rotates and (self.learned or self.fixed_rows or type(encoding).add is not Encoding.add):
            raise NotImplementedError("the table path has no encoding that both adds rows and rotates")
        if self.rotates and table_constants(encoding, V, d, 2, torch.float64, torch.device("cpu")).trig is None:
            raise NotImplementedError(f"{type(encoding).__name__} does not rotate pairs of dimensions; "
                                      "the table path needs it")
        self.table_rows = (table_rows or c.max_length) if self.learned else 0  # APE rows in the buffer
        shapes = [("EP", (V + self.table_rows, d)), ("W", (d, 3 * d + V)), ("Wo", (d, d))]
        if c.mlp:
            shapes += [("W1", (d, 4 * d)), ("W2", (4 * d, d))]
        self.blocks, at = {}, 0
        for name, shape in shapes:
            self.blocks[name] = (at, shape)
            at += shape[0] * shape[1]
        self.size = at
        self._cache: dict[tuple, tuple] = {}
        self._views_of: torch.Tensor | None = None  # the buffer _views belong to
        self._views_length, self._views = 0, {}

    def block(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        at, (r, k) = self.blocks[name]
        return buf[:, at:at + r * k].view(buf.shape[0], r, k)

    def _buffer_views(self, buf: torch.Tensor, L: int) -> dict[str, torch.Tensor]:
        """The blocks of ``buf`` and their transposes, made once per buffer and length (the trainer updates
        its buffer in place, so the views stay valid)."""
        if self._views_of is not buf or self._views_length != L:
            V, d = self.V, self.d
            v = {name: self.block(buf, name) for name in self.blocks}
            v["U"] = v["W"][..., 3 * d:]
            v["X"] = v["EP"][:, :V + L] if self.learned else v["EP"]
            for name in [n for n in v if n != "EP"]:
                v[name + "T"] = v[name].mT
            self._views_of, self._views_length, self._views = buf, L, v
        return self._views

    def views(self, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model's parameters (by ``named_parameters`` name) as views of ``buf`` (S, P); the APE
        table as its first ``table_rows`` rows."""
        V, d = self.V, self.d
        EP, W = self.block(buf, "EP"), self.block(buf, "W")
        out = {"embed": EP[:, :V]}
        if self.learned:
            out["encoding.table"] = EP[:, V:]
        out.update({"layers.0.wq": W[..., :d], "layers.0.wk": W[..., d:2 * d], "layers.0.wv": W[..., 2 * d:3 * d],
                    "layers.0.wo": self.block(buf, "Wo")})
        if self.c.mlp:
            out.update({"layers.0.w1": self.block(buf, "W1"), "layers.0.w2": self.block(buf, "W2")})
        out["unembed"] = W[..., 3 * d:]
        return out

    def pack(self, model: "Model") -> torch.Tensor:
        """A new (S, P) buffer holding the model's parameters."""
        params = dict(model.named_parameters())
        buf = torch.empty(model.members, self.size, dtype=model.embed.dtype, device=model.embed.device)
        with torch.no_grad():
            for name, view in self.views(buf).items():
                view.copy_(params[name][:, :view.shape[1]] if name == "encoding.table" else params[name])
        return buf

    def unpack(self, buf: torch.Tensor, model: "Model", members: torch.Tensor) -> None:
        """Write the rows of ``buf`` into the model's members ``members`` (indices, one per row)."""
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, view in self.views(buf).items():
                target = params[name][:, :view.shape[1]] if name == "encoding.table" else params[name]
                target.index_copy_(0, members, view)


    def step(self, buf: torch.Tensor, x: torch.Tensor, target: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward and backward for tokens x (S, B, L) and targets (S, B, 1), int64.

        Returns (mean log-likelihood of the targets (S,), correct predictions (S,) int64, gradient
        of the mean cross-entropy (S, P)). Uses no autograd.

        The logit table is laid out T[j, b, a] (key position, key token, query token), so the entry of
        key j of a sequence sits at j V^2 + x_j V + x_L. With RoPE, q(a) . rotate(k(b), j - (L-1)) =
        sum_p cos(phi_jp) C_p[a, b] + sin(phi_jp) D_p[a, b], where C_p = q_p . k_p and D_p = q_p . (k_p
        turned by 90 degrees) over the two dimensions of pair p: T = trig (L, d) @ CD (d, V^2), one
        product forward and one backward, with no rotated copy of the queries or keys.
        """
        V, d, c = self.V, self.d, self.c
        S, B, L = x.shape
        const = table_constants(self.enc, V, d, L, buf.dtype, buf.device)
        key = (S, B, L, buf.dtype, x.dtype, str(buf.device))
        if key not in self._cache:  # per shape: -1 for the loss gradient, j V^2 offsets, the scaled (cos, sin)
            self._cache = {key: (torch.full((S, B, 1), -1.0, dtype=buf.dtype, device=buf.device),
                                 (torch.arange(L, device=buf.device) * (V * V)).to(x.dtype),
                                 None if const.trig is None else const.trig * (1.0 / math.sqrt(d)))}
        lead, jvv, trig = self._cache[key]
        v = self._buffer_views(buf, L)
        EP, W, Wo, U = v["EP"], v["W"], v["Wo"], v["U"]
        rows = self.learned or self.fixed_rows
        nr = L if rows else 0
        at = V + L - 1  # the last position's row of X
        if self.fixed_rows:
            X = torch.cat((EP, const.rows.expand(S, L, d)), 1)
            XT = X.mT
        else:
            X, XT = v["X"], v["XT"]
        A = torch.bmm(X, W)  # (S, V + nr, 3d + V): [X Wq | X Wk | X Wv | X U]
        Ak, Av = A[..., d:2 * d], A[..., 2 * d:3 * d]
        Q = A[:, :V, :d] + A[:, at:at + 1, :d] if rows else A[:, :V, :d]  # (E + P_(L-1)) Wq
        last = x[..., -1:]  # (S, B, 1): the query token
        small = False
        if self.rotates:
            p = d // 2
            Xq = Q.reshape(S, V, p, 2).permute(0, 2, 3, 1).reshape(S * p, 2, V)  # q by pair: (2, a)
            Kp = Ak[:, :V].reshape(S, V, p, 2).transpose(1, 2)  # (S, p, b, 2)
            Yt = torch.stack((Kp, torch.stack((Kp[..., 1].neg(), Kp[..., 0]), -1)), 2).view(S * p, 2 * V, 2)
            CD = torch.bmm(Yt, Xq).view(S, d, V * V)  # (C_p, D_p)[b, a]
            T = torch.matmul(trig, CD)  # (S, L, V^2): T[j, b, a], scaled by 1/sqrt(d)
        else:
            Qs = Q * (1.0 / math.sqrt(d))
            TP = torch.bmm(Ak, Qs.transpose(1, 2))  # (S, V + nr, V): [k(b) . q(a); P_j Wk . q(a)]
            if rows:
                T = TP[:, None, :V] + TP[:, V:, None]  # (S, L, V, V)
            elif const.bias is not None:
                T = TP[:, None] + const.bias[:, None, None]
            else:
                T, small = TP, True  # (V, V): no position at all
        index = torch.add(last, x, alpha=V) if small else torch.add(jvv, last).add_(x, alpha=V)
        T = T.reshape(S, -1)
        index = index.view(S, B * L)
        attn = T.gather(1, index).view(S, B, L).softmax(-1)
        # y = mass @ (E Wv Wo') + attn @ (P Wv Wo') + onehot(x_L) @ R, as one product of
        # MA = [mass over tokens | attention over positions | query token] and Yv = [E Wv Wo'; P Wv Wo'; R]
        # (Wo' = Wo U without an MLP, else Wo; R = the query's own input (E + P_(L-1)), read out without an MLP)
        na = V + nr  # columns of MA that carry attention
        MA = torch.zeros(S, B, na + (V if c.residual else 0), dtype=attn.dtype, device=attn.device)
        MA[..., :V].scatter_add_(2, x, attn)
        if rows:
            MA[..., V:na].copy_(attn)
        WoU = Wo if c.mlp else torch.bmm(Wo, U)
        Yv = torch.bmm(Av, WoU)  # (S, V + nr, Y): what a unit of attention on a token / position adds
        if c.residual:
            MA[..., na:].scatter_(2, last, 1.0)
            if c.mlp:
                R = X[:, :V] + X[:, at:at + 1] if rows else X[:, :V]
            else:
                R = A[:, :V, 3 * d:] + A[:, at:at + 1, 3 * d:] if rows else A[:, :V, 3 * d:]
            Yv = torch.cat((Yv, R), 1)
        y = torch.bmm(MA, Yv)
        if c.mlp:
            W1, W2 = v["W1"], v["W2"]
            z = torch.bmm(y, W1)
            r = torch.relu(z)
            out = torch.baddbmm(y, r, W2) if c.residual else torch.bmm(r, W2)
            logits = torch.bmm(out, U)
        else:
            logits = y
        # loss, and d mean loss / d logits = (softmax - onehot) / B
        logp = logits.log_softmax(-1)
        loglik = logp.gather(-1, target).mean((1, 2))
        correct = (logits.max(-1, keepdim=True).indices == target).sum((1, 2))  # the first maximum, as argmax
        g = logp.exp_().scatter_add_(-1, target, lead).mul_(1.0 / B)
        # backward
        mT = torch.Tensor.mT.__get__
        if c.mlp:
            gU = torch.bmm(mT(out), g)
            g_out = torch.bmm(g, v['UT'])
            gW2 = torch.bmm(mT(r), g_out)
            g_z = torch.ops.aten.threshold_backward(torch.bmm(g_out, v['W2T']), z, 0)
            gW1 = torch.bmm(mT(y), g_z)
            g_y = torch.baddbmm(g_out, g_z, v['W1T']) if c.residual else torch.bmm(g_z, v['W1T'])
        else:
            g_y = g
        g_Yv = torch.bmm(mT(MA), g_y)  # (S, V + nr (+ V), Y)
        g_MA = torch.bmm(g_y, mT(Yv[:, :na]))  # (S, B, V + nr)
        g_attn = g_MA[..., :V].gather(2, x)
        if rows:
            g_attn += g_MA[..., V:]
        g_s = torch._softmax_backward_data(g_attn, attn, -1, attn.dtype)
        g_T = torch.zeros_like(T).scatter_add_(1, index, g_s.view(S, -1))
        if self.rotates:
            g_CD = torch.matmul(mT(trig), g_T.view(S, L, V * V)).view(S * p, 2 * V, V)
            g_Y = torch.bmm(g_CD, mT(Xq)).view(S, p, 2, V, 2)
            g_Q = torch.bmm(mT(Yt), g_CD).view(S, p, 2, V).permute(0, 3, 1, 2).reshape(S, V, d)
            g_turned = g_Y[:, :, 1]  # d / d (-k_o, k_e)
            g_K = (g_Y[:, :, 0] + torch.stack((g_turned[..., 1], g_turned[..., 0].neg()), -1)).transpose(1, 2)
            g_K = g_K.reshape(S, V, d)
        else:
            if small:
                g_TP = g_T.view(S, V, V)
            elif rows:
                g4 = g_T.view(S, L, V, V)
                g_TP = torch.cat((g4.sum(1), g4.sum(2)), 1)  # (S, V + L, V)
            else:
                g_TP = g_T.view(S, L, V, V).sum(1)
            g_Q = torch.bmm(mT(g_TP), Ak).mul_(1.0 / math.sqrt(d))
            g_K = torch.bmm(g_TP, Qs)  # (S, V + nr, d)
        g_WoU = torch.bmm(mT(Av), g_Yv[:, :na])  # (S, d, Y)
        g_Av = torch.bmm(g_Yv[:, :na], mT(WoU))  # (S, V + nr, d)
        g_R = g_Yv[:, na:] if c.residual else None
        g_Ru = g_R if (g_R is not None and not c.mlp) else None
        if rows:
            g_A = torch.zeros_like(A)
            g_A[:, :V, :d] = g_Q
            g_A[:, at, :d] += g_Q.sum(1)
            g_A[..., d:2 * d] = g_K
            g_A[..., 2 * d:3 * d] = g_Av
            if g_Ru is not None:
                g_A[:, :V, 3 * d:] = g_Ru
                g_A[:, at, 3 * d:] += g_Ru.sum(1)
        else:
            g_A = torch.cat((g_Q, g_K, g_Av, g_Ru if g_Ru is not None else g_Q.new_zeros(S, V, V)), 2)
        gW = torch.bmm(XT, g_A)  # (S, d, 3d + V)
        g_X = torch.bmm(g_A, v['WT'])  # (S, V + nr, d)
        if c.mlp:
            gWo = g_WoU
            gW[..., 3 * d:] = gU
            if g_R is not None:
                g_X[:, :V] += g_R
                if rows:
                    g_X[:, at] += g_R.sum(1)
        else:
            gWo = torch.bmm(g_WoU, v['UT'])
            gW[..., 3 * d:] += torch.bmm(v['WoT'], g_WoU)
        if self.learned:
            g_EP = g_X if L == self.table_rows else torch.cat((g_X, g_X.new_zeros(S, self.table_rows - L, d)), 1)
        else:
            g_EP = g_X[:, :V]
        parts = [g_EP, gW, gWo] + ([gW1, gW2] if c.mlp else [])
        return loglik, correct, torch.cat([t.reshape(S, -1) for t in parts], 1)
