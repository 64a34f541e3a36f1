"""The CPU engine of training: the table model's step (forward, loss, backward), the Adam update and the
token draws as compiled loops (numba), one call each per step instead of some hundred torch operations.

A step of the one-layer table model (``tables.TableStep``) at the book's sizes is latency-bound: a few
million floating-point operations spread over ~110 tensor operations of a few microseconds each. This
module computes the same numbers as ``TableStep.forward``, ``model.log_likelihood_gradient`` and
``TableStep.backward`` in one compiled function over the members' rows of the (S, P) buffer (one member
after another, each sequence in order: deterministic, and independent of any thread count). It covers the
one-layer models without an MLP (RoPE, learned APE, sinusoidal, NoPE, ALiBi; with or without the
residual), in float32 and float64; ``tables.TableStep`` uses it for those on the CPU and its torch
operations elsewhere (a GPU, an MLP). ``adam_step`` is ``optim.Optimizer``'s Adam on the CPU; ``randint_``
draws ``torch.randint``'s numbers from a torch generator's own state (``task.TrainStream``).
tests/test_fused.py checks each against torch (the step in float64 to rounding, the draws bitwise).

The functions are compiled on first use and cached on disk (numba's ``cache=True``: ``__pycache__``
next to this file, or ``$NUMBA_CACHE_DIR``), so only the first run on a machine pays the compile (about
half a minute for float32 and float64 together); a new process loads them in well under a second.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

# Contraction (fused multiply-adds) and reciprocals; no assumption about NaN or inf (the loss relies on log(0) =
# -inf where the other classes' probabilities underflow), and no reassociation: with it the order of a sum
# depended on where LLVM inlined the step, and ``train_steps`` loaded from numba's cache gave other float32
# numbers than the same function just compiled (measured; tests/test_stretches.py checks both agree). The cost,
# measured side by side: ``table_step`` took about 13% more CPU (the sums it no longer vectorised). The step's sums
# now run in lanes of a fixed order (``_dot8``) or along the batch, which vectorise without reassociation.
FAST = {"contract", "nsz", "arcp"}

# error_model="numpy" on the functions that divide: a division by zero gives inf or NaN as in numpy instead of
# raising ZeroDivisionError, and without that check per division their loops vectorise (measured: Adam's update
# of 5120 float32 parameters 8.5 -> 2.4 us). A zero divisor could only come from an underflow, and the code tests
# for those before it divides.

# How the attention logit table is made (tables.TableStep's cases):
ROTATE = 0  # RoPE: T[j, b, a] = trig[j] . CD[:, b, a]
ROWS = 1  # additive position rows (learned APE, sinusoidal): T[j, b, a] = k(b) . q(a) + (P_j Wk) . q(a)
BIAS = 2  # ALiBi: T[j, b, a] = k(b) . q(a) + bias[j]
NONE = 3  # NoPE: T[b, a] = k(b) . q(a)


def exp_constants(dtype: np.dtype) -> np.ndarray:
    """The constants of ``_exp_neg`` in ``dtype``: log2(e), ln 2 split in a high part exact in small
    multiples and a low part, the largest power of two taken off, the Taylor coefficients 1/13!..1/0!, and 1.5 2^m
    (m: the mantissa's bits), whose bits plus a small integer u are the bits of 1.5 2^m + u."""
    if np.dtype(dtype) == np.float32:
        hi, lo, kmax, m = 0.693359375, -2.12194440e-4, 126.0, 23
    else:
        hi, lo, kmax, m = 6.93147180369123816490e-01, 1.90821492927058770002e-10, 1022.0, 52
    return np.array([1.0 / math.log(2), hi, lo, kmax] + [1.0 / math.factorial(k) for k in range(13, -1, -1)]
                    + [1.5 * 2.0**m], dtype=dtype)


@njit(cache=True, fastmath={"contract", "nsz", "arcp"})  # no reassociation: it would undo the split of ln 2
def _exp_neg(a, c, bits):
    """a <- exp(a) in place, for a <= 0 (1D contiguous; ``bits``: an integer scratch array as long, of the
    float's width). exp(x) = 2^-u exp(r) with u = round(-x log2 e) and |r| <= ln(2)/2, exp(r) by its Taylor
    series to 1/13! (below 1e-16 relative; to 1/7! in float32), 2^-u written as the float's bits: a vectorised loop, some
    ten times faster than a libm call per entry, within 4e-7 (float32) / 1e-14 (float64) relative.
    Below -kmax ln 2 (-87 in float32, -708 in float64) it returns 0; NaN stays NaN."""
    log2e, hi, lo, kmax = c[0], c[1], c[2], c[3]
    c13, c12, c11, c10, c9, c8, c7 = c[4], c[5], c[6], c[7], c[8], c[9], c[10]
    c6, c5, c4, c3, c2, c1, c0 = c[11], c[12], c[13], c[14], c[15], c[16], c[17]
    zero = c0 - c0
    bias, shift = (127, 23) if bits.itemsize == 4 else (1023, 52)
    magic, magic_bits = c[18], (0x4B400000 if bits.itemsize == 4 else 0x4338000000000000)  # 1.5 2^shift, its bits
    lowest = -(kmax + c0) / log2e
    scale = bits.view(a.dtype)
    for i in range(a.shape[0]):
        x = a[i]
        if x < lowest:  # -inf too (NaN compares false and stays NaN)
            x = lowest
        u = min(max(np.floor(c2 - x * log2e), zero), kmax + c0)
        r = x + u * hi + u * lo
        if bits.itemsize == 4:  # float32: to 1/7! is enough (|r|^8 / 8! < 6e-9)
            p = c7
        else:
            p = c13
            p = p * r + c12
            p = p * r + c11
            p = p * r + c10
            p = p * r + c9
            p = p * r + c8
            p = p * r + c7
        p = p * r + c6
        p = p * r + c5
        p = p * r + c4
        p = p * r + c3
        p = p * r + c2
        p = p * r + c1
        a[i] = p * r + c0
        scale[i] = u + magic  # u as the float's low bits (no float -> int conversion: AVX2 has none for int64)
    for i in range(a.shape[0]):
        bits[i] = (bias + magic_bits - bits[i]) << shift  # 2^-u, or 0 (a zero exponent field) past kmax
    for i in range(a.shape[0]):
        a[i] *= scale[i]


@njit(cache=True)
def log_constants(ec):
    """The constants of ``_log1p`` in the dtype of ``ec`` (``exp_constants``): ln 2 split as there (high part,
    low part), sqrt(2), and the coefficients 2/(2k+1) of 2 atanh(s) = log((1+s)/(1-s)) from the highest used
    down to k = 0 (to s^23 in float64, s^11 in float32: |s| <= 0.172, the next term is below the precision)."""
    top = 11 if ec.itemsize == 8 else 5
    c = np.empty(top + 4, ec.dtype)
    c[0], c[1] = ec[1], ec[2]
    c[2] = math.sqrt(2.0)
    for k in range(top, -1, -1):
        c[3 + top - k] = 2.0 / (2 * k + 1)
    return c


# no reassociation: it would undo the split of ln 2
@njit(cache=True, error_model="numpy", fastmath={"contract", "nsz", "arcp"})
def _log1p(a, c, w, bits):
    """a <- log1p(a) in place, for a >= 0 (1D contiguous; ``w``: float scratch as long, ``bits``: integer
    scratch of the float's width, as long). u = 1 + a rounded, written m 2^e with m in [sqrt(1/2), sqrt(2)) from
    its bits; log m = 2 atanh(s), s = (m - 1)/(m + 1), by its series; log1p(a) = log(u) a / (u - 1), which
    undoes the rounding of u (and is a itself where u rounds to 1). Vectorised loops in place of a libm call
    per entry; within 2e-7 (float32) / 1e-15 (float64) relative of numpy's log1p (tests/test_fused.py)."""
    hi, lo, root2 = c[0], c[1], c[2]
    one = root2 / root2
    bias, shift = (127, 23) if bits.itemsize == 4 else (1023, 52)
    mant = (1 << shift) - 1
    ub = w.view(bits.dtype)
    root2_mant = root2 - one  # the mantissa bits of sqrt(2), as a fraction of 2^shift
    cut = int(root2_mant * (1 << shift))
    for i in range(a.shape[0]):
        w[i] = one + a[i]
    for i in range(a.shape[0]):  # u = m 2^e: the mantissa's bits into bits, e (a float) into w
        b = ub[i]
        e = (b >> shift) - bias
        f = b & mant
        up = f > cut  # m >= sqrt(2): halve it
        bits[i] = f | ((bias - 1 if up else bias) << shift)
        w[i] = e + 1 if up else e
    m = bits.view(a.dtype)
    n = c.shape[0]
    for i in range(a.shape[0]):
        x = a[i]
        u = one + x
        f = m[i] - one
        s = f / (f + one + one)
        z = s * s
        p = c[3]
        for k in range(4, n):
            p = p * z + c[k]
        lg = w[i] * hi + (w[i] * lo + s * p)
        a[i] = x if u == one else lg * (x / (u - one))


_LANE = tuple(np.uint64(k) for k in range(9))  # unsigned offsets: numba fixes up no negative index in _dot8


@njit(cache=True, fastmath=FAST, inline="always")
def _dot8(a, i, u, b, j, v, n):
    """sum_k a[i, u + k] b[j, v + k] over k < n (2D arrays; no views made: each would cost two atomic reference
    counts), in eight lanes (lane l adds the terms k = l mod 8 in order, then the lanes pairwise): a fixed order,
    so the same bits wherever it is compiled, yet eight independent chains where a plain loop's one sum is
    bound by the latency of each addition (the compiler may not reorder it without reassociation). The column
    indices are unsigned: with signed ones numba tested each of the eight for a negative value (a compare and a
    select per load, and no vector code)."""
    l1, l2, l3, l4, l5, l6, l7, l8 = _LANE[1], _LANE[2], _LANE[3], _LANE[4], _LANE[5], _LANE[6], _LANE[7], _LANE[8]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = a[i, u] - a[i, u]
    x, y, end = np.uint64(u), np.uint64(v), np.uint64(u) + np.uint64(n)
    while x + l8 <= end:
        s0 += a[i, x] * b[j, y]
        s1 += a[i, x + l1] * b[j, y + l1]
        s2 += a[i, x + l2] * b[j, y + l2]
        s3 += a[i, x + l3] * b[j, y + l3]
        s4 += a[i, x + l4] * b[j, y + l4]
        s5 += a[i, x + l5] * b[j, y + l5]
        s6 += a[i, x + l6] * b[j, y + l6]
        s7 += a[i, x + l7] * b[j, y + l7]
        x += l8
        y += l8
    r = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while x < end:
        r += a[i, x] * b[j, y]
        x += l1
        y += l1
    return r


@njit(cache=True, nogil=True)
def step_scratch(dt_like, kind, B, L, V, d, ec):
    """The working arrays of ``_table_step`` for batch B, length L (dtype of the array ``dt_like``), made once per
    call of ``train_steps`` (or of ``table_step``), not once per step. Every array is written before it is read,
    except the constants: ``cst`` (1, 1/sqrt(d), 2^-LOW), ``lc`` (``log_constants``) and ``ones`` (1, max(L, V))."""
    dt = dt_like.dtype
    Y = 3 * d + V
    nX = V + (L if kind == ROWS else 0)  # rows of X: tokens, then positions (learned or fixed rows)
    VV = V * V
    nT = VV if kind == NONE else L * VV
    f32 = dt_like.itemsize == 4
    cst = np.array([1.0, 1.0 / math.sqrt(d), 2.0 ** -(60 if f32 else 600)]).astype(dt)
    lc = log_constants(ec)
    return (cst, lc, np.empty(B, dt), np.empty(B, dt), np.ones((1, max(L, V)), dt),
            np.empty((nX, d), dt), np.empty((nX, Y), dt), np.empty((d, V), dt), np.empty((nX, d), dt),  # X A QT K
            np.empty((nX, d), dt), np.empty((d, V), dt), np.empty((d, V), dt), np.empty((nX, V), dt),  # Av U WoU Yv
            np.empty((V, V), dt),  # Z
            np.empty(nT, dt), np.empty(nT, dt), np.empty((d, VV), dt), np.empty((d, VV), dt),  # T gT CD gCD
            np.empty((nX, V), dt), np.empty((B, L), dt), np.empty((B, L), np.int32), np.empty(V, dt),  # TP lg at_ij top
            np.empty((V, B), dt), np.empty((V, B), dt), np.empty((V, B), dt),  # mass yt E
            np.empty(B, dt), np.empty(B, np.int64), np.empty(B, dt), np.empty(B, dt),  # rowtop pick sums rest
            np.empty((V, B), dt), np.empty((B, L), dt), np.empty((nX, V), dt), np.empty((V, V), dt),  # gM gP gYv gR
            np.empty((d, V), dt), np.empty((V, d), dt), np.empty((nX, Y), dt), np.empty((nX, d), dt),  # gQT gQ gA gX
            np.empty((d, Y), dt), np.empty((d, V), dt), np.empty((d, V), dt), np.empty((d, d), dt))  # gW gWoU gU gWo


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def table_step(buf, x, target, kind, fixed, residual, V, d, n_ep, trig, rows, bias, ec, bits, loglik, correct, grad):
    """One training step's gradient for every member, written into ``loglik`` (S,), ``correct`` (S,) and
    ``grad`` (S, P).

    buf (S, P): the members' parameters in ``TableStep``'s layout (blocks EP (n_ep, d), W (d, 3d + V),
    Wo (d, d)); x (S, B, L) int64 tokens; target (S, B) int64; kind: ROTATE / ROWS / BIAS / NONE;
    fixed: the position rows are ``rows`` (L, d) (sinusoidal) rather than rows of EP (learned APE);
    residual: the query's own input is added to the attention output. trig (L, d): (cos, sin) per
    rotation pair at offset j - (L-1), scaled by 1/sqrt(d) (ROTATE); bias (L,) (BIAS); ec:
    ``exp_constants``; bits: integer scratch of the float's width, B max(L, V) long.
    The loss is the mean cross-entropy over the B sequences, computed as ``model.log_likelihood_gradient``.
    """
    _, B, L = x.shape
    _table_step(buf, x, target, kind, fixed, residual, V, d, n_ep, trig, rows, bias, ec, bits, loglik, correct, grad,
                step_scratch(buf, kind, B, L, V, d, ec))


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def _table_step(buf, x, target, kind, fixed, residual, V, d, n_ep, trig, rows, bias, ec, bits, loglik, correct, grad,
                scratch):
    """``table_step`` in the working arrays ``scratch`` (``step_scratch``)."""
    S, B, L = x.shape
    (cst, lc, ratio, w, ones, X, A, QT, K, Av, U, WoU, Yv, Z, T, gT, CD, gCD, TP, lg, at_ij, top, mass, yt, E,
     rowtop, pick, sums, rest, gM, gP, gYv, gR, gQT, gQ, gA, gX, gW, gWoU, gU, gWo) = scratch
    one, scale, low = cst[0], cst[1], cst[2]
    zero = one - one
    Y = 3 * d + V  # columns of W: [Wq | Wk | Wv | U]
    has_rows = kind == ROWS
    nr = L if has_rows else 0
    nX = V + nr  # rows of X: tokens, then positions
    at = V + L - 1  # the last position's row of X
    VV = V * V
    nT = VV if kind == NONE else L * VV
    jstep = 0 if kind == NONE else VV
    o_W, o_Wo = n_ep * d, n_ep * d + d * Y
    for s in range(S):
        p = buf[s]
        W = p[o_W:o_Wo].reshape((d, Y))
        Wo = p[o_Wo:o_Wo + d * d].reshape((d, d))
        for r in range(V):
            X[r] = p[r * d:(r + 1) * d]
        for r in range(nr):
            if fixed:
                X[V + r] = rows[r]
            else:
                X[V + r] = p[(V + r) * d:(V + r + 1) * d]
        np.dot(X, W, A)
        for r in range(nX):
            for k in range(d):
                K[r, k] = A[r, d + k]
                Av[r, k] = A[r, 2 * d + k]
        for k in range(d):
            for a in range(V):
                QT[k, a] = A[a, k] + A[at, k] if has_rows else A[a, k]
            for c in range(V):
                U[k, c] = W[k, 3 * d + c]
        np.dot(Wo, U, WoU)
        np.dot(Av, WoU, Yv)  # what a unit of attention on a token / position adds to the logits
        YvT, YvP = Yv[:V], Yv[V:]  # tokens' and positions' rows (views: contiguous row blocks)
        # the logit table, laid out T[j, b, a] (T[b, a] with no position)
        if kind == ROTATE:
            for q in range(d // 2):
                e, o = 2 * q, 2 * q + 1
                for b in range(V):
                    ke, ko = K[b, e], K[b, o]
                    for a in range(V):
                        CD[e, b * V + a] = ke * QT[e, a] + ko * QT[o, a]
                        CD[o, b * V + a] = ke * QT[o, a] - ko * QT[e, a]
            np.dot(trig, CD, T.reshape((L, VV)))
        else:
            np.dot(K, QT, TP)
            if kind == NONE:
                for m in range(VV):
                    T[m] = TP[m // V, m % V] * scale
            else:
                for j in range(L):
                    for b in range(V):
                        for a in range(V):
                            T[j * VV + b * V + a] = (TP[b, a] + (TP[V + j, a] if has_rows else zero)) * scale + (
                                zero if has_rows else bias[j])
        # attention of the last query: a softmax over the sequence's table entries, shifted by the largest
        # entry of the query token's column (no per-sequence maximum: the gathers, exponentials and sums
        # then run as independent or vectorised loops); a sequence whose entries all lie far below that
        # largest entry (their sum under 2^-LOW) is redone with its own maximum
        xs, ts = x[s], target[s]
        top[:] = -np.inf
        nr4 = nT // V // 4 * 4
        for r in range(0, nr4, 4):  # four rows at a time: a quarter of the stores to top
            for a in range(V):
                m01 = max(T[r * V + a], T[(r + 1) * V + a])
                m23 = max(T[(r + 2) * V + a], T[(r + 3) * V + a])
                top[a] = max(top[a], max(m01, m23))
        for r in range(nr4, nT // V):
            for a in range(V):
                top[a] = max(top[a], T[r * V + a])
        # (indices read from arrays are cast to unsigned: numba then skips its fix-up of negative indices)
        for i in range(B):
            a = xs[i, L - 1]
            for j in range(L):
                at_ij[i, j] = np.int32(j * jstep + xs[i, j] * V + a)  # the table entry of key j (int32: see above)
            for j in range(L):
                lg[i, j] = T[np.uint32(at_ij[i, j])] - top[a]
        _exp_neg(lg.reshape(B * L), ec, bits)
        mass[:] = 0
        for i in range(B):
            tot = _dot8(lg, i, 0, ones, 0, 0, L)
            if not tot >= low:  # far below the column's maximum: again with the sequence's own
                for j in range(L):
                    lg[i, j] = T[np.uint32(at_ij[i, j])]
                m = lg[i].max()
                for j in range(L):
                    lg[i, j] -= m
                _exp_neg(lg[i], ec, bits)
                tot = _dot8(lg, i, 0, ones, 0, 0, L)
            inv = one / tot
            for j in range(L):
                lg[i, j] *= inv
            for j in range(L):
                mass[np.uint64(xs[i, j]), i] += lg[i, j]
        # logits (transposed, (V, B)): Yv[:V].T @ mass.T + Yv[V:].T @ attn.T + the query's own read-out R[a]
        Z[:] = YvT.T
        np.dot(Z, mass, yt)
        if has_rows:
            yt += np.dot(YvP.T, lg.T)
        if residual:
            for i in range(B):
                a = xs[i, L - 1]
                for c in range(V):
                    yt[c, i] += A[a, 3 * d + c] + A[at, 3 * d + c] if has_rows else A[a, c + 3 * d]
        # the loss (model.log_likelihood_gradient): -log p_t = log(1 + sum_(c != t) e^(y_c - y_t)); each loop
        # runs along the batch (selects, not branches: the argmax's would mispredict on fresh data)
        rowtop[:] = yt[0]
        pick[:] = 0
        for c in range(1, V):
            for i in range(B):  # the first maximum, as argmax
                y = yt[c, i]
                up = y > rowtop[i]
                rowtop[i] = y if up else rowtop[i]
                pick[i] = c if up else pick[i]
        hits = 0
        for i in range(B):
            hits += pick[i] == ts[i]
        correct[s] = hits
        for c in range(V):
            for i in range(B):
                E[c, i] = yt[c, i] - rowtop[i]
        _exp_neg(E.reshape(B * V), ec, bits)
        sums[:] = E[0]
        for c in range(1, V):
            for i in range(B):
                sums[i] += E[c, i]
        for i in range(B):
            tg = ts[i]
            rest[i] = sums[i] - E[tg, i]  # the others' share
            ratio[i] = rest[i] / E[tg, i] if E[tg, i] > 0 else zero
        _log1p(ratio, lc, w, bits)
        ll = zero
        for i in range(B):
            tg = ts[i]
            # log1p(others / E_t) is softplus(log others - log E_t); where E_t underflows, r itself
            ll -= ratio[i] if E[tg, i] > 0 else np.log(rest[i]) - (yt[tg, i] - rowtop[i])
        loglik[s] = ll / B
        for i in range(B):
            rowtop[i] = one / (sums[i] * B)  # now 1 / (sum B)
        for c in range(V):
            for i in range(B):
                E[c, i] *= rowtop[i]
        for i in range(B):  # p_t - 1 as minus the others' probability: exact where p_t rounds to 1
            E[ts[i], i] = -rest[i] * rowtop[i]
        g = E.T  # the gradient by the logits (B, V)
        # backward through the logits to Yv, R and the attention
        np.dot(mass, g, gYv[:V])
        if has_rows:
            np.dot(lg.T, g, gYv[V:])
        gR[:] = 0
        if residual:
            for i in range(B):
                a = xs[i, L - 1]
                for c in range(V):
                    gR[a, c] += g[i, c]
        np.dot(YvT, E, gM)  # the gradient of a unit of attention on each token (transposed)
        for i in range(B):  # sum_j attn_j g_attn_j = mass . gM (+ attn . gP)
            sums[i] = mass[0, i] * gM[0, i]
        for c in range(1, V):
            for i in range(B):
                sums[i] += mass[c, i] * gM[c, i]
        if has_rows:
            np.dot(g, YvP.T, gP)  # ... and on each position
        # through the softmax to the table: gs = attn g_attn - attn sum(attn g_attn)
        gT[:] = 0
        for i in range(B):
            dot = sums[i]
            if has_rows:
                dot += _dot8(lg, i, 0, gP, i, 0, L)
                for j in range(L):
                    t = gM[np.uint64(xs[i, j]), i] + gP[i, j]
                    gT[np.uint32(at_ij[i, j])] += lg[i, j] * t - lg[i, j] * dot
            else:
                for j in range(L):
                    t = gM[np.uint64(xs[i, j]), i]
                    gT[np.uint32(at_ij[i, j])] += lg[i, j] * t - lg[i, j] * dot
        # the table's gradient back to the queries (gA[:, :d]) and keys (gA[:, d:2d])
        gA[:] = 0
        if kind == ROTATE:
            np.dot(trig.T, gT.reshape((L, VV)), gCD)
            gQT[:] = 0
            for q in range(d // 2):
                e, o = 2 * q, 2 * q + 1
                for b in range(V):
                    ke, ko = K[b, e], K[b, o]
                    bV = b * V
                    for a in range(V):
                        gQT[e, a] += gCD[e, bV + a] * ke - gCD[o, bV + a] * ko
                        gQT[o, a] += gCD[e, bV + a] * ko + gCD[o, bV + a] * ke
                    gA[b, d + e] = _dot8(gCD, e, bV, QT, e, 0, V) + _dot8(gCD, o, bV, QT, o, 0, V)
                    gA[b, d + o] = _dot8(gCD, e, bV, QT, o, 0, V) - _dot8(gCD, o, bV, QT, e, 0, V)
        else:
            TP[:] = 0  # now the gradient by TP, scaled by 1/sqrt(d)
            if kind == NONE:
                for m in range(VV):
                    TP[m // V, m % V] = gT[m] * scale
            else:
                for j in range(L):
                    for b in range(V):
                        for a in range(V):
                            t = gT[j * VV + b * V + a] * scale
                            TP[b, a] += t
                            if has_rows:
                                TP[V + j, a] += t
            np.dot(TP.T, K, gQ)  # the queries' gradient (V, d)
            for a in range(V):
                for k in range(d):
                    gQT[k, a] = gQ[a, k]
            np.dot(TP, QT.T, gX)  # the keys' gradient (nX, d)
            for r in range(nX):
                for k in range(d):
                    gA[r, d + k] = gX[r, k]
        for a in range(V):
            for k in range(d):
                gA[a, k] = gQT[k, a]
                if has_rows:  # the query is (E + P_(L-1)) Wq: its gradient also reaches the last position's row
                    gA[at, k] += gQT[k, a]
        # through Yv = Av @ WoU: gAv = gYv @ WoU.T, gWoU = Av.T @ gYv
        np.dot(gYv, WoU.T, gX)
        for r in range(nX):
            for k in range(d):
                gA[r, 2 * d + k] = gX[r, k]
        np.dot(Av.T, gYv, gWoU)
        if residual:  # R = X[:V] U (+ X[at] U): the read-out of the query's own input
            for a in range(V):
                for c in range(V):
                    gA[a, 3 * d + c] = gR[a, c]
                    if has_rows:
                        gA[at, 3 * d + c] += gR[a, c]
        G = grad[s]
        np.dot(X.T, gA, gW)  # (d, Y)
        np.dot(Wo.T, gWoU, gU)  # U also reaches the logits through WoU = Wo @ U
        for k in range(d):
            for c in range(V):
                gW[k, 3 * d + c] += gU[k, c]
        G[o_W:o_Wo] = gW.reshape(d * Y)
        np.dot(gWoU, U.T, gWo)
        G[o_Wo:o_Wo + d * d] = gWo.reshape(d * d)
        np.dot(gA, W.T, gX)  # (nX, d)
        G[:o_W] = 0  # sinusoidal rows are fixed; APE rows past L get no gradient
        for r in range(V if fixed else nX):
            G[r * d:(r + 1) * d] = gX[r]


@njit(cache=True, error_model="numpy", fastmath={"contract", "arcp"}, nogil=True)
def adam_step(params, grad, m, v, lr, decay, b1, b2, eps, t):
    """One AdamW step in place, in the form of ``torch.optim.AdamW`` (decay first, then the bias-corrected
    Adam step), in the parameters' dtype: params, grad, m, v (S, P); lr (S, 1); decay (S, P) per entry, or
    (0, 0) for none; t >= 1."""
    c = np.array([b1, 1 - b1, b2, 1 - b2, 1 / math.sqrt(1 - b2**t), eps]).astype(params.dtype)
    beta1, rest1, beta2, rest2, root2, eps_ = c[0], c[1], c[2], c[3], c[4], c[5]
    for s in range(params.shape[0]):
        rates = np.array([lr[s, 0], lr[s, 0] / (1 - b1**t)]).astype(params.dtype)
        rate, step = rates[0], rates[1]
        p, g, ms, vs = params[s], grad[s], m[s], v[s]
        if decay.shape[0] > 0:
            wd = decay[s]
            for k in range(p.shape[0]):
                p[k] -= rate * wd[k] * p[k]
        for k in range(p.shape[0]):
            gk = g[k]
            mk = ms[k] * beta1 + rest1 * gk
            vk = vs[k] * beta2 + rest2 * (gk * gk)
            ms[k] = mk
            vs[k] = vk
            p[k] -= step * mk / (np.sqrt(vk) * root2 + eps_)


# torch's CPU generator (mt19937) as ``Generator.get_state`` lays it out: the number of words left + 1
# (int32 at byte 8), the next word (uint64 at byte 16), the 624 words (uint64 each, from byte 24)
_MT_STATE_BYTES, _MT_N, _MT_M = 5056, 624, 397
# its constants as unsigned integers (numba turns a mix of signed and unsigned 64-bit integers into floats)
_U = {name: np.uint64(v) for name, v in dict(upper=0x80000000, lower=0x7FFFFFFF, a=0x9908B0DF, b=0x9D2C5680,
                                             c=0xEFC60000, zero=0, one=1, s11=11, s7=7, s15=15, s18=18).items()}
_UPPER, _LOWER, _A, _B, _C, _ZERO, _ONE = (_U[k] for k in ("upper", "lower", "a", "b", "c", "zero", "one"))
_S11, _S7, _S15, _S18 = (_U[k] for k in ("s11", "s7", "s15", "s18"))


@njit(cache=True)
def _mt_twist(u, v, w):
    """mt19937's recurrence: w ^ twist(u, v)."""
    return w ^ (((u & _UPPER) | (v & _LOWER)) >> _ONE) ^ ((_ZERO - (v & _ONE)) & _A)


@njit(cache=True)
def _mt_next(words):
    """The next 624 words of mt19937 in place (torch's next_state), from the current 624 (uint64 holding 32
    bits), in torch's order: three loops, each free of dependences shorter than a vector."""
    for i in range(_MT_N - _MT_M):
        words[i] = _mt_twist(words[i], words[i + 1], words[i + _MT_M])
    for i in range(_MT_N - _MT_M, _MT_N - 1):
        words[i] = _mt_twist(words[i], words[i + 1], words[i + _MT_M - _MT_N])
    words[_MT_N - 1] = _mt_twist(words[_MT_N - 1], words[0], words[_MT_M - 1])


@njit(cache=True, inline="always")
def _mt_temper(y):
    """mt19937's tempering of the word y."""
    y ^= y >> _S11
    y ^= (y << _S7) & _B
    y ^= (y << _S15) & _C
    return y ^ (y >> _S18)


@njit(cache=True)
def _mt_randint(state, out, high):
    """out <- the next len(out) draws of torch.randint(high, ...) from the generator state ``state`` (uint8,
    ``Generator.get_state``'s layout), advanced in place: each draw is the next tempered mt19937 word modulo
    high (its low bits where high is a power of two, else the remainder by a float reciprocal and one correction,
    exact for words < 2^32)."""
    words = state[24:24 + 8 * _MT_N].view(np.uint64)
    left = np.int64(state[8:12].view(np.int32)[0])
    at = np.int64(state[16:24].view(np.uint64)[0])
    inv = 1.0 / high
    pow2 = (high & (high - 1)) == 0
    mask = np.uint64(high - 1)
    k, n = 0, out.shape[0]
    while k < n:
        if left == 1:  # every word used: the next 624
            _mt_next(words)
            left, at = _MT_N + 1, 0
        c = min(left - 1, n - k)
        w, o = words[at:at + c], out[k:k + c]  # slices: unit-stride loops (indices fixed up per entry would gather)
        if pow2:  # the remainder is the word's low bits: integer vector code (AVX2 has no vector int64 <-> float64)
            for i in range(c):
                o[i] = np.int64(_mt_temper(w[i]) & mask)
        else:
            for i in range(c):
                y = _mt_temper(w[i])
                q = np.int64(np.float64(y) * inv)
                r = np.int64(y) - q * high
                o[i] = r - high if r >= high else r
        left -= c
        at += c
        k += c
    state[8:12].view(np.int32)[0] = left
    state[16:24].view(np.uint64)[0] = at


def randint_(out: torch.Tensor, high: int, generator: torch.Generator) -> torch.Tensor:
    """``torch.randint(high, out.shape, generator=generator, out=out)``: the same numbers, and the generator
    left in the same state, drawn by ``_mt_randint`` (several times faster) for a CPU generator and a
    contiguous int64 ``out``; by torch otherwise."""
    state = generator.get_state()
    if (generator.device.type != "cpu" or state.numel() != _MT_STATE_BYTES or out.dtype != torch.int64
            or not out.is_contiguous() or not 0 < high < 2**31):
        return torch.randint(high, out.shape, generator=generator, out=out)
    _mt_randint(state.numpy(), out.numpy().reshape(-1), high)
    generator.set_state(state)
    return out


def mt_state(generator: torch.Generator) -> np.ndarray | None:
    """The generator's state as ``_mt_randint`` reads it (uint8, ``Generator.get_state``'s layout, a copy), or
    None where it cannot (not torch's CPU mt19937 layout)."""
    state = generator.get_state()
    if generator.device.type != "cpu" or state.numel() != _MT_STATE_BYTES:
        return None
    return state.numpy()


@njit(cache=True, nogil=True)
def draw_steps(states, xs, high):
    """xs (k, S, B, L) <- k steps of batches: member s's tokens of each step drawn from its mt19937 state
    ``states[s]`` (advanced in place), as ``_mt_randint``."""
    k, S, B, L = xs.shape
    for i in range(k):
        for s in range(S):
            _mt_randint(states[s], xs[i, s].reshape(B * L), high)


@njit(cache=True, error_model="numpy", nogil=True)
def train_steps(n, buf, offsets, xs, target, kind, fixed, residual, V, d, n_ep, trig, rows, bias, ec, bits,
                m, v, lr, decay, b1, b2, eps, t0, loglik, correct, grad, loglik_out, correct_out):
    """``n`` whole training steps of ``table_step`` and ``adam_step`` in one call, with no Python between them
    (and without the GIL). Step k trains on the batches xs[k % len(xs)] (S, B, L): n batches drawn before
    (``draw_steps``), or one fixed training set. Each step reads the targets ``offsets[s]`` positions before
    the last, takes the gradient and the AdamW step number t0 + 1, ..., t0 + n, and writes its mean
    log-likelihoods into loglik_out[k] and correct predictions into correct_out[k] ((n, S) each). The same
    numbers as the same steps taken one call at a time."""
    _, S, B, L = xs.shape
    scratch = step_scratch(buf, kind, B, L, V, d, ec)
    for k in range(n):
        x = xs[k % xs.shape[0]]
        for s in range(S):
            for i in range(B):
                target[s, i] = x[s, i, L - 1 - offsets[s]]
        _table_step(buf, x, target, kind, fixed, residual, V, d, n_ep, trig, rows, bias, ec, bits, loglik, correct,
                    grad, scratch)
        adam_step(buf, grad, m, v, lr, decay, b1, b2, eps, t0 + k + 1)
        loglik_out[k] = loglik
        correct_out[k] = correct
