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

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .config import Config, ConfigError
from .model import Model, TableStep
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


def _fused_adam_works() -> bool:
    """Whether this torch has the one-pass CPU Adam kernel (torch._fused_adamw_, torch >= 2.4)."""
    try:
        p, g, m, v = (torch.zeros(2) for _ in range(4))
        torch._fused_adamw_([p], [g], [m], [v], [], [torch.tensor(1.0)], lr=0.1, beta1=0.9, beta2=0.999,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
        return True
    except (AttributeError, RuntimeError, TypeError):
        return False


_FUSED_ADAM = _fused_adam_works()


class FlatOptimizer:
    """EnsembleOptimizer's arithmetic on one (S, P) buffer holding every parameter of S members, all of
    them active (the table path's trainer drops a member from the buffer when it stops): a dozen
    operations a step whatever the number of parameters, or, for Adam without weight decay on the CPU,
    torch's one-pass kernel once per distinct step size. ``t`` counts the steps every member has taken.

    ``lr``: S step sizes; ``decay``: (S, P) weight decay per entry, or None.
    """

    def __init__(self, kind: str, params: torch.Tensor, lr: Sequence[float], decay: torch.Tensor | None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.kind, self.params, self.decay, self.betas, self.eps = kind, params, decay, betas, eps
        self.lr = torch.tensor([float(x) for x in lr], dtype=params.dtype, device=params.device).view(-1, 1)
        self.t = 0
        if kind == "adam":
            self.m, self.v = torch.zeros_like(params), torch.zeros_like(params)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the members at ``rows`` (indices into the current buffer), in that order."""
        self.params = self.params.index_select(0, rows)
        self.lr = self.lr.index_select(0, rows)
        if self.decay is not None:
            self.decay = self.decay.index_select(0, rows)
        if self.kind == "adam":
            self.m, self.v = self.m.index_select(0, rows), self.v.index_select(0, rows)

    @torch.no_grad()
    def step(self, grad: torch.Tensor) -> None:
        """One update of every member from ``grad`` (S, P), which it may overwrite."""
        self.t += 1
        if self.kind == "adam" and self.decay is None and _FUSED_ADAM and self.params.device.type == "cpu":
            # torch's one-pass Adam kernel, once per distinct step size (the same update, other rounding)
            lrs = self.lr.view(-1).tolist()
            for lr in dict.fromkeys(lrs):
                rows = [i for i, x in enumerate(lrs) if x == lr]
                pick = (lambda t: [t]) if len(rows) == len(lrs) else (lambda t: [t[i] for i in rows])
                torch._fused_adamw_(pick(self.params), pick(grad), pick(self.m), pick(self.v), [],
                                    [torch.tensor(float(self.t))] * (1 if len(rows) == len(lrs) else len(rows)),
                                    lr=lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0,
                                    eps=self.eps, amsgrad=False, maximize=False)
            return
        if self.kind == "adam":
            b1, b2 = self.betas
            self.m.lerp_(grad, 1 - b1)
            self.v.lerp_(grad.mul_(grad), 1 - b2)
            update = self.v.sqrt().div_(math.sqrt(1 - b2**self.t)).add_(self.eps)
            torch.div(self.m, update, out=update).div_(1 - b1**self.t)
        else:
            update = grad
        if self.decay is not None:  # decoupled: p <- p - lr (direction + wd p)
            update.addcmul_(self.params, self.decay)
        self.params.sub_(update.mul_(self.lr))


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
    on_checkpoint: Callable[[int, Model], bool | None] | None = None,
    checkpoint_every: int = 0,
) -> Trained:
    """Train one model per seed, batched as an ensemble. Same config and seeds: same numbers on the CPU.

    ``progress``: a tqdm bar (None shows it only on an interactive terminal or notebook).
    ``on_step(step, accuracy_per_member)`` is called after every step (e.g. a widget's progress bar).
    ``on_checkpoint(steps_done, model)``, every ``checkpoint_every`` steps: see ``train_runs``.
    """
    if len(seeds) == 0:
        raise ValueError("give at least one seed")
    return train_runs([(c, s) for s in seeds], device, progress, on_step, on_checkpoint, checkpoint_every)[0]


def train_runs(
    runs: Sequence[tuple[Config, int]],
    device: torch.device | str | None = None,
    progress: bool | None = None,
    on_step: Callable[[int, np.ndarray], None] | None = None,
    on_checkpoint: Callable[[int, Model], bool | None] | None = None,
    checkpoint_every: int = 0,
) -> list[Trained]:
    """Train every (config, seed) of ``runs`` as one batched ensemble; one Trained per distinct config
    (first-seen order), holding that config's seeds in the order given.

    The configs must agree on every setting outside MEMBER_FIELDS. Each member trains exactly as it
    would alone (same data, same updates, same stop). A one-layer model trains on the table path with
    its hand-written backward (``model.TableStep``), its parameters and Adam moments in one buffer
    from which a member drops out when it stops (so a stopped member costs nothing); deeper models
    train through autograd.

    ``on_checkpoint(steps_done, model)`` is called every ``checkpoint_every`` steps with the ensemble's
    current parameters in ``model`` (stopped members at their final values); when it returns True,
    training ends there for every member (each Trained's ``steps`` then says where).
    """
    if not runs:
        raise ValueError("give at least one (config, seed) run")
    configs, seeds = [c for c, _ in runs], [int(s) for _, s in runs]
    if len({shape_key(c) for c in configs}) > 1:
        raise ConfigError(f"runs of one ensemble may differ only in {', '.join(MEMBER_FIELDS)}; group them by the rest")
    if checkpoint_every < 0 or (on_checkpoint is not None and checkpoint_every < 1):
        raise ValueError(f"checkpoint_every={checkpoint_every}: give the steps between checkpoints (>= 1)")
    device = torch.device(device) if device is not None else default_device()
    start = time.perf_counter()
    c0 = configs[0]
    model = Model(c0, seeds).to(device)
    stream = TrainStream(c0, seeds)
    bar = tqdm(disable=(None if progress is None else not progress), leave=False, desc=c0.encoding,
               total=max(c.steps for c in configs))
    loop = _train_tables if model.uses_tables() else _train_autograd
    with cpu_threads(device, TRAIN_THREADS):
        loss_hist, acc_hist, steps = loop(model, stream, configs, device, bar, on_step, on_checkpoint,
                                          checkpoint_every)
    bar.close()
    seconds = time.perf_counter() - start
    members: dict[Config, list[int]] = {}
    for i, c in enumerate(configs):
        members.setdefault(c, []).append(i)
    if len(members) == 1:
        return [Trained(model, c0, seeds, loss_hist, acc_hist, steps, seconds)]
    return [Trained(model.subset(idx, c), c, [seeds[i] for i in idx], loss_hist[:, idx], acc_hist[:, idx],
                    steps[idx], seconds) for c, idx in members.items()]


def _train_autograd(model: Model, stream: TrainStream, configs: Sequence[Config], device: torch.device, bar: tqdm,
                    on_step: Callable | None, on_checkpoint: Callable | None, every: int,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The general loop: autograd, EnsembleOptimizer, stopped members computed but frozen."""
    S = len(configs)
    opt = EnsembleOptimizer(list(model.named_parameters()), configs)
    budget = np.array([c.steps for c in configs])
    stop_at = torch.tensor([np.nan if c.target_accuracy is None else c.target_accuracy for c in configs], device=device)
    offsets = torch.tensor([c.offset for c in configs], device=device)
    early = bool((~torch.isnan(stop_at)).any())
    active = torch.ones(S, dtype=torch.bool, device=device)
    steps = budget.copy()
    losses, accs = [], []
    for step in range(int(budget.max())):
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
        bar.update()
        if early and len(accs) >= STOP_WINDOW:
            recent = torch.stack(accs[-STOP_WINDOW:]).mean(0)  # a lucky batch alone does not stop
            reached = active & (recent >= stop_at)  # NaN (no early stop) never compares true
            if reached.any():
                steps[reached.cpu().numpy()] = step + 1
                active &= ~reached
        if on_step is not None:
            on_step(step, acc.cpu().numpy())
        if on_checkpoint is not None and (step + 1) % every == 0 and on_checkpoint(step + 1, model):
            still = active.cpu().numpy()
            steps[still] = step + 1
            break
        if not active.any():
            break
    acc_hist = torch.stack(accs).cpu().numpy() if accs else np.zeros((0, S))
    loss_hist = torch.stack(losses).cpu().numpy() if losses else np.zeros((0, S))
    return loss_hist, acc_hist, steps


def _train_tables(model: Model, stream: TrainStream, configs: Sequence[Config], device: torch.device, bar: tqdm,
                  on_step: Callable | None, on_checkpoint: Callable | None, every: int,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The one-layer loop: ``TableStep`` (hand-written gradients) and ``FlatOptimizer`` on one (S, P)
    buffer; a member that stops is written to the model and leaves the buffer.

    Rows of the APE table past the training length never get a gradient, so without weight decay on
    them they stay out of the buffer (Adam leaves such rows exactly unchanged). A stopped member's loss
    and accuracy history repeat its last step (trained alone, its history ends there).
    """
    S, c0 = len(configs), configs[0]
    table_decay = any(c.weight_decay > 0 and c.decay_scope == "all" for c in configs)
    ts = TableStep(c0, model.encoding, table_rows=None if table_decay else c0.train_length)
    buf = ts.pack(model)
    decay = None
    if any(c.weight_decay > 0 for c in configs):
        decay = torch.zeros_like(buf)
        for name, view in ts.views(decay).items():
            for s, c in enumerate(configs):
                view[s] = c.weight_decay if (name not in TABLES or c.decay_scope == "all") else 0.0
    budget = np.array([c.steps for c in configs])
    steps = budget.copy()
    ids = np.flatnonzero(budget > 0)  # the members still training, in buffer order
    opt = FlatOptimizer(c0.optimizer, buf, [c.lr for c in configs], decay)
    opt.keep(torch.as_tensor(ids, device=device))
    stop_at = torch.tensor([np.nan if c.target_accuracy is None else c.target_accuracy for c in configs],
                           dtype=torch.float32, device=device)
    early = bool((~torch.isnan(stop_at)).any())
    offsets = np.array([c.offset for c in configs])
    n_steps = int(budget.max())
    loss_hist = np.full((n_steps, S), np.nan, dtype=np.float32)
    acc_hist = np.full((n_steps, S), np.nan, dtype=np.float32)
    segment: list[tuple[torch.Tensor, torch.Tensor]] = []  # (log-likelihood, correct) since ids last changed
    seg_start, window, ran = 0, [], 0
    last_acc = np.full(S, np.nan, dtype=np.float32)
    B, V = c0.batch, c0.vocab
    here = lambda i: torch.as_tensor(i, device=device)  # noqa: E731

    def flush(upto: int) -> None:  # the segment's history into the arrays
        nonlocal segment, seg_start
        if segment:
            loss_hist[seg_start:upto, ids] = -torch.stack([a for a, _ in segment]).cpu().numpy()
            acc_hist[seg_start:upto, ids] = torch.stack([b for _, b in segment]).cpu().numpy() / np.float32(B)
        segment, seg_start = [], upto

    def members() -> tuple:  # what the loop needs about the members still training
        offs = offsets[ids]
        one = int(offs[0]) if len(ids) and (offs == offs[0]).all() else None  # one offset: a slice, no gather
        return one, here(offs), int(budget[ids].min()) if len(ids) else 0

    def drop(leaving: np.ndarray) -> None:  # write the leaving members to the model, keep the others
        nonlocal ids, window, now
        ts.unpack(opt.params[here(np.flatnonzero(leaving))], model, here(ids[leaving]))
        kept = here(np.flatnonzero(~leaving))
        opt.keep(kept)
        window = [w.index_select(0, kept) for w in window]
        ids = ids[~leaving]
        now = members()

    now = members()
    for step in range(n_steps):
        one, offs, next_spent = now
        if step >= next_spent:  # some budget is spent
            flush(step)
            drop(budget[ids] <= step)
        if len(ids) == 0:
            break
        one, offs, _ = now
        n = len(ids)
        with torch.inference_mode():  # no autograd bookkeeping on any of the step's ~100 operations
            tokens = stream.next(ids).to(device)
            length = tokens.shape[-1]
            if one is not None:
                target = tokens[..., length - 1 - one:length - one]  # (n, B, 1)
            else:
                target = tokens.gather(-1, (length - 1 - offs).view(n, 1, 1).expand(n, B, 1))
            loglik, correct, grad = ts.step(opt.params, tokens, target)
            opt.step(grad)
        ran = step + 1
        segment.append((loglik, correct))
        bar.update()
        if on_step is not None:
            last_acc[ids] = correct.cpu().numpy() / np.float32(B)
            on_step(step, last_acc.copy())
        if early:
            window = (window + [correct])[-STOP_WINDOW:]
            if len(window) == STOP_WINDOW:  # a lucky batch alone does not stop
                recent = (torch.stack(window).to(torch.float32) / B).mean(0)
                reached = (recent >= stop_at[here(ids)]).cpu().numpy()  # NaN (no early stop) never compares true
                if reached.any():
                    steps[ids[reached]] = step + 1
                    flush(step + 1)
                    drop(reached)
        if on_checkpoint is not None and ran % every == 0:
            ts.unpack(opt.params, model, here(ids))
            if on_checkpoint(ran, model):
                steps[ids] = ran
                break
        if len(ids) == 0:
            break
    flush(ran)
    ts.unpack(opt.params, model, here(ids))
    loss_hist, acc_hist = loss_hist[:ran], acc_hist[:ran]
    for hist in (loss_hist, acc_hist):  # a stopped member repeats its last step
        for s in range(S):
            k = min(int(steps[s]), ran)
            if 0 < k < ran:
                hist[k:, s] = hist[k - 1, s]
    return loss_hist, acc_hist, steps
