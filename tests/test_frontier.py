"""lengthgen.chapters.ch08_extrapolation: chapter 8's analyses on small synthetic sweep frames with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthgen import compare
from lengthgen.chapters import ch08_extrapolation as page
from lengthgen.config import Config
from lengthgen.sweep import frame

MULTIPLES = (1, 2, 4)


def _record(seed: int, accuracy: list[float], kernel: dict | None = None, pinned: list | None = None, **config) -> dict:
    """A sweep record evaluated at 1x, 2x and 4x the training length."""
    c = {**Config().to_dict(), **config}
    T = c["train_length"]
    r = {"config": c, "seed": seed, "lengths": [m * T for m in MULTIPLES], "accuracy": accuracy,
         "target_weight": [0.5] * 3, "steps": c["steps"], "batch_seconds": 1.0, "batch_members": 1}
    if kernel is not None:
        r["kernel"] = kernel
    if pinned is not None:  # per length: the argmax shares (target, pinned by layer) and the pinned prediction
        r |= {"argmax_at_target": [p[0] for p in pinned], "argmax_at_pinned": [p[1] for p in pinned],
              "predicts_pinned": [p[2] for p in pinned]}
    return r


def _kernel(margin: float, predicted: float | None = None) -> dict:
    return {"margin_in_window": margin, "margin_beyond": margin - 1, "qk_norm": 2 * margin,
            "predicted_failure_length": predicted}


def test_budget_changes_pair_the_longer_run_with_the_shorter_one_seed_by_seed() -> None:
    b = frame([_record(s, [1.0, 0.5 + 0.1 * i, 0.3], _kernel(1.0 + i + 0.1 * s, 64.0 if i == 0 else None),
                       lr=1e-2, steps=steps, target_accuracy=None)
               for i, steps in enumerate((100, 200, 400)) for s in range(3)])
    numbers, verdicts = page.budget_changes(b, 100, 200, 400, far=4)
    assert numbers["budget_diff_2x"] == pytest.approx(0.1) and numbers["budget_diff_2x_up"] == 3
    assert numbers["budget_diff_4x"] == 0 and numbers["budget_diff_4x_down"] == 0
    assert verdicts == {"budget_diff_2x_verdict": "up", "budget_diff_4x_verdict": "no clear change",
                        "budget_diff_margin_verdict": "up", "budget_diff_norm_verdict": "up"}
    assert numbers["margin_in_first"] == pytest.approx(1.1) and numbers["qk_norm_ref"] == pytest.approx(4.2)
    assert (numbers["predicted_share_first"], numbers["predicted_share_last"]) == (1.0, 0.0)
    acc, margins = page.budget_lines(b, [2])
    assert acc["2x"][0] == [100, 200, 400] and margins["target vs. best in-window offset"][1] == pytest.approx([1.1, 2.1, 3.1])
    assert page.budget_rows(b, [100], [2])[0] == ["0.01", "100", "1.100 ± 0.058", "0.500 ± 0.000"]
    assert page.budget_listing(b, [2]).splitlines()[1].split() == ["0.01", "100", "1.100", "0.500"]


def test_failure_outcomes_count_each_verdict() -> None:
    learned = pd.DataFrame({"predicted": [2.0, 4.0, np.nan, np.nan], "measured": [2.0, 1.0, 3.0, np.nan],
                            "reach": [16.0] * 4})
    counts, numbers = page.failure_outcomes(learned, 1.5)
    assert list(counts) == list(compare.VERDICTS) and sum(counts.values()) == 4
    assert (counts["agrees"], counts["fails earlier"], counts["fails, none predicted"], counts["neither fails"]) == (1, 1, 1, 1)
    assert numbers["q2_with_pred"] == 2 and numbers["q2_with_pred_fail"] == 2 and numbers["q2_early_total"] == 2
    assert numbers["q2_share_fails_none_predicted"] == 0.25 and numbers["q2_cap"] == 16.0


def test_setting_effects_compare_each_setting_with_the_defaults() -> None:
    named = {label: {"rope_base": 10000.0 + i} for i, label in enumerate(page.NAMED_SETTINGS.values(), 1)}
    settings = {"defaults": {"rope_base": 10000.0}, **named}
    far = {"defaults": 0.5, "rope_base=100": 0.9, "weight_decay=1": 0.2}  # the others as the defaults
    rows = [_record(s, [1.0 if label != "weight_decay=1" else 0.8, far.get(label, 0.5) + 0.01 * s, 0.1],
                    _kernel(1.0, None if label == "rope_base=100" else 96.0), **fields)
            for label, fields in settings.items() for s in range(3)]
    r = page.setting_effects(frame(rows), settings, [1, 2, 4], focus=2, learned=0.9)
    assert r.sentences["f_best"] == "`rope_base=100`" and r.sentences["f_worst"] == "`weight_decay=1`"
    assert r.sentences["f_rope_base_change"] == "higher" and r.sentences["f_varlen_change"] == "no clear difference"
    assert "the kernel of 3 of the 3 models has no offset" in r.sentences["f_rope_base_verdict"]
    assert r.sentences["f_unlearned"].startswith("In `weight_decay=1` (0.800)")
    assert r.sentences["f_changed"] == "`rope_base=100`, `weight_decay=1`" and r.numbers["f_n_changed"] == 2
    assert r.numbers["f_defaults_2x"] == pytest.approx(0.51) and r.numbers["f_n_settings"] == 5
    assert r.rows[0][-4:] == ["3/3", "3", "-", "-"] and r.rows[1][-4:-2] == ["0/3", "-"]
    assert list(r.effects) == ["1x", "2x", "4x"] and r.effects["2x"][1][1] == pytest.approx(0.91)


def test_depth_report_reads_pinning_beyond_the_training_length() -> None:
    one = [(0.9, [0.0], 0.1)] + [(0.1, [0.8], 0.7)] * 2  # per length: at target, pinned by layer, predicts pinned
    two = [(0.9, [0.0, 0.0], 0.1)] + [(0.1, [0.6, 0.4], 0.5)] * 2
    rows = [_record(s, [1.0, acc, acc], pinned=one if n == 1 else two, encoding=enc, layers=n)
            for enc, acc in (("rope", 0.8), ("ape", 0.1)) for n in (1, 2) for s in range(2)]
    lines, table, numbers, sentences = page.depth_report(frame(rows), [1, 2, 4])
    assert list(lines) == ["rope, 1 layer", "rope, 2 layers", "ape, 1 layer", "ape, 2 layers"]
    assert table[3][-3:] == ["0.60 / 0.40", "0.10", "0.50"]
    assert numbers["d_ape1_pinned_layer1"] == pytest.approx(0.8) and numbers["d_ape2_predicts_pinned"] == pytest.approx(0.5)
    assert numbers["d_far"] == 4 and sentences["d_rope2_vs_ape2"] == "higher"
    assert sentences["d_rope2_vs_rope1"] == "no clear difference"


def test_encodings_report_and_listing() -> None:
    rows = [_record(s, [1.0, 0.5, 0.25], encoding=enc, offset=k) for enc in ("rope", "alibi") for k in (1, 2)
            for s in range(2)]
    lines, table, numbers = page.encodings_report(frame(rows), [1, 2, 4])
    assert list(lines) == ["K=1", "K=2"] and list(lines["K=1"]) == ["rope", "alibi"]
    assert table[0] == ["rope", "1", "1.000 ± 0.000", "0.500 ± 0.000", "0.250 ± 0.000"]
    assert set(numbers) == {f"e_{e}_K{k}_{m}x" for e, k in (("alibi", 1), ("alibi", 2), ("rope", 2)) for m in (1, 2, 4)}
    listing = page.accuracy_listing(frame(rows), {"rope K=1": dict(encoding="rope", offset=1)}, [1, 4], width=10)
    assert listing.splitlines() == ["                1x      4x", "rope K=1     1.000   0.250"]
