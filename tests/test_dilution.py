"""The attention-dilution laws: hand-set kernels with known curves, the exact content average, and the
laws against measurements on a small trained RoPE model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, train
from lengthgen.dilution import (
    MeanField,
    compare_laws,
    content_law,
    exact_target_weight,
    fit_rho,
    gaussian_accuracy,
    kernel_law,
    kernel_law_from_values,
    mean_field,
    mean_field_law,
    pooled,
    predict_accuracy,
    r_squared,
    simple_law,
    value_readout,
)
from lengthgen.kernel import logit_table
from lengthgen.model import Model
from lengthgen.task import eval_tokens

SMALL = Config(vocab=8, dim=16, train_length=16, steps=150, batch=128)
LENGTHS = [16, 32, 64, 128]


@pytest.fixture(scope="module")
def trained():
    return train(SMALL, seeds=[0, 1, 2], progress=False)


@pytest.fixture(scope="module")
def comparison(trained):
    return compare_laws(trained, LENGTHS, samples=1000)


def test_a_kernel_with_one_margin_gives_the_simple_law() -> None:
    """c(-K) = m and 0 elsewhere: alpha(L) = e^m / (e^m + L - 1) = 1 / (1 + (L-1) e^-m)."""
    margins, K, lengths = np.array([0.0, 1.5, 4.0]), 3, [4, 10, 100, 1000]
    kern = np.zeros((3, 1000))
    kern[:, K] = margins
    assert np.allclose(kernel_law_from_values(kern, K, lengths), simple_law(np.exp(-margins), lengths), atol=1e-12)
    alpha = simple_law(np.array([0.2, 0.05]), [17])[0]
    assert np.allclose(fit_rho(alpha, 17), [0.2, 0.05])


def test_exact_target_weight_against_enumerating_every_background() -> None:
    """V=2 tokens, 6 keys: average the softmax over all 2^4 backgrounds by brute force."""
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(2, 2, 2, 6, generator=gen, dtype=torch.float64) * 2  # (S, A, B, J)
    self_logit = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    tpos = 3
    keys = [j for j in range(6) if j != tpos]
    exact = torch.zeros(2, 2, 2, dtype=torch.float64)
    for background in itertools.product(range(2), repeat=len(keys)):
        for t in range(2):
            logits = torch.cat([table[:, :, list(background), keys], table[:, :, t, tpos, None],
                                self_logit[..., None]], -1)
            exact[:, :, t] += logits.softmax(-1)[..., -2] / 2 ** len(keys)
    assert torch.allclose(exact_target_weight(table, self_logit, tpos), exact, atol=1e-9, rtol=0)


def test_readout_tables_rebuild_the_model_output() -> None:
    """sum_j a_j u(x_j, j) + r(x_q), with a the softmax of the logit table, equals the model's logits."""
    c = SMALL.replace(encoding="ape", max_length=40)
    model = Model(c, seeds=[0, 1]).double()
    L = 24
    tokens = eval_tokens(c, L, 5, seed=1)
    table, self_logit = logit_table(model, L)
    u, r = value_readout(model, L)
    for b, x in enumerate(tokens):
        logits = torch.cat([table[:, x[-1], x[:-1], torch.arange(L - 1)], self_logit[:, x[-1], None]], -1)
        a = logits.softmax(-1)  # (S, L)
        predicted = torch.einsum("sj,sjv->sv", a, u[:, x, torch.arange(L)]) + r[:, x[-1]]
        with torch.no_grad():
            assert torch.allclose(predicted, model(x[None]).logits[:, 0].double(), atol=1e-9)


def test_gaussian_accuracy_without_noise_counts_the_winning_pairs() -> None:
    V = 3
    mean = torch.zeros(1, V, V, V, dtype=torch.float64)
    mean[0, :, :, 0] = 1.0  # token 0 always wins: correct only when the target is 0
    none = torch.zeros(1, V, V)
    mf = MeanField(10, none, none, mean, torch.zeros(1, V, V, V, V, dtype=torch.float64))
    assert gaussian_accuracy(mf, draws=16)[0] == pytest.approx(1 / V)


def test_mean_field_target_weight_is_first_order_of_the_exact_one(comparison) -> None:
    """With many keys the background sum concentrates: the mean field meets the exact content law."""
    model = Model(SMALL, seeds=[0])
    L = 400
    table, self_logit = logit_table(model, L)
    exact = exact_target_weight(table, self_logit, L - 1 - SMALL.offset)
    field = mean_field(model, L)
    assert torch.equal(field.alpha, exact)
    assert torch.allclose(field.alpha_first_order, exact, rtol=0.01)
    assert (field.alpha_first_order <= exact + 1e-12).all()  # Jensen: E[1/D] >= 1/E[D]


def test_laws_against_measurement_on_a_small_rope_model(comparison) -> None:
    """Measured on this config (3 seeds x lengths 16..128): R^2 content law 0.999, mean field 0.958,
    kernel law (mean vectors) 0.31, simple law -0.03; accuracy mean abs error 0.015, worst 0.077
    (seed 1 at L=32, where one aliased offset holds much of the weight and the Gaussian read-out is rough)."""
    assert comparison.r2("content") >= 0.99
    assert comparison.r2("mean_field") >= 0.93
    assert comparison.r2("content") > comparison.r2("kernel") > comparison.r2("simple")
    mae, worst = comparison.accuracy_error()
    assert mae <= 0.03 and worst <= 0.12
    summary = pooled([comparison])
    assert summary["r2"]["content"] == pytest.approx(comparison.r2("content"))
    assert summary["points"] == len(LENGTHS) * 3


def test_weights_only_predictions_match_the_comparison(trained, comparison) -> None:
    """The laws need no measurement: the stand-alone functions give the comparison's numbers."""
    model, rows, lengths = trained.model, [0, 2], [LENGTHS[0], LENGTHS[2]]
    assert np.allclose(content_law(model, lengths), comparison.predicted_weight["content"][rows])
    assert np.allclose(mean_field_law(model, lengths), comparison.predicted_weight["mean_field"][rows])
    assert np.allclose(kernel_law(model, lengths), comparison.predicted_weight["kernel"][rows])
    assert np.allclose(predict_accuracy(model, lengths), comparison.predicted_accuracy[rows])


def test_r_squared() -> None:
    m = np.array([0.1, 0.5, 0.9])
    assert r_squared(m, m) == 1.0
    assert r_squared(np.full(3, m.mean()), m) == pytest.approx(0.0)
    assert math.isnan(r_squared(m, np.ones(3)))


def test_bad_input_says_what_to_change() -> None:
    two = Model(SMALL.replace(layers=2), seeds=[0])
    with pytest.raises(ConfigError, match="layers=1"):
        mean_field(two, 32)
    with pytest.raises(ConfigError, match="the longest length needs 50"):
        kernel_law_from_values(np.zeros((1, 20)), 2, [50])
    with pytest.raises(ConfigError, match="at least 2"):
        fit_rho(np.array([0.5]), 1)
