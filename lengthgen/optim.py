"""The one optimiser of the package: every update rule the book uses, over a flat (S, P) buffer.

S members (runs trained as one batched ensemble) each hold P parameters in one row of ``params``.
Each member has its own step size and, optionally, its own decoupled weight decay per entry. The
update rules, with g a member's gradient row and lr its step size:

============  ======================================================================  ==================
rule          update of a member's row p                                              its geometry
============  ======================================================================  ==================
``gd``        p <- p - lr g                                                           L2 (Euclidean)
``ngd``       p <- p - lr g / |g|_2          (normalised gradient descent)            L2, reached faster
``sign``      p <- p - lr sign(g)            (sign descent: steepest descent in l-inf) l-infinity
``signum``    m <- b1 m + (1 - b1) g,  p <- p - lr sign(m)   (sign descent with momentum) l-infinity
``adam``      Adam: p <- p - lr m_hat / (sqrt(v_hat) + eps)                            l-inf (full batch)
============  ======================================================================  ==================

Weight decay is decoupled (AdamW's form) for every rule: p <- p - lr (update + wd p).

The step size is constant by default. ``power`` = a > 0 makes it decay as in Zhang, Zou & Cao (2024)'s theorem for
Adam: the t-th update (t = 1, 2, ...) takes lr (t + 1)^-a, that is eta_0 (s + 2)^-a counting s = t - 1 from 0,
with eta_0 = lr. Adam with ``eps`` = 0, as that theorem neglects eps, leaves a coordinate whose second moment is
exactly 0 where it is (its first moment is 0 too: every gradient it has seen was 0) instead of dividing 0 by 0.
The geometry column is what the implicit-bias results of ``book/bibliography.md`` say each rule's
direction converges to on separable problems (see ``maxmargin.py``).

Every rule lives here, in torch operations (``Optimizer.direction``) and compiled for the CPU: ``adam_step``, Adam
with its decay in one pass (``Optimizer.step`` and the engine's stretches, ``engine.stretch``), ``plain_step``, gradient
and sign descent without decay as the torch operations round them (the stretches), and ``update_in_place``, every
rule without decay (``selection``'s loops). The compiled forms round differently, so
each is tested against the torch path or the hand computation (tests/test_optim.py); every step size comes from
``schedule`` through ``Optimizer.current_lr`` (``selection`` calls ``schedule`` itself, compiled).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import torch
from numba import njit

from .engine.denormals import flushed

RULES = ("adam", "gd", "ngd", "sign", "signum")
GEOMETRY = {"gd": "l2", "ngd": "l2", "sign": "linf", "signum": "linf", "adam": "linf"}


class Optimizer:
    """One update rule over ``params`` (S, P), updated in place.

    ``lr``: S step sizes; ``decay``: (S, P) weight decay per entry, or None; ``betas``: Adam's
    (b1, b2) (``signum`` uses b1 as its momentum); ``eps``: Adam's epsilon (>= 0); ``power``: the step size's decay
    exponent a in [0, 1] (0: constant; see the module docstring). ``t`` counts the steps
    every member has taken (members that stop leave the buffer through ``keep``). ``compiled``: Adam on the
    CPU takes one compiled pass (``adam_step``, the same update as ``direction``, other rounding) when
    eps > 0; with eps = 0 it takes ``direction``, which guards 0 / 0. Every update, on either path, takes its step
    sizes from ``current_lr``.
    """

    def __init__(self, rule: str, params: torch.Tensor, lr: Sequence[float], decay: torch.Tensor | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, compiled: bool = True,
                 power: float = 0.0):
        if rule not in RULES:
            raise ValueError(f"unknown update rule {rule!r}; use one of {', '.join(RULES)}")
        if params.dim() != 2:
            raise ValueError(f"params must be (members, parameters); got shape {tuple(params.shape)}")
        if len(lr) != params.shape[0]:
            raise ValueError(f"{len(lr)} step sizes for {params.shape[0]} members")
        if eps < 0 or not 0 <= power <= 1:
            raise ValueError(f"need eps >= 0 (got {eps}) and a step-size decay power in [0, 1] (got {power})")
        self.rule, self.params, self.decay, self.betas, self.eps = rule, params, decay, betas, eps
        self.compiled, self.power = compiled and eps > 0, power
        self._arrays: tuple[np.ndarray, UpdateArrays] | None = None  # numpy views for the compiled pass, until ``keep``
        self.lr = torch.tensor([float(x) for x in lr], dtype=params.dtype, device=params.device).view(-1, 1)
        self.t = 0
        self.m = torch.zeros_like(params) if rule in ("adam", "signum") else None
        self.v = torch.zeros_like(params) if rule == "adam" else None

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the members at ``rows`` (indices into the current buffer), in that order."""
        self.params = self.params.index_select(0, rows)
        self.lr = self.lr.index_select(0, rows)
        if self.decay is not None:
            self.decay = self.decay.index_select(0, rows)
        if self.m is not None:
            self.m = self.m.index_select(0, rows)
        if self.v is not None:
            self.v = self.v.index_select(0, rows)
        self._arrays = None

    def update_arrays(self) -> tuple[np.ndarray, UpdateArrays]:
        """Numpy views, on the CPU, of the parameters (S, P) and of the rule's state for the compiled update
        (``update_step``), its step sizes those of the next update (``current_lr`` at t + 1). The views are made once
        until ``keep`` (the step sizes too when they are constant: a view of ``lr``)."""
        if self._arrays is None:
            none = self.params.new_empty(0, 0)
            decay, m, v = (none if a is None else a for a in (self.decay, self.m, self.v))
            params, m, v, decay = (t.detach().numpy() for t in (self.params, m, v, decay))
            self._arrays = params, UpdateArrays(RULES.index(self.rule), m, v, self.current_lr(self.t + 1).numpy(),
                                                decay, *self.betas, self.eps)
        params, state = self._arrays
        return params, state if self.power == 0 else state._replace(lr=self.current_lr(self.t + 1).numpy())

    def stretches(self) -> bool:
        """Whether ``update_step`` computes this optimiser's updates as ``step`` does, to the bit, so that compiled
        stretches of steps (``engine.stretch``) may take them: Adam's compiled pass, and gradient or sign descent
        without weight decay, with a constant step size, on the CPU."""
        plain = self.rule in ("gd", "sign") and self.decay is None
        return ((self.rule == "adam" and self.compiled) or plain) and self.power == 0 and \
            self.params.device.type == "cpu"

    def current_lr(self, t: int | None = None) -> torch.Tensor:
        """(S, 1) the step sizes of the update numbered ``t`` (default: ``self.t``, the last one taken): lr, or
        lr (t + 1)^-power. The one place a step size is made."""
        t = self.t if t is None else t
        return self.lr if self.power == 0 else self.lr * schedule(t, self.power)

    def adam_denominator(self) -> torch.Tensor:
        """(S, P) sqrt(v_hat), Adam's per-entry scale before eps is added (to compare with eps)."""
        if self.v is None or self.t == 0:
            raise ValueError("only Adam has a second moment, and only after a step")
        return self.v.sqrt() / math.sqrt(1 - self.betas[1] ** self.t)

    @torch.no_grad()
    def direction(self, grad: torch.Tensor) -> torch.Tensor:
        """The update before the step size and weight decay, from ``grad`` (S, P), which it may overwrite.
        Advances the rule's state (moments, ``t``)."""
        self.t += 1
        b1, b2 = self.betas
        if self.rule == "gd":
            return grad
        if self.rule == "ngd":  # divided by its largest entry first: |g|^2 underflows once |g| < ~1e-154 in float64
            tiny = torch.finfo(grad.dtype).tiny
            grad.div_(grad.abs().amax(1, keepdim=True).clamp_min(tiny))
            return grad.div_(grad.norm(dim=1, keepdim=True).clamp_min(tiny))
        if self.rule == "sign":
            return grad.sign_()
        if self.rule == "signum":
            self.m.lerp_(grad, 1 - b1)
            return torch.sign(self.m)
        self.m.lerp_(grad, 1 - b1)
        self.v.lerp_(grad.mul_(grad), 1 - b2)
        update = self.v.sqrt().div_(math.sqrt(1 - b2**self.t)).add_(self.eps)
        if self.eps == 0:  # v = 0 exactly only where every gradient so far was 0, and so m = 0: no move there
            return torch.where(update > 0, self.m / update, 0.0).div_(1 - b1**self.t)
        return torch.div(self.m, update, out=update).div_(1 - b1**self.t)

    def step(self, grad: torch.Tensor) -> None:
        """One update of every member from ``grad`` (S, P), which it may overwrite (no autograd either way)."""
        if self.rule == "adam" and self.compiled and self.params.device.type == "cpu":
            params, state = self.update_arrays()
            self.t += 1
            with flushed():  # subnormals as zero, as in a stretch of compiled steps (engine.denormals)
                adam_step(params, grad.detach().numpy(), state, self.t)
            return
        with torch.no_grad():
            update = self.direction(grad)
            if self.decay is not None:  # decoupled: p <- p - lr (direction + wd p)
                update = update.addcmul(self.params, self.decay)
            self.params.sub_(update.mul_(self.current_lr()))


