"""Sums held in registers over their whole length: the step's matrix products C = A @ B on machines without AVX-512,
and the lanewise sums of RoPE's backward through its table on every machine.

At the step's sizes (32 x 32 x 256 and smaller) OpenBLAS's kernels for AVX2 (Haswell's, which it also takes on an
AMD Zen) pack their operands before they multiply: on an Intel Xeon made to run as an AVX2 machine they took 8.0-8.8
us for the logit table's 32 x 32 x 256, against 2.9-3.7 us for OpenBLAS's AVX-512 kernels, which multiply small
matrices without packing. ``matmul`` computes a tile of 4 rows x 64 bytes of C (16 float32 or 8 float64 columns:
eight AVX2 registers) in a stack array that LLVM keeps in registers, adding one row of B times one entry of A per
step of the sum:

    C[i, j] = (...((0 + A[i, 0] B[0, j]) + A[i, 1] B[1, j]) + ...) + A[i, k-1] B[k-1, j]

each addition a fused multiply-add, in this order for every entry (those of tiles cut by the edge too), so the bits
do not depend on the vector width the code was compiled for (tests/test_matmul.py). On that Xeon as AVX2: 32 x 32 x
256 in 4.8-5.7 us, the step's smaller products 1.6-2.9x faster than OpenBLAS's (benchmarks/README.md). The step calls
it for its products whose right operand has contiguous rows (ten of RoPE's fourteen), and ``matmul_t`` for the
other four (A B^T): B^T copied into a scratch array, in square blocks transposed in registers, then the same tiles.
With AVX-512 (``OWN`` false) the step keeps OpenBLAS's kernels, faster there than these tiles (32 x 32 x 256: 2.9-3.7
against 4.7-5.2 us); off x86-64 too, where the tiles were not measured.

``lane_sums`` holds the same kind of tile for the sums of RoPE's backward through its table (``step._backward_table``):
per column j, sum_i G[first + i step, j] X[i, j], two such sums at a time, each in the order i = 0, 1, ... by fused
multiply-adds, two tiles at a time (2 x 64 bytes of columns, or the last 64 bytes of two sets of rows: eight registers
of sums, as a multiply-add waits four cycles for its previous term on a Zen 3, and four registers left the two units
half idle). It runs on every machine (there is no BLAS routine to prefer): with it that block took 8.3-8.7 us against
10.0-10.1 us for the loops and eight-lane dot products before it, as AVX2 on the Intel Xeon (6.5-7.0 against 8.7-9.0
natively; float32, RoPE with V 16, d 32, L 32, batch 256, one member; min of seven blocks of 2000 calls).

The tiles need LLVM's SLP vectoriser (straight-line code into vector instructions), which numba leaves off by
default: this module turns it on for the functions compiled after its import. It makes vector instructions of
independent scalar ones and never reorders a sum: the step's other loops gave the same bits with it (sha256 of 22
trainings) and a step of the small-step recipe (Adam, lr 3e-4, batch 256) took about 5% less time on that Xeon,
natively.
"""

from __future__ import annotations

import platform

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.codegen import get_host_cpu_features
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from .numerics import FAST

numba.core.config.SLP_VECTORIZE = 1

TILE_ROWS, TILE_BYTES = 4, 64  # a tile of C: 4 rows of 64 bytes (16 float32 or 8 float64)


