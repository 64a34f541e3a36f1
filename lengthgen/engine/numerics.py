"""The engine's numerics: exp(x) for x <= 0, log1p(x) for x >= 0 and dot products, as loops numba vectorises,
with a fixed order of operations (the same bits wherever a function is compiled or loaded from numba's cache).

``exp_neg`` and ``log1p`` replace a libm call per entry (some ten times slower) in the softmaxes and the loss of the
table step (``engine.step``); ``dot8`` sums in eight lanes of a fixed order, and ``lane_totals`` with ``row_total``
give every row of a 2D array its sum in dot8's order, the lanes of all rows first. tests/test_fused.py checks the first
two against numpy and the row sums against dot8.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

# Contraction (fused multiply-adds) and reciprocals; no assumption about NaN or inf (the loss relies on log(0) =
# -inf where the other classes' probabilities underflow), and no reassociation: with it the order of a sum
# depended on where LLVM inlined the step, and ``train_steps`` loaded from numba's cache gave other float32
# numbers than the same function just compiled (measured; tests/test_stretches.py checks both agree). The cost,
# measured side by side: ``table_step`` took about 13% more CPU (the sums it no longer vectorised). The step's sums
# now run in lanes of a fixed order (``dot8``) or along the batch, which vectorise without reassociation.
FAST = {"contract", "nsz", "arcp"}

# error_model="numpy" on the functions that divide: a division by zero gives inf or NaN as in numpy instead of
# raising ZeroDivisionError, and without that check per division their loops vectorise (measured: Adam's update
# of 5120 float32 parameters 8.5 -> 2.4 us). A zero divisor could only come from an underflow, and the code tests
# for those before it divides.


def exp_constants(dtype: np.dtype) -> np.ndarray:
    """The constants of ``exp_neg`` in ``dtype``: log2(e), ln 2 split in a high part exact in small
    multiples and a low part, the largest power of two taken off, the Taylor coefficients 1/13!..1/0!, and 1.5 2^m
    (m: the mantissa's bits), whose bits plus a small integer u are the bits of 1.5 2^m + u."""
    if np.dtype(dtype) == np.float32:
        hi, lo, kmax, m = 0.693359375, -2.12194440e-4, 126.0, 23
    else:
        hi, lo, kmax, m = 6.93147180369123816490e-01, 1.90821492927058770002e-10, 1022.0, 52
    return np.array([1.0 / math.log(2), hi, lo, kmax] + [1.0 / math.factorial(k) for k in range(13, -1, -1)]
                    + [1.5 * 2.0**m], dtype=dtype)


@intrinsic
def float_bits(typingctx, x):
    """The bits of the float x as an integer of its width (int32 for float32, int64 for float64): a register's
    reinterpretation, which a loop vectorises (numpy's ``view`` does it for whole arrays only)."""
    if not isinstance(x, types.Float):
        return None
    width = types.int32 if x.bitwidth == 32 else types.int64

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(width))

    return width(x), codegen


@intrinsic
def bits_float(typingctx, i, like):
    """The float of the dtype of ``like`` whose bits are the low bits of the integer i (``float_bits`` undone)."""
    if not isinstance(i, types.Integer) or not isinstance(like, types.Float):
        return None
    bits = types.int32 if like.bitwidth == 32 else types.int64

    def codegen(context, builder, signature, args):
        low = context.cast(builder, args[0], i, bits)  # the low bits, as a store into an integer array of that width
        return builder.bitcast(low, context.get_value_type(like))

    return like(i, like), codegen


