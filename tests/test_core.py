"""Unit tests of the core package: task, RoPE, equivariance, APE gradients, determinism, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lengthgen import Config, ConfigError, evaluate, train
from lengthgen.__main__ import main
from lengthgen.encodings import rope_rotate
from lengthgen.model import Model, log_likelihood, log_likelihood_gradient
from lengthgen.task import TrainStream, eval_tokens, generator, targets


def reference_rope(x: torch.Tensor, positions: list[int], base: float) -> torch.Tensor:
    """Slow fp64 reference: an explicit 2x2 rotation matrix per frequency pair. x: (n, d)."""
    n, d = x.shape
    out = torch.empty_like(x, dtype=torch.float64)
    for i, m in enumerate(positions):
        for p in range(d // 2):
            angle = m * base ** (-2 * p / d)
            rot = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64)
            out[i, 2 * p : 2 * p + 2] = rot @ x[i, 2 * p : 2 * p + 2].double()
    return out


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_rope_matches_slow_reference(base: float) -> None:
    x = torch.randn(7, 8, generator=generator(1), dtype=torch.float64)
    positions = [0, 1, 2, 5, 31, 1000, 8191]
    fast = rope_rotate(x, torch.tensor(positions), base)
    assert torch.allclose(fast, reference_rope(x, positions, base), atol=1e-12, rtol=0)


def first_layer_scores(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """Pre-softmax first-layer logits of the last query over all keys: (S, B, L)."""
    h = model.inputs(tokens)
    q_pos = torch.tensor([tokens.shape[-1] - 1])
    return model.layers[0].scores(h, model.encoding, q_pos)[:, :, 0]


@pytest.mark.parametrize("prefix", [1, 17, 200])
def test_rope_logits_depend_on_offset_only(prefix: int) -> None:
    """Prepending tokens shifts every absolute position; RoPE logits at each offset stay put (fp64)."""
    c = Config(encoding="rope")
    model = Model(c, seeds=[0, 1]).double()
    x = eval_tokens(c, 32, 8, seed=3)
    pre = torch.randint(c.vocab, (8, prefix), generator=generator(4))
    short, long = first_layer_scores(model, x), first_layer_scores(model, torch.cat([pre, x], 1))
    assert (short - long[..., prefix:]).abs().max() < 1e-10


def test_ape_logits_change_under_a_shift() -> None:
    c = Config(encoding="ape")
    model = Model(c, seeds=[0]).double()
    x = eval_tokens(c, 32, 8, seed=3)
    pre = torch.randint(c.vocab, (8, 5), generator=generator(4))
    short, long = first_layer_scores(model, x), first_layer_scores(model, torch.cat([pre, x], 1))
    assert (short - long[..., 5:]).abs().max() > 1e-2


def test_untrained_ape_rows_get_exactly_zero_gradient() -> None:
    c = Config(encoding="ape", train_length=16, max_length=64)
    model = Model(c, seeds=[0, 1])
    tokens = TrainStream(c, [0, 1]).next()
    logits = model(tokens).logits
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets(tokens, c.offset).flatten()).backward()
    grad = model.encoding.table.grad
    assert torch.all(grad[:, 16:] == 0)
    assert torch.all(grad[:, :16].abs().sum(-1) > 0)


def test_untrained_ape_rows_stay_at_initial_values_after_training() -> None:
    c = Config(encoding="ape", train_length=16, max_length=64, steps=30, weight_decay=0.1, target_accuracy=None)
    before = Model(c, seeds=[0]).encoding.table.detach().clone()
    after = train(c, seeds=[0]).model.encoding.table.detach()
    assert torch.equal(before[:, 16:], after[:, 16:])
    assert not torch.equal(before[:, :16], after[:, :16])


def test_targets_are_the_token_k_back() -> None:
    tokens = torch.arange(10).repeat(3, 1)  # position i holds token i
    for k in (1, 2, 7):
        assert torch.equal(targets(tokens, k), torch.full((3,), 9 - k))


def test_sampling_is_uniform_and_seeded() -> None:
    c = Config(vocab=8)
    a, b = eval_tokens(c, 64, 500, seed=1), eval_tokens(c, 64, 500, seed=1)
    assert torch.equal(a, b)
    assert not torch.equal(a, eval_tokens(c, 64, 500, seed=2))
    freq = torch.bincount(a.flatten(), minlength=8).float() / a.numel()
    assert (freq - 1 / 8).abs().max() < 0.01
    assert c.chance == 1 / 8


def test_variable_length_training_draws_lengths_in_range() -> None:
    c = Config(min_train_length=10, train_length=20)
    stream = TrainStream(c, [0])
    lengths = {stream.next().shape[-1] for _ in range(60)}
    assert lengths <= set(range(10, 21)) and len(lengths) > 5


def test_training_is_deterministic() -> None:
    c = Config(steps=25, target_accuracy=None)
    runs = [train(c, seeds=[0, 1]) for _ in range(2)]
    assert (runs[0].loss == runs[1].loss).all()
    evals = [evaluate(r, [32, 64], samples=200).accuracy() for r in runs]
    assert (evals[0] == evals[1]).all()
    for p, q in zip(runs[0].model.parameters(), runs[1].model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("optimizer", ["adam", "gd", "ngd", "sign", "signum"])
def test_every_update_rule_trains_and_is_named(optimizer: str) -> None:
    c = Config(optimizer=optimizer, steps=3, target_accuracy=None, lr=1e-3)
    assert c.recipe().split(",")[0] in ("Adam", "GD", "normalised GD", "sign descent", "Signum (sign descent with momentum)")
    for gradient in ("tables", "autograd"):
        trained = train(c, seeds=[0], progress=False, gradient=gradient)
        assert trained.steps.tolist() == [3] and np.isfinite(trained.loss).all()


def test_float64_runs_the_model_and_its_history_in_float64() -> None:
    c = Config(dtype="float64", steps=5, target_accuracy=None)
    trained = train(c, seeds=[0], progress=False)
    assert all(p.dtype == torch.float64 for p in trained.model.parameters()) and trained.loss.dtype == np.float64
    start32, start64 = Model(c.replace(dtype="float32"), [0]), Model(c, [0])
    for a, b in zip(start32.parameters(), start64.parameters()):  # the same initial values in both dtypes
        assert torch.equal(a.double(), b)
    assert "float64" in c.recipe()


def test_a_fixed_training_set_is_drawn_once_and_used_whole() -> None:
    c = Config(train_set=12, batch=12, steps=4, target_accuracy=None)
    stream = TrainStream(c, [0, 1])
    first = stream.next()
    assert first.shape == (2, 12, c.train_length) and torch.equal(stream.next(), first)
    assert torch.equal(stream.next([1]), first[[1]]) and not torch.equal(first[0], first[1])
    fresh = TrainStream(c.replace(train_set=None), [0, 1])
    assert torch.equal(fresh.next(), first) and not torch.equal(fresh.next(), first)  # the set is the first batch
    assert "a fixed training set of 12 (full batch)" in c.recipe()


@pytest.mark.parametrize("gradient", ["tables", "autograd"])
def test_full_batch_gradient_descent_on_a_fixed_set_never_raises_the_loss(gradient: str) -> None:
    """A small gradient step on the same 64 sequences lowers their loss at every step (float64); fresh
    batches of 64 do not (their loss is measured on a new batch each time)."""
    c = Config(train_set=64, batch=64, optimizer="gd", lr=0.5, dtype="float64", steps=40, target_accuracy=None)
    fixed = train(c, [0, 1], progress=False, gradient=gradient)
    assert (np.diff(fixed.loss, axis=0) < 0).all() and (fixed.loss[-1] < fixed.loss[0] - 0.5).all()
    fresh = train(c.replace(train_set=None), [0, 1], progress=False, gradient=gradient)
    assert (np.diff(fresh.loss, axis=0) > 0).any()


@pytest.mark.parametrize("gap", [1e-12, 1e-30, 1e-200])
def test_loss_and_gradient_stay_exact_when_the_target_is_almost_certain(gap: float) -> None:
    """float64: a member whose target probability is within ``gap`` of 1 still gets a finite, non-zero loss
    and gradient, equal to the closed form (V-1) e^(-m) for logits m apart, and autograd agrees."""
    V, B = 16, 4
    margin = -math.log(gap / (V - 1))  # p_other = e^(-margin) / (1 + (V-1) e^(-margin)): 1 - p_t = gap
    logits = torch.zeros(2, B, V, dtype=torch.float64)
    target = torch.zeros(2, B, 1, dtype=torch.long)
    logits[0].scatter_(-1, target[0], margin)  # member 0: almost certain; member 1: uniform
    logits.requires_grad_(True)
    loglik = log_likelihood(logits, target)
    (auto,) = torch.autograd.grad(-loglik.sum(), logits)
    value, grad = log_likelihood_gradient(logits.detach(), target)
    assert torch.allclose(value, loglik.detach(), rtol=1e-14, atol=0)
    assert -value[0] == pytest.approx(math.log1p(gap / (1 - gap)), rel=1e-12) and -value[0] > 0
    assert torch.isfinite(grad).all() and grad[0, 0, 0] < 0 and grad[0, 0, 1] > 0
    assert float(grad[0, 0, 0]) == pytest.approx(-gap / B, rel=1e-12)
    assert float(grad[0, 0, 1:].sum()) == pytest.approx(gap / B, rel=1e-12)
    assert -value[1] == pytest.approx(math.log(V), rel=1e-14)
    assert torch.allclose(auto, grad, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(offset=0), "offset"),
        (dict(offset=32), "below the shortest training length"),
        (dict(offset=40), "lower the offset"),
        (dict(train_length=0), "at least 1"),
        (dict(vocab=1), "vocab"),
        (dict(encoding="xpos"), "unknown encoding"),
        (dict(min_train_length=2, offset=2), "below the shortest"),
        (dict(dim=7), "even"),
        (dict(optimizer="sgd"), "use one of adam, gd, ngd, sign, signum"),
        (dict(dtype="float16"), "use one of float32, float64"),
        (dict(train_set=64), "set batch=64 too"),
        (dict(train_set=0), "at least 1 sequence"),
        (dict(train_set=8, batch=8, min_train_length=16), "set min_train_length=None"),
        (dict(train_set=8.0, batch=8), "whole number"),
    ],
)
def test_bad_config_says_what_to_change(changes: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Config(**changes)


def test_bad_eval_lengths_say_what_to_change() -> None:
    trained = train(Config(encoding="ape", max_length=64, steps=2), seeds=[0])
    with pytest.raises(ConfigError, match="past the APE table"):
        evaluate(trained, [32, 128])
    with pytest.raises(ConfigError, match="at least 1"):
        evaluate(trained, [0])


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", "--offset", "0"], "offset"),
        (["train", "--train-length", "0"], "length"),
        (["train", "--vocab", "1"], "vocab"),
        (["train", "--encoding", "learned"], "unknown encoding"),
        (["train", "--encoding", "ape", "--max-length", "64", "--eval-lengths", "32,128"], "APE table"),
        (["train", "--eval-lengths", "32,abc"], "comma-separated"),
        (["train", "--train-set", "16", "--batch", "8"], "set batch=16 too"),
        (["train", "--dtype", "float16"], "unknown dtype"),
        (["train", "--optimizer", "sgd"], "use one of adam, gd, ngd, sign, signum"),
    ],
)
def test_cli_bad_input_is_a_clear_error_not_a_traceback(argv, words, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and "Traceback" not in err


def test_cli_flags_reach_the_config(capsys) -> None:
    """--train-set sets the batch too (full batch); --dtype and --optimizer pass through."""
    argv = ["train", "--train-set", "24", "--dtype", "float64", "--optimizer", "signum", "--steps", "3",
            "--seeds", "1", "--eval-lengths", "32", "--samples", "10", "--json"]
    assert main(argv) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["train_set"], config["batch"], config["dtype"], config["optimizer"]) == (24, 24, "float64", "signum")


def test_cli_train_json_contract(capsys) -> None:
    argv = ["train", "--encoding", "ape", "--seeds", "2", "--steps", "40", "--eval-lengths", "32,64", "--samples", "100", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"config", "chance", "accuracy", "accuracy_per_seed", "target_attention"} <= set(report)
    assert report["config"]["encoding"] == "ape" and report["chance"] == 1 / 16
    assert set(report["accuracy"]) == {"32", "64"}
    assert len(report["accuracy_per_seed"]["64"]) == 2
    mean = sum(report["accuracy_per_seed"]["32"]) / 2
    assert report["accuracy"]["32"] == pytest.approx(mean)
    assert 0 <= report["target_attention"]["32"] <= 1


def test_drawing_into_the_last_batch_draws_the_same_tokens() -> None:
    """``TrainStream.next(out=...)`` draws into the previous batch's memory: the tokens of a fresh draw, and a new
    tensor each time (a batch is known by its identity: TableStep indexes a fixed training set once)."""
    from lengthgen.task import TrainStream

    c = Config(batch=8, train_length=6)
    fresh, reused = TrainStream(c, [0, 1]), TrainStream(c, [0, 1])
    last = None
    for _ in range(3):
        x, y = fresh.next(), reused.next(out=last)
        assert torch.equal(x, y) and y is not last
        if last is not None:
            assert y.data_ptr() == last.data_ptr()
        last = y
    assert reused.next([1], out=last).shape == (1, 8, 6)  # another shape: drawn fresh