def own_products() -> bool:
    """Whether ``matmul`` computes the products by its tiles: on x86-64 where numba compiles for AVX2 and FMA without
    AVX-512 (its target's features: ``NUMBA_CPU_FEATURES`` where set, as ``benchmarks.run --as-avx2`` sets them,
    else the host's as numba reads them, less AVX where ``NUMBA_ENABLE_AVX`` is 0); elsewhere numpy's BLAS."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    features = (numba.core.config.CPU_FEATURES or get_host_cpu_features()).split(",")  # as numba's codegen takes them
    return "+avx2" in features and "+fma" in features and "+avx512f" not in features


OWN = own_products()


@intrinsic
def register_tile(typingctx, like):
    """A zeroed (TILE_ROWS, TILE_BYTES / itemsize) C-contiguous array of ``like``'s dtype on the calling function's
    stack (no allocation; LLVM can keep it in registers)."""
    dtype = like.dtype
    tile = types.Array(dtype, 2, "C")

    def codegen(context, builder, signature, args):
        item = context.get_data_type(dtype)
        size = context.get_abi_sizeof(item)
        width = TILE_BYTES // size
        data = cgutils.alloca_once(builder, item, size=TILE_ROWS * width, zfill=True)
        intp = context.get_value_type(types.intp)
        array = make_array(tile)(context, builder)
        populate_array(array, data=data, shape=cgutils.pack_array(builder, [intp(TILE_ROWS), intp(width)]),
                       strides=cgutils.pack_array(builder, [intp(TILE_BYTES), intp(size)]), itemsize=intp(size),
                       meminfo=None)
        return array._getvalue()

    return tile(like), codegen


@njit(fastmath=FAST, error_model="numpy", inline="always")
def _tile_product(tile, zero, A, B, C, i0, j0, rows, cols):
    """C[i0:i0+rows, j0:j0+cols] <- A[i0:i0+rows] @ B[:, j0:j0+cols], summed in ``tile`` (rows <= its rows, cols <=
    its columns) from ``zero``. The indices are unsigned: numba then adds no fix-up of negative ones, which would keep
    the loops from vectorising."""
    for r in range(rows):
        for j in range(cols):
            tile[r, j] = zero
    for q in range(A.shape[1]):
        uq = np.uint64(q)
        for r in range(rows):
            a = A[np.uint64(i0 + r), uq]
            for j in range(cols):
                tile[r, j] += a * B[uq, np.uint64(j0 + j)]
    for r in range(rows):
        for j in range(cols):
            C[np.uint64(i0 + r), np.uint64(j0 + j)] = tile[r, j]


@njit(cache=True, fastmath=FAST, error_model="numpy")
def _tiles(A, B, C):
    """C <- A @ B by tiles: A (m, k) of any layout, B (k, n) and C (m, n) with contiguous rows. A whole tile's loops
    have constant lengths and its tile is indexed by constants only (LLVM unrolls the loops and keeps the tile in
    registers); a tile cut by the edge of C runs the same sums in a second tile, in loops of its own lengths."""
    m, n = C.shape
    whole, edge = register_tile(C), register_tile(C)
    zero = whole[0, 0]  # a tile is zeroed where it is made
    R, W = whole.shape  # TILE_ROWS, TILE_BYTES / itemsize: constants the compiler sees (C.itemsize is read at run time)
    for i0 in range(0, m, R):
        rows = min(R, m - i0)
        for j0 in range(0, n, W):
            cols = min(W, n - j0)
            if rows == R and cols == W:
                _tile_product(whole, zero, A, B, C, i0, j0, R, W)
            else:
                _tile_product(edge, zero, A, B, C, i0, j0, rows, cols)


@intrinsic
def _any_layout(typingctx, a):
    """The array ``a`` itself, typed as an array of any layout ('A', strides read at run time) rather than C or F:
    ``matmul`` and ``matmul_t`` pass their left operand so, and one compiled signature of ``_tiles`` (and of
    ``_transposed_tiles``) per dtype serves the step's row-major operands and its transposed views (X^T, Av^T, ...)
    alike. Compiled once each instead of for each layout, the two took 1.1 s to compile from an empty cache instead
    of 2.5 s for their four signatures, on a 2-core AMD EPYC (Zen 3); the strides are read where the tile reads A's
    entries, and a step is as fast (the blocks inside training within the noise) with the same bits."""
    if not isinstance(a, types.Array):
        return None
    layout = a.copy(layout="A")

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, layout, args[0])

    return layout(a), codegen


@njit(cache=True, fastmath=FAST, error_model="numpy", inline="always")
def matmul(A, B, C):
    """C <- A @ B, as np.dot(A, B, C): by ``_tiles`` where ``OWN``, else numpy's BLAS. A (m, k) of any layout; B (k,
    n) and C (m, n) with contiguous rows. The tiles do not check the shapes (the step's arrays match by
    construction): a check that raises made one small-step model (Adam, lr 3e-4, batch 256, 6667 steps, no early
    stop, no weight decay) 2-5% slower on that Xeon as AVX2 (0.552-0.572 against 0.543-0.544 s, alternated)."""
    if OWN:
        _tiles(_any_layout(A), B, C)
    else:
        np.dot(A, B, C)


VECTOR_BYTES = 32  # an AVX2 register: B^T is copied in square blocks of its lanes (8 float32 or 4 float64)


def _columns(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of a square block given as its w rows (w vectors of w lanes, w = 8 or 4), by shuffles of whole
    registers (AVX's unpack, shuffle and 128-bit permute): rows interleaved in pairs, the pairs' lanes in pairs, then
    (w = 8) the 128-bit halves exchanged."""
    w = len(rows)

    def shuffle(a: ir.Value, b: ir.Value, lanes: list[int]) -> ir.Value:  # lane i < w of a, w + i of b
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), w), lanes))

    even, odd = ([0, 4, 2, 6], [1, 5, 3, 7]) if w == 4 else ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
    pairs = [shuffle(rows[i], rows[i + 1], lanes) for i in range(0, w, 2) for lanes in (even, odd)]
    if w == 4:  # pairs: (r0 r1 even, odd), (r2 r3 even, odd) -> columns 0, 1, 2, 3
        low, high = [0, 1, 4, 5], [2, 3, 6, 7]
        return [shuffle(pairs[0], pairs[2], low), shuffle(pairs[1], pairs[3], low),
                shuffle(pairs[0], pairs[2], high), shuffle(pairs[1], pairs[3], high)]
    low, high = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    quads = [shuffle(pairs[i + h], pairs[i + 2 + h], lanes) for i in (0, 4) for h in (0, 1) for lanes in (low, high)]
    # quads[j] holds columns j and j + 4 of rows 0-3, quads[4 + j] those of rows 4-7
    first, second = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    return ([shuffle(quads[j], quads[4 + j], first) for j in range(4)]
            + [shuffle(quads[j], quads[4 + j], second) for j in range(4)])


