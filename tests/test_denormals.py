"""Subnormals flushed to zero in the engine's compiled calls only (``engine.denormals``): set on the thread that
computes a step, a stretch or Adam's update, and restored after it."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from lengthgen import Config, optim, tables, train
from lengthgen.engine import denormals, first_compile
from lengthgen.engine import step as engine_step
from lengthgen.engine import stretch as engine_stretch

pytestmark = pytest.mark.skipif(not denormals.X86, reason="FTZ and DAZ are x86's; elsewhere flushed() changes nothing")


@njit
def product(a, b):
    return a * b


def test_flushed_writes_subnormals_as_zero_and_restores_the_thread() -> None:
    tiny32, tiny64 = np.float32(1e-20), 1e-160
    before = denormals.control()
    assert product(tiny32, tiny32) > 0 and product(tiny64, tiny64) > 0  # subnormal, not zero, outside
    with denormals.flushed():
        assert denormals.control() & denormals.FLUSH == denormals.FLUSH
        assert product(tiny32, tiny32) == 0 and product(tiny64, tiny64) == 0
        assert product(np.float32(2e-19), np.float32(2e-19)) > 0  # 4e-38 is still normal
    assert denormals.control() & denormals.FLUSH == before & denormals.FLUSH
    assert product(tiny32, tiny32) > 0
    with pytest.raises(RuntimeError), denormals.flushed():
        raise RuntimeError("a step that fails")
    assert denormals.control() & denormals.FLUSH == before & denormals.FLUSH


@pytest.mark.parametrize("threads", [1, 2])
def test_the_engine_computes_with_subnormals_flushed(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """A stretch of compiled steps (on this thread or the pool's, an ensemble split over two threads), a single
    compiled step and Adam's compiled update each run flushed; the caller's thread is as it was after training."""
    seen: list[str] = []

    def spy(name, fn):
        def call(*args, **kwargs):
            seen.append(f"{name} {denormals.control() & denormals.FLUSH == denormals.FLUSH}")
            return fn(*args, **kwargs)
        return call

    first_compile.compile_step("float32", "train_steps")  # a process's first step compiles by these names: not spies
    monkeypatch.setenv("LENGTHGEN_THREADS", str(threads))
    monkeypatch.setattr(engine_stretch, "train_steps", spy("stretch", engine_stretch.train_steps))
    monkeypatch.setattr(engine_step, "table_step", spy("step", engine_step.table_step))
    monkeypatch.setattr(optim, "adam_step", spy("adam", optim.adam_step))
    before = denormals.control() & denormals.FLUSH
    train(Config(steps=tables.THREADED_STEPS, target_accuracy=None), [0, 1], progress=False)  # stretches
    train(Config(steps=3, target_accuracy=0.99), [0], progress=False)  # single steps under an early stop
    train(Config(steps=3, optimizer="ngd"), [0], progress=False)  # single steps, a rule without stretches
    assert {"stretch True", "step True"} <= set(seen) and not any(s.endswith("False") for s in seen), seen
    assert denormals.control() & denormals.FLUSH == before