@njit(cache=True, fastmath={"contract", "nsz", "arcp"})  # no reassociation: it would undo the split of ln 2
def exp_neg(a, c):
    """a <- exp(a) in place, for a <= 0 (1D contiguous). exp(x) = 2^-u exp(r) with u = round(-x log2 e) and
    |r| <= ln(2)/2, exp(r) by its Taylor series to 1/13! (below 1e-16 relative; to 1/7! in float32), 2^-u written as
    the float's bits: one vectorised loop, some ten times faster than a libm call per entry, within 4e-7 (float32) /
    1e-14 (float64) relative. Below -kmax ln 2 (-87 in float32, -708 in float64) it returns 0; NaN stays NaN.
    (One loop with ``float_bits`` and ``bits_float`` rather than three through an integer view of a scratch array:
    the same bits, 5.8 -> 4.6 us for 8192 float32 entries, measured natively and as AVX2 on an Intel Xeon.)"""
    log2e, hi, lo, kmax = c[0], c[1], c[2], c[3]
    c13, c12, c11, c10, c9, c8, c7 = c[4], c[5], c[6], c[7], c[8], c[9], c[10]
    c6, c5, c4, c3, c2, c1, c0 = c[11], c[12], c[13], c[14], c[15], c[16], c[17]
    zero = c0 - c0
    single = a.itemsize == 4
    bias, shift = (127, 23) if single else (1023, 52)
    magic, magic_bits = c[18], (0x4B400000 if single else 0x4338000000000000)  # 1.5 2^shift, its bits
    lowest = -(kmax + c0) / log2e
    for i in range(a.shape[0]):
        x = a[i]
        if x < lowest:  # -inf too (NaN compares false and stays NaN)
            x = lowest
        u = min(max(np.floor(c2 - x * log2e), zero), kmax + c0)
        r = x + u * hi + u * lo
        if single:  # float32: to 1/7! is enough (|r|^8 / 8! < 6e-9)
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
        # 2^-u, or 0 (a zero exponent field) past kmax: u is the low bits of u + 1.5 2^shift (no float -> int
        # conversion, which AVX2 lacks for int64)
        scale = bits_float((bias + magic_bits - float_bits(u + magic)) << shift, x)
        a[i] = (p * r + c0) * scale


LOG_TERMS = 12  # the coefficients of log1p's series, highest first: to s^23 in float64; float32's six (to s^11) last


def log_constants(ec: np.ndarray) -> np.ndarray:
    """The constants of ``log1p`` in the dtype of ``ec`` (``exp_constants``): ln 2 split as there (high part,
    low part), sqrt(2), and ``LOG_TERMS`` coefficients 2/(2k+1) of 2 atanh(s) = log((1+s)/(1-s)) from the highest used
    down to k = 0 (to s^23 in float64, s^11 in float32: |s| <= 0.172, the next term is below the precision), float32's
    after six zeros. The zeros keep Horner's sum exactly at its first coefficient (0 z + 0 = 0, then 0 z + c = c), so
    one loop of a constant count serves both dtypes: it unrolls, and the loop around it vectorises (a count read
    from the array kept it scalar: the loss's 256 entries in float32 1.35 -> 0.51 us, as AVX2 on an Intel Xeon).
    numpy, not compiled: it is computed once per set of working arrays (``step.step_arrays``), and compiling it took
    both processes of a first compile part of a second (``engine.first_compile``); each constant is rounded once from
    float64 into the dtype either way."""
    top = 11 if ec.itemsize == 8 else 5
    c = np.zeros(3 + LOG_TERMS, ec.dtype)
    c[0], c[1] = ec[1], ec[2]
    c[2] = math.sqrt(2.0)
    for k in range(top, -1, -1):
        c[3 + LOG_TERMS - 1 - k] = 2.0 / (2 * k + 1)
    return c


# no reassociation: it would undo the split of ln 2
@njit(cache=True, error_model="numpy", fastmath={"contract", "nsz", "arcp"})
def log1p(a, c, w, bits):
    """a <- log1p(a) in place, for a >= 0 (1D contiguous; ``w``: float scratch as long, ``bits``: integer
    scratch of the float's width, as long). u = 1 + a rounded, written m 2^e with m in [sqrt(1/2), sqrt(2)) from
    its bits; log m = 2 atanh(s), s = (m - 1)/(m + 1), by its series; log1p(a) = log(u) a / (u - 1), which
    undoes the rounding of u (and is a itself where u rounds to 1). Vectorised loops in place of a libm call
    per entry; within 2e-7 (float32) / 1e-15 (float64) relative of numpy's log1p (tests/test_fused.py). The bits
    by ``float_bits`` and ``bits_float``, not through views of w and bits as the other dtype: the same bits and
    speed, and ``_loss`` about 0.4 s quicker to compile (benchmarks/README.md, twentieth session)."""
    hi, lo, root2 = c[0], c[1], c[2]
    one = root2 / root2
    bias, shift = (127, 23) if bits.itemsize == 4 else (1023, 52)
    mant = (1 << shift) - 1
    root2_mant = root2 - one  # the mantissa bits of sqrt(2), as a fraction of 2^shift
    cut = int(root2_mant * (1 << shift))
    for i in range(a.shape[0]):
        w[i] = one + a[i]
    for i in range(a.shape[0]):  # u = m 2^e: the mantissa's bits into bits, e (a float) into w
        b = float_bits(w[i])
        e = (b >> shift) - bias
        f = b & mant
        up = f > cut  # m >= sqrt(2): halve it
        bits[i] = f | ((bias - 1 if up else bias) << shift)
        w[i] = e + 1 if up else e
    for i in range(a.shape[0]):
        x = a[i]
        u = one + x
        f = bits_float(bits[i], x) - one
        s = f / (f + one + one)
        z = s * s
        p = c[3]
        for k in range(4, 3 + LOG_TERMS):
            p = p * z + c[k]
        lg = w[i] * hi + (w[i] * lo + s * p)
        w[i] = x if u == one else lg * (x / (u - one))
    for i in range(a.shape[0]):  # (into w, then a: a select stored where one side was loaded becomes a masked store)
        a[i] = w[i]


