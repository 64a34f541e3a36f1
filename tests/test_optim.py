"""The one optimiser (lengthgen.optim): every update rule against a hand computation in float64, Adam and
gradient descent against torch.optim (Adam through its compiled pass and through torch operations), the rules'
compiled twin (``update_in_place``) against the same hand computation, members leaving the buffer (``keep``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lengthgen.optim import RULES, Optimizer, RuleArrays, update_in_place
from lengthgen.task import generator

LR = [0.1, 0.03, 0.2]  # one step size per member
B1, B2, EPS = 0.9, 0.999, 1e-8


def gradients(steps: int, shape: tuple[int, int] = (3, 7)) -> list[torch.Tensor]:
    """Seeded float64 gradients (S, P), one per step, with an entry of exactly 0 (sign(0) = 0)."""
    gen = generator(11)
    out = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(steps)]
    for g in out:
        g[:, 0] = 0.0
    return out


def by_hand(rule: str, p0: np.ndarray, grads: list[np.ndarray], decay: np.ndarray, power: float = 0.0,
            eps: float = EPS) -> np.ndarray:
    """The update rules of optim's table, entry by entry in plain Python floats: p (S, P) after the steps, the t-th
    with step size LR (t + 1)^-power; Adam with eps = 0 leaves an entry whose second moment is 0 where it is."""
    p = p0.copy()
    S, P = p.shape
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        for s in range(S):
            norm = math.sqrt(sum(float(x) ** 2 for x in g[s]))
            for i in range(P):
                x = float(g[s, i])
                if rule == "gd":
                    u = x
                elif rule == "ngd":
                    u = x / norm
                elif rule == "sign":
                    u = float(np.sign(x))
                elif rule == "signum":
                    m[s, i] = B1 * m[s, i] + (1 - B1) * x
                    u = float(np.sign(m[s, i]))
                else:  # adam
                    m[s, i] = B1 * m[s, i] + (1 - B1) * x
                    v[s, i] = B2 * v[s, i] + (1 - B2) * x * x
                    root = math.sqrt(v[s, i] / (1 - B2**t)) + eps
                    u = (m[s, i] / (1 - B1**t)) / root if root > 0 else 0.0
                p[s, i] = p[s, i] - LR[s] * (t + 1) ** -power * (u + decay[s, i] * p[s, i])
    return p


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_matches_a_hand_computation(rule: str, weight_decay: float) -> None:
    """Four steps of three members with their own step sizes (and decay on some entries only)."""
    grads = gradients(4)
    p0 = torch.randn(3, 7, generator=generator(12), dtype=torch.float64)
    decay = torch.zeros_like(p0)
    decay[:, 3:] = weight_decay
    opt = Optimizer(rule, p0.clone(), LR, decay if weight_decay else None)
    for g in grads:
        opt.step(g.clone())
    want = by_hand(rule, p0.numpy(), [g.numpy() for g in grads], decay.numpy())
    assert np.allclose(opt.params.numpy(), want, rtol=1e-12, atol=1e-14)
    assert opt.t == 4


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_matches_torch_adamw(weight_decay: float, compiled: bool) -> None:
    """Each member's row moves as torch.optim.AdamW moves it alone (float64), through the compiled pass
    (optim.adam_step) or separate torch operations."""
    grads = gradients(6)
    p0 = torch.randn(3, 7, generator=generator(13), dtype=torch.float64)
    decay = torch.full_like(p0, weight_decay)
    ours = Optimizer("adam", p0.clone(), LR, decay if weight_decay else None, compiled=compiled)
    assert_steps_like_torch(ours, p0, grads, lambda row, lr: torch.optim.AdamW(
        [row], lr=lr, betas=(B1, B2), eps=EPS, weight_decay=weight_decay))


def assert_steps_like_torch(ours: Optimizer, p0: torch.Tensor, grads: list[torch.Tensor], make) -> None:
    """Step ``ours`` (members = rows of p0) and, per member, the torch optimiser ``make(parameter, lr)`` on the same
    gradients; every member must end where torch's does, to float64 rounding."""
    rows = [torch.nn.Parameter(p0[s].clone()) for s in range(len(p0))]
    theirs = [make(rows[s], LR[s]) for s in range(len(p0))]
    for g in grads:
        ours.step(g.clone())
        for s, opt in enumerate(theirs):
            rows[s].grad = g[s].clone()
            opt.step()
    for s in range(len(p0)):
        assert torch.allclose(ours.params[s], rows[s].detach(), rtol=1e-12, atol=1e-15), s


def test_gradient_descent_matches_torch_sgd() -> None:
    """Decoupled decay p <- p - lr (g + wd p) is SGD's coupled decay for plain gradient descent."""
    grads = gradients(5)
    p0 = torch.randn(3, 7, generator=generator(14), dtype=torch.float64)
    ours = Optimizer("gd", p0.clone(), LR, torch.full_like(p0, 0.3))
    assert_steps_like_torch(ours, p0, grads, lambda row, lr: torch.optim.SGD([row], lr=lr, weight_decay=0.3))


@pytest.mark.parametrize("decayed", [True, False])
@pytest.mark.parametrize("rule", RULES)
def test_keep_drops_members_and_the_others_go_on_as_if_alone(rule: str, decayed: bool) -> None:
    """Members 0 and 2 of three, after member 1 leaves at step 2, end exactly where the two alone end;
    ``keep`` also reorders."""
    grads = gradients(5)
    p0 = torch.randn(3, 7, generator=generator(15), dtype=torch.float64)
    decay = torch.rand(3, 7, generator=generator(16), dtype=torch.float64) if decayed else None
    three = Optimizer(rule, p0.clone(), LR, None if decay is None else decay.clone())
    two = Optimizer(rule, p0[[2, 0]].clone(), [LR[2], LR[0]], None if decay is None else decay[[2, 0]].clone())
    for t, g in enumerate(grads):
        if t == 2:
            three.keep(torch.tensor([2, 0]))
        three.step(g.clone() if t < 2 else g[[2, 0]].clone())
        two.step(g[[2, 0]].clone())
    assert torch.equal(three.params, two.params)


