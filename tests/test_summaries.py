"""The numbers chapters cite, computed in the package: accuracy by multiple of the training length, how training
ended and the worst seed against the best (lengthgen.evaluate), the recipes' accuracy table (plots.accuracy_table)
and what the playground chapter states about its grid (lengthgen.chapters.ch07_playground)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lengthgen as lg
from lengthgen import playground, plots
from lengthgen.chapters import ch07_playground
from lengthgen.evaluate import Evaluation, LengthResult, evaluate, fit_summary, mean_attention_map, seed_contrast
from lengthgen.playground import PlaygroundGrid

TINY = lg.Config(vocab=8, dim=16, train_length=8, offset=2, batch=64, steps=60)


def evaluation(acc: dict[int, list[float]]) -> Evaluation:
    """An Evaluation with the given per-seed accuracy at each length (other fields zero)."""
    by_length = {L: LengthResult(L, 2, np.array(a, np.float32), np.zeros(len(a), np.float32), np.zeros((len(a), L)))
                 for L, a in acc.items()}
    return Evaluation([0, 1, 2], 0.125, 10, by_length)


def test_summary_by_multiple_and_far() -> None:
    ev = evaluation({8: [1.0, 0.9, 0.8], 16: [0.5, 0.7, 0.6], 32: [0.1, 0.3, 0.2]})
    s = ev.summary(8)
    assert s["1x"] == pytest.approx(0.9) and s["1x_min"] == pytest.approx(0.8) and s["1x_max"] == 1.0
    assert s["2x_min"] == pytest.approx(0.5) and s["2x_max"] == pytest.approx(0.7)
    assert (s["far"], s["far_min"], s["far_max"]) == (s["4x"], s["4x_min"], s["4x_max"])
    assert s["far"] == pytest.approx(0.2)
    assert set(s) == {f"{m}x{t}" for m in (1, 2, 4) for t in ("", "_min", "_max")} | {"far", "far_min", "far_max"}
    assert ev.describe(8) == "1x 0.900  2x 0.600  4x 0.200"
    with pytest.raises(ValueError, match="not multiples of train_length=5"):
        ev.summary(5)


def test_seed_contrast_picks_the_worst_and_best_seed() -> None:
    acc = np.array([0.6, 0.9, 0.3], np.float32)
    out = seed_contrast(acc, np.array([0.5, 0.8, 0.2]), np.array([0.1, 0.0, 0.4]), np.array([0.05, 0.0, 0.3]))
    assert (out["worst_seed"], out["best_seed"]) == (2, 1)
    assert out["spread"] == pytest.approx(0.6)
    assert out["worst_acc"] == pytest.approx(0.3) and out["best_target_weight"] == pytest.approx(0.8)
    assert out["worst_beyond_weight"] == pytest.approx(0.4) and out["best_beyond_argmax"] == 0.0
    assert out["beyond_mean"] == pytest.approx(0.5 / 3) and out["beyond_max"] == pytest.approx(0.4)
    assert out["argmax_beyond_max"] == pytest.approx(0.3)


@pytest.fixture(scope="module")
def tiny() -> lg.Trained:
    return lg.train(TINY, seeds=[0, 1], progress=False)


def test_fit_summary_reads_the_last_step(tiny: lg.Trained) -> None:
    out = fit_summary(tiny, TINY.target_accuracy)
    final = tiny.accuracy[tiny.steps - 1, [0, 1]]
    assert (out["steps_min"], out["steps_max"]) == (int(tiny.steps.min()), int(tiny.steps.max()))
    assert out["final_min"] == pytest.approx(float(final.min()))
    assert out["reached"] == int((final >= TINY.target_accuracy).sum())
    assert fit_summary(tiny, 0.0)["reached"] == 2 and fit_summary(tiny, 1.01)["reached"] == 0


def test_mean_attention_map_is_causal_and_matches_the_last_row(tiny: lg.Trained) -> None:
    m = mean_attention_map(tiny, 16, 20, member=1)
    assert m.shape == (16, 16)
    np.testing.assert_allclose(m.sum(1), 1.0, atol=1e-5)  # each query's attention sums to one
    assert np.abs(np.triu(m, 1)).max() == 0.0  # no weight on future keys
    tokens = lg.eval_tokens(TINY, 16, 20, seed=0)
    with torch.no_grad():
        last = tiny.model(tokens, full=True).attentions[-1][1, :, -1].mean(0).numpy()
    np.testing.assert_allclose(m[-1], last, atol=1e-6)


def test_accuracy_table_rows_and_cells(tiny: lg.Trained) -> None:
    ev = evaluate(tiny, [8, 16], samples=20)
    table = plots.accuracy_table({("rope", "first fit"): ev, ("ape", "small steps"): ev}, 8).data
    lines = table.splitlines()
    assert lines[0] == "| encoding | recipe | 1x | 2x |" and len(lines) == 4
    s = ev.summary(8)
    assert lines[2] == (f"| {plots.LABELS['rope']} | first fit | {s['1x']:.3f} (worst {s['1x_min']:.3f}) | "
                        f"{s['2x']:.3f} (worst {s['2x_min']:.3f}) |")
    with pytest.raises(ValueError, match="not evaluated at every multiple"):
        plots.accuracy_table({("rope", "a"): ev, ("rope", "b"): evaluate(tiny, [8], samples=20)}, 8)


def synthetic_grid() -> PlaygroundGrid:
    """Two recipes, T in (4, 8), K in (1, 2), RoPE and APE, two seeds, multiples 1, 2, 4; every RoPE profile
    peaks on the target except one point, every APE profile on x_(T-K)."""
    Ts, Ks, S = [4, 8], [1, 2], 2
    acc = np.zeros((2, 2, 2, 2, 3, S), np.float32)
    acc[..., 0, :] = 1.0
    acc[:, :, :, 0, 1, :] = 0.9  # RoPE at 2x
    acc[1, 0, 1, 0, 1, :] = [0.6, 0.8]  # one low point in the second recipe
    acc[:, :, :, 0, 2, :] = 0.5  # RoPE at 4x
    acc[:, :, :, 1, 1:, :] = 0.15  # APE past 1x
    acc[0, 1, 0, 1, 2, :] = [0.2, 0.3]
    profiles = {}
    for T in Ts:
        p = np.zeros((2, 2, 2, S, 2 * T), np.float32)
        for k, K in enumerate(Ks):
            p[:, k, 0, :, 2 * T - 1 - K] = 1.0  # RoPE: K back
            p[:, k, 1, :, T - 1 - K] = 1.0  # APE: x_(T-K)
        profiles[T] = p
    profiles[8][1, 0, 0] = 0.0
    profiles[8][1, 0, 0, :, 3] = 1.0  # RoPE misses the target at (recipe 1, T=8, K=1)
    return PlaygroundGrid({"fast": "Adam, lr 0.01", "slow": "Adam, lr 0.001"}, Ts, Ks, ["rope", "ape"], [0, 1],
                          [1, 2, 4], 50, 2, 20, 0.125, acc, np.ones((2, 2, 2, 2, S), np.int32), profiles, {}, 12.4)


def test_playground_describe_and_reading() -> None:
    grid = synthetic_grid()
    d = ch07_playground.describe(grid)
    assert d == {"n_T": 2, "n_K": 2, "train_lengths": "4, 8", "offsets": "1, 2", "multiples": "1x, 2x, 4x",
                 "seeds": "0, 1", "n_seeds": 2, "samples": 50, "n_models": 32, "grid_seconds": 12, "chance": 0.125,
                 "recipe_0_name": "fast", "recipe_0": "Adam, lr 0.01", "recipe_1_name": "slow",
                 "recipe_1": "Adam, lr 0.001"}
    r = ch07_playground.reading(grid)
    assert (r["n_points"], r["rope_at_target"], r["ape_at_pinned"]) == (8, 7, 8)
    assert r["ape_beyond_max"] == pytest.approx(0.25) and r["far"] == "4x"
    assert r["rope_2x_min_0"] == pytest.approx(0.9) and r["rope_2x_min_1"] == pytest.approx(0.7)
    assert r["rope_far_0"] == pytest.approx(0.5) and r["rope_far_1"] == pytest.approx(0.5)
    no_ape = synthetic_grid()
    no_ape.encodings = ["rope", "nope"]
    with pytest.raises(ValueError, match="no 'ape' models"):
        ch07_playground.reading(no_ape)
