"""Where one training step's time goes: ``python -m benchmarks.profile_step [--dtype float64 --train-set 256]
[--members 10 --batch 1024 --optimizer gd]``.

Times each part of a step of the one-layer table model in process CPU seconds (a busy machine moves them
far less than wall seconds), as medians of ``--repeats`` blocks of ``--steps`` calls, one thread, on the
small-step recipe's model by default: the token draw, the gradient call as training makes it on the CPU
(one compiled call, ``engine.step.table_step``), the same gradient by the torch operations (``TableStep.forward``,
the loss and its gradient, the count of correct predictions, ``TableStep.backward``: the path a GPU or an MLP
takes), the optimiser, and the whole step; then the number of operations the torch path dispatches (torch
profiler, top-level operations only) and the most frequent ones.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from lengthgen import Config
from lengthgen.model import Model, log_likelihood_gradient
from lengthgen.optim import Optimizer
from lengthgen.recipes import SMALL_STEPS
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream

from .run import processor, processor_line


def cpu_us(run: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over ``repeats`` blocks of ``calls`` calls of ``run``: process CPU microseconds per call."""
    per_call = []
    with torch.inference_mode():
        for _ in range(max(calls // 10, 5)):  # warm up
            run()
        for _ in range(repeats):
            start = time.process_time()
            for _ in range(calls):
                run()
            per_call.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(per_call)


def profile_step(c: Config, calls: int, repeats: int, members: int = 1) -> dict:
    """CPU microseconds per part of one step of ``c`` (``members`` members, seeds 0, 1, ...) and the operations
    the torch path dispatches."""
    seeds = list(range(members))
    model = Model(c, seeds)
    step = TableStep(c, model.encoding, c.train_length)
    buf = step.pack(model)
    opt = Optimizer(c.optimizer, buf, [c.lr] * members)
    stream = TrainStream(c, seeds)
    x = stream.next()
    target = x[..., -1 - c.offset:x.shape[-1] - c.offset]
    with torch.inference_mode():
        logits, saved = step.forward(buf, x)
        _, g = log_likelihood_gradient(logits, target)
        grad = step.backward(saved, g)

    def whole() -> None:
        tokens = stream.next()
        _, _, grad = step(opt.params, tokens, tokens[..., -1 - c.offset:tokens.shape[-1] - c.offset])
        opt.step(grad)

    parts = {
        "token draw": lambda: stream.next(),
        "gradient call (compiled: engine.step.table_step)": lambda: step(buf, x, target),
        "torch path: forward": lambda: step.forward(buf, x),
        "torch path: loss and its gradient": lambda: log_likelihood_gradient(logits, target),
        "torch path: correct predictions": lambda: (logits.max(-1, keepdim=True).indices == target).sum((1, 2)),
        "torch path: backward": lambda: step.backward(saved, g),
        f"optimiser ({c.optimizer})": lambda: opt.step(grad.clone()),
        "whole step (draw, gradient, update)": whole,
    }
    torch.set_num_threads(1)
    out = {name: cpu_us(run, calls, repeats) for name, run in parts.items()}
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        logits, saved = step.forward(buf, x)
        step.backward(saved, log_likelihood_gradient(logits, target)[1])
    top = [e.name for e in prof.events() if e.cpu_parent is None]
    return {"cpu_us": out, "ops_per_torch_gradient": len(top), "most_frequent_ops": Counter(top).most_common(12)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--train-set", type=int, default=None, help="a fixed set of N sequences, full batch (batch = N)")
    p.add_argument("--optimizer", default=SMALL_STEPS.optimizer)
    p.add_argument("--members", type=int, default=1, help="ensemble members (seeds 0, 1, ...)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default: the recipe's)")
    p.add_argument("--steps", type=int, default=500, help="calls per timed block")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks (the median is reported)")
    a = p.parse_args()
    c = SMALL_STEPS.apply(Config()).replace(dtype=a.dtype, optimizer=a.optimizer)
    if a.batch is not None:
        c = c.replace(batch=a.batch)
    if a.train_set is not None:
        c = c.replace(train_set=a.train_set, batch=a.train_set)
    r = profile_step(c, a.steps, a.repeats, a.members)
    print(processor_line(processor()))
    print(f"{c.recipe()}; {c.dtype}; {a.members} member(s), one thread; process CPU microseconds per call (median)")
    for name, us in r["cpu_us"].items():
        print(f"  {name:<46} {us:8.1f}")
    print(f"operations per torch-path gradient: {r['ops_per_torch_gradient']}; most frequent: {r['most_frequent_ops']}")


if __name__ == "__main__":
    main()
