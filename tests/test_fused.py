"""The compiled CPU step (lengthgen/engine/) gives the torch table step's numbers: every gradient, the
log-likelihood and the correct count for every encoding it covers (float64, to rounding), hundreds of
training steps in float64, float32 within float rounding, its exponential and log1p against numpy's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import ENCODINGS, Config, draws, train
from lengthgen.engine import numerics
from lengthgen.engine import step as engine_step
from lengthgen.model import Model
from lengthgen.recipes import SMALL_STEPS
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream


@pytest.fixture
def torch_step(monkeypatch: pytest.MonkeyPatch):
    """Within this fixture, TableStep takes its torch operations on the CPU too."""
    monkeypatch.setattr(TableStep, "compiled", property(lambda self: False))


def step_and_batch(c: Config, seeds: list[int], scale_queries: float = 1.0, scale_readout: float = 1.0
                   ) -> tuple[TableStep, torch.Tensor, torch.Tensor]:
    """The table step of config c, the members' parameter buffer (their queries scaled by ``scale_queries``, their
    read-out by ``scale_readout``) and the first training batch of the seeds."""
    model = Model(c, seeds)
    step = TableStep(c, model.encoding, c.train_length)
    buf = step.pack(model)
    step.views(buf)["layers.0.wq"].mul_(scale_queries)
    step.views(buf)["unembed"].mul_(scale_readout)
    return step, buf, TrainStream(c, seeds).next()


def targets_of(c: Config, x: torch.Tensor) -> torch.Tensor:
    """(S, B, 1) the targets of batch x (S, B, L): member s retrieves offset c.offset + (s mod 2) (members may differ
    in offset)."""
    S = x.shape[0]
    offsets = torch.tensor([c.offset + (s % 2) for s in range(S)])
    return x.gather(-1, (x.shape[-1] - 1 - offsets).view(-1, 1, 1).expand(S, x.shape[1], 1))


def both_steps(c: Config, seeds: list[int], scale_queries: float = 1.0, scale_readout: float = 1.0
               ) -> tuple[tuple, tuple]:
    """(loglik, correct, grad) of one step of the compiled and of the torch path on the same buffer and batch."""
    step, buf, x = step_and_batch(c, seeds, scale_queries, scale_readout)
    target = targets_of(c, x)
    assert step.compiled
    with torch.inference_mode():
        compiled = step(buf, x, target)
        saved_logits, saved = step.forward(buf, x)
        from lengthgen.model import log_likelihood_gradient
        loglik, g = log_likelihood_gradient(saved_logits, target)
        correct = (saved_logits.max(-1, keepdim=True).indices == target).sum((1, 2))
        plain = (loglik, correct, step.backward(saved, g))
    return compiled, plain


def assert_same(compiled: tuple, plain: tuple, tol: float) -> None:
    (l1, c1, g1), (l2, c2, g2) = compiled, plain
    assert torch.equal(c1, c2)
    assert torch.allclose(l1, l2, rtol=tol, atol=0)
    scale = g2.abs().amax(1, keepdim=True)
    assert ((g1 - g2).abs() <= tol * scale).all(), float(((g1 - g2).abs() / scale).max())


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_compiled_step_matches_the_torch_step(encoding: str, residual: bool) -> None:
    """float64: every gradient entry within 1e-12 of the largest of its member, loglik, correct counts equal."""
    c = Config(encoding=encoding, residual=residual, dtype="float64", batch=48, max_length=128)
    assert_same(*both_steps(c, [0, 1, 2]), 1e-12)


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("vocab,batch,lookup", [(16, 64, False), (16, 48, True), (64, 48, True), (64, 1024, False)])
def test_rope_logits_by_table_and_by_lookup(vocab: int, batch: int, lookup: bool, residual: bool) -> None:
    """RoPE's logits as a table or key by key (``engine.step.by_lookup``, chosen by V^2 against the batch): both
    give the torch step's numbers (float64, 1e-12), on both sides of the switch."""
    assert engine_step.by_lookup(engine_step.ROTATE, vocab, batch) == lookup
    c = Config(encoding="rope", residual=residual, dtype="float64", batch=batch, vocab=vocab, max_length=128)
    assert_same(*both_steps(c, [0, 1]), 1e-12)


