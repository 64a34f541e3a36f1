"""The real one-layer model along training, in the regime the implicit-bias results describe, and weight decay's bound.

Rung (c) of chapter 10's ladder: the real one-layer RoPE model (token table, Wq, Wk, Wv, Wo, read-out, all trained),
trained with one update rule on a fixed training set of N sequences, full batch, float64, no early stop. Along training
(log-spaced checkpoints) its carrier kernel's pair coefficients w = (Re z, Im z) in R^d (``kernel.pair_spectrum``:
z_p = q_p conj(k_p) / sqrt(d), with q_p, k_p the pair-p part of the mean token's query and key) are compared with
each geometry's max-margin kernel by the cosine and by the margin ratio (the kernel's smallest in-window margin per
unit of that geometry's norm, over the max-margin kernel's: 1 at the optimum), next to two baselines: random
directions and seed-to-seed. ``position_share`` records how much of the first layer's logit the offset explains:
a fixed set small enough to memorise is fitted through the tokens' content, a large one only through position.

``max_abs`` records the largest parameter, which AdamW's weight decay bounds by 1/lambda (Xie & Li 2024).

What chapter 10 shows of all this (verdicts, tables, curves, cited numbers) is built in
``lengthgen.chapters.ch10_selection``.

Shapes: S members (seeds), d model width (= 2 x the number of RoPE pairs), n checkpoints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .config import Config, ConfigError
from .kernel import PairSpectrum, pair_spectrum
from .encodings import rope_frequencies
from .maxmargin import MaxMargin, coefficients, cosine, hard_margin, kernel_constraints, norm_of
from .model import Model
from .optim import Optimizer
from .tables import TableStep
from .task import TrainStream, target_index
from .thresholds import MAX_MARGIN
from .train import Trained, cpu_threads, train


def kernel_coefficients(model: Model) -> np.ndarray:
    """(S, d) the carrier kernel's pair coefficients w = (Re z, Im z), unit length per member."""
    return _unit_coefficients(pair_spectrum(model))


def _unit_coefficients(spec: PairSpectrum) -> np.ndarray:
    w = coefficients(spec.amplitude, spec.phase)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


@torch.no_grad()
def max_abs_parameter(model: Model) -> np.ndarray:
    """(S,) the largest |entry| over every parameter of each member (AdamW bounds it by 1/lambda)."""
    return torch.stack([p.detach().abs().flatten(1).amax(1) for p in model.parameters()]).amax(0).double().cpu().numpy()


