"""Chapter 4's statistics over many trained kernels: each summary against the measurements it is taken from."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from lengthgen import Config, evaluate, kernel, kernel_study, train
from lengthgen.analyze import ALIAS_MARGIN
from lengthgen.chapters import ch04_carrier_kernel as page
from lengthgen.kernel_study import KernelRun

SMALL = Config(vocab=8, dim=16, train_length=16, steps=150, batch=128)
MULTIPLES = [1, 2, 4]
REACH = MULTIPLES[-1] * SMALL.train_length


def measure(c: Config) -> KernelRun:
    """What chapter 4 measures of one ensemble (three seeds)."""
    trained = train(c, seeds=[0, 1, 2], progress=False)
    model, T, k = trained.model, c.train_length, c.offset
    spectrum = kernel.pair_spectrum(model)
    return KernelRun(
        trained=trained,
        evaluation=evaluate(trained, [m * T for m in MULTIPLES], samples=100),
        kern=kernel.carrier_kernel(model, -torch.arange(REACH)).double().numpy(),
        spectrum=spectrum,
        pairs=spectrum.pair_kernel(-np.arange(REACH)),
        margin=kernel.target_margin(model, k, T, REACH - 1),
        peaks=kernel.aliased_peaks(model, k, T, REACH - 1, ALIAS_MARGIN),
        failure=kernel.predicted_failure_length(model, k, T, REACH),
        sv=kernel.singular_values(model, -k).numpy(),
    )


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, int], KernelRun]:
    short = SMALL.replace(steps=60, target_accuracy=None)
    return {("long", 2): measure(SMALL), ("long", 4): measure(SMALL.replace(offset=4)), ("short", 2): measure(short)}


def test_learned_is_a_clear_peak_and_the_peak_summary_counts_it(runs) -> None:
    r = runs["long", 2]
    assert np.array_equal(r.learned, r.margin.in_window >= kernel_study.PEAK)
    fit = np.concatenate([runs["long", 2].learned, runs["long", 4].learned])
    assert fit.any(), "the test models should learn the task"
    s = page.peak_summary(runs, "long")
    assert s["n_models"] == 6 and s["n_peaked"] == int(fit.sum())
    margins = np.concatenate([runs["long", 2].margin.in_window, runs["long", 4].margin.in_window])
    assert s["in_margin_min"] == pytest.approx(margins[fit].min()) and s["in_margin_min"] >= kernel_study.PEAK
    assert all(type(v) in (int, float) for v in s.values())  # plain values: their glued text is not np.float64(...)


def test_unlearned_note_names_the_models_without_a_peak(runs) -> None:
    r = runs["long", 2]
    flat = dataclasses.replace(r, margin=dataclasses.replace(r.margin, in_window=np.array([5.0, 0.5, 5.0])))
    note = page.unlearned_note({("long", 2): flat})
    assert note.startswith("Without a peak: 1 long model(s)")
    assert f"{r.evaluation.accuracy()[0, 1]:.3f}" in note
    every = dataclasses.replace(r, margin=dataclasses.replace(r.margin, in_window=np.full(3, 5.0)))
    assert page.unlearned_note({("long", 2): every}).startswith("Every model")


def test_table_has_one_line_per_model(runs) -> None:
    lines = page.table(runs, MULTIPLES).splitlines()
    assert len(lines) == 1 + 3 * len(runs)
    assert lines[0].endswith("acc@2T  acc@4T") and lines[1].startswith("long         2    0")


def test_margin_by_length_and_its_summaries(runs) -> None:
    T = SMALL.train_length
    by_length = kernel_study.margin_by_length(runs, [2 * T, 4 * T])
    assert set(by_length) == {("long", 2 * T), ("long", 4 * T), ("short", 2 * T), ("short", 4 * T)}
    margin, acc, hover = by_length["long", 4 * T]
    assert margin.shape == acc.shape == (6,) and hover[3] == "K=4, seed 0"
    assert margin[3:] == pytest.approx(kernel.target_margin(runs["long", 4].trained.model, 4, T, 4 * T - 1).beyond)
    assert acc[:3] == pytest.approx(runs["long", 2].evaluation.by_length[4 * T].accuracy)
    s = page.beyond_summary(runs, by_length, "long")
    n_fit = int(np.concatenate([runs["long", 2].learned, runs["long", 4].learned]).sum())
    assert s["n_points"] == 2 * n_fit == s["n_pos_margin"] + s["n_neg_margin"]
    assert -1 <= s["agree_min"] <= s["agree_mean"] <= 1
    failures = [f for key in [("long", 2), ("long", 4)] for f, ok in zip(runs[key].failure, runs[key].learned)
                if ok and f is not None]
    assert s["n_fail"] == len(failures)
    assert not runs["short", 2].learned.any(), "60 steps should leave the short run without a peak"
    with pytest.raises(ValueError, match="no short model has a clear peak"):
        page.beyond_summary(runs, by_length, "short")
    corr = page.margin_correlation(runs, by_length)  # the short run's points do not count
    assert corr["n_points"] == s["n_points"] and -1 <= corr["corr_margin_acc"] <= 1
    assert page.unlearned_note(runs).startswith("Without a peak: 3 short model(s)")


def test_earliest_alias_is_the_first_offset_at_the_targets_level(runs) -> None:
    alias = page.earliest_alias(runs)
    r = runs[alias["recipe"], alias["K"]]
    s = r.seeds.index(alias["seed"])
    assert r.learned[s]
    assert alias["gap"] == pytest.approx(r.kern[s, alias["back"]] - r.kern[s, alias["K"]])
    assert alias["back"] >= SMALL.train_length and alias["length"] == alias["back"] + 1
    if r.failure[s] is not None:  # it reaches the target's level there, and no model does so earlier
        assert alias["gap"] >= 0 and alias["length"] == r.failure[s]
        assert all(f is None or f >= r.failure[s] for x in runs.values() for f, ok in zip(x.failure, x.learned) if ok)
    assert 0 <= alias["mismatch"] <= np.pi


def test_spectrum_and_rank_summaries(runs) -> None:
    s = page.spectrum_summary(runs, "long")
    assert s["top1_min"] <= s["top1_mean"] <= s["top2_mean"] <= s["top4_mean"] <= 1 + 1e-12
    periods = np.round(runs["long", 2].spectrum.period, 1)
    n_peaked = page.peak_summary(runs, "long")["n_peaked"]
    assert s["common_period"] in periods and s["common_period_count"].endswith(f"of {n_peaked}")
    rank = page.rank_summary(runs, "long")
    assert 0 <= rank["rank_one_rest"] <= 1 and 0 <= rank["position_min"] <= rank["position_max"] <= 1
    r = runs["long", 2]
    rank_one = dataclasses.replace(r, sv=np.tile([3.0] + [0.0] * (SMALL.vocab - 1), (3, 1)))
    assert page.rank_summary({("long", 2): rank_one}, "long")["rank_one_rest"] == 0.0


def test_figure_frames_and_an_unknown_recipe(runs) -> None:
    frames = page.kernel_frames(runs, drawn=2, shown=20)
    assert list(frames)[:2] == ["long, K=2, seed 0", "long, K=2, seed 1"] and len(frames) == 6
    kern, top, k, peaks = frames["long, K=4, seed 1"]
    assert kern.shape == top.shape == (20,) and k == 4 and all(p < 20 for p in peaks)
    shares = page.pair_shares(runs, drawn=1)
    assert all(v.sum() == pytest.approx(1.0) for v in shares.values())
    with pytest.raises(KeyError, match="no run with recipe 'other'"):
        page.peak_summary(runs, "other")