def test_adam_denominator_is_the_root_of_the_corrected_second_moment() -> None:
    g = gradients(1)[0]
    opt = Optimizer("adam", torch.zeros(3, 7, dtype=torch.float64), LR, compiled=False)
    with pytest.raises(ValueError, match="after a step"):
        opt.adam_denominator()
    opt.step(g.clone())
    assert torch.allclose(opt.adam_denominator(), g.abs(), rtol=1e-12, atol=0)  # v_hat = g^2 after one step
    with pytest.raises(ValueError, match="only Adam"):
        Optimizer("gd", torch.zeros(3, 7), LR).adam_denominator()


@pytest.mark.parametrize("rule", RULES)
def test_a_decaying_step_size_matches_a_hand_computation(rule: str) -> None:
    """The t-th update takes LR (t + 1)^-a (Zhang, Zou & Cao's eta_0 (s + 2)^-a, s = t - 1), decay included."""
    grads = gradients(4)
    p0 = torch.randn(3, 7, generator=generator(17), dtype=torch.float64)
    decay = torch.full_like(p0, 0.05)
    opt = Optimizer(rule, p0.clone(), LR, decay.clone(), power=0.7)
    for g in grads:
        opt.step(g.clone())
    want = by_hand(rule, p0.numpy(), [g.numpy() for g in grads], decay.numpy(), power=0.7)
    assert np.allclose(opt.params.numpy(), want, rtol=1e-12, atol=1e-14)
    assert torch.allclose(opt.current_lr(), torch.tensor(LR, dtype=torch.float64)[:, None] * 5.0**-0.7)


def test_adams_decaying_step_is_the_same_compiled_or_not() -> None:
    grads = gradients(6)
    p0 = torch.randn(3, 7, generator=generator(18), dtype=torch.float64)
    a, b = (Optimizer("adam", p0.clone(), LR, power=0.5, compiled=c) for c in (True, False))
    for g in grads:
        a.step(g.clone())
        b.step(g.clone())
    assert torch.allclose(a.params, b.params, rtol=1e-13, atol=1e-15)


def test_adam_without_eps_leaves_a_coordinate_that_never_had_a_gradient() -> None:
    """eps = 0 (Zhang, Zou & Cao's setting): entry 0 of every gradient is 0, so v = m = 0 there; it stays put
    instead of becoming 0 / 0, and every other entry moves as the hand computation with eps = 0 says."""
    grads = gradients(4)
    p0 = torch.randn(3, 7, generator=generator(19), dtype=torch.float64)
    opt = Optimizer("adam", p0.clone(), LR, eps=0.0, power=1.0)
    assert not opt.compiled  # the compiled pass has no guard for 0 / 0
    for g in grads:
        opt.step(g.clone())
    assert torch.isfinite(opt.params).all() and torch.equal(opt.params[:, 0], p0[:, 0])
    want = by_hand("adam", p0.numpy(), [g.numpy() for g in grads], np.zeros((3, 7)), power=1.0, eps=0.0)
    assert np.allclose(opt.params.numpy(), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("eps", [EPS, 0.0])
@pytest.mark.parametrize("rule", RULES)
def test_the_compiled_update_of_every_rule_matches_a_hand_computation(rule: str, eps: float) -> None:
    """``update_in_place`` (the compiled loops of ``selection``) with the step sizes ``Optimizer.current_lr`` gives
    the t-th update: the hand computation's numbers, a decaying step size, Adam with and without eps (entry 0 of
    every gradient is 0)."""
    grads = gradients(4)
    p0 = torch.randn(3, 7, generator=generator(20), dtype=torch.float64)
    schedule = Optimizer(rule, p0.clone(), LR, eps=eps, power=0.7)
    params, m, v = p0.numpy().copy(), np.zeros((3, 7)), np.zeros((3, 7))
    for t, g in enumerate(grads, start=1):
        rate = schedule.current_lr(t)[:, 0].numpy()
        update_in_place(RULES.index(rule), params, g.numpy().copy(), RuleArrays(m, v, rate, B1, B2, eps), t)
    want = by_hand(rule, p0.numpy(), [g.numpy() for g in grads], np.zeros((3, 7)), power=0.7, eps=eps)
    assert np.allclose(params, want, rtol=1e-12, atol=1e-14)
    assert np.array_equal(params[:, 0], p0.numpy()[:, 0])  # its gradient is always 0: it stays (no 0 / 0)


def test_bad_arguments_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="eps >= 0"):
        Optimizer("adam", torch.zeros(3, 2), LR, eps=-1.0)
    with pytest.raises(ValueError, match=r"power in \[0, 1\]"):
        Optimizer("adam", torch.zeros(3, 2), LR, power=2.0)
    with pytest.raises(ValueError, match="use one of adam, gd, ngd, sign, signum"):
        Optimizer("sgd", torch.zeros(3, 2), LR)
    with pytest.raises(ValueError, match="members, parameters"):
        Optimizer("gd", torch.zeros(3), LR)
    with pytest.raises(ValueError, match="3 step sizes for 2 members"):
        Optimizer("gd", torch.zeros(2, 4), LR)

