"""Deterministic training of an ensemble of seeds, with an early stop per member.

The optimiser is Adam (AdamW's decoupled weight decay when ``weight_decay > 0``), written out so
that each ensemble member can stop on its own: a member whose training-batch accuracy, averaged
over the last ``STOP_WINDOW`` steps, reaches ``target_accuracy`` is frozen (no parameter, moment
or step-count change), exactly as if it had been trained alone and stopped there.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .config import Config
from .model import Model
from .task import TrainStream, targets


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextmanager
def cpu_threads(device: torch.device, threads: int = 1) -> Iterator[None]:
    """Run the block with ``threads`` intra-op CPU threads on the CPU, then restore the setting.

    A training step is some fifty operations of microseconds each: splitting them over threads
    costs more hand-offs than it saves, and on a busy machine it is many times slower
    (benchmarks/ measures it).
    """
    before = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Weight decay is applied to weight matrices only, never to the token or position tables:
# untrained APE rows must stay exactly at their initial values.
NO_DECAY = ("embed", "encoding.table")
STOP_WINDOW = 5  # steps averaged for the early stop
TRAIN_THREADS = 1  # intra-op CPU threads while training (see cpu_threads)


class EnsembleAdam:
    """Adam over parameters shaped (S, ...) with a boolean ``active`` mask over the S members.

    Every update is a handful of ``torch._foreach_*`` calls over all parameters at once (as
    ``torch.optim.Adam(foreach=True)`` does), with per-member factors shaped (S, 1, ...).
    """

    def __init__(self, named: list[tuple[str, nn.Parameter]], c: Config, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = [p for _, p in named]
        self.decay = [0.0 if name in NO_DECAY else c.weight_decay for name, _ in named]
        self.lr, self.betas, self.eps = c.lr, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        first = self.params[0]
        self.t = torch.zeros(first.shape[0], dtype=first.dtype, device=first.device)  # steps taken, per member
        self.member_shapes = [(-1,) + (1,) * (p.dim() - 1) for p in self.params]

    def per_member(self, x: torch.Tensor) -> list[torch.Tensor]:
        """An (S,) tensor as one view per parameter, shaped (S, 1, ...) to broadcast against it."""
        return [x.view(shape) for shape in self.member_shapes]

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """One update for the members where ``active`` (shape (S,), bool) is True; the others keep
        their parameters, moments and step count exactly."""
        b1, b2 = self.betas
        on = active.to(self.t.dtype)
        self.t += on
        t = self.t.clamp(min=1)
        grads = [p.grad for p in self.params]
        # m <- m + on (1 - b1)(g - m),  v <- v + on (1 - b2)(g^2 - v): Adam's moments, frozen where off
        torch._foreach_lerp_(self.m, grads, self.per_member(on * (1 - b1)))
        torch._foreach_lerp_(self.v, torch._foreach_mul(grads, grads), self.per_member(on * (1 - b2)))
        # update = m_hat / (sqrt(v_hat) + eps) (+ decay * p), with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, self.per_member((1 - b2**t).sqrt()))
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(self.m, denom)
        torch._foreach_div_(update, self.per_member(1 - b1**t))
        if any(self.decay):
            torch._foreach_add_(update, torch._foreach_mul(self.params, self.decay))
        torch._foreach_mul_(update, self.per_member(self.lr * on))
        torch._foreach_sub_(self.params, update)


@dataclass
class Trained:
    """A trained ensemble and how it got there."""

    model: Model
    config: Config
    seeds: list[int]
    loss: np.ndarray  # (steps_run, S) training loss per step and member
    accuracy: np.ndarray  # (steps_run, S) training-batch accuracy per step and member
    steps: np.ndarray  # (S,) steps each member trained (its early-stop step, or config.steps)
    seconds: float  # wall-clock training time

    @property
    def device(self) -> torch.device:
        return self.model.embed.device


def train(
    c: Config,
    seeds: Sequence[int] = (0,),
    device: torch.device | str | None = None,
    progress: bool | None = None,
    on_step: Callable[[int, np.ndarray], None] | None = None,
) -> Trained:
    """Train one model per seed, batched as an ensemble. Same config and seeds: same numbers on the CPU.

    ``progress``: a tqdm bar (None shows it only on an interactive terminal or notebook).
    ``on_step(step, accuracy_per_member)`` is called after every step (e.g. a widget's progress bar).
    """
    device = torch.device(device) if device is not None else default_device()
    start = time.perf_counter()
    model = Model(c, seeds).to(device)
    stream = TrainStream(c, list(seeds))
    opt = EnsembleAdam(list(model.named_parameters()), c)
    active = torch.ones(len(seeds), dtype=torch.bool, device=device)
    steps = np.full(len(seeds), c.steps)
    losses, accs = [], []
    bar = tqdm(range(c.steps), disable=(None if progress is None else not progress), leave=False, desc=c.encoding)
    with cpu_threads(device, TRAIN_THREADS):
        for step in bar:
            tokens = stream.next().to(device)
            y = targets(tokens, c.offset)
            logits = model(tokens).logits
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
            loss = loss.view(y.shape).mean(1)  # (S,)
            model.zero_grad(set_to_none=False)
            loss.sum().backward()  # members do not interact: each gets its own mean-loss gradient
            opt.step(active)
            acc = (logits.argmax(-1) == y).float().mean(1)
            losses.append(loss.detach())
            accs.append(acc)
            if c.target_accuracy is not None:
                recent = torch.stack(accs[-STOP_WINDOW:]).mean(0)  # a lucky batch alone does not stop
                reached = active & (recent >= c.target_accuracy) & (len(accs) >= STOP_WINDOW)
                if reached.any():
                    steps[reached.cpu().numpy()] = step + 1
                    active &= ~reached
            if on_step is not None:
                on_step(step, acc.cpu().numpy())
            if not active.any():
                break
    bar.close()
    acc_hist = torch.stack(accs).cpu().numpy() if accs else np.zeros((0, len(seeds)))
    loss_hist = torch.stack(losses).cpu().numpy() if losses else np.zeros((0, len(seeds)))
    return Trained(model, c, list(seeds), loss_hist, acc_hist, steps, time.perf_counter() - start)
