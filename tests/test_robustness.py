"""Chapter 6's statistics, on hand-built evaluations whose answers are known (and one tiny trained ensemble
for the steps the tables print)."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, train
from lengthgen.chapters import ch06_robustness as page
from lengthgen.evaluate import Evaluation, LengthResult
from lengthgen.pinning import LayerAttention, PinningResult

MULTIPLES = [1, 2, 4]
SOLVED = 0.99


@pytest.fixture(scope="module")
def trained():
    return train(Config(vocab=4, dim=8, train_length=8, steps=3, batch=16, target_accuracy=None), seeds=[0, 1],
                 progress=False)


def evaluation(t: int, acc: list[list[float]], weight: float = 0.5) -> Evaluation:
    """Two seeds evaluated at t x MULTIPLES with the given accuracy rows."""
    by_length = {m * t: LengthResult(m * t, 1, np.array(a), np.full(2, weight), np.ones((2, m * t)))
                 for m, a in zip(MULTIPLES, acc)}
    return Evaluation([0, 1], 0.25, 100, by_length)


@pytest.fixture
def rope(trained):
    """A 2 x 1 grid (T in 8, 16; K = 1) in two (recipe, width) columns."""
    acc = {8: [[1.0, 1.0], [0.9, 0.7], [0.5, 0.3]], 16: [[1.0, 0.98], [0.6, 0.6], [0.2, 0.2]]}
    return {(name, d, t, 1): (trained, evaluation(t, acc[t] if name == "a" else [[0.5, 0.5]] * 3))
            for t in (8, 16) for name, d in [("a", 8), ("b", 16)]}


def test_grid_summary_over_settings_and_seeds(rope) -> None:
    s = page.grid_summary(rope, "a", 8, MULTIPLES, SOLVED)
    assert s["solved_share"] == 0.75 and s["1x_min"] == 0.98
    assert s["2x_mean"] == pytest.approx(0.7) and (s["2x_setting_min"], s["2x_setting_max"]) == pytest.approx((0.6, 0.8))
    assert (s["2x_seed_min"], s["2x_seed_max"]) == (0.6, 0.9)
    assert s["far_mean"] == pytest.approx(0.3) and s["far_seed_min"] == 0.2
    assert s["within_sd"] == pytest.approx(np.std([0.9, 0.7], ddof=1) / 2)  # the second setting's seeds agree
    assert s["between_sd"] == pytest.approx(np.std([0.8, 0.6], ddof=1))
    assert all(type(v) is float for v in s.values())
    with pytest.raises(KeyError, match="recipe 'a' and width 16"):
        page.grid_summary(rope, "a", 16, MULTIPLES, SOLVED)
    with pytest.raises(ValueError, match="3x the training length was not evaluated"):
        page.row(MULTIPLES, 3)


def test_setting_frames_and_fit_against_transfer(rope) -> None:
    frames = page.setting_frames(rope, [("a", 8)], [8, 16], [1], MULTIPLES)
    assert list(frames) == ["a, d=8, 1x", "a, d=8, 2x", "a, d=8, 4x"] and frames["a, d=8, 2x"].shape == (2, 1, 2)
    assert frames["a, d=8, 2x"][1, 0].tolist() == [0.6, 0.6]
    points = page.fit_transfer(rope, "a", 8, MULTIPLES)
    assert points[0].tolist() == [1.0, 1.0, 1.0, 0.98] and points[1].tolist() == [0.9, 0.7, 0.6, 0.6]
    assert points[2][3] == "T=16, K=1, seed 1"
    assert page.transfer_summary(points, SOLVED) == {"n_fit": 3, "fit_2x_min": 0.6, "fit_2x_max": 0.9}
    none = page.transfer_summary(page.fit_transfer(rope, "b", 16, MULTIPLES), SOLVED)
    assert none["n_fit"] == 0 and np.isnan(none["fit_2x_min"])
    corr = page.transfer_correlation([points, points])
    assert corr["n_runs"] == 4 and corr["corr_fit_transfer"] == pytest.approx(np.corrcoef(points[0], points[1])[0, 1])


def test_tables_print_every_run(rope, trained) -> None:
    ape = {(8, 1): (trained, evaluation(8, [[1.0, 1.0], [0.3, 0.2], [0.25, 0.25]]))}
    lines = page.grid_table(rope, ape, MULTIPLES).splitlines()
    assert len(lines) == 1 + len(rope) + 1
    assert lines[-1].startswith("first fit    ape    8    8   1") and lines[-1].endswith("0.250 [0.250, 0.250]")
    assert page.ape_summary(ape) == {"1x_min": 1.0, "far_max": 0.3, "far_mean": pytest.approx(0.25)}
    encodings = {(8, 1): {"rope": rope["a", 8, 8, 1][1], "ape": ape[8, 1][1]}}
    assert len(page.encoding_table(encodings, MULTIPLES).splitlines()) == 3
    assert page.encoding_summary(ape[8, 1][1], MULTIPLES) == {"1x": 1.0, "1x_min": 1.0, "2x": 0.25, "far": 0.25}


def test_depth_and_layers(trained) -> None:
    run = (trained, evaluation(8, [[1.0, 0.9], [0.5, 0.7], [0.1, 0.3]]))
    s = page.depth_summary(run, MULTIPLES)
    assert s == {"1x": 0.95, "2x": pytest.approx(0.6), "2x_max": 0.7, "far": 0.2, "steps_max": 3}
    counts = np.zeros((2, 16))
    counts[:, 0] = counts[:, 12] = 1  # one argmax at position 0 (16 back), one 4 back
    layer = LayerAttention(counts, np.array([0.2, 0.4]), np.full(2, np.nan))
    by_layer = {16: PinningResult(16, 1, 6, [layer, layer], np.ones(2), np.zeros(2))}
    layers = page.layer_summary(by_layer, 8)
    assert layers == {"layer1_weight_2x": pytest.approx(0.3), "layer1_beyond_2x": 0.5,
                      "layer2_weight_2x": pytest.approx(0.3), "layer2_beyond_2x": 0.5}
    table = page.depth_table({("rope", 2): run}, by_layer, MULTIPLES, 8).splitlines()
    assert table[1].startswith("rope       2      3-3") and table[-1] == "  L=  16 layer 2: 0.300 / 0.500"


def test_variable_length_summary_and_table(trained) -> None:
    by_length = {L: LengthResult(L, 1, np.array(a), np.full(2, 0.5), np.ones((2, L)))
                 for L, a in [(4, [0.9, 0.7]), (6, [1.0, 0.8]), (8, [1.0, 1.0]), (16, [0.5, 0.4]), (32, [0.3, 0.1])]}
    ev = Evaluation([0, 1], 0.25, 100, by_length)
    s = page.variable_summary(ev, [4, 6], 8, 32, SOLVED)
    assert s["inside"] == pytest.approx(0.85) and s["inside_min"] == 0.7 and s["T"] == 1.0 and s["solved_share"] == 1.0
    assert (s["2x"], s["2x_min"], s["2x_max"]) == (pytest.approx(0.45), 0.4, 0.5) and s["far_min"] == 0.1
    with pytest.raises(ValueError, match=r"lengths \[5\] were not evaluated"):
        page.variable_summary(ev, [5], 8, 32, SOLVED)
    table = page.variable_table({"RoPE, fixed length, first fit": ("first fit", "rope", ev)}, trained, ev, (4, 8))
    assert table.splitlines()[0].startswith("early-stopped variable-length APE: steps [3, 3] accuracy at {4: [0.9, 0.7]")
    assert table.splitlines()[1].endswith("{4: '0.800', 8: '1.000'}")
