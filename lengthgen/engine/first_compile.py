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

Since the twenty-third session the float32 helper is forked when the package is imported (``start``, called by
``lengthgen/__init__.py`` before anything imports torch), where the marker says the first compile is still to be
done: the other core then compiles while this process imports torch and the rest (about 2 s of the 13), and the
helper's share is of the modules that import no torch (``engine.step``, ``engine.matmul``). The first training call
as above, alternated with the tree before on the same 2-core AMD EPYC: 11.82, 12.25 -> 11.10, 11.51 s in a quick
minute, 20.03, 19.84 -> 17.91, 18.57 s in a slow one (benchmarks/README.md). A process that never trains lets its
helper stop before its next function (``_leave``); ``LENGTHGEN_COMPILE_AT_IMPORT=0`` forks none at import.

Since the twenty-fourth session that helper does not stop at its share while this process has not begun its first
compile: it goes on with this process's share and the entry ``train_steps`` (``go_on``), one function at a time, each
claimed first from a pipe that this process empties when its first compile begins (``_claims``), so that no function is
compiled twice; where the helper compiled all of it, it leaves the marker. A notebook imports the package, then runs a
few cells before it trains: the training call above that followed the import after a pause of 10 s took 3.1-3.3 s in
three runs of four (7.4 s in a slower minute, the helper not yet past its share) against 7.2-9.1 s before, after 15 or
20 s 0.45-0.53 s against 6.8-9.2 s (a 2-core AMD EPYC Zen 4, alternated); one that follows at once is as before
(benchmarks/README.md).

The helper only fills the cache: the compiled code is the same whichever process compiles it, and if the helper
fails or is slow, this process compiles what is missing itself, as it did before. ``compile_step`` does this once
per dtype and cache folder: a marker file beside numba's cache says it was done.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import numba
import numpy as np
from numba.core.compiler_lock import global_compiler_lock

from . import matmul, step  # no torch: this module is imported, and the helper forked, before torch (``start``)

# The helper as a fork of this process where that is safe (Linux; macOS's system libraries may not survive a fork of a
# process that has used them, and Windows has none), else started as ``python -m lengthgen.engine.first_compile``.
FORK = sys.platform.startswith("linux")

# The first compile in two shares. The helper process compiles HELPER while this one compiles HERE and then the entry it
# was called for (``train_steps`` or ``step_in``, which call the blocks at their addresses and so compile without them:
# ``step.call``); the helper writes DONE once its share (and what it claimed past it: ``go_on``) is in numba's cache.
# HELPER starts with the products' tiles (``matmul``: where the step takes them, ``_tiles`` and ``_transposed_tiles``;
# ``lane_sums`` everywhere), so that the blocks which call them find them compiled, here (which reaches them after the
# update and the draws) or in the helper. The two blocks that call exp_neg, _attention and _loss, are in one share, so
# that it is compiled once. A forked helper's share (``FORK``) holds only functions of modules that do not import torch
# (``engine.step`` and ``engine.matmul``), so that it can be forked when the package is imported, before torch is
# (``start``); the update (``optim``) and the draws (``draws``) are compiled here, or past its share by the helper
# forked at import. Sized on a 2-core AMD EPYC (Zen 3) so that both end about together; a started helper (no ``FORK``)
# begins some 2 s later than this process's share (its own interpreter and import) and takes a smaller share, with the
# draws.
DRAWS = ("draw_steps", "mt_read", "mt_write")  # the batches' draws, and mt_state's reads and writes of the generators
TILES = ("_tiles", "_transposed_tiles")  # compiled only where the step takes them (``matmul.OWN``)
if FORK:
    HELPER = (*TILES, "lane_sums", "_backward_table", "_backward_projections", "_logit_table", "_attention", "_loss",
              "_backward_softmax")
    HERE = ("update_step", *DRAWS, "_logits", "_backward_logits", "_project", "_work")
else:
    HELPER = (*TILES, "lane_sums", "_backward_table", "_backward_projections", "_logit_table", "_logits",
              "_backward_logits", "_backward_softmax", "_project", "_work")
    HERE = ("_attention", "_loss", "update_step", *DRAWS)