def log_checkpoints(steps: int, every: int, per_decade: int = 4) -> list[int]:
    """Multiples of ``every`` up to ``steps``, about ``per_decade`` per decade, log-spaced (always ``steps``)."""
    if every < 1 or steps < every or steps % every:
        raise ConfigError(f"steps={steps}, every={every}: give every >= 1 dividing steps")
    n = max(2, int(np.ceil(per_decade * np.log10(steps / every))) + 1)
    picks = np.unique(np.round(np.geomspace(1, steps // every, n)).astype(int)) * every
    return [int(s) for s in picks]


KERNEL_GEOMETRIES = ("pairs", "factors_linf", "l2", "linf")  # induced on w by L2 and l-inf on the factors, then on w


def kernel_solutions(c: Config, geometries: Sequence[str]) -> dict[str, MaxMargin]:
    """geometry -> the max-margin carrier kernel of ``c``'s task (offset, training length, width, RoPE base) for each
    kernel geometry ``maxmargin.hard_margin`` solves (the induced ``"factors_linf"`` as well as ``maxmargin.NORMS``)."""
    theta = rope_frequencies(c.dim, c.rope_base).double().numpy()
    g = kernel_constraints(c.offset, c.train_length, theta)
    return {name: MaxMargin(hard_margin(g, name), theta, c.offset, c.train_length, name) for name in geometries}


def margin_ratio(w: np.ndarray, solution: MaxMargin) -> np.ndarray:
    """(...) the kernel's smallest in-window margin per unit of ``solution``'s norm, over the max-margin kernel's:
    min_delta w . (f(-K) - f(delta)) / R(w) x R(w*), for coefficients w (..., d). 1 exactly at the optimum (or on
    any point of an optimal face), below it elsewhere, negative when an in-window offset beats the target."""
    g = kernel_constraints(solution.offset, solution.train_length, solution.theta)  # (T-1, d)
    w = np.asarray(w, dtype=np.float64)
    return (w @ g.T).min(-1) / norm_of(w, solution.norm) * norm_of(solution.w, solution.norm)


@dataclass
class DirectionPath:
    """One rule's run with its kernel direction, position share and largest parameter at each checkpoint.

    Apart from ``selection.Trajectory`` (an update rule on a ladder rung, no transformer) and ``regimes.StepPath``
    (whole trained transformers, one separate run per checkpoint) because it reads one transformer run while it
    trains, a decaying step included (``scheduled_train``, which ``train``'s separate runs cannot give), and
    keeps only what its geometry needs at each of its many log-spaced checkpoints: the kernel's unit pair
    coefficients, not the model."""

    steps: np.ndarray  # (n,) steps done at each checkpoint (0: the initialisation)
    w: np.ndarray  # (n, S, d) unit kernel coefficients
    max_abs: np.ndarray  # (n, S) largest |parameter|
    share: np.ndarray  # (n, S) share of the in-window logit variance explained by the offset (kernel.position_share)
    trained: Trained  # the run at its end
    schedule: str = ""  # the step size's schedule and Adam's eps when not train's constant step ("" otherwise)

    def cosines(self, solution: np.ndarray) -> np.ndarray:
        """(n, S) cosine of each checkpoint's kernel with a max-margin kernel's coefficients (d,)."""
        return cosine(self.w, np.asarray(solution)[None, None])

    def margin_ratios(self, solution: MaxMargin) -> np.ndarray:
        """(n, S) ``margin_ratio`` of each checkpoint's kernel in ``solution``'s geometry."""
        return margin_ratio(self.w, solution)

    def turning(self) -> np.ndarray:
        """(n-1, S) 1 - cosine between consecutive checkpoints: -> 0 when the direction stops turning."""
        return 1 - cosine(self.w[1:], self.w[:-1])

    @property
    def recipe(self) -> str:
        """The run's recipe (``Config.recipe``), with the schedule when it has one."""
        return self.trained.config.recipe() + (f", {self.schedule}" if self.schedule else "")

    @property
    def seconds_per_step(self) -> float:
        """Wall-clock seconds per step and seed of this run (checkpoints included)."""
        return self.trained.seconds / max(1, self.trained.config.steps) / len(self.trained.seeds)


def _check(c: Config) -> Config:
    if c.encoding != "rope" or c.layers != 1:
        raise ConfigError(f"encoding={c.encoding!r}, layers={c.layers}: the kernel direction is defined for "
                          f"a one-layer RoPE model (encoding='rope', layers=1)")
    return c.replace(target_accuracy=None)


def direction_path(c: Config, seeds: Sequence[int], every: int, per_decade: int = 4, power: float = 0.0,
                   eps: float | None = None) -> DirectionPath:
    """Train ``c`` (no early stop) and record the kernel direction at ``log_checkpoints(c.steps, every)``.

    ``power`` = a > 0 gives the step size lr (t + 1)^-a of the t-th update (``optim.Optimizer``; Zhang, Zou & Cao
    2024's schedule for Adam) and ``eps`` Adam's epsilon (None: the optimiser's default). ``train`` takes a constant
    step only, so such a run goes through ``scheduled_train`` (a fixed training set, full batch)."""
    c = _check(c)
    wanted = set(log_checkpoints(c.steps, every, per_decade))
    steps, ws, big, shares = [], [], [], []

    def record(done: int, model: Model) -> None:
        if done in wanted:
            spec = pair_spectrum(model)  # its position share is taken over the training length
            steps.append(done)
            ws.append(_unit_coefficients(spec))
            big.append(max_abs_parameter(model))
            shares.append(spec.position_share)

    wanted.add(0)
    record(0, Model(c, seeds))

    if power == 0 and eps is None:
        trained, schedule = train(c, seeds, progress=False, on_checkpoint=record, checkpoint_every=every), ""
    else:
        trained = scheduled_train(c, seeds, power, eps, record, every)
        schedule = (f"step lr (t+1)^-{power:g}" if power else "constant step") + ("" if eps is None else f", eps {eps:g}")
    return DirectionPath(np.array(steps), np.stack(ws), np.stack(big), np.stack(shares), trained, schedule)


def scheduled_train(c: Config, seeds: Sequence[int], power: float, eps: float | None, on_checkpoint, every: int
                    ) -> Trained:
    """Full-batch training of a one-layer model on its fixed training set (``c.train_set``) with a decaying step
    size lr (t + 1)^-power and Adam's ``eps``: the loop of ``train`` for the one feature it lacks (a schedule),
    with its gradient (``tables.TableStep``), data (``task.TrainStream``) and update (``optim.Optimizer``).
    ``on_checkpoint(steps_done, model)`` every ``every`` steps. No weight decay, no early stop."""
    if c.train_set is None or c.weight_decay:
        raise ConfigError(f"train_set={c.train_set}, weight_decay={c.weight_decay}: a scheduled run takes a fixed "
                          f"training set (train_set=N, batch=N) and no weight decay")
    start = time.perf_counter()
    model = Model(c, seeds)
    step_fn = TableStep(c, model.encoding, c.train_length)
    buf = step_fn.pack(model)
    opt = Optimizer(c.optimizer, buf, [c.lr] * len(seeds), power=power,
                    **({} if eps is None else {"eps": eps}))
    tokens = TrainStream(c, list(seeds)).next()
    first = target_index(c.train_length, c.offset)
    target = tokens[..., first:first + 1]  # (S, B, 1)
    members = torch.arange(len(seeds))
    loss = np.empty((c.steps, len(seeds)))
    acc = np.empty((c.steps, len(seeds)), dtype=np.float32)
    with cpu_threads(torch.device("cpu")), torch.inference_mode():
        for step in range(1, c.steps + 1):
            loglik, correct, grad = step_fn(opt.params, tokens, target)
            opt.step(grad)
            loss[step - 1], acc[step - 1] = -loglik.numpy(), correct.numpy() / c.batch
            if on_checkpoint is not None and step % every == 0:
                step_fn.unpack(opt.params, model, members)
                on_checkpoint(step, model)
    step_fn.unpack(opt.params, model, members)
    return Trained(model, c, list(seeds), loss, acc, np.full(len(seeds), c.steps), time.perf_counter() - start)


def seed_agreement(w: np.ndarray) -> np.ndarray:
    """(S (S-1) / 2,) cosines between the directions (S, d) of every pair of seeds."""
    S = len(w)
    return np.array([float(cosine(w[i], w[j])) for i in range(S) for j in range(i + 1, S)])


def random_cosines(reference: np.ndarray, draws: int = 10000, seed: int = 0) -> np.ndarray:
    """(draws,) cosines of isotropic random directions with ``reference`` (d,): the chance level of a cosine."""
    gen = np.random.default_rng(seed)
    return cosine(gen.standard_normal((draws, len(reference))), np.asarray(reference)[None])


def random_level(solutions: Mapping[str, MaxMargin], quantile: float = 0.95) -> float:
    """The largest, over ``solutions``, ``quantile`` of |cosine| between a random direction and the solution's
    coefficients: a cosine below it means nothing."""
    return max(float(np.quantile(np.abs(random_cosines(s.w)), quantile)) for s in solutions.values())


# The limit: position share by training-set size, and each rule's direction against log t ------------------------

def size_scan(base: Config, sizes: Sequence[int], seeds: Sequence[int], every: int, per_decade: int = 4,
              progress: bool = False) -> dict[int, DirectionPath]:
    """training-set size N -> the ``direction_path`` of ``base`` on a fixed set of N sequences, full batch
    (``progress``: a tqdm bar over the sizes)."""
    return {N: direction_path(base.replace(train_set=N, batch=N), seeds, every, per_decade)
            for N in tqdm(sizes, desc="training-set sizes", unit="size", disable=not progress)}


def decade_slope(steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(S,) the least-squares slope of ``values`` (n, S) against log10(steps) over the last decade of checkpoints
    (steps >= steps[-1] / 10): how much a cosine or a margin ratio still gains per tenfold more steps."""
    steps = np.asarray(steps, dtype=np.float64)
    last = steps >= steps[-1] / 10
    if last.sum() < 2:
        raise ConfigError(f"checkpoints {steps.tolist()}: the last decade needs at least two")
    x = np.log10(steps[last])
    x = x - x.mean()
    return (x[:, None] * values[last]).sum(0) / (x**2).sum()


def decades_to(value: float, slope: float, target: float = MAX_MARGIN) -> float:
    """Tenfold increases of the steps still needed to reach ``target`` at ``slope`` per decade: 0 when ``value``
    is there already, inf when the slope does not climb toward it."""
    if value >= target:
        return 0.0
    return (target - value) / slope if slope > 0 else float("inf")


@dataclass
class Approach:
    """Where one rule's kernel ends against every geometry: final cosine and margin ratio (mean over seeds), their
    gain per decade of steps over the last decade, and the decades still needed to reach ``target``."""

    rule: str
    geometry: str  # the geometry of highest final margin ratio
    cos: dict[str, float]
    ratio: dict[str, float]
    cos_slope: dict[str, float]
    ratio_slope: dict[str, float]
    ratio_start: dict[str, float]  # margin ratio at the first checkpoint of the last decade
    agree: float  # mean seed-to-seed cosine at the end
    share: float  # mean position share at the end
    target: float

    @property
    def decades(self) -> float:
        """Decades of steps the closest geometry's margin ratio still needs, at its last decade's rate."""
        return decades_to(self.ratio[self.geometry], self.ratio_slope[self.geometry], self.target)


def approaches(paths: Mapping[str, DirectionPath], solutions: Mapping[str, MaxMargin], target: float = MAX_MARGIN
               ) -> dict[str, Approach]:
    """rule -> its ``Approach``: the geometry whose max-margin kernel it is closest to by the final margin ratio (the
    measure that stays right where an optimum is a face, not a point) and the rates toward every geometry."""
    out = {}
    for name, p in paths.items():
        cos = {g: p.cosines(s.w) for g, s in solutions.items()}
        ratio = {g: p.margin_ratios(s) for g, s in solutions.items()}
        final = {g: float(r[-1].mean()) for g, r in ratio.items()}
        out[name] = Approach(
            name, max(final, key=final.get), {g: float(c[-1].mean()) for g, c in cos.items()}, final,
            {g: float(decade_slope(p.steps, c).mean()) for g, c in cos.items()},
            {g: float(decade_slope(p.steps, r).mean()) for g, r in ratio.items()},
            {g: float(r[p.steps >= p.steps[-1] / 10][0].mean()) for g, r in ratio.items()},
            float(seed_agreement(p.w[-1]).mean()) if p.w.shape[1] > 1 else float("nan"),
            float(p.share[-1].mean()), target)
    return out


# Weight decay: AdamW's bound 1/lambda -------------------------------------------------------------------------

def bound_ratios(decayed: Mapping[float, DirectionPath]) -> dict[float, np.ndarray]:
    """weight decay lambda -> (n, S) the largest |parameter| over AdamW's bound 1/lambda at every checkpoint."""
    return {wd: p.max_abs / (1 / wd) for wd, p in decayed.items()}


def final_ratios(decayed: Mapping[float, DirectionPath]) -> list[float]:
    """Per lambda, the final largest |parameter| over 1/lambda, mean over seeds (the input of ``decay_verdict``)."""
    return [float(r[-1].mean()) for r in bound_ratios(decayed).values()]


def bound_drift(p: DirectionPath) -> float:
    """How much the largest parameter still moved between the last two checkpoints, relative to its final value
    (mean over seeds): near 0 once a run has settled, as the bound 1/lambda presumes (it holds at a limit point)."""
    return float(np.mean(np.abs(p.max_abs[-1] - p.max_abs[-2]) / p.max_abs[-1]))