@intrinsic
def _transpose_block(typingctx, src, dst, r0, q0):
    """dst[q0 + i, r0 + j] <- src[r0 + j, q0 + i] for i, j < w (w = ``VECTOR_BYTES`` / itemsize): a square block of
    ``src`` written transposed into ``dst``, both C-contiguous, by w loads of whole rows, ``_columns`` and w stores.
    The caller keeps the block inside both arrays (no bounds check)."""
    if not all(isinstance(a, types.Array) and a.layout == "C" and a.ndim == 2 and a.dtype == src.dtype
               for a in (src, dst)) or src.dtype not in (types.float32, types.float64):
        return None

    def codegen(context, builder, signature, args):
        item = context.get_data_type(src.dtype)
        size = context.get_abi_sizeof(item)
        w = VECTOR_BYTES // size
        vector = ir.VectorType(item, w).as_pointer()
        intp = context.get_value_type(types.intp)
        S, D = (make_array(src)(context, builder, a) for a in args[:2])
        r, q = args[2], args[3]

        def row(array, first: ir.Value, i: int, column: ir.Value) -> ir.Value:  # &array[first + i, column], a vector
            at = cgutils.get_item_pointer(context, builder, src, array, [builder.add(first, intp(i)), column])
            return builder.bitcast(at, vector)

        columns = _columns(builder, [builder.load(row(S, r, i, q), align=size) for i in range(w)])
        for i in range(w):
            builder.store(columns[i], row(D, q, i, r), align=size)
        return context.get_dummy_value()

    return types.none(src, dst, types.intp, types.intp), codegen