ENTRIES = ("train_steps", "step_in")
DONE = "done"  # the helper's line once its share is in numba's cache; this process then stops it (its exit: 0.4 s)
HELPER_SECONDS = 300  # the longest this process waits for the helper
AT_IMPORT = "LENGTHGEN_COMPILE_AT_IMPORT"  # set to 0: no helper forked when the package is imported (``start``)
_done: set[str] = set()  # the dtypes compile_step has seen in this process


class Helper(NamedTuple):
    """A helper process (``_forked``, ``_started``)."""

    pid: int  # its process id
    parent: int  # the process id of the process that made it (a process forked from that one may not use it)
    done: int  # the read end of its pipe: readable once it wrote ``DONE`` or ended
    stop: Callable[[], None]  # ends it and collects it (once its share is written: ``compile_step``)
    later: tuple[str, ...] = ()  # what it goes on with past its share, each claimed first (``start``: ``go_on``)
    claims: int = -1  # the read end of the pipe of those claims (``_claims``), or -1: it stops after its share


_early: dict[str, Helper] = {}  # the helper ``start`` forked, by dtype, until ``compile_step`` takes it


def step_signatures(dtype: str) -> dict[str, tuple[numba.types.Type, ...]]:
    """The argument types of the functions of ``engine.step`` and ``engine.matmul`` that training calls for
    ``dtype`` ("float32" or "float64"): the blocks (``step.block_types``), the products' functions as the blocks call
    them (``TILES`` only where the step takes them) and ``step._work``. Made of numpy arrays alone, so that a helper
    can be forked before torch is imported (``start``)."""
    blocks = {name: step.block_types(dtype)[name] for name in step.path(False)}  # the table's (RoPE by lookup: later)
    work = blocks["_logit_table"][1]  # the Work's type: its fields are the types of the arrays ``_work`` is given
    f = numba.from_dtype(np.dtype(dtype))
    any2, rows, row, i = (numba.types.Array(f, 2, "A"), numba.types.Array(f, 2, "C"), numba.types.Array(f, 1, "C"),
                          numba.typeof(1))
    tiles = {"_tiles": (any2, rows, rows), "_transposed_tiles": (any2, rows, rows, row)} if matmul.OWN else {}
    return {**blocks, **tiles, "lane_sums": (rows, i, i, i, i, i, i, rows, rows, rows, i, i, rows, i, i),
            "_work": (numba.types.Tuple(tuple(work.field_dict[name] for name in step.StepArrays._fields)),)}


