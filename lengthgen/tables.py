"""The fast one-layer model: attention logits read from tables over the vocabulary, with a hand-written
backward pass. The same numbers as the reference ``model.Model.forward`` (tests/test_fast_paths.py
checks logits, attention and every gradient in float64), at O(L + V^2) per sequence instead of O(L d^2).

The input at position j holding token b is E_b + P_j (P: additive position rows, if any), and the
projections are linear, so the key k(b, j) = E_b Wk + P_j Wk and the last query q(a) = E_a Wq + P_(L-1) Wq
depend on a token and a position only. Rotations compose (rotate(q, L-1) . rotate(k, j) = rotate(q, (L-1) - j) . k:
RoPE sees offsets only), so every attention logit of the last query is an entry of one table, read at
(x_j, j, x_L):

    T[j, b, a] = q(a) . rotate(k(b, j), j - (L-1)) / sqrt(d) + bias(L-1, j)

and the attention-weighted input is sum_j attn_j (E_(x_j) + P_j) = mass @ E + attn @ P, where mass_b is
the attention on the positions holding token b. The value, output and (without an MLP) read-out
projections are linear too, so they fold into small tables. Per sequence: a gather, a softmax, a
scatter and a (V x V) product; the tables cost O(V^2 L d) once per call.

Entry points, one per purpose: ``fast_forward(model, tokens)`` reads a model at its last query
(evaluation; no gradient), ``TableStep`` is the training step: ``forward`` (logits and what the
backward needs), ``backward`` (the gradient of every parameter), and calling it gives the training
loop's gradient function.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import math
import threading
from typing import NamedTuple

import numpy as np
import torch

from . import draws
from .config import Config, usable_cores
from .encodings import Encoding, LearnedAbsolute, Sinusoidal
from .engine import first_compile
from .engine import step as engine_step
from .engine import stretch as engine_stretch
from .engine.denormals import flushed
from .engine.numerics import exp_constants
from .model import Layout, Model, Output, log_likelihood_gradient
from .optim import Optimizer
from .task import TrainStream


def applies(model: Model) -> bool:
    """Whether the tables compute this model: one layer (its output at the last query)."""
    return len(model.layers) == 1


@torch.no_grad()
def fast_forward(model: Model, tokens: torch.Tensor) -> Output:
    """The model's output at its last query by the fastest exact path: the tables for a one-layer model
    (``applies``), else the reference ``model(tokens)``. No gradient: for evaluation.

    tokens: (B, L) or (S, B, L) int64. Returns logits (S, B, V) and attentions (for one layer: one
    tensor (S, B, 1, L)), the reference's numbers up to float rounding.
    """
    if not applies(model):
        return model(tokens)
    step = TableStep(model.config, model.encoding)
    S, (B, L) = model.members, tokens.shape[-2:]
    logits, saved = step.forward(step.pack(model), tokens.expand(S, B, L))
    return Output(logits, [saved["attn"][:, :, None]])


THREADED_STEPS = 100  # the shortest stretch of steps ``TableStep.run`` puts on threads (a hand-off costs ~0.1 ms)
# The tokens ``TableStep.run`` draws at a time (a block of steps, as ``engine.step.TOKENS``), each block one hand-off
# to the thread that draws ahead: 4 MB, 256 steps at batch 256, L 32. One small-step model (RoPE, default task; Adam,
# lr 3e-4, batch 256, 6667 steps, no early stop, no weight decay), as AVX2 on an Intel Xeon, min of five each, three
# rounds alternated: 1 MB 0.474-0.485 s, 4 MB 0.477-0.502 s, 16 MB 0.472-0.494 s (noise; blocks of int64 tokens
# gave 4 MB 0.495-0.511 s against 2 MB 0.509-0.526 s, six rounds).
DRAWN_BYTES = 2**22


_ROOMS = threading.local()  # each thread's blocks of drawn batches (``_room``)


def _room(which: tuple, shape: tuple) -> np.ndarray:
    """An array of tokens (``engine.step.TOKENS``) of ``shape``, kept by this thread for the next ``TableStep.run``
    that asks for the same ``which`` (a run draws into two at a time: one trained on, one drawn ahead into; a group of
    members on a pool thread into that thread's own), for the life of the thread (two blocks, 8 MB, a thread). Smaller
    rooms are views of a larger one.

    A block of batches (``DRAWN_BYTES``) is new pages from the system each time it is allocated. Measured with the
    small-step recipe (RoPE, default task; Adam, lr 3e-4, batch 256, 6667 steps, no early stop, no weight decay):
    a slider drag in the playground calls ``run`` every ``train.ON_STEP_EVERY`` steps, and a new 2 MB block of int64
    tokens took about 1 ms a call (0.07 s of a model's 0.98 s, on a 2-core AMD EPYC); ``train`` makes a new
    ``TableStep`` for each training, and with blocks kept per ``TableStep`` a model's first two draws took 14.5-14.8
    and 8.5-9.3 ms against 1.7-2.3 ms for the others (the model 0.521-0.531 s against 0.502-0.506 s with blocks kept
    by the thread, on an Intel Xeon as AVX2)."""
    rooms = getattr(_ROOMS, "rooms", None)
    if rooms is None:
        rooms = _ROOMS.rooms = {}
    size = math.prod(shape)
    room = rooms.get(which)
    if room is None or room.size < size:
        room = rooms[which] = engine_step.aligned_empty(size, engine_step.TOKENS)
    return room[:size].reshape(shape)


@functools.cache
def _pool() -> cf.ThreadPoolExecutor:
    """The threads ``TableStep.run`` hands its work to, started once (starting two took about 2 ms, every stretch).
    Its tasks never wait on one another, so runs from several threads may share it."""
    return cf.ThreadPoolExecutor(max(2, usable_cores()), thread_name_prefix="lengthgen-steps")


class TableConstants(NamedTuple):
    """What the tables need per (encoding, sizes, length): fixed rows, rotation, bias."""

    rows: torch.Tensor | None  # (1, L, d) fixed additive rows (sinusoidal), else None
    trig: torch.Tensor | None  # (L, d): (cos, sin) of pair p's angle at offset j - (L-1), for pairwise rotations
    bias: torch.Tensor | None  # (L,) additive logit bias of the last query on key position j


def rotates(enc: Encoding) -> bool:
    """Whether the encoding rotates queries and keys."""
    return type(enc).rotate is not Encoding.rotate


def table_constants(enc: Encoding, d: int, L: int, dtype: torch.dtype, device: torch.device) -> TableConstants:
    """The constants of the tables at length L (cached for the last few shapes: training reuses one)."""
    key = (type(enc).__name__, getattr(enc, "base", None), getattr(enc, "slope", None), d, L, dtype, str(device))
    hit = _CONSTANTS.get(key)
    if hit is not None:
        return hit
    pos = torch.arange(L, device=device)
    back = (L - 1) - pos
    rows = enc.add(L) if isinstance(enc, Sinusoidal) else None
    rows = None if rows is None else rows.to(dtype)
    trig = None
    if rotates(enc):  # turn pairs (1, 0) and (0, 1) by j - (L-1): a pairwise rotation gives (cos, sin) and (-sin, cos)
        unit = torch.zeros(2, L, d, dtype=torch.float64, device=device)
        unit[0, :, 0::2], unit[1, :, 1::2] = 1.0, 1.0
        turned = enc.rotate(unit, -back)
        cos, sin = turned[0, :, 0::2], turned[0, :, 1::2]
        if torch.allclose(turned[1, :, 0::2], -sin) and torch.allclose(turned[1, :, 1::2], cos):
            trig = turned[0].to(dtype)
    bias = enc.bias(pos[-1:], pos)
    bias = None if bias is None else bias[0].to(dtype)
    const = TableConstants(rows, trig, bias)
    if len(_CONSTANTS) >= 8:
        _CONSTANTS.pop(next(iter(_CONSTANTS)))
    _CONSTANTS[key] = const
    return const


_CONSTANTS: dict[tuple, TableConstants] = {}


class TableStep(Layout):
    """The training step of a one-layer model on the tables, with a hand-written backward pass.

    The parameters of S members live in one (S, P) buffer (member-major; see ``views``), laid out so
    that the step needs few and large products: per member, the block [E; APE rows] (V + R, d), the
    block [Wq | Wk | Wv | U] (d, 3d + V), then Wo (and W1, W2 with an MLP). One product
    [E; P] @ [Wq | Wk | Wv | U] gives the queries, keys, values and read-outs of every token and
    position at once. ``table_rows``: the APE rows held in the buffer (default: all of them; training
    without weight decay on the tables holds only the trained rows, the others never get a gradient).
    """

    def __init__(self, c: Config, encoding: Encoding, table_rows: int | None = None):
        V, d = c.vocab, c.dim
        self.c, self.enc, self.V, self.d = c, encoding, V, d
        self.learned = isinstance(encoding, LearnedAbsolute)
        self.fixed_rows = isinstance(encoding, Sinusoidal)
        self.rotates = rotates(encoding)
        if self.rotates and (self.learned or self.fixed_rows or type(encoding).add is not Encoding.add):
            raise NotImplementedError("the tables have no encoding that both adds rows and rotates")
        if self.rotates and table_constants(encoding, d, 2, torch.float64, torch.device("cpu")).trig is None:
            raise NotImplementedError(f"{type(encoding).__name__} does not rotate pairs of dimensions; "
                                      "the tables need it")
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
        self._index_of: torch.Tensor | None = None  # the tokens _index (S, B L) was computed from
        self._index = torch.empty(0)
        self._views_of: torch.Tensor | None = None  # the buffer _views belong to
        self._views_length, self._views = 0, {}
        self._compiled_key: tuple | None = None  # the (L, dtype) of _compiled_setup's setup
        self._compiled: engine_step.StepSetup | None = None
        self._works: dict[tuple, engine_step.Work] = {}  # the step's working arrays, by (which, B, L, dtype)

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

    no_autograd = True  # the training loop runs this gradient function in inference mode

    @property
    def compiled(self) -> bool:
        """Whether a step on the CPU runs as one compiled call (``engine.step.table_step``: no MLP, and a vocabulary
        whose tokens fit ``engine.step.TOKENS``)."""
        return not self.c.mlp and self.V <= engine_step.MAX_VOCAB

    def __call__(self, buf: torch.Tensor, x: torch.Tensor, target: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The training loop's gradient function: tokens x (S, B, L) and targets (S, B, 1), int64, ->
        (mean log-likelihood of the targets (S,), correct predictions (S,) int64, gradient of the mean
        cross-entropy (S, P) in the buffer's layout). Uses no autograd. On the CPU, a model without an MLP
        takes the compiled step (``engine.step.table_step``: the same numbers up to float rounding), else the
        torch operations of ``forward`` and ``backward``."""
        if self.compiled and buf.device.type == "cpu":
            return self._compiled_step(buf, x, target)
        logits, saved = self.forward(buf, x)
        loglik, g = log_likelihood_gradient(logits, target)
        correct = (logits.max(-1, keepdim=True).indices == target).sum((1, 2))  # the first maximum, as argmax
        return loglik, correct, self.backward(saved, g)

    def _compiled_setup(self, L: int, dtype: torch.dtype) -> engine_step.StepSetup:
        """What ``engine.step.table_step`` needs besides the parameters and the batch, for length L: the table's
        case and its constants (made once per length and dtype)."""
        key = (L, dtype)
        if self._compiled_key != key:
            const = table_constants(self.enc, self.d, L, dtype, torch.device("cpu"))
            kind = (engine_step.ROTATE if self.rotates else engine_step.ROWS if self.learned or self.fixed_rows
                    else engine_step.NONE if const.bias is None else engine_step.BIAS)
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
            none2 = np.zeros((1, 1), np_dtype)
            self._compiled_key = key
            self._compiled = engine_step.StepSetup(
                kind=kind, fixed=self.fixed_rows, residual=self.c.residual, V=self.V, d=self.d,
                n_ep=self.blocks["EP"][1][0],
                trig=none2 if const.trig is None else (const.trig * (1.0 / math.sqrt(self.d))).numpy(),
                rows=none2 if const.rows is None else const.rows[0].numpy(),
                bias=np.zeros(1, np_dtype) if const.bias is None else const.bias.numpy(),
                ec=exp_constants(np_dtype))
        return self._compiled

    def _compiled_step(self, buf: torch.Tensor, x: torch.Tensor, target: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``__call__`` as one call of ``engine.step.table_step`` (CPU, no MLP), in working arrays kept for the next
        call from this thread. Making them took about as long as the step: a float64 full-batch step (RoPE, default
        task, 256 fixed sequences, gd at lr 0.1, no early stop, no weight decay; before gd took the stretches) went
        from 0.34-0.37 to 0.165-0.17 ms on an Intel Xeon as AVX2."""
        S, B, L = x.shape
        first_compile.compile_step(str(buf.dtype).removeprefix("torch."), "step_in")
        setup = self._compiled_setup(L, buf.dtype)
        p = buf.numpy()
        key = ("call", threading.get_ident(), B, L, p.dtype)
        if key not in self._works:
            self._works[key] = engine_step.step_arrays(p, setup, B, L)
        loglik = buf.new_empty(S)
        correct = torch.empty(S, dtype=torch.int64)
        grad = buf.new_empty(S, self.size)
        with flushed():  # subnormals as zero (engine.denormals)
            engine_step.table_step(p, engine_step.as_tokens(x.numpy()), np.ascontiguousarray(target.numpy()[..., 0]),
                                   setup, engine_step.StepOut(loglik.numpy(), correct.numpy(), grad.numpy()),
                                   self._works[key])
        return loglik, correct, grad

    def runs_ahead(self, opt: Optimizer, stream: TrainStream) -> bool:
        """Whether ``run`` can take this training's steps: the compiled step (CPU, no MLP), an update the stretches
        compute as ``opt.step`` does (``Optimizer.stretches``: Adam, gradient or sign descent without weight decay,
        a constant step size), one training length, and draws from torch's CPU generators (``draws.is_mt``)."""
        lo, hi = stream.c.lengths
        return (self.compiled and opt.stretches() and lo == hi
                and all(draws.is_mt(g) for g in stream.gens))

    def run(self, opt: Optimizer, stream: TrainStream, members: np.ndarray, offsets: np.ndarray, n: int,
            threads: int = 1, stop: engine_stretch.EarlyStop | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` training steps of the stream's ``members`` (the buffer's rows, in order; ``offsets`` theirs) by
        ``engine.stretch.train_steps`` (where ``runs_ahead``): each step the batch ``stream.next`` would give, the
        gradient of ``__call__`` and ``opt.step``'s update; fewer where the early stop's rule ``stop`` ends the
        stretch (``engine.stretch.EarlyStop``). The same numbers as that many such steps, and the stream's
        generators and ``opt`` advanced as they leave them. Returns the mean log-likelihoods (k, S) and correct
        predictions (k, S) int64 of the k steps taken.

        With ``threads`` > 1 and at least ``THREADED_STEPS`` steps the work goes on threads (the compiled loops
        hold no GIL; one hand-off per call, block or stretch between checks, never per step), in one of two ways.
        Members never interact: several members are cut into groups of consecutive rows, each trained on its own
        thread, through all n steps, or under ``stop`` (a stretch that ends early ends for all of them) up to the
        next step where some member may stop: no member can before it (``engine.stretch.steps_before_stop``), that
        step is checked here (``may_stop``), and the groups go on to the next such step or the stretch ends there.
        One member's batches are drawn ahead on a second thread, a block of steps at a time
        (``draws.draw_steps``), while it trains on the block before (without ``stop``). Either way each member's
        numbers are the ones it gets alone, on one thread. One member under ``stop`` trains on this thread, and a
        block of batches drawn past the stretch's end is drawn again up to it, so that the generators stand where
        the steps taken leave them."""
        S, c = len(members), stream.c
        B, L = c.batch, c.train_length
        first_compile.compile_step(str(opt.params.dtype).removeprefix("torch."), "train_steps")
        p, state = opt.update_arrays()
        setup = self._compiled_setup(L, opt.params.dtype)
        offsets = np.ascontiguousarray(offsets, np.int64)
        loglik, correct = np.empty((n, S), p.dtype), np.empty((n, S), np.int64)
        fixed = None if stream.fixed is None else engine_step.as_tokens(stream.next(members).numpy())[None]
        states = np.stack([draws.mt_state(stream.gens[i]) for i in members]) if fixed is None else None

        def steps(rows: slice, xs: np.ndarray, done: int, k: int, early: bool) -> tuple[int, bool]:
            """Steps done + 1 .. done + k of the members at rows, on the batches xs (k of them, or 1 fixed), or
            fewer where ``stop`` ends them (when ``early``; all members then, rows = all): returns how many were
            taken, and whether ``stop`` ended them."""
            r = rows.stop - rows.start
            key = (rows.start, B, L, p.dtype)  # the step's working arrays: one set per thread, kept for the next call
            if key not in self._works:
                self._works[key] = engine_step.step_arrays(p, setup, B, L)
            ll, cc = np.empty((k, r), p.dtype), np.empty((k, r), np.int64)
            # the rows' share of the state (m, v, decay: (0, 0) where the rule has none, and so is their slice)
            mine = state._replace(m=state.m[rows], v=state.v[rows], lr=state.lr[rows], decay=state.decay[rows])
            rule = window(done) if early else engine_stretch.never_stop(r)
            with flushed():  # subnormals as zero on this thread (engine.denormals)
                took, ended = engine_stretch.train_steps(n=k, buf=p[rows], xs=xs, offsets=offsets[rows], setup=setup,
                                                         update=mine, t0=opt.t + done,
                                                         history=engine_stretch.History(ll, cc),
                                                         work=self._works[key], stop=rule)
            loglik[done:done + took, rows], correct[done:done + took, rows] = ll[:took], cc[:took]
            return took, ended

        def window(done: int) -> engine_stretch.EarlyStop:
            """``stop`` after this call's first ``done`` steps: its window's last counts, those before the call and
            then this call's."""
            prior = np.concatenate((stop.before, correct[max(0, done - stop.window + 1):done]))  # the last ones only
            return stop._replace(before=np.ascontiguousarray(prior[max(0, len(prior) - stop.window + 1):]))

        def draw(rows: slice, into: np.ndarray) -> np.ndarray:
            """The next len(into) batches of the members at rows, from their generators' states, into ``into``."""
            draws.draw_steps(states[rows], into, self.V)
            return into

        def blocks(rows: slice, k: int, which: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
            """Room for one block of batches (size, r, B, L), and the (first step, steps) of each block of k steps."""
            r = rows.stop - rows.start
            size = max(1, min(k, DRAWN_BYTES // (r * B * L * np.dtype(engine_step.TOKENS).itemsize)))
            return _room((rows.start, which), (size, r, B, L)), [(a, min(size, k - a)) for a in range(0, k, size)]

        def train_rows(rows: slice, done: int, k: int, early: bool) -> int:
            """Steps done + 1 .. done + k of the members at rows: draw a block, train on it, and so on; fewer where
            ``stop`` ends them (when ``early``). Returns the steps taken."""
            if fixed is not None:
                return steps(rows, fixed[:, rows], done, k, early)[0]
            room, todo = blocks(rows, k)
            for first, m in todo:
                start = states[rows].copy() if early else None  # to rewind to, should ``stop`` end the block
                took, ended = steps(rows, draw(rows, room[:m]), done + first, m, early)
                if ended:  # by ``stop``: the generators as the steps taken leave them
                    if took < m:
                        states[rows] = start
                        draw(rows, room[:took])
                    return first + took
            return k

        def on_lanes(done: int, k: int) -> None:
            """Steps done + 1 .. done + k, the members cut into ``lanes`` groups of consecutive rows, each on its
            thread (no ``stop`` checked)."""
            cuts = np.linspace(0, S, lanes + 1).round().astype(int)
            others = [_pool().submit(train_rows, slice(a, b), done, k, False) for a, b in zip(cuts[:-2], cuts[1:-1])]
            train_rows(slice(cuts[-2], cuts[-1]), done, k, False)  # the last group on this thread: one hand-off fewer
            for other in others:
                other.result()

        lanes = min(threads, S) if n >= THREADED_STEPS else 1
        taken = n
        if lanes > 1 and stop is None:  # groups of members, each through all n steps on its thread
            on_lanes(0, n)
        elif lanes > 1:  # the same, from one step where ``stop`` may end the stretch to the next
            taken = 0
            while taken < n:
                k = min(n - taken, engine_stretch.steps_before_stop(window(taken), B))
                on_lanes(taken, k)
                taken += k
                if engine_stretch.may_stop(correct, taken - 1, stop):
                    break
        elif fixed is None and threads > 1 and n >= THREADED_STEPS and stop is None:  # the next block drawn ahead
            every = slice(0, S)
            room, todo = blocks(every, n)
            rooms = (room, blocks(every, n, 1)[0])  # one is drawn into while the other is trained on
            ahead = _pool().submit(draw, every, rooms[0][:todo[0][1]])
            for i, (done, k) in enumerate(todo):
                xs = ahead.result()
                if i + 1 < len(todo):
                    ahead = _pool().submit(draw, every, rooms[(i + 1) % 2][:todo[i + 1][1]])
                steps(every, xs, done, k, False)
        else:
            taken = train_rows(slice(0, S), 0, n, stop is not None)
        opt.t += taken
        for i, state in zip(members, states if states is not None else []):
            draws.set_mt_state(stream.gens[i], state)
        return torch.from_numpy(loglik[:taken]), torch.from_numpy(correct[:taken])

    def forward(self, buf: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits (S, B, V) at the last query of tokens x (S, B, L), and what ``backward`` needs (the
        attention (S, B, L) under "attn").

        The logit table is laid out T[j, b, a] (key position, key token, query token), so the entry of
        key j of a sequence sits at j V^2 + x_j V + x_L. With RoPE, q(a) . rotate(k(b), j - (L-1)) =
        sum_p cos(phi_jp) C_p[a, b] + sin(phi_jp) D_p[a, b], where C_p = q_p . k_p and D_p = q_p . (k_p
        turned by 90 degrees) over the two dimensions of pair p: T = trig (L, d) @ CD (d, V^2), one
        product forward and one backward, with no rotated copy of the queries or keys.
        """
        V, d, c = self.V, self.d, self.c
        S, B, L = x.shape
        key = (L, x.dtype, buf.dtype, buf.device)
        if key not in self._cache:  # per length: the constants, the j V^2 offsets, the scaled (cos, sin)
            const = table_constants(self.enc, d, L, buf.dtype, buf.device)
            turn = torch.tensor([[[1.0, 1.0]], [[-1.0, 1.0]]], dtype=buf.dtype, device=buf.device)
            self._cache = {key: (const, (torch.arange(L, device=buf.device) * (V * V)).to(x.dtype),
                                 None if const.trig is None else const.trig * (1.0 / math.sqrt(d)), turn)}
        const, jvv, trig, turn = self._cache[key]
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
        saved = dict(X=X, XT=XT, A=A, Ak=Ak, Av=Av, x=x, last=last, trig=trig, views=v, S=S, B=B, L=L)
        small = False
        if self.rotates:
            p = d // 2
            Xq = Q.reshape(S, V, p, 2).permute(0, 2, 3, 1).reshape(S * p, 2, V)  # q by pair: (2, a)
            Kp = Ak[:, :V].reshape(S, V, p, 2).transpose(1, 2)  # (S, p, b, 2)
            # [k_p; k_p turned by 90 degrees]: (k_e, k_o) and (-k_o, k_e) = (k_o, k_e) * (-1, 1), exactly
            Yt = torch.stack((Kp, Kp.flip(-1)), 2).mul_(turn).view(S * p, 2 * V, 2)
            CD = torch.bmm(Yt, Xq).view(S, d, V * V)  # (C_p, D_p)[b, a]
            T = torch.matmul(trig, CD)  # (S, L, V^2): T[j, b, a], scaled by 1/sqrt(d)
            saved.update(Xq=Xq, Yt=Yt, turn=turn)
        else:
            Qs = Q * (1.0 / math.sqrt(d))
            TP = torch.bmm(Ak, Qs.transpose(1, 2))  # (S, V + nr, V): [k(b) . q(a); P_j Wk . q(a)]
            if rows:
                T = TP[:, None, :V] + TP[:, V:, None]  # (S, L, V, V)
            elif const.bias is not None:
                T = TP[:, None] + const.bias[:, None, None]
            else:
                T, small = TP, True  # (V, V): no position at all
            saved.update(Qs=Qs)
        if self._index_of is not x:  # a fixed training set passes the same tensor every step: index it once
            index = torch.add(last, x, alpha=V) if small else torch.add(jvv, last).add_(x, alpha=V)
            self._index_of, self._index = x, index.view(S, B * L)
        index = self._index
        T = T.reshape(S, -1)
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
        saved.update(small=small, T=T, index=index, attn=attn, MA=MA, WoU=WoU, Yv=Yv, y=y)
        if c.mlp:
            z = torch.bmm(y, v["W1"])
            r = torch.relu(z)
            out = torch.baddbmm(y, r, v["W2"]) if c.residual else torch.bmm(r, v["W2"])
            saved.update(z=z, r=r, out=out)
            return torch.bmm(out, U), saved
        return y, saved

    def backward(self, saved: dict, g: torch.Tensor) -> torch.Tensor:
        """The gradient (S, P), in the buffer's layout, of a loss whose gradient by the logits is g (S, B, V),
        from what ``forward`` saved."""
        V, d, c = self.V, self.d, self.c
        S, L, x, v = saved["S"], saved["L"], saved["x"], saved["views"]
        A, MA, Yv, attn = saved["A"], saved["MA"], saved["Yv"], saved["attn"]
        rows = self.learned or self.fixed_rows
        nr = L if rows else 0
        na, at = V + nr, V + L - 1
        mT = torch.Tensor.mT.__get__
        grad = g.new_empty(S, self.size)  # the result, written block by block (products write into it directly)
        if c.mlp:
            out, r, z, y = saved["out"], saved["r"], saved["z"], saved["y"]
            gU = torch.bmm(mT(out), g)
            g_out = torch.bmm(g, v["UT"])
            torch.bmm(mT(r), g_out, out=self.block(grad, "W2"))
            g_z = torch.bmm(g_out, v["W2T"]).masked_fill_(z <= 0, 0.0)  # relu's derivative: 1 where z > 0
            torch.bmm(mT(y), g_z, out=self.block(grad, "W1"))
            g_y = torch.baddbmm(g_out, g_z, v["W1T"]) if c.residual else torch.bmm(g_z, v["W1T"])
        else:
            g_y = g
        g_Yv = torch.bmm(mT(MA), g_y)  # (S, V + nr (+ V), Y)
        g_MA = torch.bmm(g_y, mT(Yv[:, :na]))  # (S, B, V + nr)
        g_attn = g_MA[..., :V].gather(2, x)
        if rows:
            g_attn += g_MA[..., V:]
        g_attn.mul_(attn)  # through the softmax: attn (g - sum(g attn)) = g attn - attn sum(g attn)
        g_s = torch.addcmul(g_attn, attn, g_attn.sum(-1, keepdim=True), value=-1.0)
        g_T = torch.zeros_like(saved["T"]).scatter_add_(1, saved["index"], g_s.view(S, -1))
        if self.rotates:
            p, Xq, Yt = d // 2, saved["Xq"], saved["Yt"]
            g_CD = torch.matmul(mT(saved["trig"]), g_T.view(S, L, V * V)).view(S * p, 2 * V, V)
            g_Y = torch.bmm(g_CD, mT(Xq)).view(S, p, 2, V, 2)
            g_Q = torch.bmm(mT(Yt), g_CD).view(S, p, 2, V).permute(0, 3, 1, 2).reshape(S, V, d)
            # d / d (k_e, k_o) = the first row's gradient + the turned row's (d / d (-k_o, k_e)) turned back
            g_K = torch.addcmul(g_Y[:, :, 0], g_Y[:, :, 1].flip(-1), saved["turn"][1, 0].flip(-1))  # (1, -1)
            g_K = g_K.transpose(1, 2).reshape(S, V, d)
        else:
            if saved["small"]:
                g_TP = g_T.view(S, V, V)
            elif rows:
                g4 = g_T.view(S, L, V, V)
                g_TP = torch.cat((g4.sum(1), g4.sum(2)), 1)  # (S, V + L, V)
            else:
                g_TP = g_T.view(S, L, V, V).sum(1)
            g_Q = torch.bmm(mT(g_TP), saved["Ak"]).mul_(1.0 / math.sqrt(d))
            g_K = torch.bmm(g_TP, saved["Qs"])  # (S, V + nr, d)
        Av, WoU = saved["Av"], saved["WoU"]
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
        gW = torch.bmm(saved["XT"], g_A, out=self.block(grad, "W"))  # (S, d, 3d + V)
        g_EP = self.block(grad, "EP")
        # (S, V + nr, d); X is the first rows of EP, except with fixed rows (X = [E; rows], only E trained)
        g_X = torch.bmm(g_A, v["WT"]) if self.fixed_rows else torch.bmm(g_A, v["WT"], out=g_EP[:, :g_A.shape[1]])
        if c.mlp:
            self.block(grad, "Wo").copy_(g_WoU)
            gW[..., 3 * d:] = gU
            if g_R is not None:
                g_X[:, :V] += g_R
                if rows:
                    g_X[:, at] += g_R.sum(1)
        else:
            torch.bmm(g_WoU, v["UT"], out=self.block(grad, "Wo"))
            gW[..., 3 * d:] += torch.bmm(v["WoT"], g_WoU)
        if self.fixed_rows:
            g_EP.copy_(g_X[:, :V])
        elif g_X.shape[1] < g_EP.shape[1]:  # APE rows held past this length get no gradient
            g_EP[:, g_X.shape[1]:] = 0.0
        return grad
