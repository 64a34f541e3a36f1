"""The carrier kernel: exact against measured logits, its pair spectrum, hand-built aliasing, margins."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, train
from lengthgen.encodings import ENCODINGS, TRAITS, rope_rotate
from lengthgen.kernel import (
    aliased_peaks,
    carrier_kernel,
    logit_matrix,
    pair_spectrum,
    predicted_failure_length,
    rank_one_share,
    seed_agreement,
    singular_values,
    target_margin,
)
from lengthgen.model import Model
from lengthgen.task import eval_tokens

SMALL = Config(vocab=8, dim=16, train_length=16, steps=150, batch=128)


@pytest.fixture(scope="module")
def rope():
    return train(SMALL, seeds=[0, 1, 2], progress=False)


def logits_at(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """First-layer logits of the last query over every key, measured on token sequences: (S, B, L)."""
    q_pos = torch.tensor([tokens.shape[-1] - 1])
    return model.layers[0].scores(model.inputs(tokens), model.encoding, q_pos)[:, :, 0]


@pytest.mark.parametrize("encoding", ["rope", "ape", "alibi", "sinusoidal", "nope"])
def test_kernel_equals_mean_logit_over_every_token_pair(encoding: str) -> None:
    """c(delta) = the logit averaged over all V^2 (query, key) token pairs at that offset, to float64 precision."""
    c = Config(encoding=encoding, vocab=5, dim=8, train_length=12, max_length=64)
    model = Model(c, seeds=[3, 4]).double()
    L, V = 20, c.vocab
    background = eval_tokens(c, L, 1, seed=1)[0]
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (V^2, 2): (query token, key token)
    deltas = torch.tensor([-1, -2, -7, -19])
    for delta in deltas.tolist():
        tokens = background.repeat(V * V, 1)
        tokens[:, -1], tokens[:, L - 1 + delta] = pairs[:, 0], pairs[:, 1]
        measured = logits_at(model, tokens)[:, :, L - 1 + delta].mean(1)
        kernel = carrier_kernel(model, [delta], length=L)[:, 0]
        assert torch.allclose(kernel, measured, atol=1e-12, rtol=0)


def test_kernel_matches_the_mean_logit_on_random_samples(rope) -> None:
    """On held-out i.i.d. sequences the mean logit at each offset lies within 5 standard errors of c(delta)."""
    L = 48
    with torch.no_grad():
        scores = logits_at(rope.model, eval_tokens(SMALL, L, 20000, seed=5))[..., :-1]  # (S, B, L-1), delta < 0
    mean, sem = scores.mean(1), scores.std(1) / math.sqrt(scores.shape[1])
    kernel = carrier_kernel(rope.model, torch.arange(-(L - 1), 0))
    assert ((kernel - mean).abs() < 5 * sem + 1e-6).all()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_translation_invariant_trait_says_whether_the_kernel_depends_on_the_length(encoding: str) -> None:
    """encodings.TRAITS: a translation-invariant encoding has one kernel for every length; the others do not."""
    model = Model(Config(encoding=encoding, vocab=5, dim=8, train_length=12, max_length=64), seeds=[3]).double()
    deltas = -torch.arange(20)
    same = torch.allclose(carrier_kernel(model, deltas, length=20), carrier_kernel(model, deltas, length=50),
                          atol=1e-12, rtol=0)
    assert same == TRAITS[encoding].translation_invariant


def test_rope_kernel_is_the_same_at_every_length(rope) -> None:
    deltas = -torch.arange(40)
    assert torch.allclose(carrier_kernel(rope.model, deltas), carrier_kernel(rope.model, deltas, length=300), atol=1e-5)


def test_pair_spectrum_rebuilds_the_kernel_far_beyond_the_window(rope) -> None:
    model = copy.deepcopy(rope.model).double()
    spec = pair_spectrum(model)
    deltas = np.array([0, -1, -2, -15, -16, -100, -999, -4000])
    exact = carrier_kernel(model, torch.as_tensor(deltas)).numpy()
    assert np.allclose(spec.kernel(deltas), exact, atol=1e-9)
    top = np.stack([spec.energy_top[k] for k in (1, 2, 4)])
    assert (np.diff(top, axis=0) >= 0).all() and (top > 0).all() and (top <= 1 + 1e-12).all()
    assert ((spec.participation >= 1) & (spec.participation <= SMALL.dim // 2)).all()
    assert ((spec.position_share >= 0) & (spec.position_share <= 1)).all()


def test_logit_matrix_and_its_singular_values(rope) -> None:
    m = logit_matrix(rope.model, -SMALL.offset)
    tokens = eval_tokens(SMALL, 16, 1, seed=2).repeat(SMALL.vocab**2, 1)
    pairs = torch.cartesian_prod(torch.arange(SMALL.vocab), torch.arange(SMALL.vocab))
    tokens[:, -1], tokens[:, -1 - SMALL.offset] = pairs[:, 0], pairs[:, 1]
    with torch.no_grad():
        measured = logits_at(rope.model, tokens)[:, :, -1 - SMALL.offset].view(3, SMALL.vocab, SMALL.vocab)
    assert torch.allclose(m.float(), measured, atol=1e-5)
    sv = singular_values(rope.model, -SMALL.offset)
    share = rank_one_share(sv)
    assert (sv[:, :-1] >= sv[:, 1:] - 1e-9).all() and ((share > 0) & (share <= 1)).all()


def one_tone_model(period: float, offset: int) -> Model:
    """d=4 RoPE with only pair 1 active (its period ``period`` positions), built so c peaks at delta = -K:
    c(delta) = A cos((delta + K) theta_1), A = |e|^2 / sqrt(d)."""
    d = 4
    base = (period / (2 * math.pi)) ** (d / 2)  # theta_1 = base^(-2/d) = 2 pi / period
    c = Config(encoding="rope", vocab=3, dim=d, train_length=12, offset=offset, rope_base=base)
    model = Model(c, seeds=[0]).double()
    with torch.no_grad():
        model.embed.zero_()
        model.embed[:, :, 2] = 1.0  # every token: pair 1 = (1, 0), pair 0 = 0
        model.layers[0].wq.copy_(torch.eye(d, dtype=torch.float64))
        # keys pre-rotated by K positions: the logit at key delta equals the untouched one at delta + K
        model.layers[0].wk.copy_(rope_rotate(torch.eye(d, dtype=torch.float64), torch.full((d,), offset), base))
    return model


def test_one_tone_kernel_aliases_every_period() -> None:
    period, K, L_train = 10.0, 3, 12
    model = one_tone_model(period, K)
    amp = 1 / math.sqrt(4)
    kern = carrier_kernel(model, -torch.arange(60))[0].numpy()
    assert np.allclose(kern, amp * np.cos((-np.arange(60) + K) * 2 * math.pi / period), atol=1e-12)
    peaks = aliased_peaks(model, K, L_train, max_delta=59, margin=1e-6)[0]
    assert [p.delta for p in peaks] == [-13, -23, -33, -43, -53]
    for n, p in enumerate(peaks, start=1):
        why = p.pairs[0]
        assert why["pair"] == 1 and why["period"] == pytest.approx(period)
        assert why["turns"] == pytest.approx(-n) and abs(why["mismatch"]) < 1e-9
    margin = target_margin(model, K, L_train, max_delta=59)
    assert margin.in_window[0] == pytest.approx(amp * (1 - math.cos(2 * math.pi / period)), abs=1e-12)
    assert abs(margin.beyond[0]) < 1e-12  # the first alias ties with the target
    off_grid = one_tone_model(10.3, K)  # no whole number of periods fits below delta = -60: no alias reaches c(-K)
    assert predicted_failure_length(off_grid, K, L_train, 61) == [None]
    assert target_margin(off_grid, K, L_train, 60).beyond[0] > 0


def test_failure_length_agrees_with_the_beyond_window_margin(rope) -> None:
    """Failure at L means: no beyond-window offset reached c(-K) up to L-1, one does at L."""
    max_length = 400
    failure = predicted_failure_length(rope.model, SMALL.offset, SMALL.train_length, max_length)
    for s, L in enumerate(failure):
        if L is None:
            assert target_margin(rope.model, SMALL.offset, SMALL.train_length, max_length - 1).beyond[s] > 0
        else:
            assert target_margin(rope.model, SMALL.offset, SMALL.train_length, L - 1).beyond[s] <= 0
            if L - 2 >= SMALL.train_length:
                assert target_margin(rope.model, SMALL.offset, SMALL.train_length, L - 2).beyond[s] > 0


def test_ape_failure_length_uses_the_kernel_at_each_length() -> None:
    c = SMALL.replace(encoding="ape", max_length=64)
    model = Model(c, seeds=[0, 1])
    failure = predicted_failure_length(model, c.offset, c.train_length, 64)
    for s, L in enumerate(failure):
        assert L is not None  # an untrained table has no reason to favour the offset
        kern = carrier_kernel(model, -torch.arange(L), length=L)[s]
        assert kern[c.train_length :].max() >= kern[c.offset]


def test_bad_input_says_what_to_change(rope) -> None:
    with pytest.raises(ConfigError, match="layer=0"):
        carrier_kernel(rope.model, [-1], layer=1)
    with pytest.raises(ConfigError, match="<= 0"):
        carrier_kernel(rope.model, [3])
    with pytest.raises(ConfigError, match="length >= 11"):
        carrier_kernel(rope.model, [-10], length=5)
    with pytest.raises(ConfigError, match="RoPE only"):
        pair_spectrum(Model(SMALL.replace(encoding="ape"), seeds=[0]))
    with pytest.raises(ConfigError, match="margin >= 0"):
        aliased_peaks(rope.model, 2, 16, 100, margin=-1)


def test_seed_agreement_ignores_offsets_and_scale_but_not_shape() -> None:
    x = np.cos(np.arange(50) * 0.7)
    same = np.stack([x, 3 * x + 5, -x])  # a shifted and scaled copy, and the mirror image
    assert np.allclose(seed_agreement(same), [1.0, -1.0, -1.0])
    rng = np.random.default_rng(0)
    noise = seed_agreement(rng.normal(size=(4, 2000)))
    assert noise.shape == (6,) and np.abs(noise).max() < 0.1
    with pytest.raises(ConfigError, match="S >= 2"):
        seed_agreement(x[None])


def test_reach_envelope_is_the_running_best_rival_over_the_in_window_margin() -> None:
    from lengthgen.kernel import reach_envelope

    kern = np.array([0.0, 5.0, 1.0, 2.0, 3.0, 6.0, 4.0])  # target at offset 1, window of 4 offsets
    env = reach_envelope(kern, offset=1, train_length=4)
    # rel = kern - 5; in-window margin = 5 - max(0, 1, 2) = 3; the target itself is skipped
    np.testing.assert_allclose(env, np.array([-5, -5, -4, -3, -2, 1, 1]) / 3)
    assert env[5] > 0  # offset 5 (beyond the window) outscores the target