@njit(cache=True)
def schedule(t: int, power: float) -> float:
    """(t + 1)^-power: the factor of the t-th update's step size (t >= 1; Zhang, Zou & Cao's eta_0 (s + 2)^-a with
    s = t - 1), the one formula of a decaying step, for ``Optimizer.current_lr`` and the compiled loops of
    ``selection`` (the same libm pow either way: the same bits)."""
    return (t + 1.0) ** -power


class UpdateArrays(NamedTuple):
    """A rule's state as the compiled update reads it (``update_step``; ``Optimizer.update_arrays``), numpy arrays in
    the parameters' dtype."""

    code: int  # the rule, as its index in RULES
    m: np.ndarray  # (S, P) the first moment (Adam), else (0, 0)
    v: np.ndarray  # (S, P) the second moment (Adam), else (0, 0)
    lr: np.ndarray  # (S, 1) the members' step sizes of the update
    decay: np.ndarray  # (S, P) weight decay per entry, or (0, 0) for none
    b1: float
    b2: float
    eps: float


@njit(cache=True, error_model="numpy", fastmath={"contract", "arcp"}, nogil=True)
def adam_step(params, grad, adam, t):
    """The t-th AdamW update (t >= 1) in place, compiled: ``Optimizer.direction``'s Adam with its decoupled decay,
    in the form of ``torch.optim.AdamW`` (decay first, then the bias-corrected step), in the parameters' dtype
    (tests/test_optim.py checks both against torch). params, grad (S, P); adam: ``UpdateArrays`` (m, v updated).

        p <- p - lr wd p
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
        p <- p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """
    b1, b2, lr, decay = adam.b1, adam.b2, adam.lr, adam.decay
    c = np.array([b1, 1 - b1, b2, 1 - b2, 1 / math.sqrt(1 - b2**t), adam.eps]).astype(params.dtype)
    beta1, rest1, beta2, rest2, root2, eps_ = c[0], c[1], c[2], c[3], c[4], c[5]
    for s in range(params.shape[0]):
        rates = np.array([lr[s, 0], lr[s, 0] / (1 - b1**t)]).astype(params.dtype)
        rate, step = rates[0], rates[1]
        p, g, ms, vs = params[s], grad[s], adam.m[s], adam.v[s]
        if decay.shape[0] > 0:
            wd = decay[s]
            for k in range(p.shape[0]):
                p[k] -= rate * wd[k] * p[k]
        for k in range(p.shape[0]):
            gk = g[k]
            mk = ms[k] * beta1 + rest1 * gk
            vk = vs[k] * beta2 + rest2 * (gk * gk)
            ms[k] = mk
            vs[k] = vk
            p[k] -= step * mk / (np.sqrt(vk) * root2 + eps_)


