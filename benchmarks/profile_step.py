"""Where one training step's time goes: ``python -m benchmarks.profile_step [--dtype float64 --train-set 256]``.

Times each part of a step of the one-layer table model (the token draw, ``TableStep.forward``, the loss and
its gradient, the count of correct predictions, ``TableStep.backward``, the optimiser) in process CPU
seconds (a busy machine moves them far less than wall seconds), as medians of ``--repeats`` blocks of
``--steps`` calls, one thread, on the small-step recipe's model by default; then the number of operations
one gradient call dispatches (torch profiler, top-level operations only) and the most frequent ones.
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


def profile_step(c: Config, calls: int, repeats: int) -> dict:
    """CPU microseconds per part of one step of ``c`` (one member, seed 0) and the operations it dispatches."""
    model = Model(c, [0])
    step = TableStep(c, model.encoding, c.train_length)
    buf = step.pack(model)
    opt = Optimizer(c.optimizer, buf, [c.lr])
    stream = TrainStream(c, [0])
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
        "forward": lambda: step.forward(buf, x),
        "loss and its gradient": lambda: log_likelihood_gradient(logits, target),
        "correct predictions": lambda: (logits.max(-1, keepdim=True).indices == target).sum((1, 2)),
        "backward": lambda: step.backward(saved, g),
        f"optimiser ({c.optimizer})": lambda: opt.step(grad.clone()),
        "whole step (draw, gradient, update)": whole,
    }
    torch.set_num_threads(1)
    out = {name: cpu_us(run, calls, repeats) for name, run in parts.items()}
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        step(buf, x, target)
    top = [e.name for e in prof.events() if e.cpu_parent is None]
    return {"cpu_us": out, "ops_per_gradient_call": len(top), "most_frequent_ops": Counter(top).most_common(12)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--train-set", type=int, default=None, help="a fixed set of N sequences, full batch (batch = N)")
    p.add_argument("--optimizer", default=SMALL_STEPS.optimizer)
    p.add_argument("--steps", type=int, default=500, help="calls per timed block")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks (the median is reported)")
    a = p.parse_args()
    c = SMALL_STEPS.apply(Config()).replace(dtype=a.dtype, optimizer=a.optimizer)
    if a.train_set is not None:
        c = c.replace(train_set=a.train_set, batch=a.train_set)
    r = profile_step(c, a.steps, a.repeats)
    print(f"{c.recipe()}; {c.dtype}; one member, one thread; process CPU microseconds per call (median)")
    for name, us in r["cpu_us"].items():
        print(f"  {name:<38} {us:8.1f}")
    print(f"operations per gradient call: {r['ops_per_gradient_call']}; most frequent: {r['most_frequent_ops']}")


if __name__ == "__main__":
    main()
