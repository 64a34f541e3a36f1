"""The findings page's verdict rule (lengthgen.findings) and the recipe control of figures (plots.recipe_menu)."""

import numpy as np
import pytest

from lengthgen import findings, plots, thresholds


def test_estimate_mean_and_standard_error():
    e = findings.estimate([1.0, 2.0, 3.0])
    assert e.mean == pytest.approx(2.0) and e.n == 3
    assert e.se == pytest.approx(1.0 / np.sqrt(3))
    assert e.text(2) == f"2.00 ± {2 / np.sqrt(3):.2f} (3 seeds)"
    assert findings.estimate([0.5]).se == 0.0
    assert findings.estimate([0.5]).text(2) == "0.50 (1 seed: no spread)", "one seed: no ± 0.00"


def test_one_seed_cells_say_there_is_no_spread():
    found = findings.judge({"a": np.array([[0.99], [0.97]])}, thresholds.MEAN_TRANSFER, above=True)
    assert found.cell("a") == "0.970 (1 seed: no spread): holds"
    worst = findings.judge_all({"a": {"T=64": np.array([[0.99]])}}, thresholds.MEAN_TRANSFER, above=True)
    assert worst.cell("a") == "0.990 (1 seed, T=64: no spread): holds"
    with pytest.raises(ValueError, match="finite per-seed"):
        findings.estimate([np.nan, 1.0])


def test_two_standard_error_rule():
    tight = findings.Estimate(0.97, 0.005, 4)  # interval [0.96, 0.98]
    assert findings.decide(tight, 0.95, above=True) is True
    assert findings.decide(tight, 0.99, above=True) is False
    assert findings.decide(tight, 0.975, above=True) is None
    assert findings.decide(tight, 0.99, above=False) is True
    assert findings.decide(tight, 0.95, above=False) is False


def test_verdicts_over_recipes_and_horizons():
    assert findings.verdict({"a": [True, True], "b": [True, True]}) == "holds"
    assert findings.verdict({"a": [True, False], "b": [True, True]}) == "holds in one regime (b)"
    assert findings.verdict({"a": [True, False], "b": [True, None]}) == "bounded"
    assert findings.verdict({"a": [None, None], "b": [False, False]}) == "undecided"
    assert findings.verdict({"a": [False, True], "b": [False, False]}) == "does not hold"
    assert findings.recipe_status([None, None, False]) == "fails"
    assert findings.recipe_status([True, None]) == "undecided"
    assert findings.verdict({"a": [None, False], "b": [None, True]}) == "undecided"
    assert all(v.split(":")[0] in findings.VERDICTS for v in (
        findings.verdict({"a": [True]}), findings.verdict({"a": [False]}), findings.verdict({"a": [None]})))


def test_recipe_menu_joins_slider_figures():
    rng = np.random.default_rng(0)
    figs = {name: plots.last_query_attention({32: rng.random((2, 32)), 64: rng.random((2, 64))}, 2, 32, "")
            for name in ("first fit", "small steps")}
    fig = plots.recipe_menu(figs, "profile, {0}, {1}")
    assert len(fig.data) == sum(len(f.data) for f in figs.values())
    owners = fig.layout.meta["grid"]["owners"]
    assert {o[0] for o in owners} == {0, 1} and {o[1] for o in owners} == {0, 1}
    shown = [o for o, t in zip(owners, fig.data) if t.visible]
    assert shown and all(o == [0, 0] for o in shown)  # the first recipe at the first length
    assert fig.layout.title.text == "profile, first fit, L=32"
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["recipe: first fit", "recipe: small steps"]


def test_recipe_menu_without_slider_and_mismatch():
    figs = {name: plots.shift_test([1, 2], {"rope": np.ones(2)}, "") for name in ("a", "b")}
    assert plots.recipe_menu(figs, "{0}").layout.meta["grid"]["owners"] == [[0], [1]]
    other = {"a": plots.last_query_attention({32: np.ones((1, 32))}, 2, 32, ""),
             "b": plots.last_query_attention({32: np.ones((1, 32)), 64: np.ones((1, 64))}, 2, 32, "")}
    with pytest.raises(ValueError, match="same grid"):
        plots.recipe_menu(other, "{0}")


def test_all_of_settings():
    assert findings.all_of([True, True]) is True
    assert findings.all_of([True, None]) is None
    assert findings.all_of([None, False, True]) is False


def test_headline_says_first_which_regimes_its_numbers_come_from(monkeypatch, capsys):
    from lengthgen import __main__ as cli
    from lengthgen.recipes import RECIPES

    monkeypatch.setattr(cli, "run_report", lambda c, seeds, lengths, samples: {})  # no training here
    monkeypatch.setattr(cli, "format_table", lambda reports: f"{len(reports)} columns")
    assert cli.main([]) == 0
    first, *rest = capsys.readouterr().out.splitlines()
    assert first.startswith("Headline numbers from two training regimes")
    assert all(name in first for name in RECIPES) and "implicit-bias" in first
    assert rest[-1] == f"{2 * len(RECIPES)} columns"


def test_judge_decides_each_horizon_and_shows_the_farthest():
    values = {"first fit": np.array([[0.99, 0.98, 0.99], [0.90, 0.80, 0.85]]),  # passes near, fails far
              "small steps": np.array([[0.99, 0.99, 1.0], [0.97, 0.98, 0.99]])}
    found = findings.judge(values, thresholds.MEAN_TRANSFER, above=True)
    assert found.decisions == {"first fit": [True, False], "small steps": [True, True]}
    assert found.verdict == "holds in one regime (small steps)"
    np.testing.assert_array_equal(found.far["first fit"], values["first fit"][-1])
    e = findings.estimate(values["first fit"][-1])
    assert found.cell("first fit") == f"{e.text(3)}: bounded"
    assert found.cell("small steps", ".1e").endswith("(3 seeds): holds") and "e-01" in found.cell("small steps", ".1e")
    one = findings.judge({"a": np.array([1e-12, 2e-12])}, thresholds.EXACT, above=False, unit="seed pair")
    assert one.decisions == {"a": [True]} and one.cell("a", ".1e").startswith("1.5e-12 ± ")
    assert "(2 seed pairs): holds" in one.cell("a", ".1e")


def test_judge_all_needs_every_setting_and_shows_the_worst():
    good, bad = np.array([[0.99, 0.99, 1.0], [0.99, 0.98, 0.99]]), np.array([[0.99, 0.99, 0.99], [0.5, 0.6, 0.55]])
    found = findings.judge_all({"r": {"K=1": good, "T=64": bad}, "s": {"K=1": good, "T=64": good}},
                               thresholds.MEAN_TRANSFER, above=True)
    assert found.decisions == {"r": [True, False], "s": [True, True]}
    np.testing.assert_array_equal(found.far["r"], bad[-1])
    assert found.unit == {"r": "seed, T=64", "s": "seed, K=1"}  # ties: the first setting
    assert found.cell("r").endswith("(3 seeds, T=64): bounded")
    assert found.verdict == "holds in one regime (s)"
