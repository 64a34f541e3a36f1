"""The first compile shared with a helper process (``engine.first_compile``): the helper compiles the very functions
training then calls, with the argument types training calls them with; it runs once per dtype and cache folder, and
the step does not depend on it (a failed helper leaves the rest to this process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from lengthgen import Config, draws, train
from lengthgen.engine import first_compile, matmul, numerics, step, stretch
from lengthgen.model import Model
from lengthgen.tables import TableStep


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_shares_are_what_training_compiles(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """The argument types of each function of the shares and of both entries are the ones training calls it with:
    otherwise the helper's work would be compiled again here, and the split would save nothing. A model of ``dtype``
    trains with Adam (stretches: ``train_steps``) and one with normalised GD (single steps: ``step_in``); the calls
    of ``train_steps``, ``draw_steps`` and ``table_step`` are recorded, and fresh copies of ``step_in`` and
    ``train_steps`` (uncached, so that typing them registers what they call in each callee) are compiled for the
    types of those calls, and uncached copies of the blocks for their types (``step.block_types``), which registers
    the products' functions they call."""
    first_compile.compile_step(dtype, "train_steps")  # before the recorders stand in for the functions it compiles
    seen: dict[str, object] = {}
    train_steps, draw_steps, table_step = stretch.train_steps, draws.draw_steps, step.table_step
    monkeypatch.setattr(stretch, "train_steps", lambda **kw: (seen.setdefault("train_steps", kw), train_steps(**kw))[1])
    monkeypatch.setattr(draws, "draw_steps", lambda *a: (seen.setdefault("draw_steps", a), draw_steps(*a))[1])
    monkeypatch.setattr(step, "table_step", lambda *a: (seen.setdefault("table_step", a), table_step(*a))[1])
    train(Config(dtype=dtype, steps=150, target_accuracy=None), [0], progress=False)
    train(Config(dtype=dtype, steps=3, optimizer="ngd", lr=0.1), [0], progress=False)
    monkeypatch.undo()
    kw, t = seen["train_steps"], numba.typeof
    buf, x, target, setup, out, work = seen["table_step"]
    calls = {"train_steps": tuple(t(kw[name]) for name in ("n", "buf", "xs", "offsets", "setup", "update", "t0",
                                                           "history", "work", "stop")),
             "step_in": (t(buf), t(x), t(target), t(setup), t(out), t(work)),
             "draw_steps": tuple(t(a) for a in seen["draw_steps"])}
    for name in first_compile.ENTRIES:
        numba.njit(first_compile.function(name).py_func).compile(calls[name])
    for name in step.path(False):  # the entries call the blocks at their addresses: the copies type their callees
        copy = numba.njit(error_model="numpy", fastmath=numerics.FAST)(getattr(step, name).py_func)
        copy.compile(step.block_types(dtype)[name])
    types = first_compile.signatures(dtype)
    parts = (first_compile.HELPER, first_compile.HERE, first_compile.ENTRIES)
    named = [name for part in parts for name in part if name in types or name not in first_compile.TILES]
    assert sorted(named) == sorted(types), "each function in one share, the tiles where the step takes them"
    assert set(first_compile.TILES) <= set(types) if matmul.OWN else not set(first_compile.TILES) & set(types)
    for name, sig in types.items():
        assert sig == calls[name] if name in calls else sig in first_compile.function(name).signatures, (
            f"{name}: {sig} is not what training compiled")


