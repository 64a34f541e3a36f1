"""The fast paths give the plain path's numbers: vocabulary tables, last-query-only layers, the
foreach optimiser, batched ensembles. Speed itself is measured by benchmarks/, never asserted here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthgen import ENCODINGS, Config, ConfigError, evaluate, train
from lengthgen.model import Model
from lengthgen.task import eval_tokens, generator, targets
from lengthgen.train import TABLES, EnsembleOptimizer, cpu_threads, train_runs

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
def test_tables_match_plain_path(encoding: str, mlp: bool, residual: bool) -> None:
    """One layer: forward_tables equals forward_positions in logits, attention and every gradient (fp64)."""
    c = Config(encoding=encoding, mlp=mlp, residual=residual, max_length=128)
    model, tokens = fp64_model(c)
    y = targets(tokens, c.offset)
    fast, plain = model.forward_tables(tokens), model.forward_positions(tokens)
    assert torch.allclose(fast.logits, plain.logits, atol=1e-12, rtol=1e-12)
    assert torch.allclose(fast.attentions[0], plain.attentions[0], atol=1e-14, rtol=0)
    for (name, _), a, b in zip(model.named_parameters(), grads(fast.logits, y, model), grads(plain.logits, y, model)):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10), name


def test_tables_take_per_member_tokens() -> None:
    """Tokens (S, B, L), one batch per member as in training, give the same numbers as the plain path."""
    c = Config()
    model = Model(c, SEEDS).double()
    tokens = torch.randint(c.vocab, (len(SEEDS), 16, c.train_length), generator=generator(9))
    assert torch.allclose(model.forward_tables(tokens).logits, model.forward_positions(tokens).logits, atol=1e-12)


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


def test_forward_takes_the_tables_only_where_exact() -> None:
    c = Config()
    with pytest.raises(ValueError, match="one-layer"):
        Model(c.replace(layers=2), [0]).forward_tables(eval_tokens(c, 8, 2))


@pytest.mark.parametrize("optimizer", ["adam", "gd"])
@pytest.mark.parametrize("weight_decay,scope", [(0.0, "matrices"), (0.1, "matrices"), (0.1, "all")])
def test_ensemble_optimizer_matches_torch(optimizer: str, weight_decay: float, scope: str) -> None:
    """All members active: the same steps as torch.optim.AdamW / SGD (decay on the tables only with scope "all")."""
    c = Config(encoding="ape", optimizer=optimizer, weight_decay=weight_decay, decay_scope=scope,
               lr=1e-2 if optimizer == "adam" else 0.5)
    ours, ref = Model(c, SEEDS).double(), Model(c, SEEDS).double()
    opt = EnsembleOptimizer(list(ours.named_parameters()), [c] * len(SEEDS))
    table_decay = weight_decay if scope == "all" else 0.0
    groups = [
        {"params": [p for n, p in ref.named_parameters() if n in TABLES], "weight_decay": table_decay},
        {"params": [p for n, p in ref.named_parameters() if n not in TABLES], "weight_decay": weight_decay},
    ]
    if optimizer == "adam":
        torch_opt = torch.optim.AdamW(groups, lr=c.lr, eps=1e-8)
    else:  # decoupled decay p <- p - lr (g + wd p) is SGD's coupled decay for plain gradient descent
        torch_opt = torch.optim.SGD(groups, lr=c.lr)
    tokens = eval_tokens(c, c.train_length, samples=32, seed=1)
    y = targets(tokens, c.offset)
    for _ in range(5):
        for model in (ours, ref):
            for p, g in zip(model.parameters(), grads(model(tokens).logits, y, model)):
                p.grad = g
        opt.step(torch.ones(len(SEEDS), dtype=torch.bool))
        torch_opt.step()
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10), name


def test_optimizer_steps_each_member_with_its_own_lr_and_decay() -> None:
    """Members with different step sizes and decays: each moves as torch's optimizer moves it alone."""
    base = Config(optimizer="gd", lr=0.5)
    configs = [base, base.replace(lr=0.1), base.replace(lr=0.1, weight_decay=0.3)]
    ours = Model(base, SEEDS).double()
    opt = EnsembleOptimizer(list(ours.named_parameters()), configs)
    tokens = eval_tokens(base, base.train_length, samples=16, seed=1)
    y = targets(tokens, base.offset)
    gs = grads(ours(tokens).logits, y, ours)
    before = [p.detach().clone() for p in ours.parameters()]
    for p, g in zip(ours.parameters(), gs):
        p.grad = g
    opt.step(torch.ones(len(SEEDS), dtype=torch.bool))
    for (name, p), old, g in zip(ours.named_parameters(), before, gs):
        for s, c in enumerate(configs):
            decay = c.weight_decay if name not in TABLES else 0.0
            assert torch.allclose(p[s], old[s] - c.lr * (g[s] + decay * old[s]), atol=1e-12), (name, s)


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
    with pytest.raises(ConfigError, match="one optimizer"):
        EnsembleOptimizer(list(Model(Config(), [0, 1]).named_parameters()), [Config(), Config(optimizer="gd")])


def test_ensemble_adam_leaves_inactive_members_exactly_alone() -> None:
    c = Config(weight_decay=0.1)
    model = Model(c, SEEDS)
    opt = EnsembleOptimizer(list(model.named_parameters()), [c] * len(SEEDS))
    tokens = eval_tokens(c, c.train_length, samples=32, seed=1)
    active = torch.tensor([True, False, True])
    for _ in range(3):
        model.zero_grad(set_to_none=False)
        model(tokens).logits.square().sum().backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step(active)
    for p, old in zip(model.parameters(), before):
        assert torch.equal(p[1], old[1]) and not torch.equal(p[0], old[0])
    assert opt.t.tolist() == [3.0, 0.0, 3.0]
    assert all(float(m[1].abs().max()) == 0.0 for m in opt.m)


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


def test_trained_accuracy_is_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training through the tables and through the plain path: same losses and held-out accuracy."""
    c = Config(steps=80, target_accuracy=None)
    fast = train(c, seeds=[0], progress=False)
    monkeypatch.setattr(Model, "use_tables", False)
    plain = train(c, seeds=[0], progress=False)
    assert np.allclose(fast.loss[:40], plain.loss[:40], atol=1e-4, rtol=0)
    lengths = [c.train_length, 2 * c.train_length]
    acc_fast, acc_plain = evaluate(fast, lengths, samples=500).accuracy(), evaluate(plain, lengths, samples=500).accuracy()
    assert np.allclose(acc_fast, acc_plain, atol=0.02, rtol=0)
