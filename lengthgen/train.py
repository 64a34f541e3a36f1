"""Deterministic training of an ensemble of runs, with an early stop per member.

An ensemble is a list of runs (config, seed) that share every shape setting (vocabulary, width,
lengths, encoding, ...) and may differ in the recipe settings of ``MEMBER_FIELDS``: step size, weight
decay, step budget, early stop, offset. All members train as one batched model; each member follows
exactly the path it would follow trained alone: its own data stream, its own step size, and a member
that has stopped (its budget spent, or its training-batch accuracy averaged over the last
``STOP_WINDOW`` steps at ``target_accuracy``) is frozen (no parameter, moment or step-count change).

The optimisers are written for ensembles: Adam (AdamW's decoupled weight decay) and plain gradient
descent (p <- p - lr (g + wd p), no momentum), each a handful of fused ``torch._foreach_*`` calls.
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

from .config import Config, ConfigError
from .model import Model
from .task import TrainStream


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


# The token and position tables. With decay_scope="matrices" weight decay leaves them alone, so that
# untrained APE rows stay exactly at their initial values; decay_scope="all" decays them too.
TABLES = ("embed", "encoding.table")
STOP_WINDOW = 5  # steps averaged for the early stop
TRAIN_THREADS = 1  # intra-op CPU threads while training (see cpu_threads)
# Settings that may differ between members of one batched ensemble (everything else sets tensor shapes
# or the shared data stream and must be equal).
MEMBER_FIELDS = ("lr", "weight_decay", "decay_scope", "steps", "target_accuracy", "offset")


def shape_key(c: Config) -> str:
    """The settings that runs must share to train as one ensemble (all but MEMBER_FIELDS), as text."""
    return str(sorted((k, v) for k, v in c.to_dict().items() if k not in MEMBER_FIELDS))


class EnsembleOptimizer:
    """Adam or gradient descent over parameters shaped (S, ...), with per-member step size and weight
    decay and a boolean ``active`` mask over the S members.

    ``configs``: one config per member (its lr, weight_decay, decay_scope; the optimizer is shared).
    Per-member factors are (S,) tensors viewed as (S, 1, ...) to broadcast against each parameter.
    """

    def __init__(self, named: list[tuple[str, nn.Parameter]], configs: Sequence[Config],
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        kinds = {c.optimizer for c in configs}
        if len(kinds) != 1:
            raise ConfigError(f"one ensemble trains with one optimizer; got {sorted(kinds)}: train them apart")
        self.kind = kinds.pop()
        self.params = [p for _, p in named]
        first = self.params[0]
        if len(configs) != first.shape[0]:
            raise ValueError(f"{len(configs)} configs for {first.shape[0]} ensemble members")
        f = dict(dtype=first.dtype, device=first.device)
        self.lr = torch.tensor([c.lr for c in configs], **f)
        self.member_shapes = [(-1,) + (1,) * (p.dim() - 1) for p in self.params]
        decays = [torch.tensor([c.weight_decay if (name not in TABLES or c.decay_scope == "all") else 0.0
                                for c in configs], **f) for name, _ in named]
        self.decay = [d.view(s) for d, s in zip(decays, self.member_shapes)] if any(bool(d.any()) for d in decays) else None
        self.betas, self.eps = betas, eps
        self.t = torch.zeros(first.shape[0], **f)  # steps taken, per member
        if self.kind == "adam":
            self.m = [torch.zeros_like(p) for p in self.params]
            self.v = [torch.zeros_like(p) for p in self.params]

    def per_member(self, x: torch.Tensor) -> list[torch.Tensor]:
        """An (S,) tensor as one view per parameter, shaped (S, 1, ...) to broadcast against it."""
        return [x.view(shape) for shape in self.member_shapes]

    def direction(self, on: torch.Tensor) -> list[torch.Tensor]:
        """The update direction before the step size: Adam's m_hat / (sqrt(v_hat) + eps), or the gradient."""
        grads = [p.grad for p in self.params]
        if self.kind == "gd":
            return [g.clone() for g in grads]
        b1, b2 = self.betas
        t = self.t.clamp(min=1)
        # m <- m + on (1 - b1)(g - m),  v <- v + on (1 - b2)(g^2 - v): Adam's moments, frozen where off
        torch._foreach_lerp_(self.m, grads, self.per_member(on * (1 - b1)))
        torch._foreach_lerp_(self.v, torch._foreach_mul(grads, grads), self.per_member(on * (1 - b2)))
        # m_hat / (sqrt(v_hat) + eps), with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, self.per_member((1 - b2**t).sqrt()))
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(self.m, denom)
        torch._foreach_div_(update, self.per_member(1 - b1**t))
        return update

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """One update for the members where ``active`` (shape (S,), bool) is True; the others keep
        their parameters, moments and step count exactly."""
        on = active.to(self.t.dtype)
        self.t += on
        update = self.direction(on)
        if self.decay is not None:  # decoupled: p <- p - lr (direction + wd p)
            torch._foreach_add_(update, torch._foreach_mul(self.params, self.decay))
        torch._foreach_mul_(update, self.per_member(self.lr * on))
        torch._foreach_sub_(self.params, update)


