"""engine.matmul: the step's products by tiles held in registers (machines with AVX2 and no AVX-512) give each entry
of C as one sum in a fixed order, the same bits whatever the tile, the edge or the operands' layout; so do the
lanewise sums of RoPE's backward (``lane_sums``, every machine); and the choice between the tiles and numpy's BLAS
follows the features numba compiles for."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit

from lengthgen.engine import matmul
from lengthgen.engine.numerics import FAST


@njit(fastmath=FAST)
def in_order(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C[i, j] = (...((0 + A[i, 0] B[0, j]) + A[i, 1] B[1, j]) + ...): one entry at a time, the order ``_tiles``
    promises (with the same contraction into fused multiply-adds)."""
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            s = np.zeros(1, C.dtype)[0]
            for q in range(A.shape[1]):
                s += A[i, q] * B[q, j]
            C[i, j] = s


SHAPES = [(32, 32, 256), (16, 32, 112), (16, 112, 32), (32, 16, 16), (7, 5, 19), (10, 10, 10), (4, 3, 17), (1, 1, 1),
          (3, 0, 4)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiles_sum_each_entry_in_order(dtype: type) -> None:
    """Every entry of ``_tiles``' product is the in-order sum to the bit, for whole tiles, tiles cut by the edge
    (rows and columns not multiples of the tile's), an empty sum, and A as a transposed view (the step's A^T B)."""
    rng = np.random.default_rng(7)
    for m, k, n in SHAPES:
        A = rng.standard_normal((m, k)).astype(dtype)
        B = rng.standard_normal((k, n)).astype(dtype)
        ours, theirs, by_view = (np.full((m, n), np.nan, dtype) for _ in range(3))
        matmul._tiles(A, B, ours)
        in_order(A, B, theirs)
        matmul._tiles(np.ascontiguousarray(A.T).T, B, by_view)
        assert np.array_equal(ours, theirs) and np.array_equal(ours, by_view), (m, k, n)
        np.testing.assert_allclose(ours, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_tiles_sum_each_entry_in_order(dtype: type) -> None:
    """``_transposed_tiles`` (``matmul_t``'s A B^T where the tiles are taken) gives the in-order sums of A @ B^T to
    the bit, for the same shapes, with a scratch longer than B (only its first k n entries used), and with A as a
    transposed view (the step's lg^T g); B^T is left in the scratch (``step._backward_logits`` reads it), copied by
    whole blocks of a register's lanes and one entry at a time past them (shapes with and without whole blocks)."""
    rng = np.random.default_rng(9)
    for m, k, n in SHAPES:
        A = rng.standard_normal((m, k)).astype(dtype)
        B = rng.standard_normal((n, k)).astype(dtype)
        ours, theirs, by_view = (np.full((m, n), np.nan, dtype) for _ in range(3))
        scratch = np.full(k * n + 5, np.nan, dtype)
        matmul._transposed_tiles(A, B, ours, scratch)
        in_order(A, np.ascontiguousarray(B.T), theirs)
        matmul._transposed_tiles(np.ascontiguousarray(A.T).T, B, by_view, scratch)
        assert np.array_equal(ours, theirs) and np.array_equal(ours, by_view), (m, k, n)
        assert np.isnan(scratch[k * n:]).all()
        assert np.array_equal(scratch[:k * n].reshape((k, n)), B.T), (m, k, n)
        frozen = B.copy()
        frozen.setflags(write=False)  # a read-only B (another numba type than the scratch's) copies as well
        matmul._transposed_tiles(A, frozen, by_view, scratch)
        assert np.array_equal(ours, by_view) and np.array_equal(scratch[:k * n].reshape((k, n)), B.T), (m, k, n)
        np.testing.assert_allclose(ours, A.astype(np.float64) @ B.T, rtol=1e-4, atol=1e-4)


@njit(fastmath=FAST)
def lanes_in_order(G, first, step, n, X, out, r, c):
    """out[r, c + j] = (...((0 + G[first, j] X[0, j]) + G[first + step, j] X[1, j]) + ...): the order ``lane_sums``
    promises, one column at a time."""
    for j in range(X.shape[1]):
        s = np.zeros(1, out.dtype)[0]
        for i in range(n):
            s += G[first + i * step, j] * X[i, j]
        out[r, c + j] = s


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,d,step,count,across", [(16, 32, 1, 1, 0), (16, 32, 1, 16, 16), (16, 32, 16, 16, 1),
                                                   (16, 20, 16, 3, 1), (5, 7, 3, 2, 15), (3, 17, 1, 1, 0),
                                                   (3, 40, 1, 2, 3), (0, 8, 1, 2, 1), (4, 8, 1, 0, 1),
                                                   (16, 16, 1, 16, 16), (16, 16, 16, 16, 1)])
