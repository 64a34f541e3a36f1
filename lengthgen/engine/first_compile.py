"""The first compile of the step, on two cores.

A process that trains first on a machine (or after an edit of the compiled modules: ``jit_cache``) compiles the
step with numba: about 19 s for float32 on a 2-core AMD EPYC in one process, import included (38 s before the cuts
in benchmarks/README.md). The step's nine blocks (``engine.step``), the products' tiles, the draws and the update are
separate compiled functions, each cached on disk, so a second process compiles part of them (``HELPER``) while this
one compiles the rest (``HERE``) and then the entry it calls (``train_steps`` or ``step_in``), which calls the
blocks' machine code where it lies (``step.call``) rather than linking their code in, and compiles without them.
Measured on that machine, the first training call of a new process (20 steps of Adam, lr 0.01, batch 256, no early
stop, no weight decay), import included: 41-43 s in one process; 25 s with the helper; 18-20 s with ``step_in``
inlined into ``train_steps`` and the working arrays passed as one reference (``step.Work``); 11.4-11.5 s in a quick
hour of the fifth session once the entry no longer compiled the blocks again. The products' tiles since then made
each block longer to compile (the same tree of that session 13.3-14.2 s against 16.0-17.7 s, alternated, in the
seventeenth); with the tiles compiled once per dtype and once per first compile (both processes compiled them) and
the entry compiled beside the blocks: 15.7-15.8 -> 14.3-14.4 s, three rounds alternated; with RoPE by lookup in
blocks of its own (``step.BY_LOOKUP``), compiled only for the models that take it, the two shares end together at
13.4-13.6 s; with the helper a fork of this process (``FORK``, on Linux: no interpreter to start and nothing to
import, 1.7 s there) and the shares sized again, 11.8-12.0 s against 12.6-13.0 s, four rounds alternated in the
eighteenth session (benchmarks/README.md). With no array viewed as another dtype in compiled code (the generators'
states in ``draws.mt_read``, ``numerics.log1p``), the draws 2.4-4.0 -> 1.3-1.6 s to compile and ``_loss`` about 0.4 s
less (one process, CPU time; twentieth session).

The helper only fills the cache: the compiled code is the same whichever process compiles it, and if the helper
fails or is slow, this process compiles what is missing itself, as it did before. ``compile_step`` does this once
per dtype and cache folder: a marker file beside numba's cache says it was done.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numba
import numpy as np
from numba.core.compiler_lock import global_compiler_lock

from .. import draws
from ..optim import Optimizer, update_step
from . import matmul, step, stretch

# The helper as a fork of this process where that is safe (Linux; macOS's system libraries may not survive a fork of a
# process that has used them, and Windows has none), else started as ``python -m lengthgen.engine.first_compile``.
FORK = sys.platform.startswith("linux")

# The first compile in two shares. The helper process compiles HELPER while this one compiles HERE and then the entry it
# was called for (``train_steps`` or ``step_in``, which call the blocks at their addresses and so compile without
# them: ``step.call``); the helper writes DONE once its share is in numba's cache. HELPER starts with the products'
# tiles (``matmul``: where the step takes them, ``_tiles`` and ``_transposed_tiles``; ``lane_sums`` everywhere), so
# that the blocks which call them, in HELPER first, find them compiled (``_project``, when here, comes late enough to
# load them from the cache). The two blocks that call exp_neg, _attention and _loss, are both here, so that it is
# compiled once. Sized on a 2-core AMD EPYC (Zen 3) so that both end about together: a forked helper (``FORK``) starts
# compiling at once and takes the draws, ``_project`` and ``_work`` are compiled here; a started one begins some 2 s
# later (its own interpreter and import) and takes those two instead of the draws.
DRAWS = ("draw_steps", "mt_read", "mt_write")  # the batches' draws, and mt_state's reads and writes of the generators
HELPER = ("_tiles", "_transposed_tiles", "lane_sums", "_backward_table", "_backward_projections", "_logit_table",
          "_logits", "_backward_logits", "_backward_softmax", *(DRAWS if FORK else ("_project", "_work")))
HERE = ("_attention", "_loss", "update_step", *(("_project", "_work") if FORK else DRAWS))
ENTRIES = ("train_steps", "step_in")
TILES = ("_tiles", "_transposed_tiles")  # compiled only where the step takes them (``matmul.OWN``)
DONE = "done"  # the helper's line once its share is in numba's cache; this process then stops it (its exit: 0.4 s)
HELPER_SECONDS = 300  # the longest this process waits for the helper
_done: set[str] = set()  # the dtypes compile_step has seen in this process


def signatures(dtype: str) -> dict[str, tuple[numba.types.Type, ...]]:
    """The argument types each function of ``HELPER``, ``HERE`` and ``ENTRIES`` is called with when a model of
    ``dtype`` ("float32" or "float64") trains: taken from the arguments of a small model, as ``tables.TableStep``
    passes them (types do not depend on sizes); the products' functions as the blocks call them (``TILES`` only where
    the step takes them)."""
    from ..config import Config
    from ..model import Model
    from ..tables import TableStep

    c = Config(dtype=dtype)
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    buf = table.pack(model)
    setup = table._compiled_setup(c.train_length, buf.dtype)
    p = buf.numpy()
    x, target = np.zeros((1, 2, c.train_length), step.TOKENS), np.zeros((1, 2), np.int64)
    blocks = {name: step.block_types(dtype)[name] for name in step.path(False)}  # the table's (RoPE by lookup: later)
    w = blocks["_logit_table"][1]  # the Work's type (step_arrays would compile the blocks for their addresses)
    _, update = Optimizer("adam", buf, [c.lr]).update_arrays()
    states, mt = np.zeros((1, 1), np.uint32), np.zeros(1, np.uint32)  # (S, 626) ``draws.mt_state``; (626,) one
    t = numba.typeof
    su = t(setup)
    out = step.StepOut(np.empty(1, p.dtype), np.empty(1, np.int64), np.empty_like(p))
    history = stretch.History(np.empty((1, 1), p.dtype), np.empty((1, 1), np.int64))
    xs = np.zeros((1, 1, 2, c.train_length), step.TOKENS)  # (steps, S, B, L)
    f = numba.from_dtype(np.dtype(dtype))
    any2, rows, row, i = numba.types.Array(f, 2, "A"), numba.types.Array(f, 2, "C"), numba.types.Array(f, 1, "C"), t(1)
    tiles = {"_tiles": (any2, rows, rows), "_transposed_tiles": (any2, rows, rows, row)} if matmul.OWN else {}
    return {**blocks, **tiles,
            "lane_sums": (rows, i, i, i, i, i, i, rows, rows, rows, i, i, rows, i, i),
            "_work": (numba.types.Tuple(tuple(map(t, step._arrays(p.dtype, setup, 2, c.train_length)))),),
            "draw_steps": (t(states), t(xs), t(c.vocab)),
            "mt_read": (t(mt), t(mt)), "mt_write": (t(mt), t(mt)),
            "update_step": (t(p), t(p), t(update), t(1)),
            "train_steps": (t(1), t(p), t(xs), t(np.zeros(1, np.int64)), su, t(update), t(0), t(history), w,
                            t(stretch.never_stop(1))),
            "step_in": (t(p), t(x), t(target), su, t(out), w)}


def function(name: str) -> numba.core.registry.CPUDispatcher:
    """The compiled function of that name (a block of ``engine.step``, ``step.step_in`` or ``step._work``, a
    function of ``engine.matmul``, ``draws.draw_steps``, ``mt_read`` or ``mt_write``, ``optim.update_step`` or
    ``stretch.train_steps``)."""
    return {"draw_steps": draws.draw_steps, "mt_read": draws.mt_read, "mt_write": draws.mt_write,
            "update_step": update_step, "train_steps": stretch.train_steps,
            **{name: getattr(matmul, name) for name in (*TILES, "lane_sums")}}.get(name) or getattr(step, name)


def compile_these(names: tuple[str, ...], types: dict[str, tuple[numba.types.Type, ...]]) -> None:
    """Compile (or load from numba's cache) the functions ``names`` for their argument types ``types``
    (``signatures``; those of ``TILES`` only where it has them)."""
    for name in names:
        if name in types:
            function(name).compile(types[name])


def compile_step(dtype: str, entry: str) -> None:
    """Before the first step of ``dtype`` in this process, which calls ``entry`` (one of ``ENTRIES``): where the
    marker says it was not done for this cache folder, compile ``HERE`` and ``entry`` here while a helper process
    compiles ``HELPER``; wait for its ``DONE`` (at most ``HELPER_SECONDS``) and leave the marker. Otherwise nothing (a
    set lookup after the first call)."""
    if dtype in _done:
        return
    _done.add(dtype)
    folder = Path(numba.config.CACHE_DIR)  # where numba caches this version's functions (set by ``jit_cache``)
    marker = folder / f"first-compile-{dtype}.done"
    if marker.exists():
        return
    types = signatures(dtype)  # before a fork: the helper then runs no torch operation
    try:
        done, stop = _forked(types) if FORK else _started(dtype)
    except OSError:  # no second process to be had (memory, process limits): this one compiles all, as it is called
        done, stop = None, lambda: None
    try:
        compile_these((*HERE, entry), types)
        if done is not None:  # DONE, or the helper's end; what it left undone is compiled here, as it is called
            select.select([done], [], [], HELPER_SECONDS)
    finally:
        stop()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a folder this process may not write to: numba cannot cache there either, so no marker
        pass


def _forked(types: dict[str, tuple[numba.types.Type, ...]]) -> tuple[int, Callable[[], None]]:
    """The helper as a fork of this process: it has the modules imported and ``types`` made, compiles ``HELPER``,
    writes ``DONE`` into a pipe and leaves by ``os._exit`` (none of this process's exit handlers, nothing of its
    buffered output written twice; its own output goes to the null device). Forked while this thread holds numba's
    compiler lock, so that no other thread of this process is compiling at that moment. Returns the pipe's read end
    (readable once the helper wrote ``DONE`` or ended) and a function that ends the helper."""
    read, write = os.pipe()
    try:
        with global_compiler_lock:
            pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:  # the helper
        code = 1
        try:
            os.close(read)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            compile_these(HELPER, types)
            os.write(write, f"{DONE}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)

    def stop() -> None:
        os.close(read)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it had ended (and is collected below)
            pass
        os.waitpid(pid, 0)

    return read, stop


def _started(dtype: str) -> tuple[int, Callable[[], None]]:
    """The helper as a new process, ``python -m lengthgen.engine.first_compile dtype`` (where ``FORK`` is false):
    its own interpreter and import. Returns the read end of its output (readable once it printed ``DONE`` or ended)
    and a function that ends it."""
    helper = subprocess.Popen([sys.executable, "-m", __name__, dtype], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)

    def stop() -> None:
        if helper.poll() is None:
            helper.kill()
        helper.wait()
        helper.stdout.close()

    return helper.stdout.fileno(), stop


if __name__ == "__main__":  # the started helper: python -m lengthgen.engine.first_compile float32
    compile_these(HELPER, signatures(sys.argv[1]))
    print(DONE, flush=True)
