"""The claims' thresholds: the paper's words made numeric, one home for every bar a claim is judged against.

Two kinds of rule read them. The findings page (``findings.judge``) asks whether the seeds' mean, with two
standard errors, is on the claim's side of a threshold; chapter 9 (``compare.check_criterion``) and the selection
ladder (``selection.summary``) ask whether *every* seed is. Where the two kinds share a word ("extrapolates"), the
names say which rule each bar belongs to.
"""

from __future__ import annotations

MEAN_TRANSFER = 0.95
""""Extrapolates" on the findings page: the seeds' mean accuracy, with two standard errors, at least this at each
horizon (``findings.HORIZONS`` multiples of the training length)."""

EVERY_SEED_TRANSFER = {4.0: 0.99, 8.0: 0.95}
""""Extrapolates" in chapter 9's sense: every seed, on every vocabulary and offset, at least this accuracy at each
multiple of the training length (multiple -> bar); a recipe passes only when no model falls below."""

NEAR_CHANCE = 0.05
""""Collapses to 1/V": accuracy at most this much above chance."""

EXACT = 1e-9
""""Exact equivariance": the largest float64 logit change when the sequence moves is at most this."""

RANK_ONE = 0.99
""""Low-rank kernel": the share of the squared singular values in the first, at the target offset, at least this."""

LAW_ERROR = 0.05
""""The dilution law predicts": |predicted - measured accuracy| at most this."""

AGREE = 0.95
""""Training selects one solution": the pairwise cosine of the seeds' carrier kernels at least this."""

MAX_MARGIN = 0.99
""""Training selects a max-margin kernel": the margin ratio to the max-margin solution of a geometry at least this
(the mean on the findings page; every seed in the selection ladder's ``own_margin``; the target whose distance
in decades of steps ``limit_path.Approach`` reports)."""

FITS_TRAINING_LENGTH = 0.99
"""A model "fits the training length" (chapter 9): its accuracy at the training length at least this."""

REACHED_COSINE = 0.99
""""A rule reaches its geometry's solution": the cosine of every seed's kernel to the solver's solution at least
this (the selection ladder's ``reached_own``; a solution that is a face, not a point, needs ``MAX_MARGIN``)."""

POSITION_SHARE = 0.9
""""Position decides the logit" (chapter 10's training-set scan): the offset explains at least this share of the
in-window logit variance (``kernel.position_share``; ``share_n`` of ``chapters.ch10_selection.limit_numbers``)."""

ON_DECAY_BOUND = 0.1
""""The largest parameter sits at AdamW's bound 1/lambda": max |p| x lambda within this of 1
(``chapters.ch10_selection.decay_verdict``)."""

FORECAST_ERROR = 0.05
""""The forecast before training predicts": its mean absolute accuracy error over 2x-8x at most this
(``chapters.ch10b_prediction.score_numbers``' ``meets``)."""

REACHABLE_DECADES = 2.0
""""Still approaching" (``chapters.ch10_selection.approach_sentence``): the last decade's rate would reach
``MAX_MARGIN`` within this many more decades of steps (100x the steps)."""

FITTED_RATIO = 0.5
"""A rate measured from a margin ratio below this (the target ahead by less than half the optimum's margin per unit
norm) describes the fit of the window, not the approach to a direction
(``chapters.ch10_selection.approach_sentence``)."""
