"""The real model's kernel direction along training: checkpoints, baselines, the limit regime and weight decay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, train
from lengthgen import limit_path as lp
from lengthgen.chapters import ch10_selection as page
from lengthgen.maxmargin import solve
from lengthgen.model import Model

SMALL = Config(vocab=8, dim=16, train_length=12, offset=2, batch=64, lr=1e-2, steps=40, target_accuracy=None)
FIXED = SMALL.replace(train_set=64, batch=64, dtype="float64")  # a fixed set, full batch, float64


@pytest.fixture(scope="module")
def path() -> lp.DirectionPath:
    return lp.direction_path(SMALL, [0, 1], every=5, per_decade=3)


@pytest.fixture(scope="module")
def solutions() -> dict:
    return {g: solve(SMALL.offset, SMALL.train_length, SMALL.dim, SMALL.rope_base, g) for g in ("l2", "linf", "pairs")}


def test_log_checkpoints_are_log_spaced_multiples_that_end_at_the_budget() -> None:
    picks = lp.log_checkpoints(1000, 10, per_decade=4)
    assert picks[0] == 10 and picks[-1] == 1000 and all(p % 10 == 0 for p in picks)
    ratios = np.diff(np.log10(picks))
    assert len(picks) == 9 and ratios.max() < 0.4  # 2 decades, 4 per decade
    with pytest.raises(ConfigError, match="dividing"):
        lp.log_checkpoints(1000, 30)


def test_a_checkpoint_is_the_run_trained_for_that_many_steps(path) -> None:
    assert path.steps[0] == 0 and path.steps[-1] == SMALL.steps and list(path.steps) == sorted(set(path.steps))
    assert np.allclose(np.linalg.norm(path.w, axis=-1), 1)
    k = int(np.flatnonzero(path.steps == 10)[0])
    alone = train(SMALL.replace(steps=10), [1], progress=False)
    assert np.allclose(path.w[k, 1], lp.kernel_coefficients(alone.model)[0], atol=1e-4)
    assert np.allclose(path.w[-1], lp.kernel_coefficients(path.trained.model), atol=1e-6)
    assert path.share.shape == path.max_abs.shape == (len(path.steps), 2) and ((path.share >= 0) & (path.share <= 1)).all()


def test_cosines_turning_and_the_largest_parameter(path) -> None:
    cos = path.cosines(path.w[-1, 0])
    assert cos.shape == (len(path.steps), 2) and cos[-1, 0] == pytest.approx(1.0)
    assert path.turning().shape == (len(path.steps) - 1, 2) and (path.turning() >= -1e-9).all()
    model = path.trained.model
    by_hand = max(float(p.detach()[1].abs().max()) for p in model.parameters())
    assert lp.max_abs_parameter(model)[1] == pytest.approx(by_hand)


def test_direction_path_needs_a_one_layer_rope_model() -> None:
    with pytest.raises(ConfigError, match="one-layer RoPE"):
        lp.direction_path(SMALL.replace(encoding="ape"), [0], every=5)


def test_seed_agreement_and_random_baseline() -> None:
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert np.allclose(lp.seed_agreement(w), [0.0, 2**-0.5, 2**-0.5])
    d = 32
    cos = lp.random_cosines(np.ones(d), draws=20000, seed=1)
    assert abs(cos.mean()) < 0.01 and cos.std() == pytest.approx(d**-0.5, rel=0.05)


# The limit regime ------------------------------------------------------------------------------------------------

def test_kernel_solutions_are_maxmargin_s_solutions(solutions) -> None:
    mine = lp.kernel_solutions(SMALL, list(solutions))
    for g, sol in solutions.items():
        assert mine[g].norm == g and np.allclose(mine[g].w, sol.w, atol=1e-6)


def test_the_margin_ratio_is_one_at_each_geometry_s_own_optimum_only(solutions) -> None:
    for g, sol in solutions.items():
        assert lp.margin_ratio(3.0 * sol.w, sol) == pytest.approx(1.0, abs=1e-6)  # scale does not matter
        for other, o in solutions.items():
            if other != g:  # another geometry's optimum is feasible but worse in this norm
                assert lp.margin_ratio(o.w, sol) < 1 - 1e-3
    flipped = -solutions["l2"].w  # the target loses to every offset: a negative margin
    assert lp.margin_ratio(flipped, solutions["l2"]) < 0


def test_the_position_share_rises_with_the_training_set_size() -> None:
    """A fixed set of 16 sequences is fitted through the tokens' content (the offset explains under 10% of the
    logit's variance); one of 512 only through position (over 90%), on both seeds, in 300 full-batch float64 steps."""
    base = Config(vocab=8, dim=16, train_length=12, offset=2, dtype="float64", optimizer="ngd", lr=0.1, steps=300,
                  target_accuracy=None)
    scan = lp.size_scan(base, [16, 512], [0, 1], every=100)
    assert (scan[16].trained.accuracy[-1] == 1).all() and (scan[512].trained.accuracy[-1] == 1).all()
    assert scan[16].share[-1].max() < 0.1 and scan[512].share[-1].min() > 0.9
    assert scan[512].trained.config.train_set == scan[512].trained.config.batch == 512


