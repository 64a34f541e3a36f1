"""benchmarks/gpu.py, the GPU table: it says what to run where there is no GPU, and each of its rows states the
recipe it trains with (the numbers themselves are measured on a GPU machine, never asserted)."""

from __future__ import annotations

import sys

import pytest
import torch

from benchmarks import gpu
from lengthgen import Config
from lengthgen.recipes import SMALL_STEPS


def test_without_a_gpu_it_says_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["benchmarks.gpu"])
    with pytest.raises(SystemExit, match="no GPU here.*make bench"):
        gpu.main()


def test_every_row_states_its_recipe() -> None:
    rows = gpu.measures("cpu")
    small = SMALL_STEPS.apply(Config())
    assert rows["small_steps_model"][0].endswith(small.recipe())
    for name, (what, run, unit) in rows.items():
        assert callable(run) and unit != 0, name
        if name.startswith("float64_"):
            assert f"{name.split('_')[1]} at lr" in what and "full batch" in what, what
