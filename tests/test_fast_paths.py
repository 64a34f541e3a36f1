"""The fast paths give the reference's numbers: vocabulary tables (forward and hand-written backward),
last-query-only layers, batched ensembles, the one training loop on both gradient functions. Speed
itself is measured by benchmarks/, never asserted here. The optimiser is tested in test_optim.py."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import torch

from lengthgen import ENCODINGS, Config, ConfigError, evaluate, train
from lengthgen.engine import first_compile
from lengthgen.engine import step as engine_step
from lengthgen.engine import stretch as engine_stretch
from lengthgen.model import Model, log_likelihood
from lengthgen.tables import TableStep, fast_forward
from lengthgen.task import eval_tokens, generator, targets
from lengthgen.train import cpu_threads, train_runs

SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True)
def one_thread():
    """These checks are many tiny fp64 ops: one thread, as in training (threads slow them down)."""
    with cpu_threads(torch.device("cpu")):
        yield


def grads(logits: torch.Tensor, y: torch.Tensor, model: Model) -> tuple[torch.Tensor, ...]:
    """Gradients of every parameter of the cross-entropy of logits (S, B, V) against targets y (B,)."""
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.expand(logits.shape[:2]).flatten())
    return torch.autograd.grad(loss, list(model.parameters()))


def fp64_model(c: Config) -> tuple[Model, torch.Tensor]:
    """A float64 ensemble and held-out tokens (B, L) longer than training, so untrained positions count too."""
    return Model(c, SEEDS).double(), eval_tokens(c, 2 * c.train_length + 3, samples=24, seed=5)


@pytest.mark.parametrize("mlp,residual", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_tables_match_the_reference(encoding: str, mlp: bool, residual: bool) -> None:
    """One layer: fast_forward (the tables) equals the reference Model.forward in logits and attention
    (fp64), past the training length too (untrained APE rows)."""
    c = Config(encoding=encoding, mlp=mlp, residual=residual, max_length=128)
    model, tokens = fp64_model(c)
    fast, plain = fast_forward(model, tokens), model(tokens)
    assert torch.allclose(fast.logits, plain.logits, atol=1e-12, rtol=1e-12)
    assert torch.allclose(fast.attentions[0], plain.attentions[0], atol=1e-14, rtol=0)


def test_tables_take_per_member_tokens() -> None:
    """Tokens (S, B, L), one batch per member as in training, give the same numbers as the reference."""
    c = Config()
    model = Model(c, SEEDS).double()
    tokens = torch.randint(c.vocab, (len(SEEDS), 16, c.train_length), generator=generator(9))
    assert torch.allclose(fast_forward(model, tokens).logits, model(tokens).logits, atol=1e-12)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_last_query_only_matches_full_attention_with_two_layers(encoding: str) -> None:
    """Two layers: computing only the last query of the last layer changes no logit or gradient (fp64)."""
    c = Config(encoding=encoding, layers=2, mlp=True, max_length=128)
    model, tokens = fp64_model(c)
    y = targets(tokens, c.offset)
    last, full = model(tokens), model(tokens, full=True)
    assert torch.allclose(last.logits, full.logits, atol=1e-12, rtol=1e-12)
    assert torch.allclose(last.attentions[-1][:, :, 0], full.attentions[-1][:, :, -1], atol=1e-14, rtol=0)
    for (name, _), a, b in zip(model.named_parameters(), grads(last.logits, y, model), grads(full.logits, y, model)):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10), name


def test_fast_forward_takes_the_reference_beyond_one_layer() -> None:
    c = Config(layers=2)
    model = Model(c, [0])
    tokens = eval_tokens(c, 8, 2)
    assert torch.equal(fast_forward(model, tokens).logits, model(tokens).logits)
    with pytest.raises(ValueError, match="one-layer"):
        train(c.replace(steps=1), [0], progress=False, gradient="tables")


def test_runs_with_different_recipes_train_as_if_alone() -> None:
    """One batched ensemble of runs that differ in lr, offset, budget and early stop: each equals its solo run."""
    base = Config(steps=60, target_accuracy=None)
    runs = [(base, 0), (base.replace(lr=3e-3, offset=4), 1), (base.replace(steps=20), 2),
            (base.replace(target_accuracy=0.5, steps=150), 0)]
    together = train_runs(runs, progress=False)
    assert [t.config for t in together] == [c for c, _ in runs]
    for (c, seed), t in zip(runs, together):
        alone = train(c, [seed], progress=False)
        assert t.seeds == [seed] and t.steps.tolist() == alone.steps.tolist()
        for a, b in zip(t.model.parameters(), alone.model.parameters()):
            assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_runs_must_share_their_shape() -> None:
    with pytest.raises(ConfigError, match="may differ only in"):
        train_runs([(Config(), 0), (Config(vocab=8), 0)])
    with pytest.raises(ConfigError, match="may differ only in"):  # one ensemble, one update rule
        train_runs([(Config(), 0), (Config(optimizer="gd"), 1)])


def test_ensemble_member_equals_the_same_seed_trained_alone() -> None:
    """Seed 2 batched with others follows its solo run step for step, while they stop before and after it."""
    c = Config(steps=150, target_accuracy=0.9)
    together = train(c, seeds=[1, 2, 0], progress=False)  # seeds chosen so that the stops are ordered
    alone = train(c, seeds=[2], progress=False)
    assert together.steps[0] < together.steps[1] < together.steps[2] < c.steps
    assert together.steps[1] == alone.steps[0]
    n = len(alone.loss)
    assert np.allclose(together.loss[:n, 1], alone.loss[:, 0], atol=1e-5, rtol=0)
    for a, b in zip(together.model.parameters(), alone.model.parameters()):
        assert torch.allclose(a[1], b[0], atol=1e-5, rtol=0)


def test_trained_accuracy_is_the_same_on_both_paths() -> None:
    """Training through the tables and through autograd on the reference: same losses and held-out accuracy."""
    c = Config(steps=80, target_accuracy=None)
    fast = train(c, seeds=[0], progress=False, gradient="tables")
    plain = train(c, seeds=[0], progress=False, gradient="autograd")
    assert np.allclose(fast.loss[:40], plain.loss[:40], atol=1e-4, rtol=0)
    lengths = [c.train_length, 2 * c.train_length]
    acc_fast, acc_plain = evaluate(fast, lengths, samples=500).accuracy(), evaluate(plain, lengths, samples=500).accuracy()
    assert np.allclose(acc_fast, acc_plain, atol=0.02, rtol=0)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("length", [32, 21])
@pytest.mark.parametrize("mlp,residual", [(False, True), (False, False), (True, True), (True, False)])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_table_step_gradients_match_autograd(encoding: str, mlp: bool, residual: bool, length: int, compiled: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-written backward of the training step: loss, correct count and the gradient of every
    parameter equal autograd through the plain path (fp64), at the training length and below it; on the CPU
    both by the compiled step (no MLP) and by the torch operations."""
    if not compiled:
        monkeypatch.setattr(TableStep, "compiled", property(lambda self: False))
    elif mlp:
        pytest.skip("with an MLP the step has no compiled path")
    c = Config(encoding=encoding, mlp=mlp, residual=residual, max_length=128)
    model = Model(c, SEEDS).double()
    tokens = torch.randint(c.vocab, (len(SEEDS), 24, length), generator=generator(3))
    target = tokens[..., length - 1 - c.offset:length - c.offset]
    step = TableStep(c, model.encoding, table_rows=c.train_length)
    loglik, correct, grad = step(step.pack(model), tokens, target)
    logits = model(tokens).logits
    ref_ll = log_likelihood(logits, target)
    assert torch.allclose(loglik, ref_ll, atol=1e-12, rtol=0)
    assert correct.tolist() == (logits.argmax(-1, keepdim=True) == target).sum((1, 2)).tolist()
    ref = dict(zip([n for n, _ in model.named_parameters()], torch.autograd.grad(-ref_ll.sum(), list(model.parameters()))))
    mine = step.views(grad)
    assert set(mine) == set(ref)
    for name, g in mine.items():
        want = ref[name]
        if name == "encoding.table":  # the buffer holds the first train_length rows; later rows get no gradient
            assert float(want[:, c.train_length:].abs().max()) == 0.0
            want = want[:, :c.train_length]
        assert torch.allclose(g, want, atol=1e-12, rtol=1e-10), name


