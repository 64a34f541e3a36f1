"""How sure a mean over seeds is: the standard error of the mean, defined once for the whole package."""

from __future__ import annotations

import numpy as np


def standard_error(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The standard error of the mean of ``x`` along ``axis``: std (ddof=1) / sqrt(n), and 0 where n = 1 (one value
    has no spread to estimate). Shape: ``x``'s without ``axis`` (a 0-d value for 1-d ``x``); ``x``'s dtype."""
    x = np.asarray(x)
    n = x.shape[axis]
    if n > 1:
        return x.std(axis, ddof=1) / np.sqrt(n)
    return np.zeros_like(np.take(x, 0, axis=axis))
