"""Chapter 9b's analyses: step paths, their table, figure data and cited numbers, and the laws per recipe."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, dilution, evaluate
from lengthgen import maxmargin as mm
from lengthgen import regimes
from lengthgen.chapters import ch09b_mechanism as page
from lengthgen import trajectory as tj
from lengthgen.forecast import first_reach
from lengthgen.plots import md_table

SMALL = Config(vocab=8, dim=16, train_length=12, offset=2, batch=64, lr=1e-2, target_accuracy=None)
LRS = {"large": 1e-2, "small": 2e-3}
TIMES = [0.05, 0.2]


@pytest.fixture(scope="module")
def paths() -> dict[str, regimes.StepPath]:
    return regimes.step_paths(SMALL, LRS, [0, 1], TIMES, samples=64)


@pytest.fixture(scope="module")
def solutions() -> dict[str, mm.MaxMargin]:
    return {n: mm.solve(SMALL.offset, SMALL.train_length, SMALL.dim, SMALL.rope_base, n) for n in ("l2", "pairs")}


def test_a_path_stops_at_equal_training_times(paths) -> None:
    assert [t.config.steps for t in paths["large"].runs] == [5, 20]
    assert [t.config.steps for t in paths["small"].runs] == [25, 100]
    for p in paths.values():
        assert np.allclose(p.run_times(), TIMES) and p.times == TIMES
        assert len(p.splits) == len(p.far) == 2 and p.far[0].shape == (2,)
    # the recorded split and far accuracy are those of the checkpoint itself
    last = paths["small"].runs[-1]
    assert np.array_equal(paths["small"].splits[-1].qk_norm, tj.logit_split(last).qk_norm)
    far = evaluate(last, [regimes.FAR_MULTIPLE * SMALL.train_length], samples=64).accuracy()[0]
    assert np.array_equal(paths["small"].far[-1], far)


def test_the_table_has_one_row_per_checkpoint_and_no_turn_at_the_first(paths, solutions) -> None:
    rows = page.path_rows(paths, solutions)
    assert len(rows) == 4 and all(len(r) == len(page.PATH_HEADER) for r in rows)
    assert [r[0] for r in rows] == ["large", "large", "small", "small"] and [r[2] for r in rows] == ["5", "20", "25", "100"]
    assert rows[0][8] == rows[0][9] == "-" and rows[1][8] != "-"
    md_table(page.PATH_HEADER, rows)  # raises when a row does not fit the header


def test_the_cited_numbers_are_the_last_checkpoints(paths, solutions) -> None:
    numbers = page.path_numbers(paths, solutions, {"large": "big", "small": "tiny"})
    end = paths["small"].splits[-1]
    assert numbers["tiny_lr"] == 2e-3 and numbers["n_seeds"] == 2 and numbers["last_time"] == 0.2
    assert numbers["tiny_margin_in_window"] == pytest.approx(float(end.margin_in_window.mean()))
    assert numbers["tiny_beyond_negative"] == int((end.margin_beyond < 0).sum())
    assert numbers["big_8x"] == pytest.approx(float(paths["large"].far[-1].mean()))
    assert numbers["big_align_pairs"] == pytest.approx(float(tj.alignment(paths["large"].runs[-1], solutions["pairs"]).mean()))
    assert -1 <= numbers["big_align_l2"] <= 1 and 0 <= numbers["big_dirchange"] <= 2 and numbers["big_loss"] > 0
    assert {f"big_{q}" for q in page.QUANTITIES.values()} <= set(numbers)


def test_the_figure_data(paths, solutions) -> None:
    frames = page.path_frames(paths)
    assert set(frames) == set(page.QUANTITIES) | {"accuracy at 8x"}
    times, mean, sem = frames["accuracy at 8x"]["small"]
    assert np.allclose(times, TIMES) and mean[-1] == pytest.approx(float(paths["small"].far[-1].mean()))
    assert all(s >= 0 for s in sem)
    shapes = page.kernel_shape_frames(paths, solutions, SMALL.offset, SMALL.train_length)
    assert list(shapes) == ["seed 0", "seed 1"] and len(shapes["seed 0"]) == 4
    for curve in shapes["seed 1"].values():  # every reach envelope is -1 at the window's edge
        assert curve.shape == (16 * SMALL.train_length,)
        assert curve[SMALL.train_length - 1] == pytest.approx(-1)


def test_the_max_margin_numbers(solutions) -> None:
    numbers = page.maxmargin_numbers(solutions, SMALL.train_length)
    assert numbers["l2_beyond"] == pytest.approx(solutions["l2"].beyond_margin(16 * SMALL.train_length - 1))
    assert 1 <= numbers["pairs_pairs"] <= numbers["l2_pairs"] <= SMALL.dim // 2
    assert numbers["sign"] == ("both above zero" if min(numbers["l2_beyond"], numbers["pairs_beyond"]) > 0
                               else "not both above zero")


def test_the_limit_reach_per_geometry(solutions) -> None:
    text = page.limit_reach(solutions, max_multiple=64)
    for g, sol in solutions.items():
        L = first_reach(sol, 64)
        assert (f"{g}: none up to 64x" if L is None else f"{g}: length {L} ({L / SMALL.train_length:.1f}x)") in text
    one = next(iter(solutions.values()))
    assert page.limit_reach({"x": one}, max_multiple=1) == "x: none up to 1x"  # nothing beyond the window yet


def test_the_alignment_sentence_follows_the_order() -> None:
    assert "no closer" in page.alignment_sentence(0.5, 0.4)
    assert "the closer of the two" in page.alignment_sentence(0.4, 0.5)


def test_the_laws_per_recipe() -> None:
    trained = tj.checkpoints(SMALL, [0, 1], [40])[0]
    cs = [dilution.compare_laws(trained, [12, 24], samples=64)]
    pooled = {"first fit": dilution.pooled(cs)}
    rows = page.law_rows(pooled, {"first fit": "Adam, ..."})
    assert len(rows) == 1 and len(rows[0]) == len(page.LAW_HEADER) and rows[0][-1] == "4"  # 2 lengths x 2 seeds
    numbers = page.law_numbers(pooled, {"first fit": "ff"})
    assert set(numbers) == {f"ff_r2_{law}" for law in dilution.LAWS} | {"ff_mae", "ff_worst"}
    assert numbers["ff_worst"] >= numbers["ff_mae"] >= 0
    measured, predicted = page.law_points({"first fit": cs})["first fit"]
    assert measured.shape == predicted.shape == (4,)
    assert np.array_equal(measured, cs[0].measured_accuracy.ravel())
