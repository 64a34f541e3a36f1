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
The geometry column is what the implicit-bias results of ``book/bibliography.md`` say each rule's
direction converges to on separable problems (see ``maxmargin.py``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from . import fused

RULES = ("adam", "gd", "ngd", "sign", "signum")
GEOMETRY = {"gd": "l2", "ngd": "l2", "sign": "linf", "signum": "linf", "adam": "linf"}


class Optimizer:
    """One update rule over ``params`` (S, P), updated in place.

    ``lr``: S step sizes; ``decay``: (S, P) weight decay per entry, or None; ``betas``: Adam's
    (b1, b2) (``signum`` uses b1 as its momentum); ``eps``: Adam's epsilon. ``t`` counts the steps
    every member has taken (members that stop leave the buffer through ``keep``). ``compiled``: Adam on the
    CPU takes one compiled pass (``fused.adam_step``, the same update as ``direction``, other rounding).
    """

    def __init__(self, rule: str, params: torch.Tensor, lr: Sequence[float], decay: torch.Tensor | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, compiled: bool = True):
        if rule not in RULES:
            raise ValueError(f"unknown update rule {rule!r}; use one of {', '.join(RULES)}")
        if params.dim() != 2:
            raise ValueError(f"params must be (members, parameters); got shape {tuple(params.shape)}")
        if len(lr) != params.shape[0]:
            raise ValueError(f"{len(lr)} step sizes for {params.shape[0]} members")
        self.rule, self.params, self.decay, self.betas, self.eps = rule, params, decay, betas, eps
        self.compiled = compiled
        self._arrays: tuple | None = None  # numpy views of the state for the compiled pass, until ``keep``
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

    def arrays(self) -> tuple:
        """Numpy views of Adam's state on the CPU for the compiled pass: params, m, v (S, P), lr (S, 1), decay
        (S, P) or (0, 0) for none (made once until ``keep``)."""
        if self._arrays is None:
            decay = self.params.new_empty(0, 0) if self.decay is None else self.decay
            self._arrays = tuple(t.detach().numpy() for t in (self.params, self.m, self.v, self.lr, decay))
        return self._arrays

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
        return torch.div(self.m, update, out=update).div_(1 - b1**self.t)

    def step(self, grad: torch.Tensor) -> None:
        """One update of every member from ``grad`` (S, P), which it may overwrite (no autograd either way)."""
        if self.rule == "adam" and self.compiled and self.params.device.type == "cpu":
            self.t += 1
            p, m, v, lr, decay = self.arrays()
            fused.adam_step(p, grad.detach().numpy(), m, v, lr, decay, *self.betas, self.eps, self.t)
            return
        with torch.no_grad():
            update = self.direction(grad)
            if self.decay is not None:  # decoupled: p <- p - lr (direction + wd p)
                update = update.addcmul(self.params, self.decay)
            self.params.sub_(update.mul_(self.lr))
