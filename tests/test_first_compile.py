"""The first compile shared with a helper process (``engine.first_compile``): the helper compiles the very functions
training then calls, with the argument types training calls them with; it runs once per dtype and cache folder, and
the step does not depend on it (a failed helper leaves the rest to this process)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from lengthgen import Config, draws, train
from lengthgen.engine import first_compile, matmul, numerics, step, stretch
from lengthgen.model import Model
from lengthgen.tables import TableStep


def _wait_for(path: Path, seconds: float = 120) -> None:
    """Until ``path`` exists (another process makes it), at most ``seconds``."""
    for _ in range(int(seconds * 20)):
        if path.exists():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not appear")


def _first_run(code: str, cache: Path) -> str:
    """The output of ``python -c code`` run as a first run: numba's cache in the empty folder ``cache``, the helper
    at import not switched off."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop(first_compile.AT_IMPORT, None)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_shares_are_what_training_compiles(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """The argument types of each function of the shares and of both entries are the ones training calls it with:
    otherwise the helper's work would be compiled again here, and the split would save nothing. A model of ``dtype``
    trains with Adam (stretches: ``train_steps``) and one with normalised GD (single steps: ``step_in``); the calls
    of ``train_steps``, ``draw_steps`` and ``table_step`` are recorded, and fresh copies of ``step_in`` and
    ``train_steps`` (uncached, so that typing them registers what they call in each callee) are compiled for the
    types of those calls, and uncached copies of the blocks for their types (``step.block_types``), which registers
    the products' functions they call. A forked helper's share is all in ``step_signatures`` (the types it has when
    it is forked before torch is imported)."""
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
    free = first_compile.step_signatures(dtype)  # what a helper forked before torch is given
    if first_compile.FORK:
        assert {name for name in first_compile.HELPER if name in types} <= set(free)
    assert all(free[name] == sig for name, sig in types.items() if name in free)
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

    def compile_these(names: tuple[str, ...], given: dict, parent: int | None = None) -> None:
        assert given is types
        if names == first_compile.HELPER:  # in the forked helper
            assert parent == (os.getppid() if fork else None)
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
    monkeypatch.setattr(first_compile, "_early", {})  # none forked when this process imported the package
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
            "fc.compile_these = lambda *args: None; fc.signatures = lambda dtype: {}; fc._early.clear(); "
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
    monkeypatch.setattr(first_compile, "compile_these", lambda names, types, parent=None: compiled.append(names))
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: {})
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    monkeypatch.setattr(first_compile, "_early", {})
    first_compile.start()  # the fork fails: no helper, and no error
    first_compile.compile_step("float32", "step_in")
    assert compiled == [(*first_compile.HERE, "step_in")]
    assert (tmp_path / "cache" / "first-compile-float32.done").exists()


def test_a_cache_folder_it_cannot_write_leaves_no_marker_and_no_error(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """A cache folder that cannot be made (here a file stands where its parent would be): no helper forked when the
    package is imported (``start``), and the first compile goes on without error and leaves no marker."""
    (tmp_path / "a-file").write_text("")
    forked: list[dict] = []
    monkeypatch.setattr(first_compile, "FORK", True)
    monkeypatch.setattr(first_compile, "_forked", lambda types: forked.append(types))  # and returns no helper
    monkeypatch.setattr(first_compile, "compile_these", lambda *args: None)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: {})
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    monkeypatch.setattr(first_compile, "_early", {})
    monkeypatch.delenv(first_compile.AT_IMPORT, raising=False)
    first_compile.start("float64")
    assert forked == [] and first_compile._early == {}
    first_compile.compile_step("float64", "step_in")
    assert len(forked) == 1 and not (tmp_path / "a-file" / "cache").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_the_helper_forked_at_import_is_the_one_compile_step_takes(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """``start`` (at the package's import, on a first run) forks the helper, which compiles ``HELPER`` for the types
    ``step_signatures`` gives; the first ``compile_step`` of that dtype forks no other, claims all of what the helper
    would go on with (here before the helper is done with its share), compiles ``HERE`` and the entry here, waits
    for the helper and leaves the marker."""
    compiled: list[tuple] = []
    helper_ran = tmp_path / "helper-ran"
    go = tmp_path / "go"
    free = {"made": "without torch"}
    forks: list[int] = []
    fork = os.fork

    def compile_these(names: tuple[str, ...], given: dict, parent: int | None = None) -> None:
        if parent is not None:  # in the forked helper
            with helper_ran.open("a") as f:
                f.write(f"{','.join(names)} {given is free} {parent == os.getppid()}\n")
            _wait_for(go)  # its share ends only once this process has begun its own
            return
        compiled.append(names)
        go.touch()

    monkeypatch.setattr(first_compile, "FORK", True)
    monkeypatch.setattr(first_compile.os, "fork", lambda: (forks.append(1), fork())[1])
    monkeypatch.setattr(first_compile, "compile_these", compile_these)
    monkeypatch.setattr(first_compile, "step_signatures", lambda dtype: free)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: {})
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    monkeypatch.setattr(first_compile, "_early", {})
    monkeypatch.delenv(first_compile.AT_IMPORT, raising=False)
    first_compile.start()
    first_compile.start()  # once
    assert len(forks) == 1 and set(first_compile._early) == {"float32"}
    first_compile.compile_step("float32", "train_steps")
    assert len(forks) == 1 and first_compile._early == {}
    assert helper_ran.read_text() == f"{','.join(first_compile.HELPER)} True True\n"  # nothing past its share
    assert compiled == [(*first_compile.HERE, "train_steps")]
    assert (tmp_path / "cache" / "first-compile-float32.done").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("claimed_first", [2, len(first_compile.HERE) + 1])
def test_the_helper_forked_at_import_goes_on_until_this_process_claims_the_rest(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, claimed_first: int) -> None:
    """Past its share, the helper forked at import claims and compiles what this process would (``go_on``: the
    functions whose types need no torch first, with ``step_signatures``' types, then the others, with those of
    ``signatures``, then ``train_steps``), one at a time, until this process begins its first compile: that one then
    claims and compiles the rest, no function twice. Here the helper claims ``claimed_first`` functions (all of them
    in the second case) before this process begins."""
    compiled: list[tuple] = []
    helper_ran = tmp_path / "helper-ran"
    go = tmp_path / "go"
    free = {name: ("free",) for name in first_compile.HERE[-3:]}  # three of HERE's functions need no torch
    full = {**free, "others": ("made with torch",)}
    order = first_compile.go_on(free)
    assert order == (*first_compile.HERE[-3:], *first_compile.HERE[:-3], "train_steps")

    def compile_these(names: tuple[str, ...], given: dict, parent: int | None = None) -> None:
        if parent is not None:  # in the forked helper
            with helper_ran.open("a") as f:
                f.write(f"{','.join(names)} {'free' if given is free else 'full' if given is full else '?'}\n")
            if names == order[claimed_first - 1:claimed_first]:  # its last claim: this process begins meanwhile
                (tmp_path / "begin").touch()
                _wait_for(go)
            return
        compiled.append(names)
        go.touch()

    monkeypatch.setattr(first_compile, "FORK", True)
    monkeypatch.setattr(first_compile, "compile_these", compile_these)
    monkeypatch.setattr(first_compile, "step_signatures", lambda dtype: free)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: full)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    monkeypatch.setattr(first_compile, "_early", {})
    monkeypatch.delenv(first_compile.AT_IMPORT, raising=False)
    first_compile.start()
    _wait_for(tmp_path / "begin")
    first_compile.compile_step("float32", "train_steps")
    helper = [line.split(" ") for line in helper_ran.read_text().splitlines()]
    assert helper[0] == [",".join(first_compile.HELPER), "free"]
    assert helper[1:] == [[name, "free" if name in free else "full"] for name in order[:claimed_first]]
    left = tuple(name for name in (*first_compile.HERE, "train_steps") if name not in order[:claimed_first])
    assert compiled == [left]
    assert first_compile._early == {} and (tmp_path / "cache" / "first-compile-float32.done").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_helper_that_compiled_all_leaves_the_marker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where this process has not begun its first compile by the time the helper forked at import has compiled all
    of ``go_on``, the helper leaves the marker: this process's first ``compile_step`` then compiles nothing and waits
    for nothing, and a later process's import forks no helper."""
    compiled: list[tuple] = []
    helper_ran = tmp_path / "helper-ran"

    def compile_these(names: tuple[str, ...], given: dict, parent: int | None = None) -> None:
        if parent is not None:  # in the forked helper
            with helper_ran.open("a") as f:
                f.write(",".join(names) + "\n")
            return
        compiled.append(names)

    monkeypatch.setattr(first_compile, "FORK", True)
    monkeypatch.setattr(first_compile, "compile_these", compile_these)
    monkeypatch.setattr(first_compile, "step_signatures", lambda dtype: {})
    made: list[str] = []  # the types made in this process (the helper's own calls stay in its own memory)
    monkeypatch.setattr(first_compile, "signatures", lambda dtype: (made.append(dtype), {})[1])
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_done", set())
    monkeypatch.setattr(first_compile, "_early", {})
    monkeypatch.delenv(first_compile.AT_IMPORT, raising=False)
    first_compile.start()
    helper = first_compile._early["float32"]
    assert select.select([helper.done], [], [], 120)[0]  # DONE: the helper is through
    assert (tmp_path / "cache" / "first-compile-float32.done").exists()
    first_compile.compile_step("float32", "train_steps")
    assert compiled == [] and made == []
    assert helper_ran.read_text().splitlines() == [",".join(first_compile.HELPER), *first_compile.go_on({})]
    os.close(helper.claims)
    helper.stop()
    monkeypatch.setattr(first_compile, "_early", {})  # another process: the marker, so no helper
    first_compile.start()
    assert first_compile._early == {}


@pytest.mark.parametrize("why", ["marker", "switched off", "no fork"])
def test_start_forks_no_helper_where_none_is_wanted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, why: str) -> None:
    """No helper at import where the first compile was done (the marker), where ``LENGTHGEN_COMPILE_AT_IMPORT`` is 0,
    or where the helper is not forked (``FORK`` false: a started helper would import torch itself)."""
    (tmp_path / "cache").mkdir()
    if why == "marker":
        (tmp_path / "cache" / "first-compile-float32.done").touch()
    monkeypatch.setattr(first_compile, "FORK", why != "no fork")
    monkeypatch.setenv(first_compile.AT_IMPORT, "0" if why == "switched off" else "1")
    monkeypatch.setattr(first_compile, "_forked", lambda *args: pytest.fail("a helper was forked"))
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(first_compile, "_early", {})
    first_compile.start()
    assert first_compile._early == {}