@pytest.mark.parametrize("encoding", ["rope", "ape"])
@pytest.mark.parametrize("batch", [7, 50, 257])
def test_batches_that_are_not_a_multiple_of_four(encoding: str, batch: int) -> None:
    """The attention scatters into the token masses four sequences at a time: the last batch % 4 sequences take the
    loop after (float64, 1e-12 of the torch step; batch 7 and 50 by lookup for RoPE, 257 by the table)."""
    c = Config(encoding=encoding, dtype="float64", batch=batch, max_length=128)
    assert engine_step.by_lookup(engine_step.ROTATE, c.vocab, batch) == (batch < 64)
    assert_same(*both_steps(c, [0, 1]), 1e-12)


@pytest.mark.parametrize("encoding", ["rope", "ape", "alibi"])
def test_compiled_step_with_variable_lengths(encoding: str) -> None:
    c = Config(encoding=encoding, dtype="float64", batch=32, min_train_length=9, train_length=20, max_length=64)
    assert_same(*both_steps(c, [3, 4]), 1e-12)


def far_below(c: Config, seeds: list[int], scale_queries: float) -> int:
    """How many sequences of ``both_steps``' batch have their attention logits so far below the largest entry of
    their query token's column of the table that the sum of their exponentials, shifted by that entry, lies under
    2^-60 (float32) or 2^-600 (float64): those the compiled step redoes with their own maximum."""
    step, buf, x = step_and_batch(c, seeds, scale_queries)
    with torch.inference_mode():
        _, saved = step.forward(buf, x)
    T, index = saved["T"], saved["index"]  # (S, entries of the table), (S, B L): each key's entry
    top = T.view(T.shape[0], -1, c.vocab).amax(1)  # (S, V): the largest entry of each query token's column
    shifted = T.gather(1, index).view(x.shape) - top.gather(1, x[..., -1])[..., None]
    low = 2.0 ** (-60 if c.dtype == "float32" else -600)
    return int((shifted.exp().sum(-1) < low).sum())


@pytest.mark.parametrize("encoding", ["rope", "ape", "nope"])
@pytest.mark.parametrize("dtype,tol,scale", [("float64", 1e-12, 1e5), ("float32", 1e-4, 1e4)])
def test_sequences_far_below_their_column_maximum(dtype: str, tol: float, scale: float, encoding: str) -> None:
    """Queries scaled up 10^4 times (10^5 in float64): attention logits spread over thousands, so that some sequences
    lie far below the largest entry of their query token's column (the exponentials would underflow) and are redone
    with their own maximum, each key's table entry found again from its position, token and query token (a table by
    position for RoPE and APE, one entry per token pair for NoPE); the result is still the torch step's. (At 300
    times, as this test had it until the fifteenth session, no RoPE sequence lay that far below: the redo went
    untested. A redo that reads the entries of another query token now fails every case.)"""
    c = Config(encoding=encoding, dtype=dtype, batch=64)
    assert far_below(c, [0, 1], scale) > 0  # the redo is exercised
    compiled, plain = both_steps(c, [0, 1], scale_queries=scale)
    assert_same(compiled, plain, tol)


@pytest.mark.parametrize("dtype,tol,scale", [("float64", 1e-12, 1e4), ("float32", 1e-4, 1e3)])
def test_targets_whose_probability_underflows(dtype: str, tol: float, scale: float) -> None:
    """The read-out scaled up 10^3 times (10^4 in float64): logits spread over thousands, so that the target's
    exponential, shifted by the largest logit, underflows to 0 (below -87.3 in float32, -708.4 in float64: where
    ``numerics.exp_neg`` returns 0) for most sequences. The loss then takes log(the others' share) - (y_t - max y)
    instead of log1p(others / E_t), and the target's gradient minus the others' probability; the result is still
    the torch step's (log-softmax)."""
    c = Config(dtype=dtype, batch=64)
    step, buf, x = step_and_batch(c, [0, 1], scale_readout=scale)
    with torch.inference_mode():
        y, _ = step.forward(buf, x)
    gap = y.gather(-1, targets_of(c, x))[..., 0] - y.amax(-1)  # (S, B): y_t - max y
    assert (gap < (-87.3 if dtype == "float32" else -708.4)).sum() > 0  # the underflow's branch is exercised
    compiled, plain = both_steps(c, [0, 1], scale_readout=scale)
    assert_same(compiled, plain, tol)


