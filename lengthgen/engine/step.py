"""One training step of the one-layer table model, compiled: forward, loss and backward for every member of
an ensemble in one call (``table_step``), the numbers of ``tables.TableStep.forward``, ``model.log_likelihood_gradient``
and ``TableStep.backward`` (tests/test_fused.py: float64 to rounding) without their ~110 torch operations.

It covers the one-layer models without an MLP (RoPE, learned APE, sinusoidal, NoPE, ALiBi; with or without the
residual), in float32 and float64, member after member and each sequence in order (deterministic, independent
of any thread count). The notation, for one member (``tables.py`` derives the table):

    X = [E; P]              (nX, d)   token rows E_b (b < V), then position rows P_j (j < L; learned APE, sinusoidal)
    W = [Wq | Wk | Wv | U]  (d, 3d + V),  Wo (d, d)
    q(a) = (E_a + P_(L-1)) Wq   the last query, for query token a;   k = X Wk, the keys of tokens and positions
    T[j, b, a]               the attention logit of the last query (token a) on key j holding token b
    attn_j = softmax_j T[j, x_j, x_(L-1)],   mass_b = sum_(j: x_j = b) attn_j
    y = Yv[:V]^T mass + Yv[V:]^T attn + R[x_(L-1)],   Yv = X Wv Wo U,  R = (E + P_(L-1)) U if residual
    loss = mean over the batch of -log softmax(y)_target

With RoPE and a large vocabulary (``by_lookup``: V^2 > 4 B) there is no table: each logit T[j, x_j, a] is the dot
product of the query turned for position j with the key, computed for the batch's keys only.

``step_in`` runs the step member after member as nine blocks (``_project``, ``_logit_table``, ``_attention``,
``_logits``, ``_loss``, ``_backward_logits``, ``_backward_softmax``, ``_backward_table``, ``_backward_projections``;
RoPE by lookup runs four of its own in place of the table's: ``BY_LOOKUP``), each a function with the equation it
computes in its docstring and the code under it, compiled and cached on its own, so that the first compile can
share them between two processes (``first_compile``) and a model compiles only the blocks of its path. ``step_in``
calls each (``run_block``, which knows each block's arguments) at its own machine code where it lies (``call``), so
that compiling ``step_in`` or ``stretch.train_steps`` does not optimise and emit the nine blocks' code once more. The
working arrays (``StepArrays``, by name) are made once per call (``step_arrays``), not once per step, and reach
compiled code as one reference (``Work``), which also holds the blocks' addresses. The products go through
``matmul.matmul`` where the right operand has contiguous rows and ``matmul.matmul_t`` (A B^T) where its transpose
has: register tiles where numba compiles for AVX2 without AVX-512 (B^T first copied into a scratch row), numpy's
BLAS elsewhere.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.experimental import structref
from numba.extending import intrinsic

from .matmul import OWN, lane_sums, matmul, matmul_t, register_tile
from .numerics import FAST, dot8, exp_constants, exp_neg, int_scratch, lane_totals, log1p, log_constants, row_total

# How the attention logit table is made (tables.TableStep's cases):
ROTATE = 0  # RoPE: T[j, b, a] = trig[j] . CD[:, b, a]
ROWS = 1  # additive position rows (learned APE, sinusoidal): T[j, b, a] = k(b) . q(a) + (P_j Wk) . q(a)
BIAS = 2  # ALiBi: T[j, b, a] = k(b) . q(a) + bias[j]
NONE = 3  # NoPE: T[b, a] = k(b) . q(a)

# The tokens as the compiled step reads them: 2 bytes each, where torch's are 8. A step reads its batch's tokens in
# three passes (the keys' table entries, the attention on each token, its gradient), and a training step takes a
# fresh batch (256 x 32 tokens: 16 KB, not 64 KB). One step of the default model (RoPE, V 16, d 32, L 32, batch 256,
# float32, one member) over 64 batches in turn, 4 MB as int64: 66.8-68.2 us with int64 tokens, 64.3-66.5 us with
# uint16 (six rounds alternated, an Intel Xeon as AVX2); uint8 was no faster than uint16 (64.2-66.2 us).
TOKENS = np.uint16
MAX_VOCAB = int(np.iinfo(TOKENS).max) + 1  # the largest vocabulary the compiled step takes


def as_tokens(x: np.ndarray) -> np.ndarray:
    """The tokens ``x`` (any shape, integers below ``MAX_VOCAB``) as the compiled step reads them: a contiguous
    array of ``TOKENS`` (a copy unless they are already)."""
    return np.ascontiguousarray(x, TOKENS)


# RoPE's logits by lookup instead of as a table where the table would hold more than LOOKUP_RATIO times as many
# entries as the batch has keys (V^2 > LOOKUP_RATIO B): building the table and its gradient costs about L V^2 d
# multiply-adds each, the lookups about 3 B L d in all. At V = 64, batch 256 the table took 4 ms a step against 0.12 ms
# at V = 16 (measured, float32): its 131,072 entries (512 KB, and as much for its gradient) for 8,192 keys.
LOOKUP_RATIO = 4


def by_lookup(kind: int, V: int, B: int) -> bool:
    """Whether the step computes RoPE's logits key by key (``LOOKUP_RATIO``) rather than as the table T: which blocks
    a ``Work`` holds (``step_arrays``), chosen in Python before the step runs."""
    return kind == ROTATE and V * V > LOOKUP_RATIO * B


@njit(cache=True, inline="always")
def position_step(kind, V):
    """How far apart the table T holds the entries of two neighbouring key positions: key j holding token b, for the
    query token a, is entry j position_step + b V + a (V^2; 0 without positions, NoPE's T[b, a]). The blocks compute
    each key's entry where they read it (``_attention``) or add to it (``_backward_softmax``) rather than store it."""
    return 0 if kind == NONE else V * V


class StepSetup(NamedTuple):
    """What a table step needs besides the parameters and the batch, fixed for a model, a length L and a dtype
    (``tables.TableStep``'s compiled setup)."""

    kind: int  # ROTATE / ROWS / BIAS / NONE: how the logit table is made
    fixed: bool  # the position rows are ``rows`` (sinusoidal) rather than rows of EP (learned APE)
    residual: bool  # the query's own input is added to the attention output
    V: int  # vocabulary
    d: int  # width
    n_ep: int  # rows of the parameter block EP (tokens, then learned positions)
    trig: np.ndarray  # (L, d) ROTATE: (cos, sin) per rotation pair at offset j - (L-1), / sqrt(d); else (1, 1)
    rows: np.ndarray  # (L, d) the fixed position rows (sinusoidal), else (1, 1)
    bias: np.ndarray  # (L,) the logit bias by key position (ALiBi), else (1,)
    ec: np.ndarray  # ``numerics.exp_constants`` of the dtype


class StepOut(NamedTuple):
    """What a table step writes, per member."""

    loglik: np.ndarray  # (S,) the mean log-likelihood of the targets
    correct: np.ndarray  # (S,) int64 correct predictions (the first maximum of the logits)
    grad: np.ndarray  # (S, P) the gradient of the mean cross-entropy, in the buffer's layout


class StepArrays(NamedTuple):
    """The working arrays of a table step for batch B and length L (nX = V + L with position rows, else V;
    nT = L V^2, or V^2 without positions). Every array is written before it is read, except the constants
    ``blocks``, ``cst`` (1, 1/sqrt(d), 2^-LOW) and ``lc`` (``log_constants``)."""

    blocks: np.ndarray  # (9,) int64 where the machine code of each block of the setup's path lies (``block_addresses``)
    cst: np.ndarray  # (3,) 1, 1/sqrt(d), 2^-60 (float32) or 2^-600 (float64): where a softmax is redone
    lc: np.ndarray  # ``numerics.log_constants``
    ratio: np.ndarray  # (B,) the argmax's index so far, then the others' probability over the target's, then its log1p
    w: np.ndarray  # (B,) log1p's float scratch
    bits: np.ndarray  # (B,) log1p's integer scratch, as wide as the floats
    X: np.ndarray  # (nX, d) token rows, then position rows
    A: np.ndarray  # (nX, 3d + V) X W = [X Wq | X Wk | X Wv | X U]
    K: np.ndarray  # (nX, d) the keys X Wk
    QT: np.ndarray  # (d, V) the last query q(a) of each query token a, as columns
    Av: np.ndarray  # (nX, d) the values X Wv
    U: np.ndarray  # (d, V) the read-out
    WoU: np.ndarray  # (d, V) Wo U
    Yv: np.ndarray  # (nX, V) Av Wo U: what a unit of attention on a row of X adds to the logits
    T: np.ndarray  # (nT,) the logit table T[j, b, a] (T[b, a] without positions; 1 entry by lookup)
    CD: np.ndarray  # (d, V^2) RoPE: per rotation pair, the cos and sin coefficients of T (1 column by lookup)
    Qr: np.ndarray  # (V L, d) RoPE by lookup: the query of token a turned for key position j (row a L + j), else (1, d)
    TP: np.ndarray  # (nX, V) X Wk q(a) (no rotation), then the gradient by it
    top: np.ndarray  # (V,) the largest table entry of each query token's column
    query: np.ndarray  # (B,) int64 the query token a_i = x_i,L-1 of each sequence
    lg: np.ndarray  # (B, L) the attention logits, then the attention weights attn
    mass: np.ndarray  # (V, B) the attention on each token
    Z: np.ndarray  # (V, V) Yv[:V]^T, contiguous, then R^T: R[a, c] = (E_a + P_(L-1)) U[:, c] (``_logits``)
    yt: np.ndarray  # (V, B) the logits y, transposed
    E: np.ndarray  # (V, B) exp(y - max y), then the gradient by the logits g, transposed
    lanes: np.ndarray  # (B, 8) the attention's row sums in eight lanes (``numerics.lane_totals``)
    rowtop: np.ndarray  # (B,) max y, then 1 / (B sum exp)
    sums: np.ndarray  # (B,) the argmax's maximum so far, then sum exp(y - max y), then sum_j attn_j g_attn_j
    rest: np.ndarray  # (B,) the argmax's index so far, then the other classes' share of sums
    gYv: np.ndarray  # (nX, V) dloss/dYv
    gR: np.ndarray  # (V, V) dloss/dR
    gM: np.ndarray  # (V, B) dloss/dmass
    gP: np.ndarray  # (B, L) dloss/dattn through the position rows; RoPE by lookup: dloss/ds, by logit
    gT: np.ndarray  # (nT,) dloss/dT
    gCD: np.ndarray  # (V^2, d) dloss/dCD, transposed (RoPE; 1 row by lookup)
    gQr: np.ndarray  # (V L, d) dloss/dQr (RoPE by lookup), else (1, d)
    gQ: np.ndarray  # (V, d) dloss/dq(a), as rows
    swap: np.ndarray  # (3, V, d) RoPE's backward: q~(a), k~(b) (each rotation pair's two entries swapped), R(a)
    gA: np.ndarray  # (nX, 3d + V) dloss/dA
    gX: np.ndarray  # (nX, d) a product's scratch, then dloss/dX
    gWoU: np.ndarray  # (d, V) dloss/d(Wo U)
    gU: np.ndarray  # (d, V) dloss/dU through Wo U
    BT: np.ndarray  # (max k n,) ``matmul_t``'s scratch: a product's right operand (n, k), transposed


@structref.register
class WorkType(types.StructRef):
    """numba's type of ``Work``: the fields of ``StepArrays``, their array types as given."""

    def preprocess_fields(self, fields: tuple) -> tuple:
        return tuple((name, types.unliteral(t)) for name, t in fields)


class Work(structref.StructRefProxy):
    """The ``StepArrays`` as compiled code receives them: one reference (a pointer to the 43 arrays) instead of a
    tuple, whose arrays numba passes as over 300 separate arguments to every function and unpacks in each one's
    Python wrapper. Measured on a 2-core AMD EPYC, from an empty cache: a trivial compiled function of (setup,
    StepArrays) took 0.64 s to compile (0.47 s of it LLVM), of (setup, Work) 0.11 s; the first training call of a
    new process (20 steps of Adam, lr 0.01, batch 256, no early stop, no weight decay; import included) 23.9 / 22.8 s
    -> 17.9 / 17.8 s, alternated; the same parameters to the bit. Compiled code reads the
    fields as before (``work.X``); made by ``step_arrays``, never read from Python."""


structref.define_constructor(Work, WorkType, list(StepArrays._fields))
structref.define_boxing(WorkType, Work)


@njit(cache=True)
def _work(*arrays: np.ndarray) -> Work:
    """The ``Work`` of the arrays of a ``StepArrays``, in its order (compiled, and cached: numba's own constructor of
    ``Work`` is compiled afresh in each process)."""
    return Work(*arrays)


def step_arrays(like: np.ndarray, setup: StepSetup, B: int, L: int) -> Work:
    """The ``StepArrays`` of batch B, length L, in the dtype of the array ``like``, as a ``Work``: made for a call of
    ``stretch.train_steps`` or of ``table_step``, not once per step (numpy, not compiled: it would add 2.4 s to the
    first compile). Compiles the blocks of the setup's path for the dtype where this process has not
    (``block_addresses``)."""
    where = block_addresses(str(like.dtype), by_lookup(setup.kind, setup.V, B))
    return _work(*_arrays(like.dtype, setup, B, L)._replace(blocks=where))


def aligned_empty(shape: int | tuple, dtype: np.dtype, align: int = 64) -> np.ndarray:
    """np.empty(shape, dtype) starting on an ``align``-byte boundary, a cache line: the step's working arrays and the
    blocks of drawn batches (``tables._room``). numpy's own (glibc's malloc) start 0, 16, 32 or 48 bytes into a line;
    off it, every 64-byte load spans two lines, and at 16 or 48 bytes in every other 32-byte load (a batch's row of 32
    tokens is 64 bytes). Measured on an Intel Xeon (RoPE, default task; Adam, lr 3e-4, batch 256, 6667 steps, no early
    stop, no weight decay; one model, min of seven, three rounds alternated): natively (AVX-512) 0.377-0.393 ->
    0.368-0.382 s (a step inside training, the working arrays aligned: 62.9-64.8 -> 59.3-62.6 us); as AVX2 no change
    (0.459-0.467 against 0.463-0.466 s). The same bits either way."""
    n = math.prod(shape if isinstance(shape, tuple) else (shape,)) * np.dtype(dtype).itemsize
    raw = np.empty(n + align, np.uint8)
    at = -raw.ctypes.data % align
    return raw[at:at + n].view(dtype).reshape(shape)


def _arrays(dt: np.dtype, setup: StepSetup, B: int, L: int) -> StepArrays:
    """``step_arrays``' arrays, ``blocks`` zero."""
    empty = aligned_empty  # each array from the start of a cache line
    kind, V, d = setup.kind, setup.V, setup.d
    Y = 3 * d + V
    nX = V + (L if kind == ROWS else 0)  # rows of X: tokens, then positions (learned or fixed rows)
    VV = V * V
    lookup = by_lookup(kind, V, B)
    nT = 1 if lookup else VV if kind == NONE else L * VV
    nC = 1 if lookup else VV
    nQ = V * L if lookup else 1
    low = 2.0 ** -(60 if dt.itemsize == 4 else 600)
    cst = np.array([1.0, 1.0 / math.sqrt(d), low]).astype(dt)
    return StepArrays(
        blocks=np.zeros(len(BLOCKS), np.int64), cst=cst, lc=log_constants(setup.ec),
        ratio=empty(B, dt), w=empty(B, dt),
        bits=int_scratch(cst, B),
        X=empty((nX, d), dt), A=empty((nX, Y), dt), K=empty((nX, d), dt), QT=empty((d, V), dt),
        Av=empty((nX, d), dt), U=empty((d, V), dt), WoU=empty((d, V), dt), Yv=empty((nX, V), dt),
        T=empty(nT, dt), CD=empty((d, nC), dt), Qr=empty((nQ, d), dt), TP=empty((nX, V), dt),
        top=empty(V, dt), query=empty(B, np.int64),
        lg=empty((B, L), dt), mass=empty((V, B), dt), Z=empty((V, V), dt),
        yt=empty((V, B), dt), E=empty((V, B), dt), lanes=empty((B, 8), dt), rowtop=empty(B, dt),
        sums=empty(B, dt), rest=empty(B, dt),
        gYv=empty((nX, V), dt), gR=empty((V, V), dt), gM=empty((V, B), dt), gP=empty((B, L), dt),
        gT=empty(nT, dt), gCD=empty((nC, d), dt), gQr=empty((nQ, d), dt),
        gQ=empty((V, d), dt), swap=empty((3, V, d), dt),
        gA=empty((nX, Y), dt), gX=empty((nX, d), dt), gWoU=empty((d, V), dt), gU=empty((d, V), dt),
        BT=empty(max(B * V, Y * d, max(B, V) * L if kind == ROWS else 0), dt))


def table_step(buf: np.ndarray, x: np.ndarray, target: np.ndarray, setup: StepSetup, out: StepOut,
               work: Work | None = None) -> None:
    """One training step's gradient for every member, written into ``out`` (``StepOut``): ``step_in`` in the working
    arrays ``work`` (``step_arrays`` for this setup, batch and length, made anew where None).

    buf (S, P): the members' parameters in ``TableStep``'s layout (blocks EP (n_ep, d), W (d, 3d + V),
    Wo (d, d)); x (S, B, L) tokens (``TOKENS``: ``as_tokens``); target (S, B) int64; setup: ``StepSetup``.
    The loss is the mean cross-entropy over the B sequences, computed as ``model.log_likelihood_gradient``.
    """
    _, B, L = x.shape
    step_in(buf, x, target, setup, out, step_arrays(buf, setup, B, L) if work is None else work)


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _project(p, setup, work):
    """Forward: the projections of one member's parameters ``p`` (P,).

        X = [E; P] (nX, d),   A = X W = [X Wq | X Wk | X Wv | X U]
        K = X Wk,   Av = X Wv,   q(a) = E_a Wq + P_(L-1) Wq (QT's column a),   Yv = Av (Wo U)
    """
    kind, fixed, V, d, n_ep, rows = setup.kind, setup.fixed, setup.V, setup.d, setup.n_ep, setup.rows
    X, A, K, QT, Av, U = work.X, work.A, work.K, work.QT, work.Av, work.U
    WoU, Yv = work.WoU, work.Yv
    B, L = work.lg.shape
    Y = 3 * d + V  # columns of W: [Wq | Wk | Wv | U]
    has_rows = kind == ROWS
    nr = L if has_rows else 0
    nX = V + (L if kind == ROWS else 0)  # rows of X: tokens, then positions
    at = V + L - 1  # the last position's row of X
    o_W, o_Wo = n_ep * d, n_ep * d + d * Y  # where W and Wo start in a member's row
    W = p[o_W:o_Wo].reshape((d, Y))
    Wo = p[o_Wo:o_Wo + d * d].reshape((d, d))
    for r in range(V):
        for k in range(d):
            X[r, k] = p[r * d + k]
    for r in range(nr):
        for k in range(d):
            X[V + r, k] = rows[r, k] if fixed else p[(V + r) * d + k]
    matmul(X, W, A)
    for r in range(nX):
        for k in range(d):
            K[r, k] = A[r, d + k]
            Av[r, k] = A[r, 2 * d + k]
    for k in range(d):
        for a in range(V):
            QT[k, a] = A[a, k] + A[at, k] if has_rows else A[a, k]
        for c in range(V):
            U[k, c] = W[k, 3 * d + c]
    matmul(Wo, U, WoU)
    matmul(Av, WoU, Yv)  # what a unit of attention on a token / position adds to the logits


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _logit_table(setup, work):
    """Forward: the logit table T of every (key position, key token, query token).

        ROTATE: T[j, b, a] = q(a) . rot_((L-1) - j) k(b) / sqrt(d) = trig[j] . CD[:, b V + a], where per
                rotation pair (e, o): CD[e] = k_e q_e + k_o q_o,  CD[o] = k_e q_o - k_o q_e
        ROWS:   T[j, b, a] = (k(b) + P_j Wk) . q(a) / sqrt(d)       (TP = K QT: token rows, then position rows)
        BIAS:   T[j, b, a] = k(b) . q(a) / sqrt(d) + bias[j]
        NONE:   T[b, a]    = k(b) . q(a) / sqrt(d)
    """
    kind, V, d, trig, bias = setup.kind, setup.V, setup.d, setup.trig, setup.bias
    K, QT, T, CD, TP = work.K, work.QT, work.T, work.CD, work.TP
    one = work.cst[0]
    scale = work.cst[1]
    zero = one - one
    L = work.lg.shape[1]
    has_rows = kind == ROWS
    VV = V * V
    if kind == ROTATE:
        for q in range(d // 2):
            e, o = 2 * q, 2 * q + 1
            for b in range(V):
                ke, ko = K[b, e], K[b, o]
                for a in range(V):
                    CD[e, b * V + a] = ke * QT[e, a] + ko * QT[o, a]
                    CD[o, b * V + a] = ke * QT[o, a] - ko * QT[e, a]
        matmul(trig, CD, T.reshape((L, VV)))
    else:
        matmul(K, QT, TP)
        if kind == NONE:
            for m in range(VV):
                T[m] = TP[m // V, m % V] * scale
        else:  # (unsigned indices: no fix-up of negative ones, see _attention; ROWS as AVX2 3.9 -> 1.9 us)
            for j in range(L):
                pj = np.uint64(V + j)  # position j's row of TP
                for b in range(V):
                    for a in range(V):
                        T[np.uint64(j * VV + b * V + a)] = (TP[b, a] + (TP[pj, a] if has_rows else zero)) * scale + (
                            zero if has_rows else bias[j])


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _turned_queries(setup, work):
    """Forward, RoPE by lookup (``by_lookup``), in place of ``_logit_table``: no table; each logit is computed for the
    batch's keys (``_attention_by_lookup``), T[j, b, a] = Qr[a L + j] . k(b), from the query turned for position j:

        Qr[a L + j, e] = trig[j, e] q_e + trig[j, o] q_o,   Qr[a L + j, o] = trig[j, e] q_o - trig[j, o] q_e
    """
    V, d, trig = setup.V, setup.d, setup.trig
    QT, Qr = work.QT, work.Qr
    L = work.lg.shape[1]
    for a in range(V):
        for j in range(L):
            r = a * L + j
            for q in range(d // 2):
                e, o = 2 * q, 2 * q + 1
                Qr[r, e] = trig[j, e] * QT[e, a] + trig[j, o] * QT[o, a]
                Qr[r, o] = trig[j, e] * QT[o, a] - trig[j, o] * QT[e, a]


@njit(cache=True, fastmath=FAST)
def _less_row_max(lg, i):
    """lg[i] <- lg[i] - max lg[i]: the logits shifted so that the largest is 0 (their exponentials then neither
    overflow nor all underflow)."""
    m = lg[i, 0]
    for j in range(1, lg.shape[1]):
        m = max(m, lg[i, j])
    for j in range(lg.shape[1]):
        lg[i, j] -= m


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _attention(xs, setup, work):
    """Forward: the last query's attention over each sequence of ``xs`` (B, L), from the table T.

        s_ij = T[j, x_ij, a_i]   (a_i = x_i,L-1, the query token),   attn_ij = exp(s_ij) / sum_j' exp(s_ij')
        mass[b, i] = sum_(j: x_ij = b) attn_ij    (the attention on token b)

    The exponentials are shifted by the largest entry of the query token's column, not by each sequence's maximum
    (the gathers, exponentials and sums then run as independent or vectorised loops); a sequence whose entries all
    lie far below that largest entry (their sum under 2^-LOW) is redone with its own maximum
    (``_weights_and_masses``). The query tokens a_i are kept in ``work.query`` for the blocks after this one.
    """
    kind, V = setup.kind, setup.V
    T, top, query, lg = work.T, work.top, work.query, work.lg
    B, L = work.lg.shape
    jstep = position_step(kind, V)
    for i in range(B):
        query[i] = xs[i, L - 1]
    nT = V * V if kind == NONE else L * V * V
    # each column's maximum down the table's nT / V rows, W columns at a time in a tile the compiler keeps in
    # registers (a register tile's row: W = 64 bytes); the columns past the last whole W one at a time. Indices
    # are cast to unsigned: numba then skips its fix-up of negative indices, which made LLVM build such loops of
    # element inserts (see benchmarks/README.md)
    acc = register_tile(T)
    W = acc.shape[1]  # a constant the compiler sees
    rows, uV = np.uint64(nT // V), np.uint64(V)
    for a0 in range(0, V - W + 1, W):
        for c in range(W):
            acc[0, c] = -np.inf
        for r in range(np.uint64(0), rows):
            for c in range(W):
                acc[0, c] = max(acc[0, c], T[r * uV + np.uint64(a0 + c)])
        for c in range(W):
            top[a0 + c] = acc[0, c]
    for a in range(V // W * W, V):
        m = T[np.uint64(a)]
        for r in range(np.uint64(1), rows):
            m = max(m, T[r * uV + np.uint64(a)])
        top[a] = m
    for i in range(B):
        a = query[i]
        shift = top[a]  # read once: the stores to lg below could alias top, so the compiler reloads it per key
        for j in range(L):
            lg[i, j] = T[np.uint64(j * jstep + xs[i, j] * V + a)] - shift
    _weights_and_masses(xs, setup, work, True)


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _attention_by_lookup(xs, setup, work):
    """Forward, RoPE by lookup (``by_lookup``), in place of ``_attention``: each logit from the query turned for its
    position (``_turned_queries``), shifted by the sequence's own maximum.

        s_ij = Qr[a_i L + j] . k(x_ij),   attn_ij = exp(s_ij) / sum_j' exp(s_ij'),   mass as in ``_attention``
    """
    d = setup.d
    query, lg, Qr, K = work.query, work.lg, work.Qr, work.K
    B, L = work.lg.shape
    for i in range(B):
        query[i] = xs[i, L - 1]
    for i in range(B):
        a = query[i]
        for j in range(L):
            lg[i, j] = dot8(Qr, a * L + j, 0, K, xs[i, j], 0, d)
        _less_row_max(lg, i)
    _weights_and_masses(xs, setup, work, False)


@njit(error_model="numpy", fastmath=FAST, inline="always")
def _weights_and_masses(xs, setup, work, table):
    """The end of ``_attention`` and ``_attention_by_lookup``: lg (B, L), the logits shifted to at most 0, <- the
    attention weights attn (their exponentials over each row's sum), then the attention on each token, mass (V, B).
    Where ``table`` (a constant at each call), a row whose exponentials sum under 2^-LOW (every logit far below its
    column's maximum) is redone from the table T with its own maximum."""
    kind, V, ec = setup.kind, setup.V, setup.ec
    T, query, lg, lanes, mass = work.T, work.query, work.lg, work.lanes, work.mass
    one = work.cst[0]
    low = work.cst[2]
    B, L = work.lg.shape
    jstep = position_step(kind, V)
    exp_neg(lg.reshape(B * L), ec)
    mass[:] = 0
    lane_totals(lg, lanes, 0, B)
    for i in range(B):
        tot = row_total(lg, lanes, i)
        if not tot >= low and table:  # far below the column's maximum: again with the sequence's own
            for j in range(L):
                lg[i, j] = T[np.uint64(j * jstep + xs[i, j] * V + query[i])]
            _less_row_max(lg, i)
            exp_neg(lg[i], ec)
            lane_totals(lg, lanes, i, i + 1)
            tot = row_total(lg, lanes, i)
        inv = one / tot
        for j in range(L):
            lg[i, j] *= inv
    # the scatter into mass, four sequences at a time key by key: four scatters in a row go to four columns of mass,
    # none waiting for the one before (each entry still sums its keys in order; see benchmarks/README.md)
    B4 = B // 4 * 4
    for i in range(0, B4, 4):
        for j in range(L):
            mass[np.uint64(xs[i, j]), i] += lg[i, j]
            mass[np.uint64(xs[i + 1, j]), i + 1] += lg[i + 1, j]
            mass[np.uint64(xs[i + 2, j]), i + 2] += lg[i + 2, j]
            mass[np.uint64(xs[i + 3, j]), i + 3] += lg[i + 3, j]
    for i in range(B4, B):
        for j in range(L):
            mass[np.uint64(xs[i, j]), i] += lg[i, j]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _logits(setup, work):
    """Forward: the logits of each sequence, transposed (V, B).

        y_i = Yv[:V]^T mass_i + Yv[V:]^T attn_i + R[a_i],   R = (E + P_(L-1)) U with the residual, else 0
    """
    kind, residual, V, d = setup.kind, setup.residual, setup.V, setup.d
    A, query, lg, mass, Z, yt = work.A, work.query, work.lg, work.mass, work.Z, work.yt
    B, L = work.lg.shape
    has_rows = kind == ROWS
    at = V + L - 1  # the last position's row of X
    YvT, YvP = work.Yv[:V], work.Yv[V:]  # tokens' and positions' rows
    for b in range(V):
        for c in range(V):
            Z[c, b] = YvT[b, c]
    matmul(Z, mass, yt)
    if has_rows:
        gM = work.gM  # free until the backward: the positions' share of the logits
        matmul_t(YvP.T, lg, gM, work.BT)
        for c in range(V):
            for i in range(B):
                yt[c, i] += gM[c, i]
    if residual:  # along the batch, by rows of yt and of R^T (copied into Z: no multiply by A's row width per read)
        for c in range(V):
            col = 3 * d + c
            for a in range(V):
                Z[c, a] = A[a, col] + A[at, col] if has_rows else A[a, col]
        for c in range(V):
            for i in range(B):
                yt[c, i] += Z[c, np.uint64(query[i])]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _loss(ts, setup, work):
    """The loss of the targets ``ts`` (B,) and its gradient by the logits (into E); returns (the mean
    log-likelihood, the correct predictions).

        loss = (1/B) sum_i -log p_t,   -log p_t = log(1 + sum_(c != t) e^(y_c - y_t)),   p = softmax(y)
        g_i = dloss/dy_i = (p_i - onehot(t_i)) / B,   prediction = argmax y_i (the first maximum)

    Each loop runs along the batch (selects, not branches: the argmax's would mispredict on fresh data). The
    argmax keeps its running maximum and index in two pairs of arrays, read from one and written to the other
    (``rowtop`` / ``sums`` and ``ratio`` / ``rest``, free until later): LLVM compiles a select stored back where one
    side was loaded into a masked store (AVX's vmaskmovps), which AMD's Zen 1-3 run as microcode, 42 uops.
    """
    V, ec = setup.V, setup.ec
    lc, ratio, w, bits, yt, E = work.lc, work.ratio, work.w, work.bits, work.yt, work.E
    rowtop, sums, rest = work.rowtop, work.sums, work.rest
    one = work.cst[0]
    zero = one - one
    B, L = work.lg.shape
    top, top_next, at, at_next = rowtop, sums, ratio, rest  # the maximum so far and its index (as a float)
    for i in range(B):
        top[i] = yt[0, i]
        at[i] = zero
    c_f = zero
    for c in range(1, V):
        c_f += one
        for i in range(B):  # the first maximum, as argmax
            y = yt[c, i]
            up = y > top[i]
            top_next[i] = y if up else top[i]
            at_next[i] = c_f if up else at[i]
        top, top_next, at, at_next = top_next, top, at_next, at
    if V % 2 == 0:  # an odd number of steps: the maximum is in sums
        for i in range(B):
            rowtop[i] = sums[i]
    hits = 0
    for i in range(B):
        hits += at[i] == ts[i]
    for c in range(V):
        for i in range(B):
            E[c, i] = yt[c, i] - rowtop[i]
    exp_neg(E.reshape(B * V), ec)
    for i in range(B):
        sums[i] = E[0, i]
    for c in range(1, V):
        for i in range(B):
            sums[i] += E[c, i]
    for i in range(B):
        tg = ts[i]
        rest[i] = sums[i] - E[tg, i]  # the others' share
        ratio[i] = rest[i] / E[tg, i] if E[tg, i] > 0 else zero
    log1p(ratio, lc, w, bits)
    ll = zero
    for i in range(B):
        tg = ts[i]
        # log1p(others / E_t) is softplus(log others - log E_t); where E_t underflows, r itself
        ll -= ratio[i] if E[tg, i] > 0 else np.log(rest[i]) - (yt[tg, i] - rowtop[i])
    for i in range(B):
        rowtop[i] = one / (sums[i] * B)  # now 1 / (sum B)
    for c in range(V):
        for i in range(B):
            E[c, i] *= rowtop[i]
    for i in range(B):  # p_t - 1 as minus the others' probability: exact where p_t rounds to 1
        E[ts[i], i] = -rest[i] * rowtop[i]
    return ll / B, hits


@njit(fastmath=FAST, inline="always")
def _rows_by_query(g, query, out):
    """out[a] += sum_(i: query_i = a) g[i], each in the order i = 0, 1, ...: g (B, V), query (B,), out (V, V).
    At B 256, V 16 on a Zen 3: 1.8 us by signed indices into g = E^T as a strided view, about 1 us by unsigned ones
    into E^T's contiguous copy (``_backward_logits``); either change alone saved nothing."""
    for i in range(g.shape[0]):
        a = np.uint64(query[i])
        for c in range(np.uint64(g.shape[1])):
            out[a, c] += g[np.uint64(i), c]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_logits(setup, work):
    """Backward: the logits to Yv, R and the attention.

        dYv[:V] = mass g,   dYv[V:] = attn^T g,   dR[a] = sum_(i: a_i = a) g_i
        dmass[b, i] = Yv[b] . g_i (gM),   dattn_ij (position rows) = Yv[V + j] . g_i (gP)
    """
    kind, residual, V = setup.kind, setup.residual, setup.V
    query, lg, mass, E, sums, gYv, gR = work.query, work.lg, work.mass, work.E, work.sums, work.gYv, work.gR
    gM, gP = work.gM, work.gP
    B = work.lg.shape[0]
    has_rows = kind == ROWS
    YvT, YvP = work.Yv[:V], work.Yv[V:]  # tokens' and positions' rows
    g = work.E.T  # the gradient by the logits (B, V)
    matmul_t(mass, E, gYv[:V], work.BT)  # mass g
    if has_rows:
        matmul_t(lg.T, E, gYv[V:], work.BT)
    gR[:] = 0
    if residual:
        if OWN:  # g's rows as matmul_t left them in BT (g = E^T, contiguous rows)
            _rows_by_query(work.BT[:B * V].reshape((B, V)), query, gR)
        else:
            _rows_by_query(g, query, gR)
    matmul(YvT, E, gM)  # the gradient of a unit of attention on each token (transposed)
    for i in range(B):  # sum_j attn_j g_attn_j = mass . gM (+ attn . gP)
        sums[i] = mass[0, i] * gM[0, i]
    for c in range(1, V):
        for i in range(B):
            sums[i] += mass[c, i] * gM[c, i]
    if has_rows:
        matmul_t(g, YvP, gP, work.BT)  # ... and on each position


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_softmax(xs, setup, work):
    """Backward: through the softmax to the table.

        dattn_ij = dmass[x_ij, i] + gP[i, j],   ds_ij = attn_ij (dattn_ij - sum_j' attn_ij' dattn_ij')
        dT[j, x_ij, a_i] += ds_ij
    """
    kind, V = setup.kind, setup.V
    query, lg, sums, gM, gP, gT = work.query, work.lg, work.sums, work.gM, work.gP, work.gT
    B, L = work.lg.shape
    has_rows = kind == ROWS
    jstep = position_step(kind, V)
    gT[:] = 0
    for i in range(B):
        dot = sums[i]
        a = query[i]
        if has_rows:
            dot += dot8(lg, i, 0, gP, i, 0, L)
            for j in range(L):
                b = xs[i, j]
                t = gM[np.uint64(b), i] + gP[i, j]
                gT[np.uint64(j * jstep + b * V + a)] += lg[i, j] * t - lg[i, j] * dot
        else:
            for j in range(L):
                b = xs[i, j]
                t = gM[np.uint64(b), i]
                gT[np.uint64(j * jstep + b * V + a)] += lg[i, j] * t - lg[i, j] * dot


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_softmax_by_lookup(xs, setup, work):
    """Backward, RoPE by lookup (``by_lookup``), in place of ``_backward_softmax``: through the softmax to the turned
    queries and the keys.

        ds_ij = attn_ij (dmass[x_ij, i] - sum_j' attn_ij' dattn_ij'),
        dQr[a_i L + j] += ds_ij k(x_ij),   dk(x_ij) += ds_ij Qr[a_i L + j]  (into gX)
    """
    d = setup.d
    query, lg, sums, gM = work.query, work.lg, work.sums, work.gM
    Qr, K, gQr, gK = work.Qr, work.K, work.gQr, work.gX
    B, L = work.lg.shape
    gQr[:] = 0
    gK[:] = 0
    for i in range(B):
        dot = sums[i]
        a = query[i]
        for j in range(L):
            b = xs[i, j]
            ds = lg[i, j] * gM[np.uint64(b), i] - lg[i, j] * dot
            r = a * L + j
            for k in range(d):
                gQr[r, k] += ds * K[b, k]
            for k in range(d):
                gK[b, k] += ds * Qr[r, k]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_table(setup, work):
    """Backward: the table to the queries (gA[:, :d]) and keys (gA[:, d:2d]).

        ROTATE: dCD = dT^T trig (row b V + a);  per pair, summed over b for the query a and over a for the key b:
                dq_e(a) = sum_b dCD[e] k_e - dCD[o] k_o,   dq_o(a) = sum_b dCD[e] k_o + dCD[o] k_e
                dk_e(b) = sum_a dCD[e] q_e + dCD[o] q_o,   dk_o(b) = sum_a dCD[e] q_o - dCD[o] q_e
                as lanewise sums (``matmul.lane_sums``; ~ swaps the two entries of each pair):
                M(b) = sum_a dCD q(a),  N(b) = sum_a dCD q~(a),  P(a) = sum_b dCD k(b),  R(a) = sum_b dCD k~(b),
                dk_e = M_e + M_o,  dk_o = N_e - N_o,  dq_e = P_e - P_o,  dq_o = R_e + R_o
        else:   dTP[b, a] = sum_j dT[j, b, a] / sqrt(d),  dTP[V + j, a] = sum_b dT[j, b, a] / sqrt(d) (ROWS)
                dq = dTP^T K,   dK = dTP QT^T

    With position rows the query q(a) = (E_a + P_(L-1)) Wq also sends dq(a) to the last position's row.
    """
    kind, V, d, trig = setup.kind, setup.V, setup.d, setup.trig
    A, K, QT, TP, gT, gCD = work.A, work.K, work.QT, work.TP, work.gT, work.gCD
    gQ, gA, gX = work.gQ, work.gA, work.gX
    scale = work.cst[1]
    L = work.lg.shape[1]
    has_rows = kind == ROWS
    nX = V + (L if kind == ROWS else 0)  # rows of X: tokens, then positions
    at = V + L - 1  # the last position's row of X
    VV = V * V
    gA[:] = 0
    if kind == ROTATE:
        matmul(gT.reshape((L, VV)).T, trig, gCD)
        qs, ks, R = work.swap[0], work.swap[1], work.swap[2]
        for r in range(V):
            for q in range(d // 2):
                e, o = 2 * q, 2 * q + 1
                qs[r, e], qs[r, o] = A[r, o], A[r, e]  # q(a) = A[a, :d] without position rows
                ks[r, e], ks[r, o] = K[r, o], K[r, e]
        # 1 and 0 as int64 values rather than literals: numba compiles a function anew for each literal it is passed
        # (lane_sums twice, 0.9 s each on a 2-core AMD EPYC, in a process's first compile)
        unit, start = np.int64(1), np.int64(0)  # a step of one row; the first row and column
        # M into gA[b, d:2d], N into gX[b], for each b: over the rows b V + a, a < V
        lane_sums(gCD, start, V, unit, V, V, d, A, qs, gA, start, d, gX, start, start)
        # P into gQ[a], R[a], for each a: over the rows b V + a, b < V
        lane_sums(gCD, start, unit, V, V, V, d, K, ks, gQ, start, start, R, start, start)
        for r in range(V):
            for q in range(d // 2):
                e, o = 2 * q, 2 * q + 1
                Me, Mo, Pe, Po = gA[r, d + e], gA[r, d + o], gQ[r, e], gQ[r, o]
                gA[r, d + e], gA[r, d + o] = Me + Mo, gX[r, e] - gX[r, o]
                gQ[r, e], gQ[r, o] = Pe - Po, R[r, e] + R[r, o]
    else:
        TP[:] = 0  # now the gradient by TP, scaled by 1/sqrt(d)
        if kind == NONE:
            for m in range(VV):
                TP[m // V, m % V] = gT[m] * scale
        else:  # (unsigned indices, as in _logit_table: ROWS as AVX2 5.4 -> 2.9 us)
            for j in range(L):
                pj = np.uint64(V + j)
                for b in range(V):
                    for a in range(V):
                        t = gT[np.uint64(j * VV + b * V + a)] * scale
                        TP[b, a] += t
                        if has_rows:
                            TP[pj, a] += t
        matmul(TP.T, K, gQ)  # the queries' gradient (V, d)
        matmul_t(TP, QT, gX, work.BT)  # the keys' gradient (nX, d)
        for r in range(nX):
            for k in range(d):
                gA[r, d + k] = gX[r, k]
    for a in range(V):
        for k in range(d):
            gA[a, k] = gQ[a, k]
            if has_rows:  # the query is (E + P_(L-1)) Wq: its gradient also reaches the last position's row
                gA[at, k] += gQ[a, k]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_turned_queries(setup, work):
    """Backward, RoPE by lookup (``by_lookup``), in place of ``_backward_table``: the turned queries to the queries
    (gA[:, :d]); the keys' gradient (gA[:, d:2d]) is the one ``_backward_softmax_by_lookup`` left in gX.

        dq_e(a) = sum_j trig[j, e] dQr[a L + j, e] - trig[j, o] dQr[a L + j, o]
        dq_o(a) = sum_j trig[j, o] dQr[a L + j, e] + trig[j, e] dQr[a L + j, o]
    """
    V, d, trig = setup.V, setup.d, setup.trig
    gQr, gA, gX = work.gQr, work.gA, work.gX
    zero = work.cst[0] - work.cst[0]
    L = work.lg.shape[1]
    gA[:] = 0
    for a in range(V):
        for q in range(d // 2):
            e, o = 2 * q, 2 * q + 1
            ge = go = zero
            for j in range(L):
                r = a * L + j
                ge += trig[j, e] * gQr[r, e] - trig[j, o] * gQr[r, o]
                go += trig[j, o] * gQr[r, e] + trig[j, e] * gQr[r, o]
            gA[a, e] = ge
            gA[a, o] = go
    for b in range(V):
        for k in range(d):
            gA[b, d + k] = gX[b, k]


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _backward_projections(p, G, setup, work):
    """Backward: through Yv = Av (Wo U) and A = X W to the member's gradient row ``G`` (P,).

        dAv = dYv (Wo U)^T,   d(Wo U) = Av^T dYv,   dA[:, 3d:] = dR (+ its sum on the last position's row)
        dW = X^T dA,   dU += Wo^T d(Wo U),   dWo = d(Wo U) U^T,   dX = dA W^T (token rows, learned position rows)
    """
    kind, fixed, residual, V, d, n_ep = setup.kind, setup.fixed, setup.residual, setup.V, setup.d, setup.n_ep
    X, Av, U, WoU, gYv, gR = work.X, work.Av, work.U, work.WoU, work.gYv, work.gR
    gA, gX, gWoU, gU = work.gA, work.gX, work.gWoU, work.gU
    B, L = work.lg.shape
    Y = 3 * d + V  # columns of W: [Wq | Wk | Wv | U]
    has_rows = kind == ROWS
    nX = V + (L if kind == ROWS else 0)  # rows of X: tokens, then positions
    at = V + L - 1  # the last position's row of X
    o_W, o_Wo = n_ep * d, n_ep * d + d * Y  # where W and Wo start in a member's row
    W = p[o_W:o_Wo].reshape((d, Y))
    Wo = p[o_Wo:o_Wo + d * d].reshape((d, d))
    gW = G[o_W:o_Wo].reshape((d, Y))  # dW and dWo are written in place in the gradient row
    gWo = G[o_Wo:o_Wo + d * d].reshape((d, d))
    matmul_t(gYv, WoU, gX, work.BT)
    for r in range(nX):
        for k in range(d):
            gA[r, 2 * d + k] = gX[r, k]
    matmul(Av.T, gYv, gWoU)
    if residual:  # R = X[:V] U (+ X[at] U): the read-out of the query's own input
        for a in range(V):
            for c in range(V):
                gA[a, 3 * d + c] = gR[a, c]
                if has_rows:
                    gA[at, 3 * d + c] += gR[a, c]
    matmul(X.T, gA, gW)  # (d, Y)
    matmul(Wo.T, gWoU, gU)  # U also reaches the logits through WoU = Wo @ U
    for k in range(d):
        for c in range(V):
            gW[k, 3 * d + c] += gU[k, c]
    matmul_t(gWoU, U, gWo, work.BT)
    matmul_t(gA, W, gX, work.BT)  # (nX, d)
    G[:o_W] = 0  # sinusoidal rows are fixed; APE rows past L get no gradient
    for r in range(V if fixed else nX):
        for k in range(d):
            G[r * d + k] = gX[r, k]


# The blocks in the order a step runs them, and the four that RoPE by lookup (``by_lookup``) runs in place of those
# of the table: ``Work.blocks`` holds the addresses of the nine a setup takes (``path``), in this order, and a block
# is compiled only when a model takes its path (``block_addresses``). Measured on a 2-core AMD EPYC (Zen 3), the
# table's four blocks with the lookup's code in them took 1.35 s longer to compile, one by one from an empty cache.
BLOCKS = ("_project", "_logit_table", "_attention", "_logits", "_loss", "_backward_logits", "_backward_softmax",
          "_backward_table", "_backward_projections")
BY_LOOKUP = {"_logit_table": "_turned_queries", "_attention": "_attention_by_lookup",
             "_backward_softmax": "_backward_softmax_by_lookup", "_backward_table": "_backward_turned_queries"}
FUNCTIONS = BLOCKS + tuple(BY_LOOKUP.values())  # every block


def path(lookup: bool) -> tuple[str, ...]:
    """The nine blocks a step runs, in order: ``BLOCKS``, those of ``BY_LOOKUP`` in place where ``lookup``."""
    return tuple(BY_LOOKUP.get(name, name) if lookup else name for name in BLOCKS)


@functools.cache
def block_types(dtype: str) -> dict[str, tuple[types.Type, ...]]:
    """The argument types ``step_in`` calls each block of ``FUNCTIONS`` with, for parameters of ``dtype`` ("float32"
    or "float64"): they depend on the dtype alone (``call`` checks them where it is compiled)."""
    dt = np.dtype(dtype)
    one = np.zeros((1, 1), dt)
    setup = StepSetup(ROTATE, False, False, 1, 2, 1, one, one, np.zeros(1, dt), exp_constants(dt))
    arrays = _arrays(dt, setup, 1, 1)
    t = numba.typeof
    row, xs, ts, su = t(np.zeros(1, dt)), t(np.zeros((1, 1), TOKENS)), t(np.zeros(1, np.int64)), t(setup)
    w = WorkType(list(zip(StepArrays._fields, map(t, arrays))))
    table = {"_project": (row, su, w), "_logit_table": (su, w), "_attention": (xs, su, w), "_logits": (su, w),
             "_loss": (ts, su, w), "_backward_logits": (su, w), "_backward_softmax": (xs, su, w),
             "_backward_table": (su, w), "_backward_projections": (row, row, su, w)}
    return {**table, **{lookup: table[name] for name, lookup in BY_LOOKUP.items()}}


# What the blocks return (the others return None), declared so that a function calling them (``call``) compiles
# without compiling them first: ``train_steps`` can then be compiled beside them (``first_compile``).
RESULTS = {"_loss": types.Tuple((types.float64, types.int64))}  # the mean log-likelihood, the correct predictions


@functools.cache
def block_addresses(dtype: str, lookup: bool = False) -> np.ndarray:
    """(9,) int64: where the machine code of each block of ``path(lookup)`` lies in this process, in the order of
    ``BLOCKS``, compiled (or loaded from numba's cache) for ``block_types(dtype)``; each block's return type checked
    against ``RESULTS``."""
    where = []
    for stage, name in zip(BLOCKS, path(lookup)):
        block, sig = globals()[name], block_types(dtype)[name]
        block.compile(sig)
        compiled = block.overloads[sig]
        returns, declared = compiled.signature.return_type, RESULTS.get(stage, types.none)
        if returns != declared:
            raise TypeError(f"{name} returns {returns}, not {declared}: correct step.RESULTS")
        where.append(compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name))
    return np.array(where, np.int64)


@intrinsic
def call(typingctx, block, work, args):
    """``block(*args)``, one of the ``BLOCKS`` (or the block of ``BY_LOOKUP`` that the ``Work`` holds in its place):
    its own machine code, at the address ``work.blocks`` holds, rather
    than its code linked into the caller. A compiled call links the callee's code in, and LLVM then optimises and
    emits all of it again with the caller: compiling ``stretch.train_steps``, which runs all nine blocks, took 4.1 s
    that way, 1.2 s with ``call`` (a 2-core AMD EPYC, the blocks already compiled); a step runs as fast (one
    small-step model 0.853-0.859 s against 0.850-0.860 s, alternated) and gives the same numbers to the bit. The
    arguments must have the types the block was compiled for (``block_types``); compiling a call with others is an
    error, and calling through a ``Work`` with no addresses (one not made by ``step_arrays``) raises. The block's
    result type is the declared one (``RESULTS``), so compiling a call compiles nothing of the block."""
    name = block.dispatcher.py_func.__name__
    sig = block_types(str(work.field_dict["X"].dtype)).get(name)
    if sig is None or tuple(args) != sig:
        raise TypingError(f"call: {name} takes {sig}, not {tuple(args)}")
    index = BLOCKS.index(name)
    result = RESULTS.get(name, types.none)  # declared: the caller compiles without the block (block_addresses checks)

    def address_of(w):
        if w.blocks[index] == 0:  # a Work not made by step_arrays: a call to address 0 would end the process
            raise RuntimeError("call: this Work holds no block addresses; make it with step_arrays")
        return w.blocks[index]

    def codegen(context, builder, signature, values):
        address = context.compile_internal(builder, address_of, types.int64(work), [values[1]])
        fn = builder.inttoptr(address, context.call_conv.get_function_type(result, sig).as_pointer())
        status, out = context.call_conv.call_function(builder, fn, result, sig,
                                                      cgutils.unpack_tuple(builder, values[2], len(sig)))
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return out

    return result(block, work, args), codegen


@njit(error_model="numpy", fastmath=FAST, nogil=True, inline="always")
def run_block(which, s, buf, x, target, setup, out, work):
    """Block number ``which`` of ``BLOCKS`` for member s (``call``: the block's own machine code, or that of the
    block of ``BY_LOOKUP`` in its place where the ``Work`` holds that one); ``_loss`` writes the member's mean
    log-likelihood and correct predictions into ``out``. Each block reads what the blocks before it wrote in
    ``work``. (``benchmarks/profile_blocks`` times the blocks one by one through it.)"""
    p, xs, ts = buf[s], x[s], target[s]
    if which == 0:
        call(_project, work, (p, setup, work))
    elif which == 1:
        call(_logit_table, work, (setup, work))
    elif which == 2:
        call(_attention, work, (xs, setup, work))
    elif which == 3:
        call(_logits, work, (setup, work))
    elif which == 4:
        out.loglik[s], out.correct[s] = call(_loss, work, (ts, setup, work))
    elif which == 5:
        call(_backward_logits, work, (setup, work))
    elif which == 6:
        call(_backward_softmax, work, (xs, setup, work))
    elif which == 7:
        call(_backward_table, work, (setup, work))
    else:
        call(_backward_projections, work, (p, out.grad[s], setup, work))


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True, inline="always")
def step_in(buf, x, target, setup, out, work):
    """``table_step`` in the working arrays ``work`` (``Work``): member after member, the blocks above in order
    (``run_block``)."""
    for s in range(x.shape[0]):
        for which in range(len(BLOCKS)):
            run_block(which, s, buf, x, target, setup, out, work)
