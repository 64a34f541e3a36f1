"""The first compile of the step, on two cores.

A process that trains first on a machine (or after an edit of the compiled modules: ``jit_cache``) compiles the
step with numba: about 19 s for float32 on a 2-core AMD EPYC in one process, import included (38 s before the cuts
in benchmarks/README.md). The step's nine blocks (``engine.step``), the draws and the update are separate compiled
functions, each cached on disk, so a second process compiles part of them (``HELPER``) while this one compiles the rest
(``HERE``); this one then compiles the entry it calls (``train_steps`` or ``step_in``), which calls the blocks'
machine code where it lies (``step.call``) rather than linking their code in, while the helper compiles what no entry
calls (``LATER``). Measured on that machine, the first training call of a new process (20 steps of Adam, lr 0.01,
batch 256, no early stop, no weight decay), import included: 41-43 s in one process; 25 s with the helper; 18-20 s
with ``step_in`` inlined into ``train_steps`` and the working arrays passed as one reference (``step.Work``); 13.5-13.7
s in a quick hour with the entry compiled beside ``LATER``; and 11.4-11.5 s in the same hour, alternated, once the
entry no longer compiles the blocks again (4.1 -> 1.2 s) and this process stops the helper after its last line
instead of waiting for its exit (benchmarks/README.md).

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
from ..optim import Optimizer, update_step
from . import step, stretch

# The first compile in three parts. The helper process compiles HELPER while this one compiles HERE: together the
# step's blocks, the update and ``step._work``, split so that each side takes about as long (timed on a 2-core AMD
# EPYC, the helper's start included; the two blocks that call exp_neg, _attention and _loss, on one side, so that it
# is compiled once). Then the helper prints READY and compiles LATER, which no entry calls, while this process
# compiles the entry it was called for (``train_steps`` or ``step_in``: it needs every block compiled, for their
# types and addresses, so it waits for both shares); the helper prints DONE when LATER is in the cache.
HELPER = ("_attention", "_loss", "_backward_projections", "update_step")
HERE = ("_backward_table", "_logit_table", "_backward_softmax", "_logits", "_project", "_backward_logits", "_work")
LATER = ("draw_steps",)
ENTRIES = ("train_steps", "step_in")
READY = "ready"  # the helper's line once its share is in numba's cache
DONE = "done"  # its line once LATER is too; this process then stops it rather than wait for its exit (0.4 s)
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
    x, target = np.zeros((1, 2, c.train_length), step.TOKENS), np.zeros((1, 2), np.int64)
    blocks = step.block_types(dtype)
    w = blocks["_logit_table"][1]  # the Work's type (step_arrays would compile the blocks for their addresses)
    _, update = Optimizer("adam", buf, [c.lr]).update_arrays()
    states = np.stack([draws.mt_state(torch.Generator().manual_seed(0))])
    t = numba.typeof
    su = t(setup)
    out = step.StepOut(np.empty(1, p.dtype), np.empty(1, np.int64), np.empty_like(p))
    history = stretch.History(np.empty((1, 1), p.dtype), np.empty((1, 1), np.int64))
    xs = np.zeros((1, 1, 2, c.train_length), step.TOKENS)  # (steps, S, B, L)
    return {**blocks,
            "_work": (numba.types.Tuple(tuple(map(t, step._arrays(p.dtype, setup, 2, c.train_length)))),),
            "draw_steps": (t(states), t(xs), t(c.vocab)),
            "update_step": (t(p), t(p), t(update), t(1)),
            "train_steps": (t(1), t(p), t(xs), t(np.zeros(1, np.int64)), su, t(update), t(0), t(history), w,
                            t(stretch.never_stop(1))),
            "step_in": (t(p), t(x), t(target), su, t(out), w)}


def function(name: str) -> numba.core.registry.CPUDispatcher:
    """The compiled function of that name (a block of ``engine.step``, ``step.step_in`` or ``step._work``,
    ``draws.draw_steps``, ``optim.update_step`` or ``stretch.train_steps``)."""
    return {"draw_steps": draws.draw_steps, "update_step": update_step,
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
        _next_line(helper)  # READY
        compile_these((entry,), dtype)  # what the helper left out is compiled here, as it is called
        _next_line(helper)  # DONE
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


def _next_line(helper: subprocess.Popen) -> None:
    """Wait for the helper's next line (``READY``, ``DONE``), at most ``HELPER_SECONDS``; a helper that failed
    ends its output, which ends the wait too."""
    if select.select([helper.stdout], [], [], HELPER_SECONDS)[0]:
        helper.stdout.readline()


if __name__ == "__main__":  # the helper: python -m lengthgen.engine.first_compile float32
    compile_these(HELPER, sys.argv[1])
    print(READY, flush=True)
    compile_these(LATER, sys.argv[1])
    print(DONE, flush=True)