@pytest.mark.parametrize("vocab", [15, 16])
def test_odd_and_even_vocabularies(vocab: int) -> None:
    """The loss's argmax alternates its running maximum between two arrays, one swap per class after the first: with
    an even vocabulary the maximum ends in the second and is copied back, with an odd one it ends in the first. Both
    give the torch step's loss, predictions and gradient. (The read-out is scaled up 100 times: the logits then
    spread over tens, and a shift by a maximum that missed the last class would pass ``numerics.exp_neg`` positive
    arguments far outside its range; at the initial logits' spread, under one, such a shift changes only roundings.)"""
    c = Config(vocab=vocab, dtype="float64", batch=64)
    assert_same(*both_steps(c, [0, 1], scale_readout=100.0), 1e-12)


@pytest.mark.parametrize("encoding", ["nope", "rope"])
@pytest.mark.parametrize("vocab", [7, 15, 16, 20])
def test_column_maxima_in_tiles_and_one_by_one(encoding: str, vocab: int) -> None:
    """The attention takes each query token's column maximum down the table's rows, W columns at a time in a
    register tile (``matmul.register_tile``: 8 in float64), then the columns past the last multiple of W one by one:
    here none of them (7), a tile and seven (15), two tiles (16), two tiles and four (20); over NoPE's V rows and
    RoPE's L V. With the queries scaled up 300 times the logits spread over tens to hundreds, and a maximum that
    missed a column or a row would pass ``numerics.exp_neg`` positive arguments outside its range; the result is
    still the torch step's. (With the last columns skipped this fails.)"""
    c = Config(encoding=encoding, vocab=vocab, dtype="float64", batch=64)
    assert_same(*both_steps(c, [0, 1], scale_queries=300.0), 1e-12)


def test_float32_step_within_rounding() -> None:
    c = Config(batch=256)
    assert_same(*both_steps(c, [0, 1]), 1e-5)


def test_hundreds_of_training_steps_like_the_torch_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 steps of the small-step recipe in float64, two seeds, different offsets: the compiled path ends
    within 1e-10 of the torch path in every parameter and every loss of the history."""
    c = SMALL_STEPS.apply(Config(dtype="float64")).replace(steps=300)
    runs = [(c, 0), (c.replace(offset=3), 1)]
    from lengthgen.train import train_runs
    fast = train_runs(runs, progress=False)
    monkeypatch.setattr(TableStep, "compiled", property(lambda self: False))
    plain = train_runs(runs, progress=False)
    for f, p in zip(fast, plain):
        assert np.allclose(f.loss, p.loss, rtol=1e-10, atol=0)
        assert np.array_equal(f.accuracy, p.accuracy)
        for (name, a), b in zip(f.model.named_parameters(), p.model.parameters()):
            assert torch.allclose(a, b, rtol=0, atol=1e-10), name


def test_float32_training_within_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    """float32, 200 small steps: the losses agree to float32 rounding (relative 1e-4)."""
    c = SMALL_STEPS.apply(Config()).replace(steps=200)
    fast = train(c, [0], progress=False)
    monkeypatch.setattr(TableStep, "compiled", property(lambda self: False))
    plain = train(c, [0], progress=False)
    assert np.allclose(fast.loss, plain.loss, rtol=1e-4, atol=0)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 4e-7), (np.float64, 1e-14)])
def test_exponential(dtype: type, tol: float) -> None:
    """numerics.exp_neg against numpy's exp for x <= 0, down to where it returns 0, and NaN."""
    smallest = {np.float32: -87.0, np.float64: -708.0}[dtype]
    x = np.concatenate([-np.geomspace(1e-12, -smallest, 5000), [0.0, -1e-30]]).astype(dtype)
    y = x.copy()
    numerics.exp_neg(y, numerics.exp_constants(dtype))
    ref = np.exp(x.astype(np.float64))
    assert (np.abs(y - ref) <= tol * ref).all(), float((np.abs(y - ref) / ref).max())
    far = np.array([smallest * 1.1, -np.inf, np.nan], dtype)
    numerics.exp_neg(far, numerics.exp_constants(dtype))
    assert far[0] == 0 and far[1] == 0 and np.isnan(far[2])