@intrinsic
def _lanes(typingctx, like):
    """The entries of ``like``'s dtype in ``VECTOR_BYTES``: a constant the compiler sees."""
    def codegen(context, builder, signature, args):
        return context.get_constant(types.intp, VECTOR_BYTES // context.get_abi_sizeof(
            context.get_data_type(like.dtype)))

    return types.intp(like), codegen


@njit(cache=True, fastmath=FAST, error_model="numpy")
def _transposed_tiles(A, B, C, scratch):
    """C <- A @ B^T by ``_tiles``, B^T first copied into the first k n entries of ``scratch`` (1D, contiguous): A (m,
    k) of any layout, B (n, k) and C (m, n) C-contiguous. The copy goes by square blocks of a register's lanes
    (``_transpose_block``), the rows and columns past the last whole block one entry at a time. On a 2-core AMD EPYC
    (Zen 3), float32, min of seven blocks of 2000 calls: E^T of the step's mass g (B 16 x 256) 1.29-1.77 -> 0.37 us,
    W^T of its dA W^T (32 x 112) 1.40-1.41 -> 0.30-0.33 us, against one entry at a time (benchmarks/README.md)."""
    n, k = B.shape
    BT = scratch[:k * n].reshape((k, n))
    w = _lanes(B)
    nw, kw = n // w * w, k // w * w  # the rows and columns of B in whole blocks
    for r0 in range(0, nw, w):
        for q0 in range(0, kw, w):
            _transpose_block(B, BT, r0, q0)
    for q in range(k):  # the rest, along BT's rows
        for r in range(nw if q < kw else 0, n):
            BT[q, r] = B[r, q]
    _tiles(A, BT, C)


@njit(cache=True, fastmath=FAST, error_model="numpy", inline="always")
def matmul_t(A, B, C, scratch):
    """C <- A @ B^T, as np.dot(A, B.T, C): by ``_transposed_tiles`` where ``OWN`` (``scratch``: at least k n entries),
    else numpy's BLAS. A (m, k) of any layout; B (n, k) C-contiguous and C (m, n) with contiguous rows. The copy
    costs less than OpenBLAS's packing of a transposed operand: as AVX2 on an Intel Xeon (float32, min of seven blocks
    of 2000 calls), 16 x 256 x 16 in 2.25 us with the copy against 3.13 us through OpenBLAS, 16 x 112 x 32 in 1.86
    against 2.42 us, 32 x 16 x 32 in 0.51 against 0.72 us, the copy then one entry at a time (by blocks since: see
    ``_transposed_tiles``). Where ``OWN``, the copy B^T (k, n) stays in ``scratch[:k n]`` after the call
    (``step._backward_logits`` reads g = E^T there)."""
    if OWN:
        _transposed_tiles(_any_layout(A), B, C, scratch)
    else:
        np.dot(A, B.T, C)


