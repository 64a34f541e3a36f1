"""The benchmarks' own logic, not their numbers: benchmarks/gpu.py says what to run where there is no GPU and each of
its rows states the recipe it trains with (the numbers are measured on a GPU machine, never asserted); make bench's
processor line, and the AVX2 setting of ``--as-avx2``; benchmarks/profile_blocks.py times the step's own blocks and
products."""

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


def test_processor_line_lists_the_vector_extensions() -> None:
    """make bench's processor line: the vendor and model of /proc/cpuinfo, and its vector extensions (all AVX-512
    flags, AVX2, FMA, ...) and nothing it does not list."""
    from pathlib import Path

    from benchmarks.run import VECTOR_FLAGS, processor, processor_line

    p = processor()
    info = Path("/proc/cpuinfo")
    if not info.exists():
        pytest.skip("no /proc/cpuinfo on this platform")
    flags = set(next(line for line in info.read_text().splitlines() if line.startswith("flags")).split(":")[1].split())
    assert set(p["vector"]) <= flags
    assert {f for f in flags if f.startswith("avx512") or f in VECTOR_FLAGS} == set(p["vector"])
    assert p["vendor"] and p["vendor"] in info.read_text()
    line = processor_line(p)
    assert p["model"] in line and all(f in line for f in p["vector"])
    assert ("--as-avx2" in line) == p["as_avx2"] and not processor_line({**p, "as_avx2": False}).count("AVX2 without")
    assert "code compiled for AVX2 without AVX-512" in processor_line({**p, "as_avx2": True})


def test_as_avx2_compiles_without_avx512() -> None:
    """``make bench --as-avx2``'s setting: numba compiles for Haswell with no AVX-512 (nor AMX, AVX-VNNI, AVX10)
    feature turned on and AVX2 and FMA kept where this CPU has them; OpenBLAS takes its Haswell kernels."""
    import llvmlite.binding as ll

    from benchmarks.run import NOT_AVX2, as_avx2_env

    env = as_avx2_env()
    features = dict((f[1:], f[0]) for f in env["NUMBA_CPU_FEATURES"].split(","))
    host = ll.get_host_cpu_features()
    assert set(features) == set(host)
    assert not [f for f, sign in features.items() if sign == "+" and f.startswith(NOT_AVX2)]
    assert all(features[f] == ("+" if host[f] else "-") for f in features if not f.startswith(NOT_AVX2))
    assert env["NUMBA_CPU_NAME"] == "haswell" and env["OPENBLAS_CORETYPE"] == "Haswell"


def test_profile_blocks_times_the_step_it_profiles() -> None:
    """benchmarks/profile_blocks.py: its nine blocks, called in order, give the gradient of ``engine.step.table_step``
    to the bit, and each of its products is the product of its operands (numpy's BLAS; MKL's where torch carries it),
    so that its table times the step's own work."""
    import numpy as np

    from benchmarks import profile_blocks
    from lengthgen.engine import step

    case = profile_blocks.Case(SMALL_STEPS.apply(Config()))
    profile_blocks.blocks_in_order(case)
    whole = step.StepOut(np.zeros(1, case.buf.dtype), np.zeros(1, np.int64), np.zeros_like(case.buf))
    step.table_step(case.buf, case.x, case.target, case.setup, whole)
    assert np.array_equal(case.out.grad, whole.grad) and np.abs(whole.grad).max() > 0
    assert np.array_equal(case.out.loglik, whole.loglik) and np.array_equal(case.out.correct, whole.correct)
    rows = profile_blocks.product_us(case, calls=1, repeats=1)
    gemm = profile_blocks.mkl_gemm(case.buf.dtype)
    mkl = None if gemm is None else profile_blocks._mkl_loop(gemm)
    assert len(rows) == 14 and rows["_logit_table: trig CD"]["shape"] == "32 x 32 x 256"
    for name, (a, b) in profile_blocks.products(case).items():
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
        profile_blocks._dot(1, a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4, err_msg=name)
        assert rows[name]["blas_us"] > 0 and rows[name]["tiles_us"] > 0
        tiles = np.full_like(out, np.nan)
        profile_blocks.tiles_product(1, a, b, tiles)
        np.testing.assert_allclose(tiles, out, rtol=1e-5, atol=1e-5, err_msg=name)
        if mkl is not None:
            by_mkl = profile_blocks.mkl_product(mkl, a, b)(1)
            np.testing.assert_allclose(by_mkl, out, rtol=1e-5, atol=1e-5, err_msg=name)
            assert rows[name]["mkl_us"] > 0 and rows[name]["mkl_same_bits"] in (True, False)


def test_profile_inside_training_trains_as_train_does() -> None:
    """benchmarks/profile_blocks.py's timed training loop takes ``train``'s steps: after 120 steps of the small-step
    recipe (Adam, lr 3e-4, batch 256, no early stop, no weight decay; seed 0) its parameters are ``train``'s to the
    bit, so that its table times a model's own steps; each part takes time, and the parts take most of the step."""
    import numpy as np

    from benchmarks import profile_blocks
    from lengthgen import train
    from lengthgen.engine import step
    from lengthgen.tables import TableStep

    c = SMALL_STEPS.apply(Config()).replace(steps=120)
    times, params = profile_blocks.training_us(c, 120)
    trained = train(c, [0], progress=False)
    expected = TableStep(c, trained.model.encoding, c.train_length).pack(trained.model).numpy()
    assert params.shape == expected.shape and np.array_equal(params, expected)
    assert times is not None
    assert list(times) == ["targets", *step.BLOCKS, "Adam's update", "between the parts", "whole step"]
    parts = [times[name] for name in ("targets", *step.BLOCKS, "Adam's update")]
    assert min(parts) > 0 and 0 <= times["between the parts"] < 0.2 * times["whole step"]
