"""APE pinning and attention by layer, on small trained models."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import Config, ConfigError, evaluate, evaluate_length, train
from lengthgen.model import Model
from lengthgen.pinning import (
    beyond_training, length_spike, measure, measure_lengths, pinned_index, summary_frame, table_norms,
)

APE = Config(encoding="ape", vocab=8, dim=32, train_length=16, steps=150, batch=128)


@pytest.fixture(scope="module")
def ape():
    return train(APE, seeds=[0, 1, 2], progress=False)


def test_ape_pins_the_absolute_position(ape) -> None:
    """Measured (3 seeds, 1000 samples): at L=16 argmax on the pinned = target position 0.96, accuracy 1.0;
    at L=32 argmax at the pinned position 0.43 against 0.004 at the target, predictions equal to the pinned
    token 0.49 against accuracy 0.13 (chance 0.125)."""
    results = measure_lengths(ape, [16, 32], samples=1000)
    at_train, longer = results[16], results[32]
    assert at_train.pinned == at_train.target_index == pinned_index(APE) == 13
    assert at_train.summary()["argmax_at_pinned"] >= 0.9 and at_train.accuracy.mean() >= 0.95
    s = longer.summary()
    assert s["argmax_at_pinned"] >= 0.3 and s["argmax_at_target"] <= 0.05
    assert s["weight_at_pinned"] >= 5 * s["weight_at_target"]
    assert s["predicts_pinned_token"] >= 0.35 and s["accuracy"] <= 0.2


def test_measure_agrees_with_evaluate(ape) -> None:
    mine, theirs = measure(ape, 32, samples=300, seed=4), evaluate_length(ape, 32, samples=300, seed=4)
    last = mine.layers[-1]
    assert np.array_equal(last.argmax_counts, theirs.argmax_counts)
    assert np.allclose(last.target_weight, theirs.target_weight, atol=1e-6)
    assert np.allclose(mine.accuracy, theirs.accuracy)
    assert np.allclose(last.share_at(mine.target_index), theirs.argmax_at_target)


def test_untrained_rows_never_move(ape) -> None:
    norms = table_norms(ape.model, APE.train_length)
    assert (norms.moved_untrained == 0).all() and (norms.moved_trained > 0).all()
    assert ((norms.trained > 0) & (norms.untrained > 0)).all()


def test_two_layers_report_every_layer() -> None:
    c = Config(vocab=8, dim=16, train_length=16, layers=2, steps=60, batch=128)
    result = measure(train(c, seeds=[0, 1], progress=False), 24, samples=200)
    assert len(result.layers) == 2
    for layer in result.layers:
        assert (layer.argmax_counts.sum(1) == 200).all()
        assert ((layer.target_weight >= 0) & (layer.target_weight <= 1)).all()
    assert set(result.summary(0)) == set(result.summary(1))


def test_bad_input_says_what_to_change(ape) -> None:
    with pytest.raises(ConfigError, match="encoding='ape'"):
        table_norms(Model(APE.replace(encoding="rope"), seeds=[0]), 16)
    with pytest.raises(ConfigError, match="length"):
        measure_lengths(ape, [16, 5000])
    with pytest.raises(ConfigError, match="max_length"):
        table_norms(ape.model, 5000)


def test_beyond_training_and_summary_frame(ape) -> None:
    pins = measure_lengths(ape, [8, 16, 32, 64], samples=300)
    out = beyond_training(pins, 16)
    assert out["pinned_T"] == pins[16].summary()["argmax_at_pinned"] >= 0.9
    longer = [pins[32].summary(), pins[64].summary()]
    assert out["pinned_longer_mean"] == pytest.approx(np.mean([s["argmax_at_pinned"] for s in longer]))
    assert out["target_longer_mean"] == pytest.approx(np.mean([s["argmax_at_target"] for s in longer]))
    assert out["predicts_pinned_longer"] == pytest.approx(np.mean([s["predicts_pinned_token"] for s in longer]))
    assert out["pinned_longer_max"] >= out["pinned_longer_mean"] > 5 * out["uniform_share"]
    assert out["uniform_share"] == pytest.approx((1 / 32 + 1 / 64) / 2)
    with pytest.raises(ValueError, match="at least one longer length"):
        beyond_training({16: pins[16]}, 16)
    frame = summary_frame({"a": pins, "b": {16: pins[16]}})
    assert list(frame.index) == [("a", 8), ("a", 16), ("a", 32), ("a", 64), ("b", 16)]
    assert frame.loc[("a", 32), "argmax at x_(T-K)"] == pytest.approx(longer[0]["argmax_at_pinned"])
    assert np.isnan(frame.loc[("a", 8), "argmax at x_(T-K)"])  # L=8 has no position T-K=14


def test_length_spike_at_the_training_length(ape) -> None:
    ev = evaluate(ape, [12, 16, 20], samples=300)
    out = length_spike(ev, 16)
    acc = ev.accuracy()
    assert out["acc_T"] == pytest.approx(float(acc[1].mean())) and out["acc_T"] >= 0.95
    assert out["acc_others_max"] == pytest.approx(float(acc[[0, 2]].max())) and out["acc_others_max"] < 0.5
    assert out["acc_others_mean"] == pytest.approx(float(acc[[0, 2]].mean()))
    with pytest.raises(ValueError, match="train_length=10"):
        length_spike(ev, 10)
