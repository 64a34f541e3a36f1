"""The speed work on the table step keeps its numbers: what it caches per call (the lookup index of a fixed
training set) gives bitwise the same gradient as computing it afresh, and is recomputed for new tokens; and
training runs every BLAS library on one thread."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from lengthgen import Config
from lengthgen.model import Model
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream


@pytest.mark.parametrize("encoding", ["rope", "ape", "nope"])
def test_cached_index_same_numbers_and_renewed(encoding: str) -> None:
    c = Config(encoding=encoding, train_set=64, batch=64, dtype="float64", target_accuracy=None)
    model = Model(c, [0, 1])
    stream = TrainStream(c, [0, 1])
    fixed = stream.next()
    assert stream.next() is fixed  # the fixed set is one tensor: the case the cache is for
    other = torch.randint(c.vocab, fixed.shape, generator=torch.Generator().manual_seed(5))

    def grad(step: TableStep, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return step(step.pack(model), x, x[..., -1 - c.offset:-c.offset])[2]

    cached = TableStep(c, model.encoding, c.train_length)
    first, again = grad(cached, fixed), grad(cached, fixed)  # the second call reads the cached index
    assert torch.equal(first, again)
    assert torch.equal(first, grad(TableStep(c, model.encoding, c.train_length), fixed.clone()))
    # new tokens after the cached ones: the index follows them (a stale index would give fixed's gradient)
    assert torch.equal(grad(cached, other), grad(TableStep(c, model.encoding, c.train_length), other))
    assert not torch.equal(grad(cached, other), first)


def test_training_runs_every_blas_library_on_one_thread() -> None:
    """The compiled step's products go through SciPy's OpenBLAS (numba's np.dot), a library that SciPy loads on
    first use, after numpy's: the one-thread limit of ``train.cpu_threads`` must cover it too (left at two
    threads it made some sizes 30-150x slower on a busy 2-core machine). Run in a fresh process, so that the
    libraries load in the order a reader's session loads them."""
    script = """
import json, torch
import lengthgen as lg
from threadpoolctl import threadpool_info
from lengthgen.train import cpu_threads
lg.train(lg.Config(steps=2, target_accuracy=None), seeds=[0])  # the compiled step: loads SciPy's BLAS
with cpu_threads(torch.device("cpu")):
    print(json.dumps([(i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    blas = json.loads(out.splitlines()[-1])
    assert any("scipy.libs" in path for path, _ in blas), blas  # SciPy's own OpenBLAS is among them
    assert all(n == 1 for _, n in blas), blas


def test_a_long_large_batch_run_does_not_grow_the_heap() -> None:
    """A 10-member, batch-1024 ensemble once grew by about 0.2 GB a second (glibc's heap fragmenting around
    the step's scratch buffers; ``train.steady_heap``): its memory after 1500 steps stays near where it was
    after the first 100. Run in a fresh process, so that nothing else's memory counts."""
    script = """
from lengthgen import Config
from lengthgen.train import train_runs
def rss(): return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) / 1e3
seen = {}
def on_step(step, acc):
    if step in (100, 1499):
        seen[step] = rss()
c = Config(optimizer="gd", lr=0.1, batch=1024, steps=1500, target_accuracy=None)
train_runs([(c, s) for s in range(10)], progress=False, on_step=on_step)
print(seen[100], seen[1499])
"""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    first, last = map(float, out.split()[-2:])
    assert last - first < 100, f"the heap grew from {first:.0f} MB to {last:.0f} MB over 1400 steps"


def test_default_device_takes_the_gpu_only_for_wide_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """train's device rule (train.default_device) with CUDA mocked present: the CPU for one model, the playground's
    two seeds and a few members; the GPU for members x batch >= GPU_MIN_SEQUENCES and for models the compiled CPU
    step does not cover; the CPU always without CUDA. A single model then really trains on the CPU."""
    from lengthgen import train as train_fn
    from lengthgen.train import GPU_MIN_SEQUENCES, default_device

    c = Config()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device().type == "cpu"
    assert default_device(2, c).type == "cpu"  # the playground
    wide = -(-GPU_MIN_SEQUENCES // c.batch)  # the fewest members that make the work wide
    assert default_device(wide - 1, c).type == "cpu"
    assert default_device(wide, c).type == "cuda"
    assert default_device(1, c.replace(batch=GPU_MIN_SEQUENCES)).type == "cuda"
    assert default_device(1, c.replace(mlp=True)).type == "cuda"
    assert default_device(1, c.replace(layers=2)).type == "cuda"
    assert train_fn(c.replace(steps=3, target_accuracy=None), [0], progress=False).device.type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device(wide, c).type == "cpu"
    assert default_device(1, c.replace(layers=2)).type == "cpu"
