"""A stretch of training steps in one compiled call: targets, the table step's gradient and the update (AdamW, or
gradient or sign descent without weight decay), n times, with no Python between the steps (and without the GIL).
``tables.TableStep.run`` takes whole stretches up to the next step where something may be decided (a checkpoint, a
budget spent, or an early stop: the stretch ends at the first step where a member's window of correct predictions may
reach its target, ``EarlyStop``); tests/test_stretches.py checks that a stretch gives the numbers of the same steps
taken one call at a time."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..optim import update_step
from .step import StepOut, step_in


class EarlyStop(NamedTuple):
    """Where a stretch ends before its n steps: after the first step at which some member s's correct predictions
    over the last ``window`` steps sum to ``hits[s]`` or more. The training loop (``train._train``) then decides the
    stop itself, as at every step; ``hits`` is set low enough that it never passes over a step where it would stop
    (``train.stop_hits``)."""

    hits: np.ndarray  # (S,) int64: the smallest window sum that may stop member s (above window x B: never)
    before: np.ndarray  # (m, S) int64: the correct counts of the last m steps before the stretch, oldest first
    window: int  # steps in the window


def never_stop(S: int) -> EarlyStop:
    """The ``EarlyStop`` of S members none of which stops early."""
    return EarlyStop(np.full(S, np.iinfo(np.int64).max, np.int64), np.zeros((0, S), np.int64), 1)


def steps_before_stop(stop: EarlyStop, batch: int) -> int:
    """The fewest steps after which a stretch that starts after ``stop.before`` may end (``may_stop``), whatever their
    correct counts (each at most ``batch``): the least k >= 1 with a whole window by step k and some member s for which
    the last window - k counts before plus k whole batches reach ``stop.hits[s]``; 2^62 where no member can reach its
    hits at all. So the k - 1 steps before that one need no check: they can run in groups of members on threads, and
    only the k-th is checked (``tables.TableStep.run``)."""
    m, W = stop.before.shape[0], stop.window
    for k in range(max(1, W - m), W + 1):
        kept = stop.before[m - (W - k):].sum(axis=0) if k < W else 0  # the window's counts from before the stretch
        if (kept + k * batch >= stop.hits).any():
            return k
    return 2**62


@njit(cache=True, inline="always")
def may_stop(correct, k, stop):
    """Whether the stretch ends after its step k: some member's correct counts over the last ``stop.window`` steps
    (correct (n, S) int64 of the stretch's steps, after ``stop.before``'s) sum to its ``stop.hits`` or more."""
    m, W = stop.before.shape[0], stop.window
    if m + k + 1 < W:  # not a whole window yet
        return False
    for s in range(correct.shape[1]):
        total = 0
        for j in range(k + 1 - W, k + 1):
            total += correct[j, s] if j >= 0 else stop.before[m + j, s]
        if total >= stop.hits[s]:
            return True
    return False


class History(NamedTuple):
    """What a stretch records of each of its n steps."""

    loglik: np.ndarray  # (n, S) the members' mean log-likelihoods
    correct: np.ndarray  # (n, S) int64 their correct predictions


@njit(cache=True, error_model="numpy", nogil=True)
def train_steps(n, buf, xs, offsets, setup, update, t0, history, work, stop):
    """Up to ``n`` whole training steps; returns how many it took and whether ``stop`` (an ``EarlyStop``) ended the
    stretch (at its last step, or before the n). Step k trains on the batches xs[k % len(xs)] (S, B, L) (n batches
    drawn before, ``draws.draw_steps``, or one fixed training set), reads member s's targets ``offsets[s]`` positions
    before the last, takes the gradient (``step.table_step``; setup: ``StepSetup``) and the update number t0 + k + 1
    (``optim.update_step``: AdamW, or gradient or sign descent; update: ``optim.UpdateArrays``, its step sizes
    constant over the stretch), and writes its mean log-likelihoods and correct predictions into history[k]
    (``History``); work: ``step.step_arrays`` for the batch. The same numbers as the same steps taken one call at a
    time."""
    _, S, B, L = xs.shape
    target = np.empty((S, B), np.int64)
    out = StepOut(np.empty(S, buf.dtype), np.empty(S, np.int64), np.empty_like(buf))
    for k in range(n):
        x = xs[k % xs.shape[0]]
        for s in range(S):
            for i in range(B):
                target[s, i] = x[s, i, L - 1 - offsets[s]]  # task.target_index, in compiled code
        step_in(buf, x, target, setup, out, work)
        update_step(buf, out.grad, update, t0 + k + 1)
        for s in range(S):
            history.loglik[k, s] = out.loglik[s]
            history.correct[k, s] = out.correct[s]
        if may_stop(history.correct, k, stop):
            return k + 1, True
    return n, False