def test_table_step_pack_and_views_round_trip() -> None:
    """pack puts every parameter into the buffer and unpack writes it back into chosen members only."""
    c = Config(encoding="ape", mlp=True)
    model = Model(c, SEEDS)
    step = TableStep(c, model.encoding, table_rows=c.train_length)
    buf = step.pack(model)
    assert buf.shape == (len(SEEDS), step.size)
    for name, p in model.named_parameters():
        view = step.views(buf)[name]
        assert torch.equal(view, p[:, :view.shape[1]] if name == "encoding.table" else p), name
    other = Model(c, [7, 8, 9])
    before = [p.detach().clone() for p in other.parameters()]
    step.unpack(buf[[2]], other, torch.tensor([1]))
    for (name, p), old, mine in zip(other.named_parameters(), before, model.parameters()):
        rows = c.train_length if name == "encoding.table" else p.shape[1]
        assert torch.equal(p[1, :rows], mine[2, :rows]), name
        assert torch.equal(p[0], old[0]) and torch.equal(p[1, rows:], old[1, rows:]), name


def test_one_layer_training_takes_the_table_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """One layer on the CPU: the compiled steps without an MLP (stretches of Adam, gradient descent and sign descent
    steps by ``engine.stretch.train_steps``, other rules step by step by ``engine.step.table_step``), the hand-written
    backward with one; deeper models through autograd."""
    def broken(name: str) -> Callable[..., None]:
        def call(*args: object, **kwargs: object) -> None:
            raise RuntimeError(f"{name} called")
        return call

    first_compile.compile_step("float32", "train_steps")  # a process's first step compiles by these names: not broken
    for target_accuracy in (None, 0.99):  # a whole stretch, and single steps under an early stop
        with monkeypatch.context() as m:
            m.setattr(engine_stretch, "train_steps", broken("train_steps"))
            with pytest.raises(RuntimeError, match="train_steps called"):
                train(Config(steps=3, target_accuracy=target_accuracy), [0], progress=False)
    monkeypatch.setattr(engine_step, "table_step", broken("table_step"))
    with pytest.raises(RuntimeError, match="table_step called"):
        train(Config(steps=3, optimizer="ngd"), [0], progress=False)
    monkeypatch.setattr(TableStep, "backward", broken("TableStep.backward"))
    with pytest.raises(RuntimeError, match="TableStep.backward called"):
        train(Config(steps=3, mlp=True), [0], progress=False)
    train(Config(steps=3, layers=2), [0], progress=False)


