"""lengthgen.compare (results as a data frame, and the statistics chapters 6, 8 and 9 state their verdicts with)
and plots.md_table."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lengthgen import compare
from lengthgen.config import Config
from lengthgen.plots import md_table
from lengthgen.recipes import FIRST_FIT, Recipe
from lengthgen.sweep import frame, grid_from_dict
from lengthgen.task import eval_tokens, targets


def _record(seed: int, acc4: float, acc8: float, **config) -> dict:
    """A sweep record (what ``Sweep.records`` holds) evaluated at 1x, 4x and 8x the training length."""
    c = {**Config().to_dict(), "target_accuracy": None, **config}
    T = c["train_length"]
    return {"config": c, "seed": seed, "lengths": [T, 4 * T, 8 * T], "accuracy": [1.0, acc4, acc8],
            "target_weight": [0.9, 0.5, 0.3], "steps": 7, "batch_seconds": 2.0, "batch_members": 4}


def test_frame_of_records_has_one_row_per_model_and_length_with_every_config_field() -> None:
    records = [_record(0, 0.9, 0.8, lr=1e-3), _record(1, 0.7, 0.6, lr=1e-3)]
    records[1]["kernel"] = {"margin_in_window": 0.5, "predicted_failure_length": None}
    df = frame(records)
    assert len(df) == 6 and df.multiple.tolist() == [1.0, 4.0, 8.0] * 2
    assert df.accuracy.tolist() == [1.0, 0.9, 0.8, 1.0, 0.7, 0.6]
    assert set(Config().to_dict()) <= set(df.columns) and (df.lr == 1e-3).all() and (df.optimizer == "adam").all()
    assert df.steps_trained.tolist() == [7] * 6 and df.seconds.tolist() == [0.5] * 6 and df.run.nunique() == 2
    assert df.recipe.iloc[0] == Config(**records[0]["config"]).recipe()
    assert np.isnan(df.margin_in_window.iloc[0]) and df.margin_in_window.iloc[3] == 0.5
    assert df.predicted_failure_length.isna().all()
    again = frame(records[:1] + [_record(0, 0.9, 0.8, lr=1e-3)])  # the same run in two grids: one id
    assert again.run.nunique() == 1


def test_where_selects_and_treats_none_as_missing() -> None:
    df = frame([_record(0, 0.9, 0.8), _record(0, 0.5, 0.4, target_accuracy=0.99)])
    assert len(compare.where(df, target_accuracy=None)) == 3
    assert compare.where(df, target_accuracy=0.99, multiple=4).accuracy.tolist() == [0.5]
    assert len(compare.where(df)) == 6
    with pytest.raises(KeyError, match="no column 'nope'"):
        compare.where(df, nope=1)


def test_summary_at_and_line_give_mean_and_standard_error_over_seeds() -> None:
    df = frame([_record(0, 0.5, 0.1, lr=1e-2), _record(1, 0.7, 0.1, lr=1e-2), _record(0, 0.9, 0.1, lr=1e-3)])
    s = compare.at(df, lr=1e-2, multiple=4)
    assert s["n"] == 2 and s["mean"] == pytest.approx(0.6)
    assert s["sem"] == pytest.approx(np.std([0.5, 0.7], ddof=1) / np.sqrt(2)) and (s["min"], s["max"]) == (0.5, 0.7)
    assert compare.pm(s) == "0.600 ± 0.100" and isinstance(s["mean"], float)
    x, mean, sem = compare.line(df, "lr", multiple=4)
    assert x == [1e-2, 1e-3] and mean == pytest.approx([0.6, 0.9]) and sem[1] == 0.0
    table = compare.summary(df, ["lr", "multiple"])
    assert table.loc[(1e-2, 4.0), "mean"] == pytest.approx(0.6) and table.loc[(1e-3, 8.0), "n"] == 1
    with pytest.raises(ValueError, match="no rows"):
        compare.at(df, lr=5.0)


def test_versus_uses_two_combined_standard_errors() -> None:
    b = {"mean": 0.5, "sem": 0.03}
    err = float(np.hypot(0.04, 0.03))  # 0.05
    assert compare.versus({"mean": 0.5 + 2 * err - 1e-9, "sem": 0.04}, b) == "no clear difference"
    assert compare.versus({"mean": 0.5 + 2 * err + 1e-6, "sem": 0.04}, b) == "higher"
    assert compare.versus({"mean": 0.5 - 2 * err - 1e-6, "sem": 0.04}, b) == "lower"
    assert compare.versus({"mean": 0.6, "sem": 0.0}, {"mean": 0.5, "sem": 0.0}) == "higher"


def test_paired_change_counts_seeds_and_gives_a_verdict() -> None:
    ch = compare.paired_change(np.zeros(3), np.array([1.0, 2.0, 3.0]))
    assert (ch.mean, ch.up, ch.down, ch.verdict) == (2.0, 3, 0, "up")
    assert ch.sem == pytest.approx(1 / np.sqrt(3))
    noisy = compare.paired_change(np.zeros(4), np.array([1.0, -1.0, 2.0, -1.5]))
    assert (noisy.up, noisy.down, noisy.verdict) == (2, 2, "no clear change")
    down = compare.paired_change(np.array([0.9, 0.8]), np.array([0.1, 0.1]))
    assert down.verdict == "down" and down.mean == pytest.approx(-0.75)
    one = compare.paired_change(np.array([1.0]), np.array([0.5]))
    assert (one.sem, one.verdict) == (0.0, "down")


def test_paired_change_rejects_unpaired_input() -> None:
    with pytest.raises(ValueError, match="same seeds"):
        compare.paired_change(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="non-empty"):
        compare.paired_change(np.zeros(0), np.zeros(0))


@pytest.mark.parametrize("predicted, measured, expected", [
    (None, None, "neither fails"), (None, 2.0, "fails, none predicted"), (2.0, None, "predicted, does not fail"),
    (4.0, 2.0, "fails earlier"), (2.0, 4.0, "fails later"), (2.0, 3.0, "agrees"), (3.0, 2.0, "agrees"),
])
def test_failure_verdict(predicted, measured, expected) -> None:
    assert compare.failure_verdict(predicted, measured, tol=1.5) == expected
    assert expected in compare.VERDICTS


def test_failure_verdict_rejects_a_tolerance_below_one() -> None:
    with pytest.raises(ValueError, match="tol"):
        compare.failure_verdict(1.0, 1.0, tol=0.5)


def test_failure_multiples_in_training_lengths() -> None:
    record = {"config": {**Config().to_dict(), "vocab": 10, "train_length": 16}, "seed": 0, "steps": 5,
              "lengths": [16, 32, 64, 128], "accuracy": [1.0, 0.9, 0.5, 0.1], "target_weight": [0.5] * 4,
              "kernel": {"predicted_failure_length": 48}}
    never = {**record, "seed": 1, "accuracy": [1.0] * 4, "kernel": {"predicted_failure_length": None}}
    table = compare.failure_multiples(frame([record, never]))
    # halfway to chance 0.1 is 0.55: the first length below it is 64
    assert table.iloc[0][["first_accuracy", "reach", "predicted", "measured"]].tolist() == [1.0, 8.0, 3.0, 4.0]
    assert table.iloc[1][["predicted", "measured"]].isna().all()
    assert compare.failure_verdict(table.iloc[1].predicted, table.iloc[1].measured, 1.5) == "neither fails"


def test_settings_and_setting_label() -> None:
    base = {"dim": 8, "lr": 0.01, "rope_base": 10000.0}
    assert compare.setting_label(base, base) == "defaults"
    assert compare.setting_label({**base, "dim": 16, "rope_base": 100.0}, base) == "dim=16, rope_base=100"
    grid = grid_from_dict({"base": {"steps": 10}, "recipes": [{}, {"lr": 1e-3}], "variants": [{}, {"dim": 16}]})
    by_recipe = compare.settings_by_recipe(grid, ["lr"])
    first, small = (Config().replace(steps=10, lr=lr) for lr in (Config().lr, 1e-3))
    assert list(by_recipe) == [Recipe.of(first), Recipe.of(small)]  # Recipes, in grid order
    assert [r.name for r in by_recipe] == [first.recipe(), small.recipe()]
    assert by_recipe[Recipe.of(small)] == {"defaults": {"lr": 1e-3, "dim": Config().dim},
                                          "dim=16": {"lr": 1e-3, "dim": 16}}
    with pytest.raises(ValueError, match="not recipe fields"):
        compare.settings_by_recipe(grid, ["dim"])
    decay = grid_from_dict({"base": {"steps": 10}, "variants": [{}, {"weight_decay": 1.0}]})
    assert list(compare.settings_by_recipe(decay, ["lr"]).values())[0] == {  # weight decay outside ``by``: a setting
        "defaults": {"weight_decay": 0.0}, "weight_decay=1": {"weight_decay": 1.0}}


def test_frequency_guess_matches_a_direct_count() -> None:
    c = Config().replace(vocab=4, train_length=12, offset=2)
    tokens = eval_tokens(c, 12, 50, seed=3)
    want = []
    for seq, target in zip(tokens.tolist(), targets(tokens, c.offset).tolist()):
        counts = Counter(seq)
        top = max(counts.values())
        tied = [t for t, n in counts.items() if n == top]
        want.append(1 / len(tied) if target in tied else 0.0)
    assert compare.frequency_guess(c, 12, 50, seed=3) == pytest.approx(np.mean(want))


def test_share_beyond_the_training_length() -> None:
    counts = np.array([[1, 1, 2, 4], [0, 0, 0, 5]])  # (S=2, L=4) argmax counts per key position
    assert compare.share_beyond(counts, 2).tolist() == [0.25, 0.0]
    assert compare.share_beyond(counts, 4).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="train_length"):
        compare.share_beyond(counts, 5)


def test_accuracy_at_stacks_the_requested_lengths() -> None:
    ev = SimpleNamespace(by_length={8: SimpleNamespace(accuracy=np.array([1.0, 0.5])),
                                    16: SimpleNamespace(accuracy=np.array([0.2, 0.4]))}, lengths=[8, 16])
    assert compare.accuracy_at(ev, [16, 8]).tolist() == [[0.2, 0.4], [1.0, 0.5]]
    with pytest.raises(ValueError, match="not evaluated"):
        compare.accuracy_at(ev, [32])


def test_spread_and_md_table() -> None:
    assert compare.spread(np.array([0.25, 0.5, 0.75])) == "0.500 [0.250, 0.750]"
    table = md_table(["a", "b"], [["1", "2"], ["3", "4"]])
    assert table.data == "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |"
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        md_table(["a", "b"], [["1", "2"], ["3"]])


# --- recipes and the chapter 9 criterion ---


def test_check_criterion_finds_the_recipes_that_pass_and_ranks_by_slack() -> None:
    good = [_record(s, 0.995, 0.97, lr=3e-4, vocab=V) for s in range(2) for V in (16, 64)]
    close = [_record(0, 0.995, 0.97, lr=1e-3), _record(1, 0.985, 0.99, lr=1e-3)]  # one model 0.005 short at 4x
    bad = [_record(0, 0.5, 0.3, lr=1e-2)]
    checks = compare.check_criterion(frame(bad + close + good))
    assert [c.recipe.lr for c in checks] == [3e-4, 1e-3, 1e-2]
    assert checks[0].passes and checks[0].settings == 2 and checks[0].models == 4
    assert not checks[1].passes and checks[1].failing == 1 and np.isclose(checks[1].slack, -0.005)
    assert checks[1].worst == {4.0: 0.985, 8.0: 0.97} and np.isclose(checks[0].seconds_per_model, 0.5)
    assert checks[0].recipe == Recipe.of(Config(lr=3e-4, target_accuracy=None)) != FIRST_FIT
    assert checks[0].recipe.name == Config(lr=3e-4, target_accuracy=None).recipe()  # named as the frame states it


def test_check_criterion_keeps_batch_and_decay_scope_apart() -> None:
    """Batch and decay scope are not fields a Recipe sets, but runs that differ in them are checked apart."""
    rows = [_record(0, 1.0, 1.0, weight_decay=1.0), _record(0, 0.5, 0.5, weight_decay=1.0, decay_scope="all"),
            _record(0, 0.2, 0.2, batch=1024)]
    checks = compare.check_criterion(frame(rows))
    assert len(checks) == 3 and [c.slack < 0 for c in checks] == [False, True, True]
    assert checks[0].recipe == checks[1].recipe and "every parameter" in checks[1].text


def test_check_criterion_keeps_a_different_rope_base_apart() -> None:
    checks = compare.check_criterion(frame([_record(0, 1.0, 1.0), _record(0, 0.2, 0.2, rope_base=100.0)]))
    assert len(checks) == 2 and "RoPE base 100" in checks[1].text and "RoPE base" not in checks[0].text


def test_paired_pairs_by_seed_and_setting() -> None:
    before = frame([_record(s, 0.5, 0.4, offset=K) for s in range(3) for K in (1, 2)])
    after = frame([_record(s, 0.7, 0.4 + 0.1 * s, offset=K, lr=1e-3) for s in range(3) for K in (1, 2)])
    at4 = compare.paired(compare.where(before, multiple=4), compare.where(after, multiple=4))
    at8 = compare.paired(compare.where(before, multiple=8), compare.where(after, multiple=8))
    assert np.isclose(at4.mean, 0.2) and at4.up == 6 and at4.verdict == "up"
    assert np.isclose(at8.mean, 0.1) and at8.up == 4 and at8.down == 0
    twice = pd.concat([after, after])  # a run listed by two grids is paired once
    assert compare.paired(compare.where(before, multiple=4), compare.where(twice, multiple=4)).up == 6
    with pytest.raises(ValueError, match="no rows to pair"):
        compare.paired(before, frame([_record(9, 0.5, 0.5)]))