def test_the_scheduled_loop_is_train_s_loop_with_a_decaying_step() -> None:
    c = FIXED.replace(optimizer="adam", lr=1e-2, steps=20)
    constant = lp.direction_path(c, [0, 1], every=5, eps=1e-8)  # scheduled_train at power 0: train's numbers
    assert constant.schedule == "constant step, eps 1e-08"
    same = train(c, [0, 1], progress=False)
    assert np.allclose(constant.trained.loss, same.loss, rtol=1e-9, atol=1e-12)
    for a, b in zip(constant.trained.model.parameters(), same.model.parameters()):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-12)
    one = lp.scheduled_train(FIXED.replace(optimizer="sign", lr=0.1, steps=1), [0], 1.0, None, None, 1)
    start = dict(Model(FIXED, [0]).named_parameters())
    moved = max(float((p - start[n]).detach().abs().max()) for n, p in one.model.named_parameters())
    assert moved == pytest.approx(0.1 / 2)  # the first update of sign descent takes lr (1 + 1)^-1
    with pytest.raises(ConfigError, match="fixed"):
        lp.scheduled_train(SMALL, [0], 0.5, None, None, 1)


def test_decade_slope_and_the_decades_still_needed() -> None:
    steps = np.array([1, 10, 100, 1000, 10000])
    values = np.stack([0.1 * np.log10(steps), np.full(5, 0.5)], 1)  # (n, S=2): +0.1 a decade, and flat
    assert np.allclose(lp.decade_slope(steps, values), [0.1, 0.0])
    assert lp.decades_to(0.89, 0.1) == pytest.approx(1.0) and lp.decades_to(0.995, 0.0) == 0.0
    assert lp.decades_to(0.5, 0.0) == float("inf")
    with pytest.raises(ConfigError, match="last decade"):
        lp.decade_slope(np.array([1, 100]), values[:2])


def test_approaches_read_the_final_checkpoint_in_each_geometry(path, solutions) -> None:
    found = lp.approaches({"gd": path}, solutions)
    a = found["gd"]
    ratios = {g: float(path.margin_ratios(s)[-1].mean()) for g, s in solutions.items()}
    assert a.geometry == max(ratios, key=ratios.get) and a.ratio == pytest.approx(ratios)
    assert a.cos["l2"] == pytest.approx(float(path.cosines(solutions["l2"].w)[-1].mean()))
    assert a.agree == pytest.approx(float(lp.seed_agreement(path.w[-1]).mean()))
    assert a.share == pytest.approx(float(path.share[-1].mean()))
    start = int(np.flatnonzero(path.steps >= path.steps[-1] / 10)[0])
    assert a.ratio_start["l2"] == pytest.approx(float(path.margin_ratios(solutions["l2"])[start].mean()))
    rows = page.limit_rows({"gd": path}, found)
    assert len(rows[0]) == len(page.limit_header(list(solutions))) and rows[0][1] == SMALL.recipe()
    reached = lp.Approach("sign", "linf", {"linf": 0.999}, {"linf": 0.995}, {"linf": 0.0}, {"linf": 0.0}, {"linf": 0.9}, 0.9, 0.9, 0.99)
    none = lp.Approach("gd", "l2", {"l2": 0.6}, {"l2": 0.3}, {"l2": 0.0}, {"l2": -0.01}, {"l2": 0.6}, 0.9, 0.9, 0.99)
    slow = lp.Approach("ngd", "l2", {"l2": 0.95}, {"l2": 0.945}, {"l2": 0.0}, {"l2": 0.0009}, {"l2": 0.94}, 0.9, 0.9, 0.99)
    near = lp.Approach("adam", "pairs", {"pairs": 0.9}, {"pairs": 0.9}, {"pairs": 0.1}, {"pairs": 0.06}, {"pairs": 0.8}, 0.9, 0.9, 0.99)
    verdict = page.limit_verdict({"sign": reached, "gd": none, "ngd": slow, "adam": near})
    assert verdict.startswith("sign reaches linf (margin ratio 0.995") and "gd approaches no geometry" in verdict
    assert "(not gaining)" in verdict and "ngd approaches no geometry" in verdict and "(50 more decades" in verdict
    assert "adam is still approaching pairs" in verdict and "about 1.5 more decades" in verdict
    fitting = lp.Approach("gd", "l2", {"l2": 0.86}, {"l2": 0.85}, {"l2": 3.0}, {"l2": 3.4}, {"l2": -0.5}, 0.8, 0.9, 0.99)
    assert page.approach_sentence(fitting).startswith("gd was still fitting the window when its last decade began")
    half = lp.Approach("gd", "l2", {"l2": 0.86}, {"l2": 0.85}, {"l2": 3.0}, {"l2": 3.4}, {"l2": 0.4}, 0.8, 0.9, 0.99)
    assert "still fitting" in page.approach_sentence(half)  # below FITTED_RATIO: the rate is the fit's
    frames = page.path_frames({"gd": path}, solutions, random=0.3)
    assert np.allclose(frames["gd"]["position share"][1], path.share[1:].mean(1))
    assert np.all(frames["gd"]["random direction (95% of |cosine|)"][1] == 0.3)
    level = lp.random_level(solutions, 0.95)
    assert 0 < level < 1 and level >= np.quantile(np.abs(lp.random_cosines(solutions["l2"].w)), 0.95)