def test_the_compiled_call_keeps_its_working_arrays_per_thread() -> None:
    """A ``TableStep`` called step by step (rules the stretches do not take) makes the compiled step's working
    arrays once per thread, batch, length and dtype and reuses them: each call gives the numbers of a call in fresh
    arrays (every working array is written before it is read), over calls with other batches and members."""
    import threading

    c = Config(dtype="float64", encoding="ape")
    model = Model(c, [0, 1]).double()
    step = TableStep(c, model.encoding, c.train_length)
    buf = step.pack(model)
    gen = torch.Generator().manual_seed(3)
    for B, L in ((8, c.train_length), (5, c.train_length), (8, c.train_length - 4), (8, c.train_length)):
        x = torch.randint(0, c.vocab, (2, B, L), generator=gen)
        target = x[..., L - 1 - c.offset:L - c.offset]
        kept = step(buf, x, target)
        fresh = TableStep(c, model.encoding, c.train_length)(buf, x, target)  # a new TableStep: new arrays
        assert all(torch.equal(a, b) for a, b in zip(kept, fresh)) and kept[2].abs().max() > 0, (B, L)
    calls = [key for key in step._works if key[0] == "call"]
    assert sorted((B, L) for _, _, B, L, _ in calls) == [(5, c.train_length), (8, c.train_length - 4),
                                                          (8, c.train_length)]
    other = threading.Thread(target=step, args=(buf, x, target))
    other.start()
    other.join()
    assert len([key for key in step._works if key[0] == "call"]) == 4  # the other thread's own set