def test_lane_sums_sum_each_column_in_order(dtype: type, n: int, d: int, step: int, count: int, across: int) -> None:
    """``lane_sums`` (RoPE's backward through the table, ``step._backward_table``) gives each of its two outputs'
    entries as the in-order sum to the bit, down rows first + t across + i step of G for each of its ``count`` sets
    t: by two tiles' columns at a time (d 32 in both dtypes, 40 in float32), by one tile's columns two sets at a time
    (d 16, 17 and 20 in float32, with an odd number of sets too; d 8 in float64), by single columns (the rest), an
    empty sum and no set; at the rows and columns it is told, writing nothing else."""
    rng = np.random.default_rng(11)
    first = 2
    last = first + max(count - 1, 0) * across + max(n - 1, 0) * step
    G = rng.standard_normal((last + 1, d)).astype(dtype)
    X, Y = rng.standard_normal((max(n, 1), d)).astype(dtype), rng.standard_normal((max(n, 1), d)).astype(dtype)
    outX, outY = np.full((count + 2, d + 3), np.nan, dtype), np.full((count + 2, d), np.nan, dtype)
    matmul.lane_sums(G, first, across, step, n, count, d, X, Y, outX, 1, 3, outY, 2, 0)
    wantX, wantY = np.full_like(outX, np.nan), np.full_like(outY, np.nan)
    for t in range(count):
        lanes_in_order(G, first + t * across, step, n, X, wantX, 1 + t, 3)
        lanes_in_order(G, first + t * across, step, n, Y, wantY, 2 + t, 0)
    assert np.array_equal(outX, wantX, equal_nan=True) and np.array_equal(outY, wantY, equal_nan=True)
    for t in range(count):
        g0 = first + t * across
        rows = G[g0:g0 + n * step:step] if n else G[:0]
        np.testing.assert_allclose(outX[1 + t, 3:], (rows.astype(np.float64) * X[:n]).sum(0), rtol=1e-4, atol=1e-4)


def test_a_non_finite_entry_stays_in_its_rows() -> None:
    """An inf in A's first row makes C's first row inf or NaN, and no other entry: every tile, cut or whole, starts
    its sums from zero (not from what an earlier tile left)."""
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((9, 6)).astype(np.float32), rng.standard_normal((6, 37)).astype(np.float32)
    A[0, 2] = np.inf
    ours, theirs = np.empty((9, 37), np.float32), np.empty((9, 37), np.float32)
    matmul._tiles(A, B, ours)
    in_order(A, B, theirs)
    assert not np.isfinite(ours[0]).any() and np.isfinite(ours[1:]).all()
    assert np.array_equal(ours[1:], theirs[1:])


def test_matmul_writes_the_product_either_way() -> None:
    """``matmul`` (the step's call) writes A @ B into C, by tiles or by BLAS as ``OWN`` says, into a row block of a
    larger array too (the step's gYv[:V])."""
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 112)).astype(np.float32)
    big = np.zeros((20, 112), np.float32)

    @njit
    def into_rows(A, B, big):
        matmul.matmul(A, B, big[:16])

    into_rows(A, B, big)
    np.testing.assert_allclose(big[:16], A @ B, rtol=1e-5, atol=1e-5)
    assert not big[16:].any()


def test_matmul_t_writes_the_product_either_way() -> None:
    """``matmul_t`` (the step's A B^T) writes A @ B^T into C, by tiles or by BLAS as ``OWN`` says, into a row block
    of a larger array too (the step's gYv[:V])."""
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((16, 256)).astype(np.float32), rng.standard_normal((16, 256)).astype(np.float32)
    big, scratch = np.zeros((20, 16), np.float32), np.empty(256 * 16, np.float32)

    @njit
    def into_rows(A, B, big, scratch):
        matmul.matmul_t(A, B, big[:16], scratch)

    into_rows(A, B, big, scratch)
    np.testing.assert_allclose(big[:16], A @ B.T, rtol=1e-5, atol=1e-5)
    assert not big[16:].any()


@pytest.mark.parametrize("features,own", [("+avx2,+fma,-avx512f", True), ("+avx2,+fma,+avx512f", False),
                                          ("+avx,-avx2,-fma,-avx512f", False)])
def test_tiles_where_avx2_without_avx512(monkeypatch: pytest.MonkeyPatch, features: str, own: bool) -> None:
    """The tiles are chosen where numba compiles for AVX2 and FMA without AVX-512 (``NUMBA_CPU_FEATURES``, as
    ``benchmarks.run --as-avx2`` sets it), on x86-64 only."""
    monkeypatch.setattr(numba.core.config, "CPU_FEATURES", features)
    monkeypatch.setattr(matmul.platform, "machine", lambda: "x86_64")
    assert matmul.own_products() is own
    monkeypatch.setattr(matmul.platform, "machine", lambda: "arm64")
    assert matmul.own_products() is False
