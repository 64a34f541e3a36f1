"""Where a compiled step's time goes, block by block: ``python -m benchmarks.profile_blocks [--as-avx2]
[--dtype float64] [--steps N]``.

Times each of the nine blocks of ``engine.step.step_in`` (``step.BLOCKS``), called through ``step.call`` in a
compiled loop as a step calls them, and the whole step; then each matrix product a step of the default model makes
(RoPE by its table), at its shape and with its operands' layout, through numpy's BLAS as the step
calls it; and the same shape, row-major, through the MKL that torch carries (``mkl_gemm``), where it exports one.
Each number is the minimum over ``--repeats`` blocks of ``--calls`` calls, wall microseconds per call, one thread:
the benchmark's own loop, no Python between the calls. ``--as-avx2`` runs it as a machine with AVX2 and no AVX-512
would (``run.as_avx2_env``).

Last, the same blocks inside training (``training_us``): ``--steps`` steps of the small-step recipe's loop
(``engine.stretch.train_steps``: the targets, the nine blocks, Adam's update) from seed 0's initial parameters on
seed 0's batches, as ``train`` takes them, with the processor's time-stamp counter read around each part; the mean
per step of each part. A block called 2000 times in a row finds its arrays in the caches nearest the core, where it
left them; inside a step it follows the other blocks, whose working arrays (``step.StepArrays``: 344 KB at the default
task in float32) pass through a first-level cache of some 32-48 KB. Its time there is the one a model pays.

MKL is measured, not used: on an Intel Xeon its AVX2 kernels beat OpenBLAS's Haswell ones 1.5-2.5x at these shapes,
but made to take its path for processors it does not know as Intel's, it was 1.5-4x slower than OpenBLAS
(benchmarks/README.md); on an AMD Zen, MKL picks kernels of its own that this machine could not run. This table is
the measurement that decides it there.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from lengthgen import Config, draws
from lengthgen.engine import matmul, step
from lengthgen.engine.denormals import flushed
from lengthgen.model import Model
from lengthgen.optim import Optimizer, adam_step
from lengthgen.recipes import SMALL_STEPS
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream, targets

from .run import processor, processor_line, restart_as_avx2


class Case:
    """One member's step of ``c`` (seed 0): parameters (1, P), batch x (1, B, L), targets (1, B), the compiled setup,
    its working arrays (``step.step_arrays``) and the output."""

    def __init__(self, c: Config):
        model = Model(c, [0])
        table = TableStep(c, model.encoding, c.train_length)
        buf = table.pack(model)
        self.buf = buf.numpy()
        tokens = TrainStream(c, [0]).next()
        self.x = step.as_tokens(tokens.numpy())
        self.target = np.ascontiguousarray(targets(tokens, c.offset).numpy())
        self.B, self.L = self.x.shape[1:]
        self.setup = table._compiled_setup(self.L, buf.dtype)
        self.work = step.step_arrays(self.buf, self.setup, self.B, self.L)
        self.out = step.StepOut(np.zeros(1, self.buf.dtype), np.zeros(1, np.int64), np.zeros_like(self.buf))


@njit(error_model="numpy")
def _run(which, n, buf, x, target, setup, out, work):
    """``n`` calls of block number ``which`` of ``step.BLOCKS`` (``step.run_block``, as ``step_in`` calls it), or of
    the whole step (``which`` = 9); block ``which`` reads what the blocks before it wrote in ``work``."""
    for _ in range(n):
        if which < len(step.BLOCKS):
            step.run_block(which, 0, buf, x, target, setup, out, work)
        else:
            step.step_in(buf, x, target, setup, out, work)


def blocks_in_order(case: Case) -> None:
    """Each block once, in ``step.BLOCKS``' order: one step's gradient into ``case.out`` (tests check it is
    ``step.table_step``'s)."""
    for which in range(len(step.BLOCKS)):
        _run(which, 1, case.buf, case.x, case.target, case.setup, case.out, case.work)


def best_us(run: Callable[[int], object], calls: int, repeats: int) -> float:
    """The minimum over ``repeats`` blocks of ``run(calls)``: wall microseconds per call (after a warm-up block)."""
    run(max(1, calls // 10))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(calls)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def block_us(case: Case, calls: int, repeats: int) -> dict[str, float]:
    """Microseconds per call of each block, in a step's order, and of the whole step."""
    blocks_in_order(case)  # every working array written once
    out = {}
    for which, name in enumerate((*step.BLOCKS, "whole step")):
        out[name] = best_us(lambda n: _run(which, n, case.buf, case.x, case.target, case.setup, case.out, case.work),
                            calls, repeats)
    return out


def products(case: Case) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The matrix products of a step of the default model (RoPE by its table: no position rows), by block, as
    (left, right) operands of the step's shapes and layouts (transposes as views, as the step passes them)."""
    s, V, d, L = case.setup, case.setup.V, case.setup.d, case.L
    if s.kind != step.ROTATE or step.by_lookup(s.kind, V, case.B):
        raise ValueError("products: the products of RoPE's step by its table (the default model)")
    dt = case.buf.dtype
    rng = np.random.default_rng(0)

    def m(r: int, c: int) -> np.ndarray:
        return rng.standard_normal((r, c)).astype(dt)

    Y, VV, B = 3 * d + V, V * V, case.B
    X, W, Wo, U, Av, WoU = m(V, d), m(d, Y), m(d, d), m(d, V), m(V, d), m(d, V)
    mass, E, gT, gYv, gA, gWoU = m(V, B), m(V, B), m(L, VV), m(V, V), m(V, Y), m(d, V)
    return {"_project: X W": (X, W), "_project: Wo U": (Wo, U), "_project: Av (Wo U)": (Av, WoU),
            "_logit_table: trig CD": (np.ascontiguousarray(s.trig), m(d, VV)),
            "_logits: Yv[:V]^T mass": (m(V, V), mass),
            "_backward_logits: mass g": (mass, E.T), "_backward_logits: Yv[:V] E": (m(V, V), E),
            "_backward_table: dT^T trig": (gT.T, np.ascontiguousarray(s.trig)),
            "_backward_projections: dYv (Wo U)^T": (gYv, WoU.T), "_backward_projections: Av^T dYv": (Av.T, gYv),
            "_backward_projections: X^T dA": (X.T, gA), "_backward_projections: Wo^T d(Wo U)": (Wo.T, gWoU),
            "_backward_projections: d(Wo U) U^T": (gWoU, U.T), "_backward_projections: dA W^T": (gA, W.T)}


@njit
def _dot(n, a, b, out):
    """``n`` times out = a @ b through numpy's BLAS, as the step calls it (compiled per layout)."""
    for _ in range(n):
        np.dot(a, b, out)


def mkl_gemm(dtype: np.dtype) -> Callable | None:
    """The Fortran ``sgemm_`` / ``dgemm_`` of the MKL built into torch's CPU library, as a ctypes function (all 13
    arguments pointers), with MKL set to one thread on this thread; None where torch carries no MKL (an ARM build)."""
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        mkl = ctypes.CDLL(str(lib))
        fn = getattr(mkl, "sgemm_" if np.dtype(dtype) == np.float32 else "dgemm_")
        mkl.MKL_Set_Num_Threads_Local(1)  # it threads products as small as 32 x 32 x 256 otherwise
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = None, [ctypes.c_void_p] * 13
    return fn


def _mkl_loop(gemm: Callable) -> Callable:
    """A compiled loop of ``n`` row-major products out (m, k) = a (m, q) @ b (q, k) by MKL's column-major ``gemm``:
    out^T = b^T a^T. (Compiled here: the ctypes function is a constant of the code.)"""

    @njit
    def loop(n, a, b, out, dims, no, scalars):
        for _ in range(n):
            gemm(no.ctypes.data, no.ctypes.data, dims[0:].ctypes.data, dims[1:].ctypes.data, dims[2:].ctypes.data,
                 scalars.ctypes.data, b.ctypes.data, dims[0:].ctypes.data, a.ctypes.data, dims[2:].ctypes.data,
                 scalars[1:].ctypes.data, out.ctypes.data, dims[0:].ctypes.data)

    return loop


def mkl_product(loop: Callable, a: np.ndarray, b: np.ndarray) -> Callable[[int], np.ndarray]:
    """``run(n)``: n products a @ b (row-major copies) by ``_mkl_loop``'s ``loop``; returns the product."""
    ar, br = np.ascontiguousarray(a), np.ascontiguousarray(b)
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    dims = np.array([b.shape[1], a.shape[0], a.shape[1]], np.int32)  # column-major: out^T (k, m) = b^T (k, q) a^T
    no, scalars = np.frombuffer(b"N", np.uint8).copy(), np.array([1, 0], a.dtype)  # no transpose; alpha 1, beta 0

    def run(n: int) -> np.ndarray:
        loop(n, ar, br, out, dims, no, scalars)
        return out

    return run


@njit
def _tiles_loop(n, a, b, out):
    """``n`` times out = a @ b by ``engine.matmul``'s tiles, whatever ``matmul.OWN`` says here, as ``matmul`` takes
    them (b's rows contiguous)."""
    for _ in range(n):
        matmul._tiles(matmul._any_layout(a), b, out)


@njit
def _transposed_loop(n, a, bt, out, scratch):
    """``n`` times out = a @ bt^T by ``engine.matmul``'s tiles, as ``matmul_t`` takes them (bt C-contiguous, copied
    transposed into ``scratch`` first)."""
    for _ in range(n):
        matmul._transposed_tiles(matmul._any_layout(a), bt, out, scratch)


def tiles_product(n: int, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``n`` times out = a @ b by ``engine.matmul``'s tiles, whatever ``matmul.OWN`` says here: as ``matmul`` where b's
    rows are contiguous, else as ``matmul_t`` (b = B^T, a view of a C-contiguous B, copied into a scratch first)."""
    if b.strides[1] == b.itemsize:
        _tiles_loop(n, a, b, out)
    else:
        _transposed_loop(n, a, b.T, out, step.aligned_empty(b.size, b.dtype))


def product_us(case: Case, calls: int, repeats: int) -> dict[str, dict]:
    """Per product of ``products``: its shape (m x q x k), microseconds through numpy's BLAS at the step's layout;
    by ``engine.matmul``'s tiles (``matmul`` where B's rows are contiguous, ``matmul_t`` where B^T's are);
    through MKL with row-major operands (None without MKL), and whether MKL gave the bits numpy's BLAS gives for those
    row-major operands."""
    gemm = mkl_gemm(case.buf.dtype)
    loop = _mkl_loop(gemm) if gemm is not None else None
    out = {}
    for name, (a, b) in products(case).items():
        (m, q), k = a.shape, b.shape[1]
        blas = np.empty((m, k), a.dtype)
        row = {"shape": f"{m} x {q} x {k}", "blas_us": best_us(lambda n: _dot(n, a, b, blas), calls, repeats),
               "mkl_us": None, "mkl_same_bits": None}
        tiles = np.empty((m, k), a.dtype)
        row["tiles_us"] = best_us(lambda n: tiles_product(n, a, b, tiles), calls, repeats)
        if loop is not None:
            mkl = mkl_product(loop, a, b)
            row["mkl_us"] = best_us(mkl, calls, repeats)
            _dot(1, np.ascontiguousarray(a), np.ascontiguousarray(b), blas)  # numpy's, on the same row-major operands
            row["mkl_same_bits"] = bool(np.array_equal(blas, mkl(1)))
        out[name] = row
    return out


@intrinsic
def _ticks(typingctx):
    """The processor's time-stamp counter (``llvm.readcyclecounter``: rdtsc on x86-64, a constant rate there; 0 on
    targets without one)."""

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(fn, [])

    return types.int64(), codegen


@njit(error_model="numpy")
def _train_ticked(n, buf, xs, offset, setup, adam, work, out, ticks):
    """``n`` steps of ``engine.stretch.train_steps``' loop for one member (S = 1) on the batches xs (n, 1, B, L), the
    counter read around each part: ticks (12,) += the targets', each block's (``step.BLOCKS``, through
    ``step.run_block`` as ``step_in`` calls them) and Adam's update's, and ticks[11] += the whole loop's."""
    _, S, B, L = xs.shape
    target = np.empty((S, B), np.int64)
    first = _ticks()
    for k in range(n):
        t = _ticks()
        x = xs[k]
        for i in range(B):
            target[0, i] = x[0, i, L - 1 - offset]
        ticks[0] += _ticks() - t
        for which in range(len(step.BLOCKS)):
            t = _ticks()
            step.run_block(which, 0, buf, x, target, setup, out, work)
            ticks[1 + which] += _ticks() - t
        t = _ticks()
        adam_step(buf, out.grad, adam, k + 1)
        ticks[1 + len(step.BLOCKS)] += _ticks() - t
    ticks[2 + len(step.BLOCKS)] += _ticks() - first


def training_us(c: Config, steps: int) -> tuple[dict[str, float] | None, np.ndarray]:
    """Mean wall microseconds per step of each part of the first ``steps`` training steps of ``c`` (one member, seed
    0): the targets, the nine blocks, Adam's update (``_train_ticked``), what lies between them (the loop, the
    counter's own reads), and the whole step, the counter's ticks taken to microseconds by the whole loop's ticks and
    wall time (None where the counter reads 0); and the parameters (1, P) after those steps, ``train``'s (tests check
    them). The batches are seed 0's stream's, all drawn before the timed run
    (16 KB a step at the default task: 107 MB for 6667 steps)."""
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    opt = Optimizer(c.optimizer, table.pack(model), [c.lr])
    buf, adam = opt.update_arrays()
    B, L = c.batch, c.train_length
    xs = step.aligned_empty((steps, 1, B, L), step.TOKENS)  # aligned as training's (tables._room)
    draws.draw_steps(draws.mt_state(TrainStream(c, [0]).gens[0])[None], xs, c.vocab)
    setup = table._compiled_setup(L, opt.params.dtype)
    work = step.step_arrays(buf, setup, B, L)
    out = step.StepOut(np.zeros(1, buf.dtype), np.zeros(1, np.int64), np.zeros_like(buf))
    ticks = np.zeros(len(step.BLOCKS) + 3, np.int64)
    _train_ticked(1, buf.copy(), xs, c.offset, setup, adam._replace(m=adam.m.copy(), v=adam.v.copy()), work, out,
                  ticks.copy())  # compiled, and the working arrays touched once
    with flushed():  # subnormals as zero, as training runs (engine.denormals)
        start = time.perf_counter()
        _train_ticked(steps, buf, xs, c.offset, setup, adam, work, out, ticks)
        wall = time.perf_counter() - start
    if ticks[-1] == 0:
        return None, buf
    us = ticks[:-1] / ticks[-1] * wall / steps * 1e6  # ticks to microseconds: the whole loop's ticks took ``wall``
    names = ("targets", *step.BLOCKS, "Adam's update")
    parts = dict(zip(names, us.tolist()))
    step_us = wall / steps * 1e6
    return {**parts, "between the parts": step_us - sum(parts.values()), "whole step": step_us}, buf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--calls", type=int, default=2000, help="calls per timed block")
    p.add_argument("--repeats", type=int, default=7, help="timed blocks (the minimum is reported)")
    p.add_argument("--steps", type=int, default=6667, help="training steps timed inside training (the recipe's)")
    p.add_argument("--as-avx2", action="store_true",
                   help="run as an AVX2 machine without AVX-512 would (benchmarks.run.as_avx2_env)")
    a = p.parse_args()
    if a.calls < 1 or a.repeats < 1 or a.steps < 1:
        raise SystemExit(f"--calls {a.calls} --repeats {a.repeats} --steps {a.steps}: use at least 1 of each")
    if a.as_avx2:
        restart_as_avx2("benchmarks.profile_blocks")
    c = SMALL_STEPS.apply(Config()).replace(dtype=a.dtype)
    case = Case(c)
    print(processor_line(processor()))
    print(f"{c.recipe()}; {c.dtype}; B {case.B}, L {case.L}, V {case.setup.V}, d {case.setup.d}; one member, one "
          f"thread; wall microseconds per call, minimum of {a.repeats} blocks of {a.calls}")
    times = block_us(case, a.calls, a.repeats)
    for name, us in times.items():
        print(f"  {name:<26} {us:8.2f}")
    print(f"  {'sum of the blocks':<26} {sum(v for k, v in times.items() if k != 'whole step'):8.2f}")
    print(f"the step's products (m x q x k), microseconds: numpy's BLAS at the step's layout; engine.matmul's tiles, "
          f"B^T copied first for A B^T (the step takes them: {matmul.OWN}); MKL (torch's) row-major, and whether its "
          f"bits are numpy's BLAS's on the same row-major operands")
    for name, r in product_us(case, a.calls, a.repeats).items():
        bits = "same" if r["mkl_same_bits"] else "other"
        mkl = "no MKL" if r["mkl_us"] is None else f"{r['mkl_us']:6.2f} ({bits} bits)"
        print(f"  {name:<38} {r['shape']:>14} {r['blas_us']:6.2f} {r['tiles_us']:6.2f}   {mkl}")
    inside = training_us(c, a.steps)[0]
    if inside is None:
        print("inside training: not timed (no time-stamp counter on this processor)")
        return
    print(f"inside training: its first {a.steps} steps from seed 0, a fresh batch each step; mean wall microseconds "
          f"per step of each part (time-stamp counter; its rate from the whole loop's ticks and wall time)")
    for name, us in inside.items():
        print(f"  {name:<26} {us:8.2f}")


if __name__ == "__main__":
    main()