@njit(fastmath=FAST, error_model="numpy", inline="always")
def _lane_tile(tile, zero, G, step, X, Y, n, W, gA, jA, outX, rXA, cXA, outY, rYA, cYA, gB, jB, rXB, cXB, rYB, cYB):
    """Two tiles' sums at once: rows 0 and 1 of ``tile`` <- sum over i < n of G[gA + i step, jA + j] X[i, jA + j] and
    of G[...] Y[i, jA + j] for the W columns j < W (W the tile's columns), written to outX[rXA, cXA + j] and
    outY[rYA, cYA + j]; rows 2 and 3 the same from gB, jB into rows rXB, rYB at columns cXB, cYB (the next W columns
    of the same rows of G, or the same columns of another set of rows). Each summed in order i = 0, 1, ... by fused
    multiply-adds. Eight registers of sums in flight: with four (one tile), a Zen 3's two multiply-add units stood
    half idle, each sum waiting four cycles for its previous term. Unsigned indices, as in ``_tile_product``."""
    for r in range(4):
        for j in range(W):
            tile[r, j] = zero
    for i in range(n):
        ga, gb, ui = np.uint64(gA + i * step), np.uint64(gB + i * step), np.uint64(i)
        for j in range(W):
            g = G[ga, np.uint64(jA + j)]
            tile[0, j] += g * X[ui, np.uint64(jA + j)]
            tile[1, j] += g * Y[ui, np.uint64(jA + j)]
        for j in range(W):
            g = G[gb, np.uint64(jB + j)]
            tile[2, j] += g * X[ui, np.uint64(jB + j)]
            tile[3, j] += g * Y[ui, np.uint64(jB + j)]
    for j in range(W):
        outX[np.uint64(rXA), np.uint64(cXA + j)] = tile[0, j]
        outY[np.uint64(rYA), np.uint64(cYA + j)] = tile[1, j]
        outX[np.uint64(rXB), np.uint64(cXB + j)] = tile[2, j]
        outY[np.uint64(rYB), np.uint64(cYB + j)] = tile[3, j]


@njit(cache=True, fastmath=FAST, error_model="numpy")
def lane_sums(G, first, across, step, n, count, d, X, Y, outX, rX, cX, outY, rY, cY):
    """For t < count and j < d: outX[rX + t, cX + j] <- sum_i G[first + t across + i step, j] X[i, j] and
    outY[rY + t, cY + j] <- sum_i G[first + t across + i step, j] Y[i, j], i < n: sums of elementwise products down
    strided sets of G's rows, each column summed in order i = 0, 1, ... by fused multiply-adds (the same bits at any
    vector width), in tiles of 64-byte rows held in registers over the whole sum. G, X, Y, outX, outY with contiguous
    rows. All ``count`` sets in one call: numba does not inline this function, and a call per set took about a fifth
    of the sums' time. Two tiles at a time (``_lane_tile``): the columns by 2 W (W a tile's columns: d = 32 is one
    pass in float32, two in float64), then a last W columns two sets at a time (d = 16 in float32), then the columns
    left one by one, in plain loops. (A third tile variant for them, of runtime width, added 0.2-0.3 s to this
    function's first compile on a 2-core AMD EPYC, Zen 3.)"""
    tile = register_tile(G)
    zero = tile[0, 0]
    W = tile.shape[1]  # TILE_BYTES / itemsize: a constant the compiler sees
    wide = d // (2 * W) * (2 * W)  # the columns taken by 2 W
    single = wide + W if d - wide >= W else wide  # ... and then by one tile
    per = wide // (2 * W)  # tiles' pairs a set
    pairs = count * per + ((count + 1) // 2 if single > wide else 0)
    for k in range(pairs):  # one call site: the tile's code is inlined once
        if k < count * per:  # the next 2 W columns of a set
            t = k // per
            u, jA = t, k % per * 2 * W
            jB = jA + W
        else:  # the last W columns of two sets (an odd count's last set twice: the same sums written twice)
            t = 2 * (k - count * per)
            u, jA, jB = min(t + 1, count - 1), wide, wide
        _lane_tile(tile, zero, G, step, X, Y, n, W, first + t * across, jA, outX, rX + t, cX + jA, outY, rY + t,
                   cY + jA, first + u * across, jB, rX + u, cX + jB, rY + u, cY + jB)
    for t in range(count):
        g = first + t * across
        for j in range(single, d):
            sx = sy = zero
            for i in range(n):
                gj = G[np.uint64(g + i * step), np.uint64(j)]
                sx += gj * X[np.uint64(i), np.uint64(j)]
                sy += gj * Y[np.uint64(i), np.uint64(j)]
            outX[np.uint64(rX + t), np.uint64(cX + j)] = sx
            outY[np.uint64(rY + t), np.uint64(cY + j)] = sy
