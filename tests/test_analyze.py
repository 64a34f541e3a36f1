"""The `analyze` report and its CLI: one JSON object, every part of the mechanism, clear errors."""

from __future__ import annotations

import json

import pytest

from lengthgen import Config
from lengthgen.__main__ import main
from lengthgen.analyze import analyze, format_report

TINY = ["--vocab", "8", "--dim", "16", "--train-length", "16", "--steps", "80", "--batch", "128",
        "--seeds", "2", "--eval-lengths", "16,32", "--samples", "200"]


def test_cli_prints_one_json_object(capsys) -> None:
    assert main(["analyze", *TINY, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    k = report["kernel"]
    assert set(k["energy_top_pairs"]) == {"1", "2", "4"} and len(k["participation_ratio"]) == 2
    assert len(k["margin_in_window"]) == len(k["margin_beyond_window"]) == 2
    assert len(k["aliased_peak_count"]) == len(k["predicted_failure_length"]) == 2
    assert set(report["dilution"]["r2"]) == {"simple", "kernel", "mean_field", "content"}
    assert set(report["attention"]["by_length"]) == {"16", "32"}


def test_ape_report_has_pinning_and_table_norms() -> None:
    c = Config(encoding="ape", vocab=8, dim=16, train_length=16, steps=80, batch=128)
    report = analyze(c, [0], [16, 32], samples=200)
    assert report["attention"]["pinned_position"] == 14
    assert report["attention"]["table_norms"]["moved_untrained"] == [0.0]
    assert "energy_top_pairs" not in report["kernel"]
    text = format_report(report)
    assert "APE row norms" in text and "pinned position 14" in text


def test_two_layer_report_has_attention_by_layer_and_no_dilution_law() -> None:
    c = Config(vocab=8, dim=16, train_length=16, layers=2, steps=40, batch=128)
    report = analyze(c, [0], [16, 32], samples=200)
    assert report["dilution"] is None
    assert [len(v) for v in report["attention"]["by_layer"].values()] == [2, 2]
    assert "one layer without MLP" in format_report(report)


def test_text_report_names_every_part() -> None:
    c = Config(vocab=8, dim=16, train_length=16, steps=80, batch=128)
    out = format_report(json.loads(json.dumps(analyze(c, [0], [16, 32], samples=200))))
    for part in ("Carrier kernel", "energy in top 1 pair", "predicted failure length", "Where the last layer",
                 "Attention dilution", "content law", "accuracy predicted"):
        assert part in out


@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0"], "train at least one seed"),
    (["--eval-lengths", "2"], "must exceed K"),
    (["--encoding", "relative"], "unknown encoding"),
])
def test_bad_input_exits_with_a_clear_error(capsys, flags: list[str], message: str) -> None:
    assert main(["analyze", "--steps", "1", *flags]) == 2
    assert message in capsys.readouterr().err