def test_the_compiled_step_takes_tokens_that_fit_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled step reads tokens as ``engine.step.TOKENS`` (``as_tokens``: a contiguous copy, the same values);
    a vocabulary too large for that type trains by the torch operations instead, to the same numbers up to rounding."""
    x = torch.randint(0, 16, (2, 3, 5), generator=torch.Generator().manual_seed(0)).transpose(1, 2)
    tokens = engine_step.as_tokens(x.numpy())
    assert tokens.dtype == engine_step.TOKENS and tokens.flags.c_contiguous and (tokens == x.numpy()).all()
    assert engine_step.MAX_VOCAB == np.iinfo(engine_step.TOKENS).max + 1
    c = Config(steps=20, target_accuracy=None, dtype="float64")
    compiled = train(c, [0], progress=False)
    monkeypatch.setattr(engine_step, "MAX_VOCAB", c.vocab - 1)
    assert not TableStep(c, Model(c, [0]).encoding).compiled
    monkeypatch.setattr(engine_step, "table_step", lambda *args: pytest.fail("the compiled step took V > MAX_VOCAB"))
    monkeypatch.setattr(engine_stretch, "train_steps", lambda **kw: pytest.fail("the compiled step took V > MAX_VOCAB"))
    by_torch = train(c, [0], progress=False)
    for a, b in zip(compiled.model.parameters(), by_torch.model.parameters()):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("gradient", ["tables", "autograd"])
def test_stopped_member_history_repeats_its_last_step(gradient: str) -> None:
    """A member that stops early leaves the batch; its rows after the stop repeat its last step, so its
    final accuracy and loss are the ones it ends with alone. The same on both gradient functions."""
    c = Config(steps=150, target_accuracy=0.9)
    together = train(c, seeds=[1, 2, 0], progress=False, gradient=gradient)
    first = int(np.argmin(together.steps))
    n = int(together.steps[first])
    assert n < len(together.accuracy)
    assert (together.accuracy[n:, first] == together.accuracy[n - 1, first]).all()
    assert (together.loss[n:, first] == together.loss[n - 1, first]).all()
    alone = train(c, seeds=[together.seeds[first]], progress=False, gradient=gradient)
    assert np.allclose(together.accuracy[-1, first], alone.accuracy[-1, 0]) and len(alone.accuracy) == n
    for a, b in zip(together.model.parameters(), alone.model.parameters()):
        assert torch.allclose(a[first], b[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("layers", [1, 2])
def test_checkpoints_see_the_current_model_and_can_stop_training(layers: int) -> None:
    """on_checkpoint gets the parameters after exactly that many steps; returning True stops every member."""
    c = Config(steps=60, target_accuracy=None, layers=layers)
    seen = []

    def check(step: int, model: Model) -> bool:
        seen.append((step, [p.detach().clone() for p in model.parameters()]))
        return step >= 40

    stopped = train(c, [0, 1], progress=False, on_checkpoint=check, checkpoint_every=20)
    assert [s for s, _ in seen] == [20, 40] and stopped.steps.tolist() == [40, 40] and len(stopped.loss) == 40
    shorter = train(c.replace(steps=20), [0, 1], progress=False)
    for a, b in zip(seen[0][1], shorter.model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(stopped.model.parameters(), seen[1][1]):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="checkpoint_every"):
        train(c, [0], progress=False, on_checkpoint=check)


@pytest.mark.parametrize("scope", ["matrices", "all"])
def test_table_path_trains_like_autograd_with_variable_lengths_and_decay(scope: str) -> None:
    """APE with variable training lengths and weight decay (on the matrices only, where untrained table rows
    stay out of the buffer, or on every row): the table path ends where the autograd path ends."""
    c = Config(encoding="ape", min_train_length=12, train_length=24, steps=30, target_accuracy=None,
               weight_decay=0.5, decay_scope=scope, max_length=64)
    fast = train(c, [0, 1], progress=False, gradient="tables")
    plain = train(c, [0, 1], progress=False, gradient="autograd")
    assert np.allclose(fast.loss, plain.loss, atol=1e-5, rtol=0)
    for (name, a), b in zip(fast.model.named_parameters(), plain.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5, rtol=0), name
    table = fast.model.encoding.table
    untouched = Model(c, [0, 1]).encoding.table[:, c.train_length:]
    assert torch.equal(table[:, c.train_length:], untouched) == (scope == "matrices")


@pytest.mark.parametrize("gradient", ["tables", "autograd"])
def test_members_with_no_budget_keep_their_initial_parameters(gradient: str) -> None:
    """A budget of 0: initial parameters and NaN history rows, on both gradient functions; alone, an empty history."""
    c = Config(steps=10, target_accuracy=None)
    idle, busy = train_runs([(c.replace(steps=0), 0), (c, 1)], progress=False, gradient=gradient)
    assert idle.steps.tolist() == [0] and busy.steps.tolist() == [10]
    assert idle.loss.shape == (10, 1) and np.isnan(idle.loss).all() and np.isnan(idle.accuracy).all()
    assert np.isfinite(busy.loss).all()
    for a, b in zip(idle.model.parameters(), Model(c, [0]).parameters()):
        assert torch.equal(a, b)
    alone = train(c.replace(steps=0), [0], progress=False, gradient=gradient)
    assert alone.loss.shape == (0, 1) and alone.steps.tolist() == [0]
    for a, b in zip(alone.model.parameters(), Model(c, [0]).parameters()):
        assert torch.equal(a, b)
