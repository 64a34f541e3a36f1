"""Deterministic training of an ensemble of runs, with an early stop per member.

An ensemble is a list of runs (config, seed) that share every shape setting (vocabulary, width,
lengths, encoding, ...) and may differ in the recipe settings of ``MEMBER_FIELDS``: step size, weight
decay, step budget, early stop, offset. All members train as one batched model; each member follows
exactly the path it would follow trained alone: its own data stream, its own step size, and a member
that has stopped (its budget spent, or its training-batch accuracy averaged over the last
``STOP_WINDOW`` steps at ``target_accuracy``) leaves the batch (no parameter, moment or step-count
change), and its history rows after the stop repeat its last step.

One loop (``_train``) for every model: the members' parameters live in one flat (S, P) buffer that
``optim.Optimizer`` updates with the config's rule, and a gradient function gives each step's
(log-likelihood, correct predictions, gradient): the hand-written backward of ``tables.TableStep`` for a
one-layer model, autograd through the reference ``Model.forward`` (``AutogradStep``) otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from tqdm.auto import tqdm

from .config import Config, ConfigError, usable_cores
from .engine.stretch import EarlyStop
from .model import Layout, Model, log_likelihood
from .optim import Optimizer
from .tables import TableStep, applies
from .task import TrainStream, target_index


def steady_heap(threshold: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold (process-wide) so that buffers of ``threshold`` bytes or more always come
    from mmap and go back to the system when freed. Returns whether it was set (glibc only).

    glibc raises the threshold each time it frees a large mmapped block, after which the step's scratch
    buffers (tokens, the compiled step's arrays: about 3 MB a step at batch 1024) come from the heap, between
    the small history tensors the loop keeps; the heap then fragments and grows without bound. Measured: a
    10-member, batch-1024 ensemble grew by about 0.2 GB a second (a 20,000-step sweep job reached 22 GB and
    was killed); with the threshold fixed it stays flat, at the same speed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # another C library (musl): it does not move its threshold
        return False
    m_mmap_threshold = -3  # glibc's M_MMAP_THRESHOLD
    return bool(libc.mallopt(m_mmap_threshold, threshold))


steady_heap()


# The fewest sequences per step (members x batch) for which the GPU trains a one-layer model faster than the
# compiled CPU step (measured with benchmarks/gpu.py on an H200 host, README "On a GPU": one model of batch 256
# 11.2 s on the GPU against 0.94 s on its CPU, two 9.5 s against 1.04 s; 10 members of batch 1024 3.65 against
# 5.26 ms a step, 1000 members of batch 256 2.5x faster on the GPU). The threshold lies between 512 and 10,240.
GPU_MIN_SEQUENCES = 8192


def default_device(members: int = 1, c: Config | None = None) -> torch.device:
    """Where ``train`` runs ``members`` models of config ``c`` when no device is given: the GPU only where it was
    measured to win, else the CPU.

    A one-layer model without an MLP trains on the CPU by the compiled step (``tables.TableStep``), which beats a
    GPU's hundred small kernels a step until the work is wide: the GPU is taken (when CUDA is present) once
    members x batch >= ``GPU_MIN_SEQUENCES``. Other models (more layers, an MLP) run torch operations on either
    device and take the GPU when present. Without ``c``: the rule for the default config."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    c = c if c is not None else Config()
    compiled_on_cpu = c.layers == 1 and not c.mlp
    if compiled_on_cpu and members * c.batch < GPU_MIN_SEQUENCES:
        return torch.device("cpu")
    return torch.device("cuda")


