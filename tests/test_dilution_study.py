"""Chapter 5's statistics over law comparisons, on hand-built comparisons whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen.chapters import ch05_dilution_law as page
from lengthgen.dilution import LAWS, Comparison, r_squared

T = 8
LENGTHS = [T, 2 * T, 4 * T]


def comparison(offset: int, measured: np.ndarray, errors: dict[str, np.ndarray], accuracy_miss: np.ndarray) -> Comparison:
    """Two seeds at lengths T, 2T, 4T: predicted weight = measured + errors[law], predicted accuracy = measured
    accuracy (0.6) + accuracy_miss. Arrays are (3 lengths, 2 seeds)."""
    acc = np.full((3, 2), 0.6)
    return Comparison(offset=offset, train_length=T, seeds=[0, 1], lengths=LENGTHS, rho=np.array([0.1, 0.2]) * offset,
                      measured_weight=measured, measured_accuracy=acc,
                      predicted_weight={law: measured + errors.get(law, np.zeros((3, 2))) for law in LAWS},
                      predicted_accuracy=acc + accuracy_miss)


@pytest.fixture
def comparisons() -> dict[tuple[str, int], Comparison]:
    measured = np.array([[0.9, 0.8], [0.6, 0.5], [0.3, 0.2]])
    far_up = np.array([[0.0, 0.0], [0.1, 0.1], [0.1, 0.1]])  # exact at T, over beyond
    mf = np.array([[0.0, 0.0], [0.2, 0.2], [0.05, 0.05]])  # worst at 2T
    miss = np.zeros((3, 2))
    worst = miss.copy()
    worst[2, 1] = -0.3
    return {
        ("first fit", 1): comparison(1, measured, {"simple": far_up, "kernel": -far_up, "mean_field": mf}, miss),
        ("first fit", 2): comparison(2, measured, {"simple": far_up, "kernel": 2 * far_up}, worst),
        ("small steps", 1): comparison(1, measured, {}, miss + 0.01),
    }


def test_fit_summary_pools_offsets_and_gives_their_range(comparisons) -> None:
    s = page.fit_summary(comparisons, "first fit")
    a, b = comparisons["first fit", 1], comparisons["first fit", 2]
    measured = np.concatenate([a.measured_weight.ravel(), b.measured_weight.ravel()])
    pooled_simple = r_squared(np.concatenate([a.predicted_weight["simple"].ravel(), b.predicted_weight["simple"].ravel()]),
                              measured)
    assert s["n_points"] == 12 and s["r2_simple"] == pytest.approx(pooled_simple)
    assert s["r2_kernel_min"] == pytest.approx(b.r2("kernel")) and s["r2_kernel_max"] == pytest.approx(a.r2("kernel"))
    assert s["r2_kernel_min"] < s["r2_kernel_max"]
    assert s["r2_content"] == s["r2_content_min"] == s["r2_content_max"] == 1.0  # the content law is exact here
    assert (s["rho_min"], s["rho_max"]) == pytest.approx((0.1, 0.4))
    assert all(type(v) in (int, float) for v in s.values())


def test_error_summary_where_each_law_holds(comparisons) -> None:
    s = page.error_summary(comparisons, "first fit")
    assert s["err_simple_T"] == 0 and s["err_simple_far"] == pytest.approx(0.1) and s["err_simple_last"] == pytest.approx(0.1)
    assert s["simple_over_share"] == 1.0 and s["simple_worst"] == pytest.approx(0.1)
    assert s["kernel_over_share"] == 0.5  # under at K=1, over at K=2
    assert s["mf_worst_multiple"] == 2.0 and s["mf_worst_err"] == pytest.approx(0.1)  # mean of 0.2 (K=1) and 0 (K=2)
    assert s["content_at_mf_worst"] == 0.0
    assert page.error_summary(comparisons, "small steps")["err_kernel_far"] == 0.0


def test_worst_accuracy_finds_the_largest_miss(comparisons) -> None:
    w = page.worst_accuracy(comparisons)
    assert (w["acc_worst_recipe"], w["acc_worst_K"], w["acc_worst_seed"], w["acc_worst_L"]) == ("first fit", 2, 1, 4 * T)
    assert w["acc_worst"] == pytest.approx(0.3) and w["acc_worst_predicted"] == pytest.approx(0.3)
    assert w["acc_worst_measured"] == pytest.approx(0.6)
    assert w["acc_worst_mf_err"] == 0.0 and w["acc_worst_content_err"] == 0.0
    s = page.accuracy_summary(comparisons, "small steps")
    assert s["acc_mae"] == pytest.approx(0.01) and s["acc_range_min"] == s["acc_range_max"] == pytest.approx(0.6)


def test_tables_and_figure_points(comparisons) -> None:
    laws = page.law_table(comparisons).splitlines()
    assert len(laws) == 2 + 3 + 2  # title, header, one line per comparison, one pooled line per recipe
    assert laws[4].startswith("first fit    all")
    errors = page.error_table(comparisons).splitlines()
    assert len(errors) == 2 + 2 * len(LENGTHS) and errors[3].startswith("first fit     2.00")
    frames = page.weight_frames(comparisons, drawn=1)
    assert list(frames) == ["first fit, K=1, seed 0", "first fit, K=2, seed 0", "small steps, K=1, seed 0"]
    points = page.weight_points(comparisons, ("simple", "content"))
    assert list(points) == ["simple law, first fit", "simple law, small steps", "content law, first fit",
                            "content law, small steps"] and points["simple law, first fit"][0].shape == (12,)
    assert page.accuracy_points(comparisons)["first fit, K=2"][1].min() == pytest.approx(0.3)
    with pytest.raises(KeyError, match="no comparison with recipe 'other'"):
        page.fit_summary(comparisons, "other")
