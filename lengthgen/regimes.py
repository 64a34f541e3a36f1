"""The mechanism in both training regimes (chapter 9b): each step size's run along training, the first layer's
logit split into kernel and content at every checkpoint, and the accuracy far out.

A *step path* is one step size's run stopped at checkpoints of equal training time lr x steps
(``trajectory.checkpoints``), with the first layer's logit split into kernel and content at each checkpoint
(``trajectory.logit_split``) and the accuracy far past the training length. What the chapter shows of a few such
paths, of the max-margin kernels they are compared with and of ``dilution.compare_laws`` on each recipe (its
tables, figures' data and cited numbers) is built in ``lengthgen.chapters.ch09b_mechanism``.

Shapes: S members (seeds), n checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .config import Config
from .evaluate import evaluate
from .trajectory import LogitSplit, checkpoints, logit_split
from .train import Trained

FAR_MULTIPLE = 8  # the path's accuracy is measured at this many training lengths


@dataclass
class StepPath:
    """One step size's run at checkpoints of growing training time, same seeds at every checkpoint.

    Apart from ``limit_path.DirectionPath`` (one run's kernel direction only) and ``selection.Trajectory`` (an
    update rule on a ladder rung, no transformer) because its readings need each checkpoint's whole model (the
    logit split into kernel and content, the turn of W_q W_k^T, the accuracy at 8x): each checkpoint is a
    separate run (``trajectory.checkpoints``; a member stopped at step n is exactly the n-step run), kept as a
    ``Trained``, and indexed by training time lr x steps so that step sizes compare."""

    lr: float
    times: list[float]  # the requested training times lr x steps, ascending
    runs: list[Trained]  # (n,) the run stopped at each checkpoint
    splits: list[LogitSplit]  # (n,) the logit split of each, per member (S,)
    far: list[np.ndarray]  # (n,) accuracy (S,) at FAR_MULTIPLE x the training length

    def run_times(self) -> list[float]:
        """(n,) the training time lr x steps each checkpoint actually ran (steps are whole numbers)."""
        return [t.config.lr * t.config.steps for t in self.runs]


def step_paths(base: Config, lrs: Mapping[str, float], seeds: Sequence[int], times: Sequence[float],
               samples: int) -> dict[str, StepPath]:
    """For each named step size: ``base`` at that lr, stopped after ``max(1, round(t / lr))`` steps for every
    training time t of ``times``, split and evaluated at ``FAR_MULTIPLE`` x the training length."""
    out = {}
    for name, lr in lrs.items():
        runs = checkpoints(base.replace(lr=lr), seeds, [max(1, round(t / lr)) for t in times])
        far = [evaluate(t, [FAR_MULTIPLE * base.train_length], samples=samples).accuracy()[0] for t in runs]
        out[name] = StepPath(lr, [float(t) for t in times], runs, [logit_split(t) for t in runs], far)
    return out