@dataclass
class Trained:
    """A trained ensemble (one config, one member per seed) and how it got there."""

    model: Model
    config: Config
    seeds: list[int]
    loss: np.ndarray  # (steps_run, S) training loss per step and member
    accuracy: np.ndarray  # (steps_run, S) training-batch accuracy per step and member
    steps: np.ndarray  # (S,) steps each member trained (its early-stop step, or config.steps)
    seconds: float  # wall-clock training time (of the whole batch it was trained in)

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
    if len(seeds) == 0:
        raise ValueError("give at least one seed")
    return train_runs([(c, s) for s in seeds], device, progress, on_step)[0]


def train_runs(
    runs: Sequence[tuple[Config, int]],
    device: torch.device | str | None = None,
    progress: bool | None = None,
    on_step: Callable[[int, np.ndarray], None] | None = None,
) -> list[Trained]:
    """Train every (config, seed) of ``runs`` as one batched ensemble; one Trained per distinct config
    (first-seen order), holding that config's seeds in the order given.

    The configs must agree on every setting outside MEMBER_FIELDS. Each member trains exactly as it
    would alone (same data, same updates, same stop).
    """
    if not runs:
        raise ValueError("give at least one (config, seed) run")
    configs, seeds = [c for c, _ in runs], [int(s) for _, s in runs]
    if len({shape_key(c) for c in configs}) > 1:
        raise ConfigError(f"runs of one ensemble may differ only in {', '.join(MEMBER_FIELDS)}; group them by the rest")
    device = torch.device(device) if device is not None else default_device()
    start = time.perf_counter()
    c0 = configs[0]
    model = Model(c0, seeds).to(device)
    stream = TrainStream(c0, seeds)
    opt = EnsembleOptimizer(list(model.named_parameters()), configs)
    S = len(runs)
    budget = np.array([c.steps for c in configs])
    stop_at = torch.tensor([np.nan if c.target_accuracy is None else c.target_accuracy for c in configs], device=device)
    offsets = torch.tensor([c.offset for c in configs], device=device)
    early = bool((~torch.isnan(stop_at)).any())
    active = torch.ones(S, dtype=torch.bool, device=device)
    steps = budget.copy()
    losses, accs = [], []
    bar = tqdm(range(int(budget.max())), disable=(None if progress is None else not progress), leave=False,
               desc=c0.encoding)
    with cpu_threads(device, TRAIN_THREADS):
        for step in bar:
            active &= torch.as_tensor(step < budget, device=device)
            if not active.any():
                break
            tokens = stream.next().to(device)  # (S, B, L)
            L = tokens.shape[-1]
            y = tokens.gather(-1, (L - 1 - offsets).view(S, 1, 1).expand(S, tokens.shape[1], 1))[..., 0]  # (S, B)
            logits = model(tokens).logits
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
            loss = loss.view(y.shape).mean(1)  # (S,)
            model.zero_grad(set_to_none=False)
            loss.sum().backward()  # members do not interact: each gets its own mean-loss gradient
            opt.step(active)
            acc = (logits.argmax(-1) == y).float().mean(1)
            losses.append(loss.detach())
            accs.append(acc)
            if early and len(accs) >= STOP_WINDOW:
                recent = torch.stack(accs[-STOP_WINDOW:]).mean(0)  # a lucky batch alone does not stop
                reached = active & (recent >= stop_at)  # NaN (no early stop) never compares true
                if reached.any():
                    steps[reached.cpu().numpy()] = step + 1
                    active &= ~reached
            if on_step is not None:
                on_step(step, acc.cpu().numpy())
            if not active.any():
                break
    bar.close()
    seconds = time.perf_counter() - start
    acc_hist = torch.stack(accs).cpu().numpy() if accs else np.zeros((0, S))
    loss_hist = torch.stack(losses).cpu().numpy() if losses else np.zeros((0, S))
    members: dict[Config, list[int]] = {}
    for i, c in enumerate(configs):
        members.setdefault(c, []).append(i)
    if len(members) == 1:
        return [Trained(model, c0, seeds, loss_hist, acc_hist, steps, seconds)]
    return [Trained(model.subset(idx, c), c, [seeds[i] for i in idx], loss_hist[:, idx], acc_hist[:, idx],
                    steps[idx], seconds) for c, idx in members.items()]
