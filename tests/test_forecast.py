"""The prediction before training (lengthgen.forecast): the limit prediction on hand-solved kernels; the chapter's
readings of the scores (lengthgen.chapters.ch10b_prediction) on the same hand-made rows."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import ConfigError
from lengthgen import forecast as fc
from lengthgen.chapters import ch10b_prediction as page
from lengthgen.maxmargin import MaxMargin, hard_margin, kernel_constraints, solve


def _one_pair(theta: float, offset: int, train_length: int) -> MaxMargin:
    """The L2 max-margin kernel of one RoPE pair, solved by hand: c(delta) = r cos((delta + K) theta), peaked at
    the target; the nearest in-window offsets sit at cos(theta) r, so the margin is r (1 - cos theta) = 1."""
    r = 1 / (1 - np.cos(theta))
    w = r * np.array([np.cos(offset * theta), -np.sin(offset * theta)])  # (cos, sin) . w = r cos((delta + K) theta)
    return MaxMargin(w, np.array([theta]), offset, train_length, "l2")


def test_the_hand_solved_kernel_is_the_solvers() -> None:
    for theta, K, T in ((2 * np.pi / 10, 2, 5), (1.0, 1, 3)):
        hand = _one_pair(theta, K, T)
        assert hand.in_window_margin() == pytest.approx(1.0)
        assert np.allclose(hard_margin(kernel_constraints(K, T, np.array([theta])), "l2"), hand.w, atol=1e-6)


def test_first_reach_on_hand_solved_kernels() -> None:
    # period 10: the target's value returns at delta = -12, seen first by a sequence of length 13
    assert fc.first_reach(_one_pair(2 * np.pi / 10, 2, 5)) == 13
    assert fc.first_reach(_one_pair(2 * np.pi / 10, 2, 5), max_multiple=2) is None  # 12 > 2 x 5 - 1
    # theta = 1 rad never returns to the peak at a whole offset: cos(m) < 1 - 1e-9 for every m < 64 x 3
    assert fc.first_reach(_one_pair(1.0, 1, 3)) is None
    # the d = 2 solver's kernel (theta = 1 at any base) gives the same answer
    assert fc.first_reach(solve(1, 3, 2, 10000.0, "l2")) is None
    with pytest.raises(ConfigError, match="max_multiple"):
        fc.first_reach(_one_pair(1.0, 1, 3), max_multiple=0)


def test_first_reach_is_where_a_beyond_window_offset_first_reaches_the_target() -> None:
    sol = solve(2, 8, 8, 100.0, "l2")
    L = fc.first_reach(sol, max_multiple=64)
    kern = sol.kernel(-np.arange(64 * 8))
    if L is None:
        assert kern[8:].max() < kern[2]
    else:
        assert kern[L - 1] >= kern[2] - 1e-9 > kern[8 : L - 1].max()


def test_the_growth_law_against_the_exact_kernel_rung() -> None:
    """Each rule's law for the in-window margin it reaches, against the rule trained on the exact kernel rung
    (float64, full batch, from a random start of norm 0.1): within 25% at every checkpoint past the first tenth
    of each run, and within 5% at the end for the sign-type and normalised steps."""
    from lengthgen.selection import RuleSettings

    recipes = [RuleSettings("gd", 1.0, 500), RuleSettings("ngd", 0.3, 300), RuleSettings("sign", 0.05, 300), RuleSettings("adam", 0.05, 500),
               RuleSettings("adam", 0.05, 300, betas=(0.9, 0.9), eps=1e-300)]
    rows = fc.growth_check(dict(offset=2, train_length=16, dim=16, rope_base=100.0), recipes, seeds=(0, 1),
                           checkpoints=6)
    worst = {r["label"]: r["worst"] for r in rows}
    assert all(0.8 < w < 1.25 for w in worst.values()), worst
    end = {r["label"]: r["ratio_end"] for r in rows}
    assert all(abs(end[label] - 1) < 0.05 for label in end if label.startswith(("ngd", "sign", "adam (lr 0.05, b2"))), end


def test_growth_laws_by_hand() -> None:
    sol = _one_pair(2 * np.pi / 10, 2, 5)
    # sign: every coordinate moves by lr, so s grows by lr / |w|_inf; with the step lr t^-1, by lr (1 + 1/2 + ...)
    assert fc.growth(sol, "sign", 0.1, 3)[-1] == pytest.approx(0.3 / np.abs(sol.w).max())
    assert fc.growth(sol, "sign", 0.1, 3, power=1.0)[-1] == pytest.approx(0.1 * (1 + 1 / 2 + 1 / 3) / np.abs(sol.w).max())
    assert fc.growth(sol, "ngd", 0.1, 3)[-1] == pytest.approx(0.3 / np.linalg.norm(sol.w))
    # gd: s ~ log t once the loss is small (Soudry et al.): equal steps of log t give nearly equal steps of s
    s = fc.growth(sol, "gd", 1.0, 100_000)
    steps = np.diff(s[[999, 9999, 99_999]])
    assert steps[1] == pytest.approx(steps[0], rel=0.05) and s[-1] > s[999] > 0
    with pytest.raises(ConfigError, match="growth laws"):
        fc.growth(sol, "sgd", 0.1, 3)


def test_spearman_on_hand_ranked_cases() -> None:
    x = [0.1, 0.5, 0.3, 0.9, 0.7]
    assert fc.spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert fc.spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    y = [2, 1, 4, 3, 5]  # ranks of x are 1 3 2 5 4: d = (-1, 2, -2, 2, -1), sum d^2 = 14
    assert fc.spearman(x, y) == pytest.approx(1 - 6 * 14 / (5 * 24))
    scipy_stats = pytest.importorskip("scipy.stats")
    ties = ([1, 2, 2, 3, 5, 5], [3, 1, 4, 1, 5, 9])
    assert fc.spearman(*ties) == pytest.approx(scipy_stats.spearmanr(*ties).statistic)
    assert np.isnan(fc.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ConfigError, match="equal length"):
        fc.spearman([1, 2, 3], [1, 2])


# The held-out grid and the prediction path -------------------------------------------------------------------------

def test_the_heldout_grid_is_declared_apart_from_the_development_grid() -> None:
    from lengthgen.sweep import load_grid

    held, dev = load_grid("heldout"), load_grid("selection")
    quick = load_grid("heldout", quick=True)
    assert len(held.configs) == 64 and len(held.seeds) == 3 and len(quick.configs) == 16 and len(quick.seeds) == 1
    settings = lambda g: {(c.vocab, c.offset, c.rope_base, c.train_length) for c in g.configs}  # noqa: E731
    assert not settings(held) & settings(dev)  # no held-out setting was used to develop the predictor
    assert {c.optimizer for c in held.configs} == {"adam", "sign", "gd"} and held.multiples == (1, 2, 4, 8, 16)


def test_the_prediction_path_reads_no_trained_result(monkeypatch) -> None:
    """Every prediction of a grid comes from its file alone: training, the sweep and the results cache raise."""
    import sys

    from lengthgen import cache, sweep
    from lengthgen.sweep import grid_from_dict

    train = sys.modules["lengthgen.train"]

    def refuse(*args, **kwargs):
        raise AssertionError("the prediction path read or made a trained result")

    for module, name in ((sweep, "run_sweep"), (sweep, "run_grids"), (sweep, "run_job"), (train, "train"),
                         (train, "train_runs"), (cache.Cache, "get"), (cache.Cache, "put")):
        monkeypatch.setattr(module, name, refuse)
    grid = grid_from_dict({"base": {"target_accuracy": None, "vocab": 8, "dim": 8, "train_length": 8, "offset": 2},
                           "recipes": [{"optimizer": "sign", "lr": 0.01, "steps": 50},
                                       {"optimizer": "gd", "lr": 1.0, "steps": 50}],
                           "eval": {"multiples": [1, 4]}})
    out = fc.heldout_predictions(grid)
    assert set(out) == {c.key() for c in grid.configs}
    sign = out[grid.configs[0].key()]
    sol = fc.solution_for(2, 8, 8, 10000.0, "linf")
    assert sign["scale"] == pytest.approx(0.5 / np.abs(sol.w).max()) and sign["lengths"] == [8, 32]
    assert sign["accuracy"].shape == (2,) and out[grid.configs[1].key()]["geometry"] == "l2"


def _scored(rule: str, lr: float, forecast: list[float], measured: list[float], std: list[float], lead: list[float]) -> dict:
    return {"rule": rule, "lr": lr, "forecast": np.array(forecast), "limit": np.ones(len(forecast)),
            "rule_mean": np.full(len(forecast), 0.5), "ignores_rule": np.full(len(forecast), 0.6),
            "measured": np.array(measured), "measured_std": np.array(std), "lead": np.array(lead)}


def test_the_scores_on_hand_made_rows() -> None:
    rows = [_scored("gd", 1.0, [1.0, 0.9], [0.8, 0.5], [0.0, 0.3], [5.0, 0.5]),
            _scored("gd", 1.0, [0.9, 0.8], [0.9, 0.7], [0.0, 0.1], [6.0, 2.0]),
            _scored("gd", 1.0, [0.8, 0.7], [1.0, 0.9], [0.0, 0.0], [7.0, 3.0])]
    assert np.allclose(fc.mae(rows, "forecast"), [0.4 / 3, 0.7 / 3]) and np.allclose(fc.mae(rows, "rule_mean"), [0.4, 0.2])
    rho = fc.within_rule(rows)[("gd", 1.0)]
    assert rho[0] == pytest.approx(-1.0) and rho[1] == pytest.approx(-1.0)
    agree = fc.verdicts(rows, "forecast", bars=(0.85,))
    assert np.allclose(agree, [[1 / 3, 1 / 3]])  # bar 0.85 at 1x: yes/no, yes/yes, no/yes; 2x: yes/no, no/no, no/yes
    seeds = fc.seed_scores(rows, lead_bar=1.0)
    assert seeds["rho"][1] == pytest.approx(-1.0) and seeds["std_small"][1] == pytest.approx(0.3)
    assert seeds["std_large"][1] == pytest.approx(0.05) and np.isnan(seeds["std_small"][0])
    text = page.seed_reading(rows, [1, 8])  # the second multiple is 8x: one row has a lead under 1 logit
    assert "-1.00" in text and "The 1 configurations with a lead under 1 logit have a mean standard deviation of 0.300" in text
    limit = [{"reach": {"l2": None, "linf": None, "pairs": 40}}, {"reach": {"l2": None, "linf": None, "pairs": None}}]
    assert page.limit_reading(limit).startswith("In the limit, then, the account predicts that every rule keeps the target")
    assert "1 settings (l2)" in page.limit_reading([{"reach": {"l2": 30, "linf": None}}])


def test_lead_is_the_targets_lead_in_logits() -> None:
    sol = _one_pair(2 * np.pi / 10, 2, 5)  # c = r cos((delta + 2) theta): in-window others at r cos(theta) = r - 1
    lead = fc.lead(sol, 3.0, [5, 12, 13])
    assert lead[0] == pytest.approx(3.0) and lead[1] == pytest.approx(3.0)  # delta = -11 sits at r cos(theta) too
    assert lead[2] == pytest.approx(0.0, abs=1e-9)  # delta = -12 ties the target


def test_the_explorer_shows_both_predictions_for_every_choice() -> None:
    from lengthgen import plots

    ex = fc.explore({"gd": 1.0, "sign": 0.1}, [0.1, 1.0], [10, 100], [2], [100.0], 8, 8, 4, [1, 2, 4], reach=4)
    assert set(ex["kernels"]) == {("gd", 2, 100.0), ("sign", 2, 100.0)} and len(ex["curves"]) == 8
    sign = ex["curves"]["sign", 1, 100, 2, 100.0]
    assert sign["scale"] == pytest.approx(10 / np.abs(fc.solution_for(2, 8, 8, 100.0, "linf").w).max())
    assert ex["kernels"]["gd", 2, 100.0]["kernel"][2] == pytest.approx(
        ex["kernels"]["gd", 2, 100.0]["kernel"][:8][[0, 1, 3, 4, 5, 6, 7]].max() + 1)
    fig = plots.selection_explorer(ex)
    assert len(fig.data) == 4 * 2 + 8  # per kernel: line, peaks, first reach, limit; one curve per choice
    shown = [t for t in fig.data if t.visible]
    assert len(shown) == 5 and fig.layout.meta["grid"]["labels"][2] == ["10", "100"]
    assert fig.layout.xaxis2.ticktext == ("1x", "2x", "4x") and fig.layout.xaxis2.tickvals == (0, 1, 2)
    curve = shown[-1]
    assert list(curve.y) == [round(float(a), 2) for a in ex["curves"]["gd", 1, 100, 2, 100.0]["accuracy"]]
