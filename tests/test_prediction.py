"""The prediction before training and the rank statistics of the prediction table."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, ConfigError
from lengthgen import prediction as pr
from lengthgen.maxmargin import far_field, predict, solve


def test_spearman_on_hand_ranked_cases() -> None:
    x = [0.1, 0.5, 0.3, 0.9, 0.7]
    assert pr.spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert pr.spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    y = [2, 1, 4, 3, 5]  # ranks of x are 1 3 2 5 4: d = (-1, 2, -2, 2, -1), sum d^2 = 14
    assert pr.spearman(x, y) == pytest.approx(1 - 6 * 14 / (5 * 24))
    scipy_stats = pytest.importorskip("scipy.stats")
    ties = ([1, 2, 2, 3, 5, 5], [3, 1, 4, 1, 5, 9])
    assert pr.spearman(*ties) == pytest.approx(scipy_stats.spearmanr(*ties).statistic)
    assert np.isnan(pr.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ConfigError, match="equal length"):
        pr.spearman([1, 2, 3], [1, 2])


# The prediction before training ---------------------------------------------------------------------------------

T, D, V = 12, 16, 8


def test_fit_norm_is_where_the_kernel_first_fits_the_training_length() -> None:
    sol = solve(2, T, D, 100.0, "linf")
    norm = pr.fit_norm(sol, V)
    at = lambda n: predict(sol, [n], [T], V, pr.PREDICT_DRAWS).accuracy[0, 0]  # noqa: E731
    assert at(norm) >= pr.FIT_ACCURACY > at(norm / 1.05)
    with pytest.raises(ConfigError, match="does not reach"):
        pr.fit_norm(sol, V, high=0.2)


def _record(seed: int, accuracy: list[float], margin: float, rule: str = "gd") -> dict:
    config = Config(vocab=V, dim=D, train_length=T, offset=2, rope_base=100.0, optimizer=rule).to_dict()
    return {"config": config, "seed": seed, "lengths": [T * m for m in (1, 2, 4, 8)], "accuracy": accuracy,
            "kernel": {"margin_in_window": margin}}


def test_prediction_table_joins_the_prediction_with_the_trained_models() -> None:
    records = [_record(0, [1.0, 0.9, 0.8, 0.5], 2.0), _record(1, [1.0, 0.7, 0.6, 0.3], 4.0),
               _record(0, [1.0, 1.0, 1.0, 0.99], 3.0, "sign"), _record(1, [0.5, 0.2, 0.1, 0.1], 3.0, "sign")]
    rows = pr.prediction_table(records, multiples=(2, 4, 8))
    gd, sign = rows
    assert (gd["optimizer"], gd["geometry"], sign["geometry"]) == ("gd", "l2", "linf")
    assert gd["measured"][8] == pytest.approx(0.4) and gd["sem"][8] == pytest.approx(0.1)
    assert gd["fit"] == 1.0 and sign["fit"] == 0.75 and gd["trained_margin"] == 3.0
    assert not gd["measured_extrapolates"] and not sign["measured_extrapolates"]
    sol = solve(2, T, D, 100.0, "l2")
    expected = predict(sol, [pr.fit_norm(sol, V)], [2 * T, 4 * T, 8 * T], V, pr.PREDICT_DRAWS).accuracy[:, 0]
    assert [gd["predicted"][m] for m in (2, 4, 8)] == pytest.approx(expected.tolist())
    assert gd["predicted_extrapolates"] == (expected[-1] >= pr.EXTRAPOLATES[1])
    assert gd["far_field"] == pytest.approx(far_field(sol))


def test_rank_agreement_reads_the_chosen_columns() -> None:
    rows = [{"predicted": {8: p}, "measured": {8: m}} for p, m in [(0.1, 0.2), (0.5, 0.4), (0.9, 0.3)]]
    assert pr.rank_agreement(rows, 8) == pytest.approx(0.5)


def test_explore_holds_each_kernel_in_units_of_its_margin() -> None:
    grid = pr.explore([2], [100.0], ["l2", "linf"], T, D, V, [T, 4 * T])
    assert set(grid) == {("l2", 2, 100.0), ("linf", 2, 100.0)}
    for entry in grid.values():
        kern = entry["kernel"]
        assert len(kern) == pr.BEYOND_MULTIPLE * T
        assert kern[2] - np.delete(kern[:T], 2).max() == pytest.approx(1.0, abs=1e-6)
        assert entry["accuracy"].shape == (2,) and entry["accuracy"][0] >= pr.FIT_ACCURACY
        assert entry["far_field"] == pytest.approx((kern[2] - kern[T:].max()) / 1.0, abs=1e-6)
        assert len(entry["peaks"]) == 5 and all(p["delta"] <= -T for p in entry["peaks"])


def test_the_explorer_figure_has_one_set_of_traces_per_grid_point() -> None:
    from lengthgen import plots

    grid = pr.explore([2, 4], [100.0], ["l2", "linf"], T, D, V, [T, 2 * T])
    fig = plots.selection_explorer(grid, T)
    assert len(fig.data) == 3 * len(grid) and fig.layout.shapes[0].name == "training window"
    shown = [t for t in fig.data if t.visible]
    assert len(shown) == 3  # the first grid point (the window is a shape, shown throughout)
    assert fig.layout.meta["grid"]["labels"] == [["l2", "linf"], ["2", "4"], ["100"]]
    # page weight: kernels and peaks in whole percent of the in-window margin (the kernels int16 on plotly's
    # implicit x axis), the few peaks and accuracies as short lists; the first point is l2's at K = 2 (geometry
    # innermost)
    kernels, peaks, accuracy = fig.data[0::3], fig.data[1::3], fig.data[2::3]
    first = grid[("l2", 2, 100.0)]
    assert all(t.x is None and t.x0 is None and t.y.dtype == np.int16 for t in kernels)
    assert np.array_equal(kernels[0].y, np.round(100 * first["kernel"]))
    assert list(peaks[0].y) == [round(100 * p["value"]) for p in first["peaks"]]
    assert list(accuracy[0].y) == [round(float(a), 3) for a in first["accuracy"]]
    assert '"f8"' not in fig.to_json() and '"f4"' not in fig.to_json()


def _row(rule: str, geometry: str, predicted: float, measured: float, yes: bool, right: bool) -> dict:
    return {"vocab": 16, "offset": 2, "rope_base": 100.0, "optimizer": rule, "geometry": geometry, "fit": 1.0,
            "predicted": {8: predicted}, "measured": {8: measured}, "sem": {8: 0.01},
            "predicted_extrapolates": yes, "measured_extrapolates": yes == right}


def test_the_prediction_table_report() -> None:
    rows = [_row("gd", "l2", 0.4, 0.5, False, True), _row("gd", "l2", 0.9, 0.3, True, False),
            _row("sign", "linf", 0.99, 0.97, True, True)]
    formatted = pr.table_rows(rows, [8])
    assert formatted[0] == ["16", "2", "100", "gd", "l2", "1.000", "0.400 / 0.500 ± 0.010", "no", "no"]
    assert all(len(r) == len(pr.table_header([8])) for r in formatted)
    numbers = pr.table_numbers(rows + [_row("gd", "l2", 0.1, 0.1, False, True)], rows)
    assert numbers["grid_settings"] == 4 and numbers["grid_fitted"] == 3 and numbers["yesno_agree"] == 2
    assert (numbers["n_said_yes"], numbers["n_said_yes_right"], numbers["n_said_no"], numbers["n_said_no_right"]) == (2, 1, 1, 1)
    assert (numbers["l2_rows"], numbers["l2_rows_extrapolate"], numbers["linf_rows"], numbers["linf_rows_extrapolate"]) == (2, 0, 1, 1)
    assert numbers["l2_measured_8x"] == "0.300 to 0.500" and numbers["l2_predicted_8x"] == "0.400 to 0.900"
    points = pr.scatter_points(rows, 8)
    assert list(points) == ["gd", "sign"] and np.array_equal(points["gd"][0], [0.5, 0.3])
    assert np.array_equal(points["gd"][1], [0.4, 0.9])
    assert pr.format_rho(0.5) == "+0.50" and pr.format_rho(float("nan")) == "none (no spread)"
    far = pr.far_field_range({("l2", 1, 100.0): {"far_field": -0.5}, ("l2", 2, 100.0): {"far_field": 0.2},
                              ("linf", 1, 100.0): {"far_field": 0.7}})
    assert far == {"l2": (-0.5, 0.2), "linf": (0.7, 0.7)}
