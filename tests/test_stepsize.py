"""lengthgen.chapters.ch09_step_size: chapter 9's analyses on small synthetic sweep frames with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthgen import compare
from lengthgen.chapters import ch09_step_size as page
from lengthgen.config import Config
from lengthgen.recipes import FIRST_FIT, SMALL_STEPS
from lengthgen.sweep import frame

MULTIPLES = (1, 2, 4, 8, 16)


def _record(seed: int, far: float, **config) -> dict:
    """A sweep record: accuracy 1.0 at the training length and ``far`` at 2x-16x."""
    c = {**Config().to_dict(), "target_accuracy": None, **config}
    T = c["train_length"]
    return {"config": c, "seed": seed, "lengths": [m * T for m in MULTIPLES], "accuracy": [1.0] + [far] * 4,
            "target_weight": [0.5] * 5, "steps": c["steps"], "batch_seconds": 1.0, "batch_members": 2}


def _fixed(far: dict[float, list[float]]) -> pd.DataFrame:
    """Fixed-budget runs (lr x steps = 2) at each step size, one per seed with the given far accuracy."""
    return frame([_record(s, a, lr=lr, steps=round(2 / lr)) for lr, accs in far.items() for s, a in enumerate(accs)])


FIXED = _fixed({1e-2: [0.2, 0.3, 0.4], 1e-3: [0.6, 0.7, 0.8], 3e-4: [0.6, 0.7, 0.81]})
FIRST = frame([_record(s, 0.1, target_accuracy=0.995, steps=400) for s in range(3)])


def test_convergence_pairs_each_step_size_with_the_next_smaller() -> None:
    rows, numbers = page.convergence(FIXED, FIRST)
    assert [r[:2] for r in rows] == [["0.01 -> 0.001", "8x"], ["0.01 -> 0.001", "16x"],
                                     ["0.001 -> 0.0003", "8x"], ["0.001 -> 0.0003", "16x"]]
    assert rows[0][3:] == ["3 / 0", "up"]  # every seed up by 0.4: a clear change
    assert numbers["conv_steps_8x"] == "+0.400, +0.003"
    assert numbers["conv_last_8x"] == pytest.approx(0.01 / 3) and numbers["conv_last_8x_verdict"] == "no clear change"
    assert numbers["limit_8x_min"] == 0.6 and numbers["firstfit_16x"] == pytest.approx(0.1)
    assert (numbers["big_lr"], numbers["lr_second"], numbers["lr_smallest"]) == (1e-2, 1e-3, 3e-4)
    assert numbers["longer_at_big_lr_4x"] == pytest.approx(0.2) and numbers["longer_at_big_lr_4x_verdict"] == "up"


def test_tables_and_listings_state_every_step_size() -> None:
    rows = page.recipe_rows(FIXED, FIRST, [2, 8])
    assert [r[1] for r in rows] == ["first fit", "lr 0.01, 200 steps", "lr 0.001, 2000 steps", "lr 0.0003, 6667 steps"]
    assert rows[1][2:] == ["0.300 ± 0.058", "0.300 ± 0.058", "0.200", "3", "0.50"]
    listing = page.lr_listing(FIXED, [8]).splitlines()
    assert len(listing) == 4 and listing[1].split() == ["16", "lr", "0.01", "0.300", "0.200"]
    seeds = page.seed_listing(FIXED).splitlines()
    assert len(seeds) == 3 * (1 + len(MULTIPLES)) and seeds[2] == "    2x: 0.200 0.300 0.400"
    lines = page.accuracy_lines(FIXED, [8])["V=16, K=2"]
    assert lines["8x, worst seed"][1] == [0.2, 0.6, 0.6] and lines["8x"][0] == [1e-2, 1e-3, 3e-4]
    assert page.overview(FIXED, FIRST)["lr_range"] == "0.01 to 0.0003"


def test_time_or_step_picks_the_sentence_by_the_paired_verdict() -> None:
    longer = _fixed({1e-3: [0.6, 0.7, 0.8], 1e-2: [0.2, 0.3, 0.4]}).assign(steps=lambda d: d.steps * 4)
    rows, numbers, sentences = page.time_or_step(longer, FIXED)
    assert len(rows) == 4 and numbers["time_big_8x"] == 0 and numbers["time_big_8x_verdict"] == "no clear change"
    assert numbers["time_vs_step_lr"] == 3e-4 and numbers["time_long_steps"] == 8000
    assert sentences["time_sentence"].endswith(page.TIME_SENTENCE["no clear change"])


def test_gradient_descent_counts_the_seeds_that_fit() -> None:
    gd = frame([_record(s, 0.5 + 0.1 * i, optimizer="gd", lr=lr, steps=round(2000 / lr), batch=1024)
                for i, lr in enumerate((1.0, 0.3)) for s in range(2)])
    gd.loc[(gd.lr == 1.0) & (gd.seed == 0) & (gd.multiple == 1), "accuracy"] = 0.5  # one seed does not fit
    rows, numbers = page.gradient_descent(gd, [1, 8])
    assert [r[2] for r in rows] == ["1/2", "2/2"]
    assert (numbers["gd_learned_big"], numbers["gd_learned_small"], numbers["gd_batch"]) == (1, 2, 1024)
    assert numbers["gd_change_8x"] == pytest.approx(0.1) and numbers["gd_lr_second"] == 1.0


def test_weight_decay_finds_the_largest_change_against_no_decay() -> None:
    decay = frame([_record(s, far + 0.01 * s, lr=1e-2, steps=200, weight_decay=wd, decay_scope=scope)
                   for wd, scope, far in ((0.0, "matrices", 0.5), (1.0, "matrices", 0.7), (1.0, "all", 0.3))
                   for s in range(3)])
    labels, effects, rows, numbers = page.weight_decay(decay)
    assert labels == ["lr 0.01, no decay", "lr 0.01, decay 1 on matrices", "lr 0.01, decay 1 on all"]
    assert effects["8x"][1] == pytest.approx([0.51, 0.71, 0.31]) and rows[0][-2:] == ["-", "-"]
    assert numbers["decay_best"] == labels[1] and numbers["decay_best_verdict"] == "up"
    assert (numbers["decay_n"], numbers["decay_n_up"], numbers["decay_n_down"]) == (2, 1, 1)


def test_regime_names_the_closest_recipe_and_whether_it_is_the_books() -> None:
    small = SMALL_STEPS.apply(Config())
    runs = [_record(s, 1.0, **{k: getattr(small, k) for k in SMALL_STEPS}) for s in range(2)]
    runs += [_record(s, 0.5, target_accuracy=0.995) for s in range(2)]
    checks = compare.check_criterion(frame(runs))
    base = frame([_record(s, a, rope_base=100.0, **FIRST_FIT) for s, a in enumerate((0.9, 1.0))])
    base.loc[base.multiple == 1, "accuracy"] = [0.98, 1.0]  # one first-fit model does not fit at 1x
    numbers, sentences = page.regime(checks, compare.check_criterion(base), base, SMALL_STEPS)
    assert numbers["book_recipe_is_regime"] == "is" and numbers["regime_passes"] == "reaches"
    assert numbers["n_passing"] == 1 and numbers["n_complete"] == 2 and numbers["regime_failing"] == 0
    assert numbers["base_ff_unfit"] == 1 and numbers["base_ff_nbig"] == 2 and numbers["base_value"] == 100.0
    assert numbers["base_ff_passes"] == "does not reach" and sentences["regime_bullet"].startswith("The recipe")
    numbers, _ = page.regime(checks, compare.check_criterion(base), base, FIRST_FIT)
    assert numbers["book_recipe_is_regime"] == "is not"
    assert page.criterion_text() == ">= 0.99 at 4x, >= 0.95 at 8x"
    assert page.regime_rows(checks)[0][-2:] == ["yes", "0.50"] and np.isclose(checks[0].worst[8.0], 1.0)