def test_the_helper_runs_as_a_module() -> None:
    """``python -m lengthgen.engine.first_compile float32``, as ``compile_step`` starts it, exits cleanly (here the
    functions come from the cache the test above filled)."""
    done = subprocess.run([sys.executable, "-m", "lengthgen.engine.first_compile", "float32"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("fork", [True, False])
@pytest.mark.parametrize("helper_fails", [False, True])
def test_compile_step_starts_the_helper_once_per_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              fork: bool, helper_fails: bool) -> None:
    """The first call for a dtype starts the helper (a fork of this process, or ``python -m``) and compiles this
    process's share; the marker then keeps later calls, in this process or another, from doing it again. A helper that
    fails changes nothing of that. The forked helper compiles ``HELPER`` (seen here through a file it writes: its
    memory is its own) and never returns into this process's code."""
    if fork and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    started: list[list[str]] = []
    compiled: list[tuple] = []
    helper_ran = tmp_path / "helper-ran"
    popen = subprocess.Popen
    types = {"made": "before the helper starts"}

    def compile_these(names: tuple[str, ...], given: dict) -> None:
        assert given is types
        if names == first_compile.HELPER:  # in the forked helper
            helper_ran.write_text(",".join(names))
            if helper_fails:
                raise RuntimeError("the helper fails")
            return
        compiled.append(names)

    def helper(args, **kw):
        started.append(args)
        return popen([sys.executable, "-c", f"raise SystemExit({int(helper_fails)})"], **kw)

    monkeypatch.setattr(first_compile, "FORK", fork)
    monkeypatch.setattr(first_compile.subprocess, "Popen", helper)
    monkeypatch.setattr(first_compile, "compile_these", compile_these)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: types)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    first_compile.compile_step("float32", "train_steps")
    first_compile.compile_step("float32", "step_in")  # the same process: nothing
    if fork:
        assert started == [] and helper_ran.read_text() == ",".join(first_compile.HELPER)
    else:
        assert started == [[sys.executable, "-m", "lengthgen.engine.first_compile", "float32"]]
        assert not helper_ran.exists()
    assert compiled == [(*first_compile.HERE, "train_steps")]
    assert (tmp_path / "cache" / "first-compile-float32.done").exists()
    monkeypatch.setattr(first_compile, "_done", set())  # another process, the same cache folder: the marker
    first_compile.compile_step("float32", "train_steps")
    assert len(compiled) == 1 and len(started) == (0 if fork else 1)


@pytest.mark.skipif(not first_compile.FORK, reason="the helper is started, not forked, on this platform")
def test_the_forked_helper_writes_none_of_this_process_s_output(tmp_path: Path) -> None:
    """Output this process had buffered appears once: the forked helper leaves by ``os._exit``, which writes out no
    buffer it was forked with (an exit through Python's would write it a second time)."""
    code = ("import sys, numba; from lengthgen.engine import first_compile as fc; "
            "fc.compile_these = lambda names, types: None; fc.signatures = lambda dtype: {}; "
            f"numba.config.CACHE_DIR = {str(tmp_path)!r}; sys.stdout.write('once'); "
            "fc.compile_step('float32', 'train_steps')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == "once" and (tmp_path / "first-compile-float32.done").exists()


@pytest.mark.parametrize("fork", [True, False])
def test_no_helper_to_be_had_leaves_all_to_this_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         fork: bool) -> None:
    """Where no second process can be made (the fork or the start fails: memory, process limits), this process
    compiles its share and the entry as ever, the rest as it is called, and leaves the marker."""
    compiled: list[tuple] = []

    def fails(*args, **kw):
        raise OSError("no process to be had")

    monkeypatch.setattr(first_compile, "FORK", fork)
    monkeypatch.setattr(first_compile.os, "fork", fails)
    monkeypatch.setattr(first_compile.subprocess, "Popen", fails)
    monkeypatch.setattr(first_compile, "compile_these", lambda names, types: compiled.append(names))
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: {})
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    first_compile.compile_step("float32", "step_in")
    assert compiled == [(*first_compile.HERE, "step_in")]
    assert (tmp_path / "cache" / "first-compile-float32.done").exists()


def test_a_cache_folder_it_cannot_write_leaves_no_marker_and_no_error(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    popen = subprocess.Popen
    monkeypatch.setattr(first_compile.subprocess, "Popen", lambda args, **kw: popen([sys.executable, "-c", "pass"], **kw))
    monkeypatch.setattr(first_compile, "compile_these", lambda names, types: None)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: {})
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    first_compile.compile_step("float64", "step_in")
    assert not (tmp_path / "a-file" / "cache").exists()