@contextmanager
def cpu_threads(device: torch.device, threads: int = 1) -> Iterator[None]:
    """Run the block with ``threads`` intra-op CPU threads on the CPU, then restore the setting: torch's, and
    that of every BLAS library in the process (numpy's and SciPy's OpenBLAS, which ignore torch's; the compiled
    step's products call SciPy's: ``_blas``).

    A training step is a few small products and loops of microseconds each: splitting them over threads
    costs more hand-offs than it saves, and on a busy machine it is many times slower
    (benchmarks/ measures it). The numbers do not depend on the thread count.
    """
    before = torch.get_num_threads()
    if device.type != "cpu":
        yield
        return
    torch.set_num_threads(threads)
    try:
        with _blas().limit(limits=threads, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(before)


@functools.cache
def _blas() -> ThreadpoolController:
    """The process's thread pools (found once: about a millisecond; a limit then costs microseconds).

    The compiled step's products (numba's ``np.dot``) call SciPy's OpenBLAS, a second library beside numpy's,
    which SciPy loads on first use: it is loaded here first, so that the limit covers it. Left at its default
    of one thread per core, that library made a V=32 RoPE step 30 ms instead of 0.2 (measured on 2 cores)."""
    import scipy.linalg.cython_blas  # noqa: F401  (the BLAS that numba's np.dot calls)

    return ThreadpoolController()


def run_threads() -> int:
    """Threads over which an ensemble's members are split when its steps run as stretches (``TableStep.run``):
    ``$LENGTHGEN_THREADS``, else one per core this process may use. Processes that share the cores (the
    sweep's workers, chapters executed side by side) set it to 1. The numbers do not depend on it."""
    value = os.environ.get(THREADS_ENV, "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"${THREADS_ENV}={value!r}: give a number of threads (>= 1), or unset it")
        return int(value)
    return usable_cores()


# The token and position tables. With decay_scope="matrices" weight decay leaves them alone, so that
# untrained APE rows stay exactly at their initial values; decay_scope="all" decays them too.
TABLES = ("embed", "encoding.table")
STOP_WINDOW = 5  # steps averaged for the early stop
# A stretch of compiled steps under an early stop ends at every step where the exact mean of a member's window,
# h / (STOP_WINDOW B) for h correct predictions, is within STOP_MARGIN of its target (``stop_hits``). The training
# loop's own check rounds (counts / B and their mean in float32: a few roundings of numbers <= 1, each under 6e-8),
# so it is within far less than STOP_MARGIN of the exact mean, and a stretch never passes a step where it stops.
STOP_MARGIN = 1e-6
TRAIN_THREADS = 1  # intra-op CPU threads while training (see cpu_threads)
THREADS_ENV = "LENGTHGEN_THREADS"  # threads for the members of an ensemble (run_threads)
# With on_step (the playground's progress bar) a stretch runs ON_STEP_EVERY steps at first, and twice as many as the
# last one while that one took under ON_STEP_SECONDS / 2: each stretch is a hand-off to the threads and a wait for
# the slower one (measured: a small-step model of two seeds on two threads, 1.09 s in stretches of 200 steps, 0.99 s
# in one; benchmarks/README.md). How the steps are cut into stretches does not change their numbers.
ON_STEP_EVERY = 200
ON_STEP_SECONDS = 0.1
# Settings that may differ between members of one batched ensemble (everything else sets tensor shapes
# or the shared data stream and must be equal).
MEMBER_FIELDS = ("lr", "weight_decay", "decay_scope", "steps", "target_accuracy", "offset")
GRADIENTS = ("tables", "autograd")  # how a step's gradient is computed (train_runs' ``gradient``)


def stop_hits(stop_at: np.ndarray, batch: int, window: int = STOP_WINDOW) -> np.ndarray:
    """(S,) int64: for each member, the smallest sum h of its correct predictions over ``window`` steps of ``batch``
    sequences whose exact mean accuracy h / (window batch) is at least its target ``stop_at`` (S,) minus
    ``STOP_MARGIN``; window x batch + 1 (never) for a NaN target (no early stop). ``engine.stretch.EarlyStop``'s
    ``hits``."""
    total = window * batch
    need = np.ceil((np.asarray(stop_at, np.float64) - STOP_MARGIN) * total)
    return np.where(np.isnan(need), total + 1, np.clip(need, 0, total + 1)).astype(np.int64)


def shape_key(c: Config) -> str:
    """The settings that runs must share to train as one ensemble (all but MEMBER_FIELDS), as text."""
    return str(sorted((k, v) for k, v in c.to_dict().items() if k not in MEMBER_FIELDS))


@dataclass
class Trained:
    """A trained ensemble (one config, one member per seed) and how it got there."""

    model: Model
    config: Config
    seeds: list[int]
    loss: np.ndarray  # (steps_run, S) training loss per step and member (NaN for a member with no budget;
    # float64 in a float64 run, else float32)
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
    *,
    gradient: str | None = None,
) -> Trained:
    """Train one model per seed, batched as an ensemble. Same config and seeds: same numbers on the CPU.

    ``device``: where to train; None picks by ``default_device``: the CPU for a single model or a few (the compiled
    step), a GPU only for wide ensembles (members x batch >= ``GPU_MIN_SEQUENCES``) or models the compiled step does
    not cover.
    ``progress``: a tqdm bar (None shows it only on an interactive terminal or notebook).
    ``on_step(step, accuracy_per_member)`` is called for every step, in order (e.g. a widget's progress bar); where
    steps run as compiled stretches, for each step of a stretch once it is done (``ON_STEP_EVERY``).
    ``on_checkpoint(steps_done, model)``, every ``checkpoint_every`` steps, and ``gradient``: see ``train_runs``.
    """
    if len(seeds) == 0:
        raise ValueError("give at least one seed")
    return train_runs([(c, s) for s in seeds], device, progress, on_step, on_checkpoint, checkpoint_every,
                      gradient=gradient)[0]


def train_runs(
    runs: Sequence[tuple[Config, int]],
    device: torch.device | str | None = None,
    progress: bool | None = None,
    on_step: Callable[[int, np.ndarray], None] | None = None,
    on_checkpoint: Callable[[int, Model], bool | None] | None = None,
    checkpoint_every: int = 0,
    *,
    gradient: str | None = None,
) -> list[Trained]:
    """Train every (config, seed) of ``runs`` as one batched ensemble; one Trained per distinct config
    (first-seen order), holding that config's seeds in the order given.

    The configs must agree on every setting outside MEMBER_FIELDS. Each member trains exactly as it
    would alone (same data, same updates, same stop). ``gradient``: "tables" (the hand-written backward
    of ``tables.TableStep``, one-layer models only), "autograd" (through ``Model.forward``), or None: the
    tables where they apply. Either way the parameters and the optimiser's state live in one buffer from
    which a member drops out when it stops (so a stopped member costs nothing).

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
    if gradient is not None and gradient not in GRADIENTS:
        raise ValueError(f"gradient={gradient!r}: use one of {', '.join(GRADIENTS)}, or None (the tables where they apply)")
    device = torch.device(device) if device is not None else default_device(len(runs), configs[0])
    start = time.perf_counter()
    c0 = configs[0]
    model = Model(c0, seeds).to(device)
    if gradient == "tables" and not applies(model):
        raise ValueError(f"gradient='tables' needs a one-layer model (this one has {c0.layers}); use 'autograd'")
    if applies(model) if gradient is None else gradient == "tables":
        # APE rows past the training length get no gradient: without decay on them, leave them out
        table_decay = any(c.weight_decay > 0 and c.decay_scope == "all" for c in configs)
        step_fn: GradientFunction = TableStep(c0, model.encoding, None if table_decay else c0.train_length)
    else:
        step_fn = AutogradStep(model)
    stream = TrainStream(c0, seeds)
    bar = tqdm(disable=(None if progress is None else not progress), leave=False, desc=c0.encoding,
               total=max(c.steps for c in configs))
    with cpu_threads(device, TRAIN_THREADS):
        loss_hist, acc_hist, steps = _train(model, stream, configs, step_fn, bar, on_step, on_checkpoint,
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


class GradientFunction(Protocol):
    """A layout of the parameters in one (S, P) buffer (``model.Layout``) and, called on (buffer rows (n, P),
    tokens (n, B, L), targets (n, B, 1)), each member's (mean log-likelihood (n,), correct predictions (n,),
    gradient of the mean cross-entropy (n, P)). ``no_autograd``: it may run in inference mode."""

    no_autograd: bool

    def pack(self, model: Model) -> torch.Tensor: ...
    def unpack(self, buf: torch.Tensor, model: Model, members: torch.Tensor) -> None: ...
    def views(self, buf: torch.Tensor) -> dict[str, torch.Tensor]: ...
    def __call__(self, buf: torch.Tensor, x: torch.Tensor, target: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class AutogradStep(Layout):
    """The gradient function of any model: autograd through ``Model.forward``, the parameters being views
    of the buffer's rows (``torch.func.functional_call``), so that it runs on the members still training."""

    no_autograd = False

    def __init__(self, model: Model):
        super().__init__(model)
        self.model = model

    def __call__(self, buf: torch.Tensor, x: torch.Tensor, target: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            params = buf.detach().requires_grad_(True)
            logits = torch.func.functional_call(self.model, self.views(params), (x,)).logits
            loglik = log_likelihood(logits, target)
            (grad,) = torch.autograd.grad(loglik.sum(), params)  # members do not interact
        correct = (logits.detach().argmax(-1, keepdim=True) == target).sum((1, 2))
        return loglik.detach(), correct, grad.neg_()


@dataclass
class _Members:
    """The members still training and what a step needs of them: ``ids`` (their indices among the S, in buffer
    order), ``offsets`` (n,) theirs on the device, ``shared_offset`` their one offset when they share it (a slice,
    no gather) else None, and ``until``, the step at which the first of their budgets is spent (0 when none is
    left)."""

    ids: np.ndarray
    offsets: torch.Tensor
    shared_offset: int | None
    until: int

    @classmethod
    def of(cls, ids: np.ndarray, offsets: np.ndarray, budget: np.ndarray, device: torch.device) -> _Members:
        """The members ``ids`` of all members' ``offsets`` (S,) and step ``budget`` (S,)."""
        mine = offsets[ids]
        shared = int(mine[0]) if len(ids) and (mine == mine[0]).all() else None
        return cls(ids, torch.as_tensor(mine, device=device), shared, int(budget[ids].min()) if len(ids) else 0)


@dataclass
class _History:
    """The loss and accuracy history (steps, S), written a segment at a time: ``segment`` holds the (log-likelihood,
    correct predictions) (k, n) of each call since step ``start``, the last time the members changed, and
    ``flush`` writes them into the members' columns."""

    loss: np.ndarray
    accuracy: np.ndarray
    batch: int
    segment: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    start: int = 0

    def flush(self, upto: int, ids: np.ndarray) -> None:
        """Write the segment (steps start .. upto of the members ``ids``) into the arrays; a new segment at upto."""
        if self.segment:
            self.loss[self.start:upto, ids] = -torch.cat([a for a, _ in self.segment]).cpu().numpy()
            self.accuracy[self.start:upto, ids] = (torch.cat([b for _, b in self.segment]).cpu().numpy()
                                                   / np.float32(self.batch))
        self.segment, self.start = [], upto


def _train(model: Model, stream: TrainStream, configs: Sequence[Config], step_fn: GradientFunction, bar: tqdm,
           on_step: Callable | None, on_checkpoint: Callable | None, every: int,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training loop: ``step_fn`` and ``optim.Optimizer`` on one (S, P) buffer; a member that stops is
    written to the model and leaves the buffer. Returns (loss (steps run, S), accuracy (steps run, S),
    steps each member trained (S,)).

    Defined once for every gradient function: a stopped member's loss and accuracy rows repeat its last
    step (trained alone, its history ends there); a member with a budget of 0 never enters the buffer,
    keeps its initial parameters, and its rows are NaN. The loop's state: ``step``, the members still training
    (``_Members``), the early stop's ``window`` of their last correct counts, the ``history`` (``_History``) and
    the optimiser's buffer and moments.
    """
    S, c0 = len(configs), configs[0]
    device = model.embed.device
    buf = step_fn.pack(model)
    decay = None
    if any(c.weight_decay > 0 for c in configs):
        decay = torch.zeros_like(buf)
        for name, view in step_fn.views(decay).items():
            for s, c in enumerate(configs):
                view[s] = c.weight_decay if (name not in TABLES or c.decay_scope == "all") else 0.0
    budget = np.array([c.steps for c in configs])
    steps = budget.copy()
    offsets = np.array([c.offset for c in configs])
    members = _Members.of(np.flatnonzero(budget > 0), offsets, budget, device)
    opt = Optimizer(c0.optimizer, buf, [c.lr for c in configs], decay)
    opt.keep(torch.as_tensor(members.ids, device=device))
    stop_at = torch.tensor([np.nan if c.target_accuracy is None else c.target_accuracy for c in configs],
                           dtype=torch.float32, device=device)
    early = bool((~torch.isnan(stop_at)).any())
    n_steps = int(budget.max())
    B = c0.batch
    history = _History(np.full((n_steps, S), np.nan, dtype=np.float64 if c0.dtype == "float64" else np.float32),
                       np.full((n_steps, S), np.nan, dtype=np.float32), B)
    window: list[torch.Tensor] = []  # the members' correct counts (n,) of the last STOP_WINDOW steps
    last_acc = np.full(S, np.nan, dtype=np.float32)
    here = lambda i: torch.as_tensor(i, device=device)  # noqa: E731
    mode = torch.inference_mode if step_fn.no_autograd else torch.no_grad  # no autograd bookkeeping on the step

    def drop(leaving: np.ndarray, members: _Members, window: list[torch.Tensor]
             ) -> tuple[_Members, list[torch.Tensor]]:
        """Write the ``leaving`` members (a mask over ``members.ids``) to the model and take them out of the
        optimiser; the members that stay, and their window."""
        ids = members.ids
        step_fn.unpack(opt.params[here(np.flatnonzero(leaving))], model, here(ids[leaving]))
        kept = here(np.flatnonzero(~leaving))
        opt.keep(kept)
        return _Members.of(ids[~leaving], offsets, budget, device), [w.index_select(0, kept) for w in window]

    # where the gradient function can (``TableStep.run``: compiled, on the CPU) it takes whole stretches of steps
    # up to the next checkpoint or spent budget in one call (its members on ``run_threads()`` threads); under an
    # early stop a stretch also ends where a member's window may reach its target (``stop_hits``), and the check
    # below decides at its last step (the same compiled code: the same numbers either way); on_step then hears
    # of each step of a stretch (``span`` steps at most) once the stretch is done
    ahead = getattr(step_fn, "runs_ahead", lambda *_: False)(opt, stream)
    threads = run_threads() if ahead else 1
    least_hits = stop_hits(stop_at.cpu().numpy(), B)  # where a stretch may end under the early stop
    step = 0
    drawn = None  # the last batch drawn step by step, drawn into again (TrainStream.draw)
    span = ON_STEP_EVERY  # the steps of the next stretch while on_step listens
    while step < n_steps:
        if step >= members.until:  # some budget is spent
            history.flush(step, members.ids)
            members, window = drop(budget[members.ids] <= step, members, window)
        if len(members.ids) == 0:
            break
        ids, n = members.ids, len(members.ids)
        if ahead:  # k steps: (k, n) log-likelihoods and correct predictions
            k = members.until - step if on_checkpoint is None else min(members.until - step, every - step % every)
            if on_step is not None:
                k = min(k, span)
            rule = None
            if early:  # the window's counts before the stretch, oldest first
                before = np.array([w.numpy() for w in window], np.int64).reshape(-1, n)
                rule = EarlyStop(least_hits[ids], before, STOP_WINDOW)
            started = time.perf_counter()
            loglik, correct = step_fn.run(opt, stream, ids, offsets[ids], k, threads, rule)
            k = len(loglik)  # fewer where the early stop's rule ended the stretch
            if on_step is not None and k == span and time.perf_counter() - started < ON_STEP_SECONDS / 2:
                span *= 2
        else:
            k = 1
            with mode():
                drawn = stream.next(ids, out=drawn)
                tokens = drawn.to(device)
                length = tokens.shape[-1]
                one = members.shared_offset
                if one is not None:
                    at = target_index(length, one)
                    target = tokens[..., at:at + 1]  # (n, B, 1)
                else:
                    at = target_index(length, members.offsets)  # (n,)
                    target = tokens.gather(-1, at.view(n, 1, 1).expand(n, B, 1))
                loglik, correct, grad = step_fn(opt.params, tokens, target)
                opt.step(grad)
            loglik, correct = loglik[None], correct[None]
        step += k
        history.segment.append((loglik, correct))
        bar.update(k)
        if on_step is not None:
            for i, hits in enumerate(correct.cpu().numpy()):
                last_acc[ids] = hits / np.float32(B)
                on_step(step - k + i, last_acc.copy())
        if early:
            window = (window + list(correct[-STOP_WINDOW:]))[-STOP_WINDOW:]
            if len(window) == STOP_WINDOW:  # a lucky batch alone does not stop
                recent = (torch.stack(window).to(torch.float32) / B).mean(0)
                reached = (recent >= stop_at[here(ids)]).cpu().numpy()  # NaN (no early stop) never compares true
                if reached.any():
                    steps[ids[reached]] = step
                    history.flush(step, ids)
                    members, window = drop(reached, members, window)
        if on_checkpoint is not None and step % every == 0:
            step_fn.unpack(opt.params, model, here(members.ids))
            if on_checkpoint(step, model):
                steps[members.ids] = step
                break
        if len(members.ids) == 0:
            break
    history.flush(step, members.ids)
    step_fn.unpack(opt.params, model, here(members.ids))
    loss_hist, acc_hist = history.loss[:step], history.accuracy[:step]
    for hist in (loss_hist, acc_hist):  # a stopped member repeats its last step
        for s in range(S):
            k = min(int(steps[s]), step)
            if 0 < k < step:
                hist[k:, s] = hist[k - 1, s]
    return loss_hist, acc_hist, steps
