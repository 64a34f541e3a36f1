"""The prediction made before training: what a rule's geometry says about accuracy beyond the training length.

Two predictions, neither reading a trained model:

* the **limit prediction** (``first_reach``): the implicit-bias results give a direction in the limit of
  infinite norm. There the attention puts all its weight on the highest logit, so the max-margin kernel of
  the rule's geometry keeps the target right at every length until the first beyond-window offset whose
  c(delta) reaches the target's c(-K), and no further. No scale enters: the answer is a length, or none up to
  a horizon.
"""

from __future__ import annotations

import numpy as np

from .config import ConfigError
from .maxmargin import MaxMargin

LIMIT_HORIZON = 64  # the limit prediction looks this many training lengths far
TIE = 1e-9  # a beyond-window offset "reaches" the target within this many in-window margins (float64 rounding)


def first_reach(solution: MaxMargin, max_multiple: int = LIMIT_HORIZON) -> int | None:
    """The first evaluation length L whose window holds a beyond-window offset delta in [-(L-1), -T] with
    c(delta) >= c(-K) (within ``TIE`` in-window margins): where the limit kernel stops picking the target.
    None when no offset out to ``max_multiple`` x the training length reaches it. Needs nothing trained."""
    T = solution.train_length
    if max_multiple < 1:
        raise ConfigError(f"max_multiple={max_multiple}: look at least one training length far (>= 1)")
    kern = solution.kernel(-np.arange(max_multiple * T))
    scale = solution.in_window_margin()
    reach = np.flatnonzero(kern[T:] >= kern[solution.offset] - TIE * scale)
    return int(T + reach[0] + 1) if len(reach) else None