def signatures(dtype: str) -> dict[str, tuple[numba.types.Type, ...]]:
    """The argument types each function of ``HELPER``, ``HERE`` and ``ENTRIES`` is called with when a model of
    ``dtype`` ("float32" or "float64") trains: those of ``step_signatures``, and for the draws, the update and the
    entries, taken from the arguments of a small model, as ``tables.TableStep`` passes them (types do not depend on
    sizes)."""
    from ..config import Config  # here, not above: these import torch
    from ..model import Model
    from ..optim import Optimizer
    from ..tables import TableStep
    from . import stretch

    c = Config(dtype=dtype)
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    buf = table.pack(model)
    setup = table._compiled_setup(c.train_length, buf.dtype)
    p = buf.numpy()
    x, target = np.zeros((1, 2, c.train_length), step.TOKENS), np.zeros((1, 2), np.int64)
    free = step_signatures(dtype)
    w = free["_logit_table"][1]  # the Work's type (step_arrays would compile the blocks)
    _, update = Optimizer("adam", buf, [c.lr]).update_arrays()
    states, mt = np.zeros((1, 1), np.uint32), np.zeros(1, np.uint32)  # (S, 626) ``draws.mt_state``; (626,) one
    t = numba.typeof
    su = t(setup)
    out = step.StepOut(np.empty(1, p.dtype), np.empty(1, np.int64), np.empty_like(p))
    history = stretch.History(np.empty((1, 1), p.dtype), np.empty((1, 1), np.int64))
    xs = np.zeros((1, 1, 2, c.train_length), step.TOKENS)  # (steps, S, B, L)
    return {**free,
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
    if name in (*TILES, "lane_sums"):
        return getattr(matmul, name)
    if hasattr(step, name):
        return getattr(step, name)
    from .. import draws  # here, not above: these import torch (a helper forked before it compiles none of them)
    from ..optim import update_step
    from . import stretch

    return {"draw_steps": draws.draw_steps, "mt_read": draws.mt_read, "mt_write": draws.mt_write,
            "update_step": update_step, "train_steps": stretch.train_steps}[name]


def go_on(free: dict[str, tuple[numba.types.Type, ...]]) -> tuple[str, ...]:
    """What the helper forked at import compiles once its share is done, for as long as this process has not begun
    its first compile (``compile_step`` then claims the rest: ``_claims``): ``HERE``'s functions whose types need no
    torch (those of ``free``, ``step_signatures``), then the others (the helper imports torch for their types:
    ``signatures``), then ``train_steps``, the entry ``train`` calls. A notebook that imports the package and trains a
    few cells later then finds most or all of the step compiled."""
    return (*[n for n in HERE if n in free], *[n for n in HERE if n not in free], ENTRIES[0])


def _claims(names: tuple[str, ...]) -> int:
    """A pipe holding one byte per function of ``names`` (its index there), its write end already closed; the read
    end is returned. Whoever reads a byte has claimed that function: a read hands each byte to one reader only, so
    the helper and this process never compile the same function, and an empty pipe (end of file) says all are
    claimed."""
    read, write = os.pipe()
    try:
        os.write(write, bytes(range(len(names))))
    finally:
        os.close(write)
    return read


def _claim_rest(helper: Helper) -> set[str]:
    """This process's claims: every function of ``helper.later`` the helper has not claimed yet (the pipe read to
    its end, then closed)."""
    names: set[str] = set()
    while got := os.read(helper.claims, 256):
        names.update(helper.later[i] for i in got)
    os.close(helper.claims)
    return names


def compile_these(names: tuple[str, ...], types: dict[str, tuple[numba.types.Type, ...]],
                  parent: int | None = None) -> None:
    """Compile (or load from numba's cache) the functions ``names`` for their argument types ``types``
    (``signatures``; those of ``TILES`` only where it has them); in a helper, none after the process ``parent`` that
    forked it has ended (its parent is then another: ``_leave``)."""
    for name in names:
        if parent is not None and os.getppid() != parent:
            return
        if name in types:
            function(name).compile(types[name])


def _marker(dtype: str) -> Path:
    """The file that says the first compile of ``dtype`` was done for numba's cache folder of this version."""
    return Path(numba.config.CACHE_DIR) / f"first-compile-{dtype}.done"


def _mark(dtype: str) -> None:
    """Leave the marker of ``dtype``'s first compile (``compile_step``, or the helper that compiled all of it); none
    where its folder cannot be written to (numba cannot cache there either)."""
    marker = _marker(dtype)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass


def start(dtype: str = "float32") -> None:
    """When the package is imported, before torch (``lengthgen/__init__.py``): where the first compile of ``dtype``
    is still to be done (no marker), ``FORK`` holds and ``LENGTHGEN_COMPILE_AT_IMPORT`` is not 0, fork the helper now,
    so that it compiles ``HELPER`` while this process imports torch and the rest, on the core that import leaves idle;
    ``compile_step`` then takes it instead of forking one. Where the cache folder cannot be made or the fork fails,
    nothing: ``compile_step`` forks one as before. In a process that never trains, the helper ends soon after that
    process (``_leave``)."""
    marker = _marker(dtype)
    if not FORK or os.environ.get(AT_IMPORT) == "0" or dtype in _early or marker.exists():
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)  # a folder this process may not write to: no helper
        free = step_signatures(dtype)
        later = go_on(free)
        claims = _claims(later)
        try:
            helper = _forked(free, dtype, later, claims)
        except OSError:
            os.close(claims)
            raise
    except OSError:
        return
    _early[dtype] = helper
    atexit.register(_leave, dtype, helper)