@pytest.mark.skipif(not first_compile.FORK, reason="the helper is started, not forked, on this platform")
def test_importing_the_package_forks_the_helper_before_torch_and_it_ends_after_the_process(tmp_path: Path) -> None:
    """On a first run (an empty cache folder), importing the package forks the helper before torch is imported (so
    that it compiles while this process imports torch). A process that never trains leaves it to stop before its
    next function (``_leave``): it ends soon after, and leaves no cache file half-written (no temporary file of
    numba's), only functions of its share and their callees."""
    code = ("import os, sys\nfork = os.fork\nseen = []\n"
            "def spy():\n    seen.append('torch' in sys.modules)\n    return fork()\n"
            "os.fork = spy\nimport lengthgen\nfrom lengthgen.engine import first_compile\n"
            "print(seen, first_compile._early['float32'].pid)")
    seen, pid = _first_run(code, tmp_path).rsplit(" ", 1)
    assert seen == "[False]"
    stat = Path(f"/proc/{int(pid)}/stat")
    for _ in range(1200):  # at most one function's compile after its parent's exit (a few seconds), here <= 120 s
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":  # gone, or ended uncollected
            break
        time.sleep(0.1)
    else:
        pytest.fail("the helper went on after its parent's exit")
    files = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert not [f for f in files if ".tmp." in f], files
    cached = {f.split(".")[1].split("-")[0] for f in files if f.endswith(".nbi")}  # module.function-line.py311.nbi
    assert cached <= {*first_compile.HELPER, "exp_neg", "log1p", "_less_row_max"}, cached  # the share, its callees


