"""A stretch of training steps in one compiled call: targets, the table step's gradient and the AdamW update, n
times, with no Python between the steps (and without the GIL). ``tables.TableStep.run`` takes whole stretches
where nothing is to be decided between steps (no early stop, no checkpoint); tests/test_stretches.py checks that
a stretch gives the numbers of the same steps taken one call at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..optim import adam_step
from .step import StepOut, step_in


class History(NamedTuple):
    """What a stretch records of each of its n steps."""

    loglik: np.ndarray  # (n, S) the members' mean log-likelihoods
    correct: np.ndarray  # (n, S) int64 their correct predictions


@njit(cache=True, error_model="numpy", nogil=True)
def train_steps(n, buf, xs, offsets, setup, adam, t0, history, work):
    """``n`` whole training steps: step k trains on the batches xs[k % len(xs)] (S, B, L) (n batches drawn before,
    ``draws.draw_steps``, or one fixed training set), reads member s's targets ``offsets[s]`` positions before the
    last, takes the gradient (``step.table_step``; setup: ``StepSetup``) and the AdamW update number t0 + k + 1
    (``optim.adam_step``; adam: ``optim.AdamArrays``, its step sizes constant over the stretch), and writes its
    mean log-likelihoods and correct predictions into history[k] (``History``); work: ``step.step_arrays`` for the
    batch. The same numbers as the same steps taken one call at a time."""
    _, S, B, L = xs.shape
    target = np.empty((S, B), np.int64)
    out = StepOut(np.empty(S, buf.dtype), np.empty(S, np.int64), np.empty_like(buf))
    for k in range(n):
        x = xs[k % xs.shape[0]]
        for s in range(S):
            for i in range(B):
                target[s, i] = x[s, i, L - 1 - offsets[s]]  # task.target_index, in compiled code
        step_in(buf, x, target, setup, out, work)
        adam_step(buf, out.grad, adam, t0 + k + 1)
        for s in range(S):
            history.loglik[k, s] = out.loglik[s]
            history.correct[k, s] = out.correct[s]