def _leave(dtype: str, helper: Helper) -> None:
    """At the exit of the process that forked ``helper`` at import, if ``compile_step`` never took it: the helper
    stops before its next function (``compile_these``: its parent is then another), so that what it writes is whole
    (numba writes each cache file under a temporary name and renames it; a kill in between would leave that file
    behind) and the next process loads it instead of compiling it; collected now if it has ended already."""
    if _early.get(dtype) is not helper or os.getpid() != helper.parent:  # taken (and ended), or not this process's
        return
    if helper.claims >= 0:
        os.close(helper.claims)
    os.close(helper.done)
    os.waitpid(helper.pid, os.WNOHANG)


def compile_step(dtype: str, entry: str) -> None:
    """Before the first step of ``dtype`` in this process, which calls ``entry`` (one of ``ENTRIES``): where the
    marker says it was not done for this cache folder, compile ``HERE`` and ``entry`` here while a helper process
    compiles ``HELPER`` (the one ``start`` forked when this process imported the package, else one made now); of
    those, the helper forked at import may have claimed and compiled some since its share (``go_on``): this process
    claims the rest and compiles only those. Wait for its ``DONE`` (at most ``HELPER_SECONDS``), end it and leave the
    marker. Otherwise nothing (a set lookup after the first call)."""
    if dtype in _done:
        return
    _done.add(dtype)
    marker = _marker(dtype)
    if marker.exists():
        return
    types = signatures(dtype)
    helper = _early.pop(dtype, None)
    here = (*HERE, entry)
    if helper is not None and helper.parent == os.getpid() and helper.claims >= 0:  # forked at import: what is left
        mine = _claim_rest(helper)
        here = tuple(name for name in here if name in mine or name not in helper.later)
    elif helper is None or helper.parent != os.getpid():  # none at import, or one forked by this one's parent
        try:
            helper = _forked(types) if FORK else _started(dtype)
        except OSError:  # no second process to be had (memory, process limits): this one compiles all, as it is called
            helper = None
    try:
        compile_these(here, types)
        if helper is not None:  # DONE, or the helper's end; what it left undone is compiled here, as it is called
            select.select([helper.done], [], [], HELPER_SECONDS)
    finally:
        if helper is not None:
            helper.stop()
    _mark(dtype)


def _forked(types: dict[str, tuple[numba.types.Type, ...]], dtype: str = "float32", later: tuple[str, ...] = (),
            claims: int = -1) -> Helper:
    """The helper as a fork of this process: it has the modules imported and ``types`` made, compiles ``HELPER``, then
    each function of ``later`` that it claims from the pipe ``claims`` before this process does (``_claims``; none
    where ``claims`` is -1; where it claimed all, it leaves the marker of ``dtype``'s first compile, so that this
    process's ``compile_step`` and later processes' ``start`` do nothing), writes ``DONE`` into a pipe and leaves by
    ``os._exit`` (none of this process's exit handlers, nothing of its buffered output written twice; its own output
    goes to the null device). It compiles no function once this process has ended (``_leave``). Forked while this
    thread holds numba's compiler lock, so that no other thread of this process is compiling at that moment."""
    read, write = os.pipe()
    parent = os.getpid()
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
            compile_these(HELPER, types, parent)
            mine: list[str] = []
            while claims >= 0 and os.getppid() == parent and (claim := os.read(claims, 1)):
                name = later[claim[0]]
                if name not in types:  # the update, the draws, the entry: types made with torch (imported here now)
                    types = signatures(dtype)
                compile_these((name,), types, parent)
                mine.append(name)
            if later and len(mine) == len(later) and os.getppid() == parent:  # all of it compiled here: the marker
                _mark(dtype)
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

    return Helper(pid, parent, read, stop, later, claims)


def _started(dtype: str) -> Helper:
    """The helper as a new process, ``python -m lengthgen.engine.first_compile dtype`` (where ``FORK`` is false):
    its own interpreter and import; its ``done`` is the read end of its output."""
    helper = subprocess.Popen([sys.executable, "-m", __name__, dtype], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)

    def stop() -> None:
        if helper.poll() is None:
            helper.kill()
        helper.wait()
        helper.stdout.close()

    return Helper(helper.pid, os.getpid(), helper.stdout.fileno(), stop)


if __name__ == "__main__":  # the started helper: python -m lengthgen.engine.first_compile float32
    compile_these(HELPER, signatures(sys.argv[1]))
    print(DONE, flush=True)