# the rules ``plain_step`` computes as the torch operations do (a product, then a difference: no fused multiply-add),
# by their codes (``RULES.index``)
GD, SIGN = RULES.index("gd"), RULES.index("sign")


@njit(cache=True, error_model="numpy", nogil=True)
def plain_step(params, grad, state):
    """Gradient descent or sign descent (``state.code``: GD or SIGN) without weight decay, in place, compiled:
    ``Optimizer.step``'s torch update to the bit (tests/test_stretches.py), which rounds the product first, then the
    difference, and whose sign is 0 at 0 and at NaN. params, grad (S, P); state: ``UpdateArrays``.

        gd:   p <- p - (lr g)
        sign: p <- p - (lr sign(g))
    """
    for s in range(params.shape[0]):
        rate = state.lr[s, 0]
        p, g = params[s], grad[s]
        if state.code == GD:
            for k in range(p.shape[0]):
                p[k] -= g[k] * rate
        else:
            zero = rate - rate  # in the parameters' dtype, as every operand here (a literal would be a float64)
            for k in range(p.shape[0]):
                sign = np.sign(g[k])
                if not (sign > zero or sign < zero):  # torch's sign: +0 at 0, -0 and NaN
                    sign = zero
                p[k] -= sign * rate


@njit(cache=True, nogil=True)
def update_step(params, grad, state, t):
    """The t-th update (t >= 1) of ``state``'s rule (``UpdateArrays``), compiled: ``adam_step`` for Adam,
    ``plain_step`` for gradient and sign descent (without weight decay: ``Optimizer.stretches``)."""
    if state.code == GD or state.code == SIGN:
        plain_step(params, grad, state)
    else:
        adam_step(params, grad, state, t)


