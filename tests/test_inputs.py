"""Every input is checked before any work: a one-line ConfigError that says what to change, from
``Config``, the command line (exit code 2, no traceback), the sweep grid loader, evaluation and the
playground widget alike (issue 12, item 4)."""

from __future__ import annotations

import json
import importlib
import math

import pytest
import torch

from lengthgen import Config, ConfigError, evaluate, train
from lengthgen.__main__ import main
from lengthgen.config import (FLOAT_FIELDS, INT_FIELDS, MEMORY_ENV, check_memory, estimate_bytes, memory_limit,
                              memory_terms, parse_bytes)
from lengthgen.sweep import grid_from_dict, load_grid

train_module = importlib.import_module("lengthgen.train")  # the module (lengthgen.train is also the function)

NAN, INF = float("nan"), float("inf")


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message, f"the error should be one line: {message!r}"
    return message


# ---- Config -------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
def test_every_float_setting_must_be_finite(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"{field}=.*finite") as e:
        Config(**{field: value})
    assert f"e.g. {field}=" in one_line(e), "the message gives a value to use instead"


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(lr=0.0), "lr=0.0: use a positive step size"),
        (dict(lr=-1e-3), "positive step size"),
        (dict(weight_decay=-0.1), "weight_decay >= 0"),
        (dict(init_scale=0.0), "positive scale"),
        (dict(init_scale=-1.0), "positive scale"),
        (dict(rope_base=1.0), "base above 1"),
        (dict(rope_base=-5.0), "base above 1"),
        (dict(alibi_slope=0.0), "positive slope"),
        (dict(alibi_slope=-0.5), "positive slope"),
        (dict(target_accuracy=0.0), r"\(0, 1\]"),
        (dict(target_accuracy=1.5), r"\(0, 1\]"),
        (dict(max_length=0), "at least 1 row"),
        (dict(length_seed=-1), "seed >= 0"),
        (dict(steps=-1), "steps >= 0"),
        (dict(batch=0), "batch >= 1"),
        (dict(layers=0), "at least 1 layer"),
    ],
)
def test_out_of_range_settings_say_what_to_change(changes: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as e:
        Config(**changes)
    one_line(e)


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [16.5, True, "16"], ids=["float", "bool", "str"])
def test_whole_number_settings_reject_other_types(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"{field}=.*whole number") as e:
        Config(**{field: value})
    one_line(e)


@pytest.mark.parametrize("changes", [dict(lr="0.01"), dict(lr=True), dict(mlp=1), dict(encoding=None)])
def test_settings_of_the_wrong_type_are_errors(changes: dict) -> None:
    with pytest.raises(ConfigError) as e:
        Config(**changes)
    one_line(e)


def test_valid_numbers_still_pass() -> None:
    """ints for float settings (JSON has one number type), the defaults, the recipes' values."""
    c = Config(lr=1, weight_decay=0, init_scale=2, rope_base=100, alibi_slope=1, target_accuracy=1)
    assert c.lr == 1 and c.target_accuracy == 1
    assert Config(target_accuracy=None, lr=1e-3, steps=0).steps == 0


# ---- memory -------------------------------------------------------------------------------------

def test_huge_vocabulary_is_refused_before_allocating(monkeypatch) -> None:
    def no_tensor(*args, **kwargs):
        raise AssertionError("the check must come before any tensor is made")

    for make in ("empty", "zeros", "randn", "rand", "ones", "full"):
        monkeypatch.setattr(torch, make, no_tensor)
    with pytest.raises(ConfigError, match="memory limit") as e:
        Config(vocab=100_000_000)
    message = one_line(e)
    assert "lower vocab" in message and "vocab x vocab x length" in message, message


def test_estimate_counts_the_table_path_tensors() -> None:
    """One layer: the (S, V, V, L) logit table grows with V^2 L S; the (S, V, L, d) keys with V L d S."""
    c = Config(vocab=64, train_length=128, dim=32)
    terms = memory_terms(c, members=3)
    table, _ = terms["logit table (vocab x vocab x length)"]
    assert table >= 3 * 64 * 64 * 128 * 4, "at least one float32 copy of the table per member"
    assert table <= 8 * 3 * 64 * 64 * 128 * 4, "a small multiple of it, not more"
    assert estimate_bytes(c, members=6) > 1.9 * estimate_bytes(c, members=3), "the ensemble width multiplies it"
    deeper = Config(vocab=64, train_length=128, dim=32, layers=2)
    assert "attention (batch x length x length)" in memory_terms(deeper), "deeper models: L x L attention per layer"
    # evaluation at a longer length costs more than at a shorter one
    assert estimate_bytes(c, 3, length=4096) > estimate_bytes(c, 3, length=256)
    wide = memory_terms(c.replace(dtype="float64"), members=3)
    assert wide["logit table (vocab x vocab x length)"][0] == 2 * table, "float64: every float twice as wide"


def test_ape_table_and_ensemble_width_are_checked() -> None:
    with pytest.raises(ConfigError, match="lower max_length or dim") as e:
        Config(encoding="ape", max_length=10**11)
    one_line(e)
    c = Config()
    check_memory(c, members=16)  # the book's widest ensembles fit
    with pytest.raises(ConfigError, match="the number of seeds"):
        check_memory(c, members=10**9)