@pytest.mark.parametrize("dtype,tol", [(np.float32, 3e-7), (np.float64, 1e-15)])
def test_log1p(dtype: type, tol: float) -> None:
    """numerics.log1p against numpy's log1p (in float64) for x >= 0: from below the float's precision (where u = 1 + x
    rounds to 1) past 1e30, the cut at sqrt(2) - 1 on either side, and NaN."""
    x = np.concatenate([np.geomspace(1e-30, 1e30, 20000), [0.0, 1e-8, 0.41421354, 0.41421357, 1.0, 3.0]]).astype(dtype)
    bits = numerics.int_scratch(x, len(x))
    y, w = x.copy(), np.empty_like(x)
    numerics.log1p(y, numerics.log_constants(numerics.exp_constants(dtype)), w, bits)
    ref = np.log1p(x.astype(np.float64))
    assert (np.abs(y - ref) <= tol * ref).all(), float((np.abs(y - ref) / np.maximum(ref, 1e-300)).max())
    nan = np.array([np.nan], dtype)
    numerics.log1p(nan, numerics.log_constants(numerics.exp_constants(dtype)), w[:1], bits[:1])
    assert np.isnan(nan[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 5, 8, 13, 32, 37])
def test_row_totals_are_dot8_against_ones(dtype: type, n: int) -> None:
    """numerics.lane_totals then row_total give each row's sum the bits of dot8 of the row against ones (the
    attention's row sums before and after they were split in two passes), for lengths below, at and past eight and
    not a multiple of it; and a sum in another order would differ somewhere in these rows."""
    a = np.random.default_rng(n).exponential(1.0, (64, n)).astype(dtype)
    ones = np.ones((1, n), dtype)
    lanes = np.full((64, 8), np.nan, dtype)
    numerics.lane_totals(a, lanes, 0, 64)
    got = np.array([numerics.row_total(a, lanes, i) for i in range(64)], dtype)
    want = np.array([numerics.dot8(a, i, 0, ones, 0, 0, n) for i in range(64)], dtype)
    assert np.array_equal(got, want)
    if n >= 13:  # plain left-to-right sums round differently from the eight lanes in some of the 64 rows
        assert not np.array_equal(want, np.array([sum(row[1:], row[0]) for row in a], dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log1p_of_an_entry_is_the_same_wherever_it_lies(dtype: type) -> None:
    """numerics.log1p gives an entry the same bits alone, in the vectorised body of a long array, or in the loop
    that ends it (each start offset 0-8): the loss's log-likelihood then does not depend on the batch's size or on
    where an example lies in it. Float32's series runs the same loop as float64's after six zero coefficients
    (``numerics.LOG_TERMS``), which leave Horner's sum at its first coefficient exactly."""
    x = (10.0 ** np.random.default_rng(1).uniform(-8, 4, 1003)).astype(dtype)
    lc = numerics.log_constants(numerics.exp_constants(dtype))

    def log1p(v: np.ndarray) -> np.ndarray:
        y = v.copy()
        numerics.log1p(y, lc, np.empty_like(y), numerics.int_scratch(y, len(y)))
        return y

    whole = log1p(x)
    for start in range(9):
        assert np.array_equal(log1p(x[start:]), whole[start:]), start
    assert np.array_equal(np.concatenate([log1p(x[i:i + 1]) for i in range(len(x))]), whole)
    assert len(lc) == 3 + numerics.LOG_TERMS and (lc[3:9] == 0).all() == (dtype == np.float32)


@pytest.mark.parametrize("high", [16, 10, 7, 64, 1000])
def test_token_draws_are_torch_randint(high: int) -> None:
    """draws.randint_ draws torch.randint's numbers and leaves the generator in torch's state, across many
    refills of the generator's 624 words; a tensor it does not cover (not contiguous) goes to torch."""
    ours, theirs = torch.Generator().manual_seed(high), torch.Generator().manual_seed(high)
    for shape in [(256, 33), (1, 5), (3, 700), (256, 32)]:
        drawn = draws.randint_(torch.empty(shape, dtype=torch.long), high, ours)
        assert torch.equal(drawn, torch.randint(high, shape, generator=theirs))
    assert torch.equal(ours.get_state(), theirs.get_state())
    strided = torch.empty(8, 6, dtype=torch.long)[:, ::2]
    assert torch.equal(draws.randint_(strided, high, ours), torch.randint(high, (8, 3), generator=theirs))


@pytest.mark.parametrize("high", [16, 10, 2])
def test_drawn_steps_are_torch_randint_as_the_step_reads_them(high: int) -> None:
    """draws.draw_steps, into the step's own token type (two bytes), gives each member's batches in turn as
    torch.randint from that member's generator, across refills of the 624 words, and leaves each state where
    torch leaves it: written back (``draws.set_mt_state``) into a generator of the same seed, its 32-bit words in
    torch's 64-bit layout, it has torch's state to the byte."""
    k, S, B, L = 5, 3, 64, 17  # 5 x 1088 draws a member: several refills, none on a batch's edge
    gens = [torch.Generator().manual_seed(100 * high + s) for s in range(S)]
    states = np.stack([draws.mt_state(g) for g in gens])
    xs = np.zeros((k, S, B, L), engine_step.TOKENS)
    draws.draw_steps(states, xs, high)
    for s, g in enumerate(gens):
        for i in range(k):
            assert np.array_equal(xs[i, s], torch.randint(high, (B, L), generator=g).numpy()), (s, i)
        ours = torch.Generator().manual_seed(100 * high + s)
        draws.set_mt_state(ours, states[s])
        assert torch.equal(ours.get_state(), g.get_state()), s
        assert np.array_equal(draws.mt_state(ours), states[s]), s


def test_working_arrays_and_drawn_blocks_start_on_a_cache_line() -> None:
    """``engine.step.aligned_empty`` gives the asked shape and dtype from a 64-byte boundary, and the step's working
    arrays and the blocks of drawn batches (``tables._room``) are made by it (numpy's own may start 16, 32 or 48
    bytes into a line)."""
    from lengthgen import tables
    from lengthgen.engine import step as engine_step

    for shape, dtype in [(1, np.float32), ((3, 5), np.float64), ((7, 1, 9, 13), np.uint16), ((256, 32), np.int32)]:
        a = engine_step.aligned_empty(shape, dtype)
        assert a.ctypes.data % 64 == 0 and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
    c = SMALL_STEPS.apply(Config())
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    buf = table.pack(model).numpy()
    work = engine_step._arrays(buf.dtype, table._compiled_setup(c.train_length, torch.float32), c.batch,
                               c.train_length)
    made_here = [name for name in work._fields if name not in ("blocks", "cst", "lc", "bits")]
    assert all(getattr(work, name).ctypes.data % 64 == 0 for name in made_here)
    assert tables._room(("aligned test", 0), (3, 1, c.batch, c.train_length)).ctypes.data % 64 == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("vocab,batch", [(16, 256), (64, 8)])
def test_the_transposes_scratch_holds_every_right_operand(encoding: str, vocab: int, batch: int) -> None:
    """``StepArrays.BT``, ``matmul.matmul_t``'s scratch, holds the transposed right operand (n, k) of each A B^T the
    step computes: every encoding, a batch larger and one smaller than the vocabulary (its copy is only made where
    numba compiles for AVX2 without AVX-512, so a short scratch would fail there alone)."""
    from lengthgen.engine import step as engine_step

    c = Config(encoding=encoding, vocab=vocab, batch=batch, dim=8, train_length=24)
    model = Model(c, [0])
    table = TableStep(c, model.encoding, c.train_length)
    setup = table._compiled_setup(c.train_length, torch.float32)
    w = engine_step._arrays(np.dtype(np.float32), setup, batch, c.train_length)
    d, V, L = c.dim, vocab, c.train_length
    sizes = {"mass g": w.E.size, "dYv (Wo U)^T": w.WoU.size, "d(Wo U) U^T": w.U.size, "dA W^T": d * (3 * d + V)}
    if setup.kind != engine_step.ROTATE:
        sizes["dTP QT^T"] = w.QT.size
    if setup.kind == engine_step.ROWS:
        sizes.update({"attn^T g": w.E.size, "g Yv[V:]^T": w.Yv[V:].size, "Yv[V:]^T attn^T": w.lg.size})
        assert w.Yv[V:].shape == (L, V) and w.lg.shape == (batch, L)
    assert all(len(w.BT) >= n for n in sizes.values()), (len(w.BT), sizes)