def test_blocks_are_called_at_their_addresses_with_the_types_they_were_compiled_for() -> None:
    """``step.call`` runs a block's own machine code at the address ``Work.blocks`` holds: the addresses are those
    of the nine blocks of a setup's path (the table's, or RoPE's by lookup with four blocks of its own in place),
    compiled for ``step.block_types``; a call with other argument types (here a float64 parameter row beside float32
    working arrays) does not compile, rather than run code made for others."""
    table, lookup = step.block_addresses("float32", False), step.block_addresses("float32", True)
    assert step.path(False) == step.BLOCKS and len(set(step.path(True)) - set(step.BLOCKS)) == len(step.BY_LOOKUP)
    for where, names in ((table, step.path(False)), (lookup, step.path(True))):
        assert where.dtype == np.int64 and len(set(where.tolist())) == len(step.BLOCKS) and (where != 0).all()
        for name, address in zip(names, where):
            compiled = getattr(step, name).overloads[step.block_types("float32")[name]]
            assert compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name) == address
    assert [a == b for a, b in zip(table, lookup)] == [name not in step.BY_LOOKUP for name in step.BLOCKS]
    c = Config()
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    setup = table._compiled_setup(c.train_length, torch.float32)
    work = step.step_arrays(np.zeros(1, np.float32), setup, 2, c.train_length)

    @numba.njit
    def project(p, setup, work):
        step.call(step._project, work, (p, setup, work))

    with pytest.raises(numba.core.errors.TypingError, match="_project takes"):
        project(np.zeros(10, np.float64), setup, work)
    row = table.pack(model).numpy()[0]
    project(row, setup, work)  # the right types: it runs
    no_addresses = step._work(*step._arrays(np.dtype(np.float32), setup, 2, c.train_length))
    with pytest.raises(RuntimeError, match="no block addresses; make it with step_arrays"):
        project(row, setup, no_addresses)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_each_callee_of_the_blocks_is_compiled_once_per_dtype(dtype: str) -> None:
    """No block calls a separately compiled function with literal arguments: numba compiles a function anew for each
    literal it is passed (``matmul.lane_sums`` took 0.9 s each time, twice in ``_backward_table``'s first compile).
    Uncached copies of the blocks that call such functions are typed for ``dtype`` (a block loaded from the cache
    registers nothing in its callees); each callee then holds one signature of that dtype."""
    from lengthgen.engine import matmul, numerics

    for name in ("_attention", "_loss", "_backward_table"):
        block = getattr(step, name)
        numba.njit(error_model="numpy", fastmath=numerics.FAST)(block.py_func).compile(step.block_types(dtype)[name])
    floats = numba.from_dtype(np.dtype(dtype))
    for f in (matmul.lane_sums, numerics.exp_neg, numerics.log1p, step._less_row_max):
        mine = [sig for sig in f.signatures if sig[0].dtype == floats]  # the first argument an array of dtype
        assert len(mine) == 1, (f.py_func.__name__, mine)


@pytest.mark.skipif(not matmul.OWN, reason="the step takes numpy's BLAS here, not the tiles")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_block_calls_one_compiled_tile_function_per_dtype(dtype: str) -> None:
    """``matmul`` and ``matmul_t`` pass their left operand as an array of any layout, so the blocks link one
    ``_tiles`` and one ``_transposed_tiles`` per dtype (the helper of ``first_compile`` compiles exactly those), not
    one per layout of the operands (row-major, transposed views). Read from the functions each uncached copy of a
    block links in: their mangled names carry the argument types."""
    linked: set[str] = set()
    for name in step.FUNCTIONS:
        block = getattr(step, name)
        copy = numba.njit(error_model="numpy", fastmath=numerics.FAST)(block.py_func)
        sig = step.block_types(dtype)[name]
        copy.compile(sig)
        code = copy.overloads[sig].library.get_llvm_str()
        linked |= set(re.findall(r'define[^@]*@"?(\w*matmul\w*tiles\w*)', code))
    tiles = {re.search(r"matmul\d+(_\w*?tiles)B", f).group(1): f for f in linked}
    assert len(linked) == 2 and set(tiles) == {"_tiles", "_transposed_tiles"}, linked
    left = "5ArrayI" + ("f" if dtype == "float32" else "d") + "Li2E1A7mutable"  # the first argument, layout 'A'
    assert all(f[f.index("5Array"):].startswith(left) for f in linked), linked
    types = first_compile.signatures(dtype)  # the very signatures the helper compiles
    assert {types[name][0] for name in tiles} == {numba.types.Array(numba.from_dtype(np.dtype(dtype)), 2, "A")}
