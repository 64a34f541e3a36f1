"""lengthgen.uncertainty: the one standard error of the package."""

from __future__ import annotations

import numpy as np

from lengthgen.uncertainty import standard_error


def test_standard_error_is_the_sample_std_over_root_n() -> None:
    x = np.array([1.0, 2.0, 4.0, 7.0])
    assert standard_error(x) == np.sqrt(((x - 3.5) ** 2).sum() / 3) / 2


def test_standard_error_along_an_axis_and_for_one_value() -> None:
    x = np.arange(12.0).reshape(3, 4) ** 2
    assert np.array_equal(standard_error(x, axis=1), [standard_error(row) for row in x])
    assert np.array_equal(standard_error(x[:, :1], axis=1), np.zeros(3))  # one seed: no spread
    assert standard_error(np.array([0.5])) == 0