def test_limit_numbers_and_the_scan_table(path, solutions) -> None:
    scan = {64: path, 1024: path}
    heldout = {64: np.array([0.1, 0.2]), 1024: np.array([0.9, 1.0])}
    found = {"gd": lp.Approach("gd", "pairs", {"pairs": 0.97}, {"pairs": 0.95}, {"pairs": 0.01}, {"pairs": 0.02},
                               {"pairs": 0.9}, 0.9, 0.98, 0.99)}
    numbers = page.limit_numbers(scan, heldout, found, share_bar=2.0)
    assert numbers["share_n"] == "none" and numbers["small_heldout"] == pytest.approx(0.15)
    assert (numbers["closest_rule"], numbers["closest_geometry"], numbers["closest_ratio"]) == ("gd", "pairs", 0.95)
    assert numbers["reached"] == "none" and page.limit_numbers(scan, heldout, found, share_bar=0.0)["share_n"] == 64
    rows = page.scan_rows(scan, heldout, solutions)
    assert [r[0] for r in rows] == ["64", "1024"] and all(len(r) == len(page.scan_header(list(solutions))) for r in rows)
    assert page.full_scale_hours(0.036, 100_000, 10) == pytest.approx(10.0)
    drift = page.share_drift({"a": path, "b": path})
    assert drift["drift_rule"] == "a" and drift["drift_final"] == pytest.approx(float(path.share[-1].mean()))
    assert drift["drift_peak"] == pytest.approx(float(path.share.mean(1).max())) and drift["drift_peak"] >= drift["drift_final"]


# Weight decay ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def decayed() -> dict:
    c = SMALL.replace(weight_decay=1.0, decay_scope="all")
    return {wd: lp.direction_path(c.replace(weight_decay=wd), [0, 1], every=5, per_decade=3) for wd in (0.5, 1.0)}


def test_the_weight_decay_report(decayed, solutions) -> None:
    accuracy = {0.0: np.array([[1.0, 1.0], [0.5, 0.6]]), 0.5: np.array([[1.0, 1.0], [0.7, 0.8]]),
                1.0: np.array([[1.0, 1.0], [0.5, 0.5]])}
    rows = page.decay_rows(decayed, accuracy, solutions, SMALL.lr, SMALL.steps)
    assert [r[:3] for r in rows] == [["0.5", "2", "0.2"], ["1", "1", "0.4"]]
    assert all(len(r) == len(page.decay_header(list(solutions))) for r in rows)
    p = decayed[0.5]
    assert lp.final_ratios(decayed)[0] == pytest.approx(float((p.max_abs[-1] * 0.5).mean()))
    assert lp.bound_drift(p) == pytest.approx(float((np.abs(p.max_abs[-1] - p.max_abs[-2]) / p.max_abs[-1]).mean()))
    numbers = page.decay_numbers(decayed, accuracy, SMALL.lr, SMALL.steps)
    assert numbers["decay_best"] == "0.5" and numbers["decay_best_change"] == "+0.200 ± 0.000"
    assert numbers["nodecay_8x"] == "0.550 [0.500, 0.600]" and numbers["decay_time_min"] == pytest.approx(0.2)
    assert numbers["decay_8x"].startswith("lambda 0.5: 0.750 [0.700, 0.800]; lambda 1: ")
    frames = page.decay_frames(decayed)
    assert list(frames) == ["lambda = 0.5", "lambda = 1"]
    assert np.allclose(frames["lambda = 1"]["largest |parameter|"][1], decayed[1.0].max_abs[1:].mean(1))
    assert page.decay_verdict([1.02, 1.5, 0.5]) == ("1 of 3 settings sit on the bound (within 10%); "
                                                  "1 of 3 settings exceed it; 1 of 3 settings stay below it.")
