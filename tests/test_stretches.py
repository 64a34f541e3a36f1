"""Stretches of training steps in one compiled call (``TableStep.run`` / ``engine.stretch.train_steps``): the same numbers
as the same steps taken one call at a time, whatever the stretch length, the thread count or the callbacks."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from lengthgen import Config, draws, tables
from lengthgen.config import ConfigError
from lengthgen.engine import step as engine_step
from lengthgen.engine import first_compile, stretch
from lengthgen.model import Model
from lengthgen.optim import Optimizer
from lengthgen.recipes import SMALL_STEPS
from lengthgen.tables import TableStep
from lengthgen.task import TrainStream
from lengthgen.train import THREADS_ENV, run_threads, train, train_runs

SMALL = SMALL_STEPS.apply(Config()).replace(steps=240)
train_module = importlib.import_module("lengthgen.train")  # the module (lengthgen.train is also the function)


def same_history(a, b, i: int = 0, j: int = 0) -> bool:
    return bool(np.array_equal(a.loss[:, i], b.loss[:, j]) and np.array_equal(a.accuracy[:, i], b.accuracy[:, j]))


def single_steps(runs: list[tuple[Config, int]]):
    """``train_runs(runs)`` one step per call: a checkpoint after every step ends every stretch there."""
    return train_runs(runs, progress=False, checkpoint_every=1, on_checkpoint=lambda step, model: False)


def same_run(a, b) -> bool:
    """The same steps, histories and parameters to the bit."""
    return (np.array_equal(a.steps, b.steps) and np.array_equal(a.loss, b.loss, equal_nan=True)
            and np.array_equal(a.accuracy, b.accuracy, equal_nan=True)
            and all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters())))


@pytest.mark.parametrize("train_set", [None, 64])
def test_a_stretch_equals_single_steps(train_set: int | None) -> None:
    """A member trained alone takes its 240 steps as one stretch; with a checkpoint after every step it takes them
    one call at a time. The same history and parameters to the bit (fresh draws, and a fixed training set)."""
    c = SMALL if train_set is None else SMALL.replace(train_set=train_set, batch=train_set)
    assert same_run(train(c, [1], progress=False), single_steps([(c, 1)])[0])


@pytest.mark.parametrize("rule,lr", [("gd", 0.3), ("sign", 0.003)])
@pytest.mark.parametrize("dtype,train_set", [("float32", None), ("float64", 64)])
def test_gd_and_sign_stretches_equal_the_torch_update(monkeypatch: pytest.MonkeyPatch, rule: str, lr: float,
                                                      dtype: str, train_set: int | None) -> None:
    """Gradient and sign descent without weight decay take compiled stretches (``optim.plain_step``): the same
    histories and parameters to the bit as the same steps through ``Optimizer.step``'s torch update, for one member
    (its batches drawn ahead on a second thread) and for three on two threads, under an early stop too, with fresh
    batches and with a fixed training set."""
    monkeypatch.setenv(THREADS_ENV, "2")
    c = SMALL.replace(optimizer=rule, lr=lr, dtype=dtype, steps=150)
    if train_set is not None:
        c = c.replace(train_set=train_set, batch=train_set)
    runs = [(c, 0), (c, 1), (c.replace(target_accuracy=0.07), 2)]  # near chance: stops early, mid-stretch
    stretched = train(c, [0], progress=False), train_runs(runs, progress=False)
    assert TableStep.runs_ahead(TableStep(c, Model(c, [0]).encoding, c.train_length),
                                Optimizer(rule, torch.zeros(1, 4, dtype=getattr(torch, dtype)), [lr]),
                                TrainStream(c, [0]))
    monkeypatch.setattr(TableStep, "runs_ahead", lambda *_: False)
    by_torch = train(c, [0], progress=False), train_runs(runs, progress=False)
    assert same_run(stretched[0], by_torch[0])
    assert all(same_run(a, b) for a, b in zip(stretched[1], by_torch[1]))
    assert len(stretched[1]) == 2 and stretched[1][1].steps[0] < c.steps  # one Trained per config; the stop reached
    assert not torch.equal(next(stretched[0].model.parameters()), next(Model(c, [0]).parameters()))


def test_plain_step_signs_as_torch() -> None:
    """Sign descent's compiled update takes torch's sign: 0 at +0, -0 and NaN."""
    from lengthgen import optim

    g = torch.tensor([[float("nan"), -0.0, 0.0, -2.0, 3.0, 1e-300]], dtype=torch.float64)
    p = torch.zeros(1, 6, dtype=torch.float64) - 0.0
    opt = optim.Optimizer("sign", p.clone(), [0.5])
    params, state = opt.update_arrays()
    optim.plain_step(params, g.numpy().copy(), state)
    ref = p - torch.sign(g) * 0.5
    assert np.array_equal(opt.params.numpy().view(np.int64), ref.numpy().view(np.int64))  # -0 too


@pytest.mark.parametrize("margin", [train_module.STOP_MARGIN, 0.3])
@pytest.mark.parametrize("train_set", [None, 64])
def test_the_early_stop_in_stretches_stops_where_single_steps_do(monkeypatch: pytest.MonkeyPatch, margin: float,
                                                                 train_set: int | None) -> None:
    """Under an early stop a stretch ends where a member's window may reach its target, and the training loop decides
    there: the members stop at the steps where they stop one step per call, with the same histories and parameters
    (three members with targets 0.9, 0.995 and none, the book's first-fit step size). With a margin of 0.3 the
    stretches end far below the target again and again, mid-block of drawn batches, and the loop trains on: the
    same numbers still (the generators are rewound to the stretch's end)."""
    monkeypatch.setattr(train_module, "STOP_MARGIN", margin)
    c = Config(steps=300) if train_set is None else Config(steps=300, train_set=train_set, batch=train_set)
    runs = [(c.replace(target_accuracy=0.9), 0), (c, 1), (c.replace(target_accuracy=None), 2)]
    stretches = train_runs(runs, progress=False)
    one_by_one = single_steps(runs)
    for a, b in zip(stretches, one_by_one):
        assert same_run(a, b)
    assert 0 < stretches[0].steps[0] < 300 and 0 < stretches[1].steps[0] < 300 and stretches[2].steps[0] == 300


@pytest.mark.parametrize("batch", [1, 7, 100, 256])
@pytest.mark.parametrize("target", [1 / 3, 0.5, 0.9, 0.995, 0.999, 1.0])
def test_stop_hits_never_passes_a_step_where_the_loop_stops(batch: int, target: float) -> None:
    """Every window of correct counts that the training loop's own check (float32, as in ``_train``) stops at sums to
    at least ``stop_hits``; and every sum that reaches it is within STOP_MARGIN of the target exactly."""
    W = train_module.STOP_WINDOW
    stop_at = torch.tensor([target], dtype=torch.float32)
    least = int(train_module.stop_hits(stop_at.numpy(), batch)[0])
    for h in range(W * batch + 1):
        counts = torch.tensor([[h // W + (i < h % W)] for i in range(W)], dtype=torch.int64)  # (W, 1), spread
        stops = bool((counts.to(torch.float32) / batch).mean(0) >= stop_at)
        assert not stops or h >= least, (h, least)
        assert h < least or h / (W * batch) >= float(stop_at) - train_module.STOP_MARGIN
    assert train_module.stop_hits(np.array([np.nan], np.float32), batch)[0] == W * batch + 1


def test_threads_do_not_change_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three members split over 1, 2 or 3 threads, and one member with its batches drawn on a second thread: the
    same histories and parameters, each member's as alone."""
    runs = {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv(THREADS_ENV, threads)
        runs[threads] = train(SMALL, [0, 1, 2], progress=False)
        runs["one member " + threads] = train(SMALL, [2], progress=False)  # 2 or 3: its batches drawn ahead
    alone = runs["one member 1"]
    for t in ("2", "3"):
        assert same_history(runs["one member " + t], alone)
        assert np.array_equal(runs["1"].loss, runs[t].loss) and np.array_equal(runs["1"].accuracy, runs[t].accuracy)
        for a, b in zip(runs["1"].model.parameters(), runs[t].model.parameters()):
            assert torch.equal(a, b)
    assert same_history(runs["3"], alone, 2, 0)


@pytest.mark.parametrize("margin", [train_module.STOP_MARGIN, 0.3])
def test_threads_under_an_early_stop_do_not_change_the_numbers(monkeypatch: pytest.MonkeyPatch, margin: float) -> None:
    """Under an early stop the members go on threads up to each step where a member may stop (``steps_before_stop``;
    the loop checks only those): five members of the first-fit recipe (Adam, lr 0.01, batch 256, <= 300 steps, no
    weight decay; targets 0.9, 0.995, 0.995, none, 0.995), split over 1, 2 or 3 threads, stop at the same steps with
    the same histories and parameters. With a margin of 0.3 the stretches end far below the targets again and again."""
    monkeypatch.setattr(train_module, "STOP_MARGIN", margin)
    c = Config(steps=300)
    targets = [0.9, 0.995, 0.995, None, 0.995]
    runs = [(c.replace(target_accuracy=t), s) for s, t in enumerate(targets)]
    checked = []
    counted = stretch.steps_before_stop
    monkeypatch.setattr(stretch, "steps_before_stop", lambda *a: checked.append(counted(*a)) or checked[-1])
    by_threads = {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv(THREADS_ENV, threads)
        checked.clear()
        by_threads[threads] = train_runs(runs, progress=False)
        assert (len(checked) > 0) == (threads != "1")  # on threads, from one step that may stop to the next
    for t in ("2", "3"):
        for a, b in zip(by_threads["1"], by_threads[t]):
            assert same_run(a, b)
    first, most, none = by_threads["1"]  # one result per config: targets 0.9, 0.995 (seeds 1, 2, 4), none
    assert list(most.seeds) == [1, 2, 4] and 0 < first.steps[0] < 300 and none.steps[0] == 300
    assert all(0 < s < 300 for s in most.steps)


def test_steps_before_stop_is_the_first_step_that_may_stop() -> None:
    """``steps_before_stop`` is the first step of a stretch at which ``may_stop`` is true when every step after the
    window before it is a whole batch correct (the most any step can add), over random windows and hits; 2^62 where
    even that never stops."""
    rng = np.random.default_rng(0)
    W, B = train_module.STOP_WINDOW, 16
    for _ in range(400):
        S, m = int(rng.integers(1, 4)), int(rng.integers(0, W + 1))
        before = rng.integers(0, B + 1, size=(m, S)).astype(np.int64)
        hits = rng.integers(0, W * B + 2, size=S).astype(np.int64)
        stop = stretch.EarlyStop(hits, before, W)
        whole = np.full((2 * W, S), B, np.int64)
        first = next((k + 1 for k in range(2 * W) if stretch.may_stop(whole, k, stop)), 2**62)
        assert stretch.steps_before_stop(stop, B) == first, (before, hits)


def test_run_threads_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_ENV, "3")
    assert run_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(ConfigError, match=THREADS_ENV):
            run_threads()
    monkeypatch.delenv(THREADS_ENV)
    assert run_threads() >= 1


def test_on_step_hears_every_step_in_order() -> None:
    """With a per-step callback the steps still run in stretches; the callback sees each step once, in order,
    with that step's training-batch accuracy, and the numbers are those of a run without it."""
    seen: list[tuple[int, np.ndarray]] = []
    heard = train(SMALL, [0, 1], progress=False, on_step=lambda i, acc: seen.append((i, acc)))
    plain = train(SMALL, [0, 1], progress=False)
    assert [i for i, _ in seen] == list(range(SMALL.steps))
    assert np.array_equal(np.stack([a for _, a in seen]), plain.accuracy)
    assert np.array_equal(heard.loss, plain.loss)


@pytest.mark.parametrize("seconds, spans", [(1e9, [10, 20, 40, 80, 90]), (0.0, [10] * 24)])
def test_stretches_under_on_step_double_while_quick(monkeypatch: pytest.MonkeyPatch, seconds: float,
                                                    spans: list[int]) -> None:
    """Under on_step the first stretch runs ON_STEP_EVERY steps and each next one twice as many while the last took
    under ON_STEP_SECONDS / 2 (never, with a limit of 0), up to the budget; the numbers stay those of one stretch."""
    monkeypatch.setattr(train_module, "ON_STEP_EVERY", 10)
    monkeypatch.setattr(train_module, "ON_STEP_SECONDS", seconds)
    calls: list[int] = []
    run = TableStep.run

    def counted(self, opt, stream, members, offsets, n, threads=1, stop=None):
        calls.append(n)
        return run(self, opt, stream, members, offsets, n, threads, stop)

    monkeypatch.setattr(TableStep, "run", counted)
    heard = train(SMALL, [0], progress=False, on_step=lambda i, acc: None)
    assert calls == spans
    monkeypatch.setattr(TableStep, "run", run)
    assert same_history(heard, train(SMALL, [0], progress=False))


def test_run_draws_into_the_same_room_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TableStep.run`` keeps its block of drawn batches for the next call (a fresh block of ``DRAWN_BYTES`` is new
    pages from the system each time), one per thread: with the batches drawn ahead on a second thread, two blocks in
    turn; and a new ``TableStep`` on the same thread (``train`` makes one per training) draws into the same ones. The
    step's working arrays are kept too: the same ``Work`` (kept alive by the step, so its id is its own) for every
    call. (Blocks of 32 steps here: each run of 100 steps takes four.)"""
    token = np.dtype(engine_step.TOKENS).itemsize
    monkeypatch.setattr(tables, "DRAWN_BYTES", 32 * SMALL.batch * SMALL.train_length * token)
    model = Model(SMALL, [0])
    step = TableStep(SMALL, model.encoding, SMALL.train_length)
    opt = Optimizer("adam", step.pack(model), [SMALL.lr])
    stream = TrainStream(SMALL, [0])
    first_compile.compile_step("float32", "train_steps")  # before the recorders stand in for what it compiles
    where: list[int] = []
    draw_steps = draws.draw_steps
    monkeypatch.setattr(draws, "draw_steps", lambda states, into, V: (where.append(into.ctypes.data),
                                                                      draw_steps(states, into, V))[1])
    works: list[int] = []
    train_steps = stretch.train_steps
    monkeypatch.setattr(stretch, "train_steps", lambda **kw: (works.append(id(kw["work"])),
                                                             train_steps(**kw))[1])
    for threads in (1, 1, 2, 2):
        step.run(opt, stream, np.arange(1), np.array([SMALL.offset]), 100, threads=threads)
    one, two = where[:len(where) // 2], where[len(where) // 2:]
    assert len(set(one)) == 1 and len(set(two)) == 2 and set(one) < set(two)
    assert len(works) == 16 and len(set(works)) == 1
    where.clear()
    TableStep(SMALL, model.encoding, SMALL.train_length).run(opt, stream, np.arange(1), np.array([SMALL.offset]), 100)
    assert len(where) == 4 and set(where) == set(one)


def test_checkpoints_cut_stretches_without_changing_them() -> None:
    """Checkpoints every 70 steps: each sees the parameters after exactly that many steps (the first 140 steps
    of a 240-step run equal a 140-step run), and stopping at one ends training there."""
    at: dict[int, list[torch.Tensor]] = {}
    train(SMALL, [0], progress=False, checkpoint_every=70,
          on_checkpoint=lambda n, model: at.setdefault(n, [p.detach().clone() for p in model.parameters()]) and None)
    assert sorted(at) == [70, 140, 210]
    short = train(SMALL.replace(steps=140), [0], progress=False)
    for a, b in zip(at[140], short.model.parameters()):
        assert torch.equal(a, b)
    stopped = train(SMALL, [0], progress=False, checkpoint_every=70, on_checkpoint=lambda n, _: n == 140)
    assert stopped.steps.tolist() == [140] and same_history(stopped, short)


def test_run_leaves_the_stream_and_optimiser_as_single_steps_do() -> None:
    """After ``TableStep.run`` of 30 steps the generators are where 30 batches of draws leave them, and the
    optimiser has counted 30 steps."""
    model = Model(SMALL, [0, 1])
    step = TableStep(SMALL, model.encoding, SMALL.train_length)
    opt = Optimizer("adam", step.pack(model), [SMALL.lr] * 2)
    stream, reference = TrainStream(SMALL, [0, 1]), TrainStream(SMALL, [0, 1])
    assert step.runs_ahead(opt, stream)
    loglik, correct = step.run(opt, stream, np.arange(2), np.array([SMALL.offset] * 2), 30, threads=2)
    assert loglik.shape == correct.shape == (30, 2) and opt.t == 30
    for _ in range(30):
        reference.next()
    for g, r in zip(stream.gens, reference.gens):
        assert torch.equal(g.get_state(), r.get_state())


def test_runs_ahead_only_where_it_computes_the_same_steps() -> None:
    """No stretches for rules whose torch update the compiled one does not reproduce to the bit (normalised GD,
    signum, gradient descent with weight decay), for variable training lengths, or on the torch path."""
    def ahead(c: Config) -> bool:
        model = Model(c, [0])
        step = TableStep(c, model.encoding, c.train_length)
        buf = step.pack(model)
        decay = torch.full_like(buf, c.weight_decay) if c.weight_decay else None  # as train passes it
        return step.runs_ahead(Optimizer(c.optimizer, buf, [c.lr], decay), TrainStream(c, [0]))

    assert ahead(SMALL) and ahead(SMALL.replace(optimizer="gd")) and ahead(SMALL.replace(optimizer="sign"))
    for other in ("ngd", "signum"):
        assert not ahead(SMALL.replace(optimizer=other, lr=0.01))
    assert not ahead(SMALL.replace(optimizer="gd", weight_decay=0.1))
    assert not ahead(SMALL.replace(min_train_length=16))
    assert not ahead(SMALL.replace(mlp=True))
    assert draws.mt_state(torch.Generator().manual_seed(0)) is not None


def test_compiled_code_just_compiled_or_from_the_cache_gives_the_same_numbers(tmp_path) -> None:
    """The same training run in a process that compiles the steps afresh (an empty numba cache, which it fills)
    and in a process that loads them from that cache: the same loss history to the bit, and this process's
    too. With reassociation in the step's fast-math flags the first two differed in float32 rounding
    (engine.numerics.FAST)."""
    import hashlib
    import os
    import subprocess
    import sys

    c = SMALL.replace(steps=120)
    code = ("import hashlib; from lengthgen import Config, train; "
            f"c = Config(**{c.to_dict()!r}); "
            "print(hashlib.sha256(train(c, [0, 1], progress=False).loss.tobytes()).hexdigest())")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    fresh, cached = (subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip() for _ in range(2))
    assert any((tmp_path / "numba").rglob("*train_steps*.nbc")), "the first process should fill the cache"
    assert fresh == cached == hashlib.sha256(train(c, [0, 1], progress=False).loss.tobytes()).hexdigest()