@pytest.mark.skipif(not first_compile.FORK, reason="the helper is started, not forked, on this platform")
def test_a_process_that_trains_once_the_helper_is_done_compiles_nothing_itself(tmp_path: Path) -> None:
    """A notebook's way: the package imported on a first run (an empty cache folder), then a pause (here: until the
    helper forked at import is done), then training. The helper compiled the whole step meanwhile, the update, the
    draws and ``train_steps`` included (it imported torch for their types), and left the marker, so this process
    compiles none of them (numba's cache statistics: no miss) and loads the entry from the cache (the update and the
    draws are linked into it)."""
    code = ("import select, lengthgen\nfrom lengthgen.engine import first_compile as fc\n"
            "ready, _, _ = select.select([fc._early['float32'].done], [], [], 280)\n"
            "marked = fc._marker('float32').exists()\n"
            "from lengthgen import Config, train\n"
            "train(Config(steps=3, target_accuracy=None), [0], progress=False)\n"
            "names = [n for n in (*fc.HELPER, *fc.HERE, 'train_steps') if n in fc.signatures('float32')]\n"
            "print(bool(ready), marked, sorted(n for n in names if fc.function(n).stats.cache_misses),"
            " sum(fc.function('train_steps').stats.cache_hits.values()))")
    assert _first_run(code, tmp_path).strip() == "True True [] 1"  # the helper was done, left the marker
    assert len(list(tmp_path.rglob("first-compile-float32.done"))) == 1


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
