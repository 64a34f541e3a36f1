"""The first compile of the step, on two cores.

A process that trains first on a machine (or after an edit of the compiled modules: ``jit_cache``) compiles the
step with numba: about 23 s of CPU for float32 on a 2-core AMD EPYC, in one thread (38 s before the two cuts in
benchmarks/README.md). The step's nine blocks (``engine.step``), the draws and the update are separate compiled
functions, each cached on disk, so a second process compiles part of them (``HELPER``) while this one compiles the rest
(``HERE``); this one then compiles the entry it calls (``train_steps`` or ``step_in``), loading the helper's share
from numba's cache, while the helper compiles what no entry links in (``LATER``). Measured on that machine, the
first training call of a new process (20 steps of Adam, lr 0.01, batch 256, no early stop, no weight decay), import
included: 41-43 s in one process; 25 s with the helper; 18-20 s with
``step_in`` inlined into ``train_steps`` and the working arrays passed as one reference (``step.Work``); and with
the entry compiled beside ``LATER``, a median of 18.0 s against 19.4 s over six alternated pairs
(benchmarks/README.md).

The helper only fills the cache: the compiled code is the same whichever process compiles it, and if the helper
fails or is slow, this process compiles what is missing itself, as it did before. ``compile_step`` does this once
per dtype and cache folder: a marker file beside numba's cache says it was done.
"""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import torch

from .. import draws
from ..optim import Optimizer, adam_step
from . import step, stretch

# The first compile in three parts. The helper process compiles HELPER while this one compiles HERE: together the
# step's blocks and the update, split so that each side takes about as long (each function's compile timed alone on a
# 2-core AMD EPYC, the helper's start included; the two blocks that call exp_neg, _attention and _loss, on one side,
# so that it is compiled once). Then the helper prints READY and compiles LATER, which no entry links in, while this
# process compiles the entry it was called for (``train_steps`` or ``step_in``: the blocks linked and optimised
# together, the one part that must wait for both shares).
HELPER = ("_attention", "_loss", "_backward_projections", "adam_step")
HERE = ("_backward_table", "_logit_table", "_backward_softmax", "_logits", "_project", "_backward_logits")
LATER = ("draw_steps",)
ENTRIES = ("train_steps", "step_in")
READY = "ready"  # the helper's line once its share is in numba's cache
HELPER_SECONDS = 300  # the longest this process waits for the helper at each of the two points
_done: set[str] = set()  # the dtypes compile_step has seen in this process


def signatures(dtype: str) -> dict[str, tuple[numba.types.Type, ...]]:
    """The argument types each function of ``HELPER``, ``HERE``, ``LATER`` and ``ENTRIES`` is called with when a model
    of ``dtype`` ("float32" or "float64") trains: taken from the arguments of a small model, as ``tables.TableStep``
    passes them (types do not depend on sizes)."""
    from ..config import Config
    from ..model import Model
    from ..tables import TableStep

    c = Config(dtype=dtype)
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    buf = table.pack(model)
    setup = table._compiled_setup(c.train_length, buf.dtype)
    p = buf.numpy()
    x, target = np.zeros((1, 2, c.train_length), np.int64), np.zeros((1, 2), np.int64)
    work = step.step_arrays(p, setup.kind, 2, c.train_length, setup.V, setup.d, setup.ec)
    _, adam = Optimizer("adam", buf, [c.lr]).adam_arrays()
    states = np.stack([draws.mt_state(torch.Generator().manual_seed(0))])
    t = numba.typeof
    row, su, w = t(p[0]), t(setup), t(work)
    out = step.StepOut(np.empty(1, p.dtype), np.empty(1, np.int64), np.empty_like(p))
    history = stretch.History(np.empty((1, 1), p.dtype), np.empty((1, 1), np.int64))
    xs = np.zeros((1, 1, 2, c.train_length), np.int64)  # (steps, S, B, L)
    return {"_project": (row, su, w), "_logit_table": (su, w), "_attention": (t(x[0]), su, w),
            "_logits": (t(x[0]), su, w), "_loss": (t(target[0]), su, w), "_backward_logits": (t(x[0]), su, w),
            "_backward_softmax": (t(x[0]), su, w), "_backward_table": (su, w),
            "_backward_projections": (row, row, su, w),
            "draw_steps": (t(states), t(xs), t(c.vocab)),
            "adam_step": (t(p), t(p), t(adam), t(1)),
            "train_steps": (t(1), t(p), t(xs), t(np.zeros(1, np.int64)), su, t(adam), t(0), t(history), w,
                            t(stretch.never_stop(1))),
            "step_in": (t(p), t(x), t(target), su, t(out), w)}


def function(name: str) -> numba.core.registry.CPUDispatcher:
    """The compiled function of that name (a block of ``engine.step`` or ``step.step_in``, ``draws.draw_steps``,
    ``optim.adam_step`` or ``stretch.train_steps``)."""
    return {"draw_steps": draws.draw_steps, "adam_step": adam_step,
            "train_steps": stretch.train_steps}.get(name) or getattr(step, name)


def compile_these(names: tuple[str, ...], dtype: str) -> None:
    """Compile (or load from numba's cache) the functions ``names`` for ``dtype``'s argument types."""
    types = signatures(dtype)
    for name in names:
        function(name).compile(types[name])


def compile_step(dtype: str, entry: str) -> None:
    """Before the first step of ``dtype`` in this process, which calls ``entry`` (one of ``ENTRIES``): where the
    marker says it was not done for this cache folder, compile ``HERE`` here while a helper process compiles
    ``HELPER``; once the helper says READY, compile ``entry`` here while it compiles ``LATER``; wait for it (at most
    ``HELPER_SECONDS`` at each point) and leave the marker. Otherwise nothing (a set lookup after the first call)."""
    if dtype in _done:
        return
    _done.add(dtype)
    folder = Path(numba.config.CACHE_DIR)  # where numba caches this version's functions (set by ``jit_cache``)
    marker = folder / f"first-compile-{dtype}.done"
    if marker.exists():
        return
    helper = subprocess.Popen([sys.executable, "-m", __name__, dtype], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        compile_these(HERE, dtype)
        if select.select([helper.stdout], [], [], HELPER_SECONDS)[0]:  # READY, or the end of a helper that failed
            helper.stdout.readline()
        compile_these((entry,), dtype)  # what the helper left out is compiled here, as it is called
        helper.wait(timeout=HELPER_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()
        helper.stdout.close()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a folder this process may not write to: numba cannot cache there either, so no marker
        pass


if __name__ == "__main__":  # the helper: python -m lengthgen.engine.first_compile float32
    compile_these(HELPER, sys.argv[1])
    print(READY, flush=True)
    compile_these(LATER, sys.argv[1])