def test_memory_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert memory_limit() is None or memory_limit() > 10**8
    monkeypatch.setenv(MEMORY_ENV, "512K")
    assert memory_limit() == 512 * 1024
    with pytest.raises(ConfigError, match=f"memory limit 524 KB .*{MEMORY_ENV}"):
        Config(vocab=64, train_length=64)
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(ConfigError, match="give bytes"):
        Config()
    assert parse_bytes("8e9") == 8 * 10**9 and parse_bytes("2G") == 2 * 2**30


# ---- evaluation ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny() -> object:
    return train(Config(vocab=4, dim=8, train_length=8, steps=2, batch=8), seeds=[0], progress=False)


@pytest.mark.parametrize("samples", [0, -3, 2.5])
def test_evaluation_needs_at_least_one_sample(tiny, samples) -> None:
    with pytest.raises(ConfigError, match="samples") as e:
        evaluate(tiny, [8], samples=samples)
    one_line(e)


def test_evaluation_length_too_long_for_memory(tiny) -> None:
    with pytest.raises(ConfigError, match="evaluating 1 member.*at length 10000000000.*lower"):
        evaluate(tiny, [10**10], samples=10)


# ---- command line -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", "--lr", "nan"], "lr=nan"),
        (["train", "--lr", "inf"], "lr=inf"),
        (["train", "--lr", "0"], "positive step size"),
        (["train", "--weight-decay", "nan"], "weight_decay=nan"),
        (["train", "--weight-decay", "-1"], "weight_decay >= 0"),
        (["train", "--init-scale", "nan"], "init_scale=nan"),
        (["train", "--rope-base", "inf"], "rope_base=inf"),
        (["train", "--target-accuracy", "nan"], "target_accuracy=nan"),
        (["train", "--samples", "0"], "--samples 0"),
        (["train", "--samples", "-3"], "--samples -3"),
        (["analyze", "--samples", "0"], "--samples 0"),
        (["train", "--seeds", "0"], "--seeds 0"),
        (["train", "--vocab", "100000000"], "lower vocab"),
        (["train", "--seeds", "100000000"], "the number of seeds"),
        (["train", "--train-length", "1000000", "--offset", "2"], "lower"),
        (["train", "--eval-lengths", "100000000"], "at length 100000000"),
        (["train", "--samples", "100000000000"], "lower samples"),
        (["train", "--max-length", "0"], "max_length=0"),
        (["sweep", "sweeps/budget.json", "--workers", "-1"], "--workers -1"),
        (["sweep", "sweeps/budget.json", "--workers", "100000"], "use at most"),
        (["train", "--steps", "10000000000000"], "lower steps"),
        (["maxmargin", "--geometry", "pairs", "--rope-base", "0"], "rope_base=0.0: use a base above 1"),
        (["maxmargin", "--geometry", "linf", "--dim", "3"], "dim=3: use an even width"),
        (["maxmargin", "--train-length", "100000"], "lower --train-length or --dim"),
        (["maxmargin", "--multiple", "1000000"], "lower --multiple"),
    ],
)
def test_cli_rejects_bad_input_at_once(argv: list[str], words: str, capsys, monkeypatch) -> None:
    def no_training(*args, **kwargs):
        raise AssertionError(f"{argv} started training: check the input before training")

    monkeypatch.setattr(train_module, "_train", no_training)  # every training path goes through the one loop
    monkeypatch.setattr("lengthgen.maxmargin.solve", no_training)  # nor may maxmargin start its solver
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, f"one line, no traceback: {err!r}"


@pytest.mark.parametrize("argv", [["train", "--samples", "abc"], ["train", "--lr", "fast"]])
def test_cli_unparsable_numbers_are_usage_errors(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid" in err and "Traceback" not in err


# ---- sweep grids (built through Config().replace, so Config's checks apply) -----------------------

@pytest.mark.parametrize(
    "spec, words",
    [
        ({"base": {"lr": NAN}}, "lr=nan"),
        ({"base": {"weight_decay": -1.0}}, "weight_decay >= 0"),
        ({"product": {"init_scale": [1.0, INF]}}, "init_scale=inf"),
        ({"product": {"vocab": [16, 100_000_000]}}, "memory limit"),
        ({"variants": [{}, {"alibi_slope": 0}]}, "alibi_slope"),
        ({"base": {"vocab": 16.5}}, "whole number"),
        ({"product": {"train_length": [32]}, "eval": {"lengths": [10**10]}}, "at length 10000000000"),
    ],
)
def test_sweep_grid_with_a_bad_value_is_refused(spec: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as e:
        grid_from_dict({"seeds": 1, **spec})
    one_line(e)


def test_sweep_grid_file_with_nan_is_refused(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"base": {"lr": NaN}, "seeds": 1}')  # json accepts NaN: the Config check must catch it
    assert math.isnan(json.loads(path.read_text())["base"]["lr"])
    with pytest.raises(ConfigError, match="lr=nan"):
        load_grid(path)


# ---- the playground widget (builds Configs through Config.replace) --------------------------------

def test_playground_says_what_to_change_for_a_size_that_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from lengthgen.widgets import Playground

    pg = Playground(Config(steps=2, batch=8), seeds=1, multiples=(1,), samples=8)
    for control in (pg.train_length, pg.vocab):
        control.unobserve_all()
    pg.train_length.value, pg.vocab.value = pg.train_length.max, pg.vocab.max
    monkeypatch.setenv(MEMORY_ENV, "1M")
    with pytest.raises(ConfigError, match="memory limit"):
        pg.config()
    pg._changed({})  # what a slider release does: the message, not a traceback
    assert "cannot train these settings" in pg.status.value and "lower" in pg.status.value