class RuleArrays(NamedTuple):
    """A rule's state and settings as ``update_in_place`` reads them, float64."""

    m: np.ndarray  # (S, P) the first moment (adam, signum)
    v: np.ndarray  # (S, P) the second moment (adam)
    lr: np.ndarray  # (S,) the members' step sizes of the update
    b1: float
    b2: float
    eps: float


@njit(cache=True)
def update_in_place(code: int, params: np.ndarray, grad: np.ndarray, rule: RuleArrays, t: int) -> None:
    """The t-th update (t >= 1) of rule ``RULES[code]`` without weight decay, compiled: ``Optimizer.step``'s update
    (the same formulas, other rounding; tests/test_optim.py checks it against the hand computation) for loops of many
    tiny steps that must not pay Python's cost per step (``selection.run``). params, grad: (S, P) float64; rule:
    ``RuleArrays`` (m, v updated; m unused by gd, ngd, sign, v by all but adam). Adam with eps = 0 leaves an entry
    whose v is 0 where it is, as ``direction`` does."""
    m, v, lr, b1, b2, eps = rule.m, rule.v, rule.lr, rule.b1, rule.b2, rule.eps
    S, P = params.shape
    c1, c2 = 1.0 / (1.0 - b1**t), 1.0 / math.sqrt(1.0 - b2**t)
    for s in range(S):
        g, p, rate = grad[s], params[s], lr[s]
        if code == 1:  # gd
            for k in range(P):
                p[k] -= rate * g[k]
        elif code == 2:  # ngd, divided by its largest entry first (as ``direction``: no underflow of |g|^2)
            top = 0.0
            for k in range(P):
                top = max(top, abs(g[k]))
            if top > 0.0:
                total = 0.0
                for k in range(P):
                    total += (g[k] / top) ** 2
                norm = math.sqrt(total)  # of g / top; dividing by top first keeps a denormal top from overflowing
                for k in range(P):
                    p[k] -= rate * (g[k] / top / norm)
        elif code == 3:  # sign
            for k in range(P):
                p[k] -= rate * np.sign(g[k])
        elif code == 4:  # signum
            for k in range(P):
                m[s, k] = b1 * m[s, k] + (1.0 - b1) * g[k]
                p[k] -= rate * np.sign(m[s, k])
        else:  # adam
            for k in range(P):
                m[s, k] = b1 * m[s, k] + (1.0 - b1) * g[k]
                v[s, k] = b2 * v[s, k] + (1.0 - b2) * g[k] * g[k]
                root = math.sqrt(v[s, k]) * c2 + eps
                if root > 0.0:
                    p[k] -= rate * m[s, k] * c1 / root