_LANE = tuple(np.uint64(k) for k in range(9))  # unsigned offsets: numba fixes up no negative index in dot8


@njit(cache=True, fastmath=FAST, inline="always")
def dot8(a, i, u, b, j, v, n):
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


@njit(cache=True, fastmath=FAST, inline="always")
def lane_totals(a, lanes, first, stop):
    """lanes[i, l] = the sum of a[i, k] over k = l mod 8, k < 8 floor(n / 8), in order, for the rows first <= i < stop
    of ``a`` (B, n) into ``lanes`` (B, 8): the eight lanes of ``dot8`` of a row against ones, for all those rows first
    (``row_total`` then adds them). Within one row, dot8's final pairwise sum made LLVM keep the eight lanes
    interleaved over four 128-bit registers, with shuffles at every step (``_attention``'s row sums as AVX2 on a Zen 3:
    3.6 us of the block's 18); stored row by row, the lanes are one 256-bit register."""
    n8 = np.uint64(a.shape[1] // 8 * 8)
    for i in range(first, stop):
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = a[i, 0] - a[i, 0]
        for k in range(np.uint64(0), n8, np.uint64(8)):
            s0 += a[i, k]
            s1 += a[i, k + np.uint64(1)]
            s2 += a[i, k + np.uint64(2)]
            s3 += a[i, k + np.uint64(3)]
            s4 += a[i, k + np.uint64(4)]
            s5 += a[i, k + np.uint64(5)]
            s6 += a[i, k + np.uint64(6)]
            s7 += a[i, k + np.uint64(7)]
        lanes[i, 0], lanes[i, 1], lanes[i, 2], lanes[i, 3] = s0, s1, s2, s3
        lanes[i, 4], lanes[i, 5], lanes[i, 6], lanes[i, 7] = s4, s5, s6, s7


@njit(cache=True, fastmath=FAST, inline="always")
def row_total(a, lanes, i):
    """sum_k a[i, k] from ``lane_totals``' lanes: the lanes pairwise, then the terms past the last eight in order;
    the bits of ``dot8(a, i, 0, ones, 0, 0, n)`` (a term times one is the term)."""
    r = ((lanes[i, 0] + lanes[i, 1]) + (lanes[i, 2] + lanes[i, 3])) + (
        (lanes[i, 4] + lanes[i, 5]) + (lanes[i, 6] + lanes[i, 7]))
    for k in range(a.shape[1] // 8 * 8, a.shape[1]):
        r += a[i, np.uint64(k)]
    return r


def int_scratch(like, n):
    """An integer array of ``n`` entries as wide as the floats of ``like`` (int32 for float32, int64 for float64):
    the ``bits`` scratch of ``exp_neg`` and ``log1p``. Compiled code calls it through its overload below."""
    return np.empty(n, np.int32 if like.itemsize == 4 else np.int64)


@overload(int_scratch)
def _int_scratch(like, n):
    """``int_scratch`` in compiled code: the integer type is chosen when the function is compiled."""
    kind = np.int32 if like.dtype.bitwidth == 32 else np.int64

    def impl(like, n):
        return np.empty(n, kind)
    return impl
