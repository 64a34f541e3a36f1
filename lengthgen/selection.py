"""The exact rungs of the ladder: where what each update rule selects is known, and trajectories that reach it.

Two problems small enough to train to their limit in float64, full batch, with every rule of ``optim``:

* the **kernel rung** (``kernel_rung``): the logit of the key at offset delta is c(delta) = f(delta) . w with the
  RoPE features of ``maxmargin.features``; one query, keys at delta = 0, -1, ..., -(T-1), target delta = -K. Its
  geometries are those of ``maxmargin.NORMS``: ``"l2"``, ``"linf"`` and ``"pairs"``.
* the **attention rung** (``attention_rung``): one softmax attention layer on a FIXED training set of N sequences
  of T i.i.d. tokens; the query is the last position, the target the key K back. The logit of key j is
  x_q^T W x_j with W = Wq Wk^T (d_x x d_x) and inputs x_j = [one-hot token (V) ; f(j) (d)], f(j) the RoPE
  features of the absolute position j. Why these inputs: the position block gives logits
  f(T-1)^T W_pos f(j) = u . f(j), and f(j) is f(j - (T-1)) rotated pair by pair by the fixed angle (T-1) theta_p,
  so the position block alone spans exactly the kernel rung's functions of the offset, while the token blocks
  add the content part a real model also has (its token embedding is a learned table; one-hot tokens are that
  table in its most neutral form). Its geometries (Tarzanagh et al. 2023): ``"fro"`` (the Frobenius attention-SVM,
  the limit of gradient descent on the combined W), ``"nuclear"`` (that of factorised (Wq, Wk)) and ``"linf"``
  (the largest |W_ab|, the l-infinity analogue for sign descent and Adam on W).

  The constraints are x_q^T W (x_target - x_j) >= 1 for EVERY non-target key j, also when key j holds the same
  token as the target: the loss of both rungs is the cross-entropy of the target *position* among the keys
  (written as the softplus of a logsumexp, exact in float64 at any loss), which keeps pushing a same-token key
  down, so its hard-margin limit constrains every key. Such a key stays separable through its position features.
  (A read-out would not mind a same-token key; the position-selection loss is the one the attention-SVM results
  are stated for, Tarzanagh et al. 2023.)

A rung's parameters are either the end-to-end vector itself (``"linear"``: w, or W flattened row-major) or a
factorisation (``"factorised"``: per RoPE pair z_p = q_p conj(k_p) for the kernel, whose bias is the pair norm; Wq
Wk^T with square factors for attention, whose bias is the nuclear norm). ``run`` trains one rule from several
seeded initialisations with ``optim.Optimizer`` and records, at log-spaced checkpoints, the cosine of the
end-to-end iterate to every geometry's solution, two baselines (random directions; seed-to-seed), the loss, the
norm, and the update's anatomy (gradient norm, update size, Adam's sqrt(v_hat) against eps).

Shapes: S members (seeds), N training sequences, J keys per sequence, D end-to-end parameters, C checkpoints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import ConfigError
from .encodings import rope_frequencies
from .maxmargin import NORMS, cosine, features, hard_margin, kernel_constraints, norm_of
from .optim import GEOMETRY, RULES, Optimizer
from .task import generator, sample_tokens
from .train import cpu_threads

ATTENTION_GEOMETRIES = ("fro", "linf", "nuclear")
PARAMETRISATIONS = ("linear", "factorised")
SOLVER_NORM = {"l2": "l2", "linf": "linf", "pairs": "pairs", "fro": "l2", "nuclear": "nuclear"}
STREAM_RUNG, STREAM_INIT, STREAM_RANDOM = 20, 21, 22  # random streams apart from the task's
RANDOM_DIRECTIONS = 200  # random directions behind the random baseline


@dataclass
class Rung:
    """One separable selection problem: logits (S, N, J) of the keys, linear in the end-to-end parameter x (D,).

    ``name``: "kernel" or "attention". ``queries`` (N, d_q) and ``keys`` (N, J, d_k) are the inputs: the logit
    of key j in sequence n is queries[n] @ X @ keys[n, j] with X = x reshaped to ``shape`` (d_q, d_k); the kernel
    rung has d_q = 1 (queries are ones) and ``shape`` (1, d). ``target`` (N,) indexes the target key.
    """

    name: str
    queries: torch.Tensor  # (N, d_q) float64
    keys: torch.Tensor  # (N, J, d_k) float64
    target: torch.Tensor  # (N,) long
    shape: tuple[int, int]  # (d_q, d_k)
    settings: dict  # offset, train_length, dim, rope_base (and vocab, sequences, seed for attention)
    _solutions: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def geometries(self) -> tuple[str, ...]:
        return NORMS if self.name == "kernel" else ATTENTION_GEOMETRIES

    @property
    def dim(self) -> int:
        """D, the number of end-to-end parameters."""
        return self.shape[0] * self.shape[1]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) logits of every key for end-to-end parameters x (S, D)."""
        X = x.reshape(-1, *self.shape)
        return torch.einsum("nq,sqk,njk->snj", self.queries, X, self.keys)

    def _gaps(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) z_j - z_target, with -inf at the target."""
        z = self.logits(x)
        idx = self.target.expand(x.shape[0], -1)[..., None]
        return (z - z.gather(-1, idx)).scatter(-1, idx, float("-inf"))

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """(S,) mean over sequences of the cross-entropy of the target key, log(1 + sum_(j != t) e^(z_j - z_t)),
        computed as softplus(logsumexp of the gaps): accurate in float64 even when it is far below 1e-16."""
        return torch.nn.functional.softplus(torch.logsumexp(self._gaps(x), -1)).mean(-1)

    def logit_gradient(self, x: torch.Tensor) -> torch.Tensor:
        """(S, N, J) d loss / d logits at x (S, D), by hand: sigmoid(s) softmax_(j != t)(z_j) for the other keys
        and -sigmoid(s) for the target, s the logsumexp of the gaps. The target's entry is not p_t - 1, which
        float64 rounds to 0 once the loss is below 1e-16 while the other keys' entries are still resolved."""
        gaps = self._gaps(x)
        s = torch.logsumexp(gaps, -1, keepdim=True)
        g = torch.sigmoid(s) * torch.softmax(gaps, -1)  # zero at the target
        return g.scatter(-1, self.target.expand(x.shape[0], -1)[..., None], -torch.sigmoid(s)) / len(self.target)

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """(S, D) gradient of ``loss`` at x (S, D), exact in float64 at any loss (``logit_gradient``)."""
        return torch.einsum("snj,nq,njk->sqk", self.logit_gradient(x), self.queries, self.keys).flatten(1)

    def margins(self, x: torch.Tensor) -> torch.Tensor:
        """(S,) the smallest logit gap target minus any other key, over sequences: >= 1 at a hard-margin point."""
        return -self._gaps(x).amax(-1).amax(-1)

    def constraints(self) -> np.ndarray:
        """(N (J-1), D) rows vec(q_n (k_target - k_j)^T) for every sequence n and non-target key j."""
        rows = []
        for n in range(len(self.target)):
            t = int(self.target[n])
            diff = self.keys[n, t][None] - torch.cat([self.keys[n, :t], self.keys[n, t + 1:]])  # (J-1, d_k)
            rows.append((self.queries[n][None, :, None] * diff[:, None, :]).flatten(1))
        return torch.cat(rows).numpy()

    def solution(self, geometry: str) -> np.ndarray:
        """(D,) the hard-margin solution of one geometry in ``geometries`` (solved once, then cached)."""
        if geometry not in self.geometries:
            raise ConfigError(f"geometry={geometry!r}: the {self.name} rung has {', '.join(self.geometries)}")
        if geometry not in self._solutions:
            self._solutions[geometry] = hard_margin(self.constraints(), SOLVER_NORM[geometry], self.shape)
        return self._solutions[geometry]


def kernel_rung(offset: int, train_length: int, dim: int, rope_base: float = 10000.0) -> Rung:
    """Rung (a): c(delta) = f(delta) . w over the keys delta = 0, -1, ..., -(T-1); target delta = -K."""
    theta = rope_frequencies(dim, rope_base).double().numpy()
    kernel_constraints(offset, train_length, theta)  # checks 0 < K < T
    keys = torch.from_numpy(features(theta, -np.arange(train_length)))[None]  # (1, T, d)
    settings = {"offset": offset, "train_length": train_length, "dim": dim, "rope_base": rope_base}
    return Rung("kernel", torch.ones(1, 1, dtype=torch.float64), keys, torch.tensor([offset]), (1, dim), settings)


def attention_rung(offset: int, train_length: int, vocab: int, dim: int, sequences: int, rope_base: float = 10000.0,
                   seed: int = 0) -> Rung:
    """Rung (b): one attention layer, logit x_q^T W x_j, on a fixed seeded set of ``sequences`` token sequences.

    Inputs x_j = [one-hot(token_j) ; f(j)] (d_x = vocab + dim); keys are the positions 0..T-1 (the query, at
    T-1, included); the target is position T-1-K. D = d_x^2 parameters.
    """
    if not 0 < offset < train_length or vocab < 2 or sequences < 1:
        raise ConfigError(f"need 0 < offset ({offset}) < train_length ({train_length}), vocab >= 2 ({vocab}) "
                          f"and sequences >= 1 ({sequences})")
    theta = rope_frequencies(dim, rope_base).double().numpy()
    tokens = sample_tokens(vocab, sequences, train_length, generator(seed, STREAM_RUNG, train_length))
    onehot = torch.nn.functional.one_hot(tokens, vocab).double()  # (N, T, V)
    pos = torch.from_numpy(features(theta, np.arange(train_length)))  # (T, d)
    keys = torch.cat([onehot, pos[None].expand(sequences, -1, -1)], -1)  # (N, T, d_x)
    target = torch.full((sequences,), train_length - 1 - offset)
    settings = {"offset": offset, "train_length": train_length, "vocab": vocab, "dim": dim, "rope_base": rope_base,
                "sequences": sequences, "seed": seed}
    dx = vocab + dim
    return Rung("attention", keys[:, -1].clone(), keys, target, (dx, dx), settings)


def end_to_end(rung: Rung, parametrisation: str, params: torch.Tensor) -> torch.Tensor:
    """(S, D) end-to-end parameters from the trained ones (S, n_params)."""
    if parametrisation == "linear":
        return params
    if rung.name == "kernel":  # params = (q, k), each (Re ..., Im ...) over the P pairs; z_p = q_p conj(k_p)
        qr, qi, kr, ki = params.chunk(4, 1)
        return torch.cat([qr * kr + qi * ki, qi * kr - qr * ki], 1)
    wq, wk = (w.reshape(-1, *rung.shape) for w in params.chunk(2, 1))  # params = (Wq, Wk), each d_x x d_x
    return (wq @ wk.transpose(1, 2)).flatten(1)


def pullback(rung: Rung, parametrisation: str, params: torch.Tensor, grad_x: torch.Tensor) -> torch.Tensor:
    """(S, n_params) the gradient with respect to the trained parameters, from grad_x (S, D) by the chain rule
    through ``end_to_end``."""
    if parametrisation == "linear":
        return grad_x
    if rung.name == "kernel":
        qr, qi, kr, ki = params.chunk(4, 1)
        gre, gim = grad_x.chunk(2, 1)
        return torch.cat([gre * kr - gim * ki, gre * ki + gim * kr, gre * qr + gim * qi, gre * qi - gim * qr], 1)
    wq, wk = (w.reshape(-1, *rung.shape) for w in params.chunk(2, 1))
    G = grad_x.reshape(-1, *rung.shape)
    return torch.cat([(G @ wk).flatten(1), (G.transpose(1, 2) @ wq).flatten(1)], 1)


def expected_geometry(rung: Rung, rule: str, parametrisation: str = "linear") -> str | None:
    """The geometry the implicit-bias results name for this rule and parametrisation, or None where none does
    (sign-type rules on a factorisation)."""
    own = GEOMETRY[rule]
    if parametrisation == "factorised":
        return ("pairs" if rung.name == "kernel" else "nuclear") if own == "l2" else None
    return "fro" if (own == "l2" and rung.name == "attention") else own


def log_steps(steps: int, count: int) -> np.ndarray:
    """About ``count`` log-spaced checkpoint steps in [1, steps], distinct, always including ``steps``."""
    return np.unique(np.round(np.geomspace(1, steps, count)).astype(int))


@dataclass
class Trajectory:
    """One rule on one rung from S seeded initialisations, at checkpoints ``steps`` (C,)."""

    rung: str
    rule: str
    parametrisation: str
    lr: float
    seeds: list[int]
    steps: np.ndarray  # (C,) updates taken at each checkpoint
    cosine: dict[str, np.ndarray]  # geometry -> (S, C) cosine of the end-to-end iterate with that solution
    margin_ratio: dict[str, np.ndarray]  # geometry -> (S, C) normalised margin / that geometry's max margin, <= 1
    random: dict[str, np.ndarray]  # geometry -> (RANDOM_DIRECTIONS,) cosines of isotropic random directions
    seed_to_seed: np.ndarray  # (C,) mean cosine between the end-to-end iterates of different seeds
    loss: np.ndarray  # (S, C)
    norm: np.ndarray  # (S, C) |x|_2 of the end-to-end iterate
    margin: np.ndarray  # (S, C) smallest target-minus-other logit gap (Rung.margins)
    grad_norm: np.ndarray  # (S, C) |gradient|_2 of the trained parameters at the checkpoint's update
    update_max: np.ndarray  # (S, C) max |change of a parameter| / lr in that update (1 for sign; Adam: ~1 or less)
    update_norm: np.ndarray  # (S, C) |change|_2 / lr in that update
    adam_median: np.ndarray | None  # (S, C) median over entries of sqrt(v_hat) (Adam only; compare with eps)
    adam_max: np.ndarray | None  # (S, C) largest sqrt(v_hat)
    eps: float
    seconds: float
    final: np.ndarray  # (S, D) last end-to-end iterate

    @property
    def random_level(self) -> dict[str, float]:
        """geometry -> mean |cosine| of a random direction with its solution: what a cosine means by chance."""
        return {g: float(np.abs(c).mean()) for g, c in self.random.items()}

    def final_cosine(self) -> dict[str, np.ndarray]:
        """geometry -> (S,) cosine at the last checkpoint."""
        return {g: c[:, -1] for g, c in self.cosine.items()}


def run(rung: Rung, rule: str, lr: float, steps: int, seeds=(0, 1), parametrisation: str = "linear",
        checkpoints: int = 30, init_scale: float = 0.1, betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8) -> Trajectory:
    """Train ``rule`` (``optim.RULES``) on ``rung`` in float64, full batch, for ``steps`` updates of size ``lr``.

    Each seed draws its initial parameters as Gaussian entries of norm about ``init_scale`` (a factorisation
    needs a non-zero start); the seeds train as one batched ``optim.Optimizer``. The gradient is
    ``Rung.gradient`` (the cross-entropy's, exact in float64 at any loss) pulled back through ``end_to_end``.
    """
    if rule not in RULES or parametrisation not in PARAMETRISATIONS:
        raise ConfigError(f"rule={rule!r}, parametrisation={parametrisation!r}: use a rule in {', '.join(RULES)} "
                          f"and a parametrisation in {', '.join(PARAMETRISATIONS)}")
    if steps < 1 or lr <= 0 or len(seeds) < 1:
        raise ConfigError(f"need steps >= 1 ({steps}), lr > 0 ({lr}) and at least one seed")
    n_params = rung.dim if parametrisation == "linear" else 2 * rung.dim
    init = [torch.randn(n_params, generator=generator(s, STREAM_INIT, n_params), dtype=torch.float64) for s in seeds]
    params = torch.stack(init) * (init_scale / np.sqrt(n_params))
    opt = Optimizer(rule, params, [lr] * len(seeds), betas=betas, eps=eps)
    solutions = {g: rung.solution(g) for g in rung.geometries}
    gen = generator(0, STREAM_RANDOM, rung.dim)
    rand = torch.randn(RANDOM_DIRECTIONS, rung.dim, generator=gen, dtype=torch.float64).numpy()
    marks = log_steps(steps, checkpoints)
    rec: dict[str, list] = {k: [] for k in ("x", "loss", "margin", "grad", "umax", "unorm", "amed", "amax")}
    start, next_mark = time.perf_counter(), 0
    with cpu_threads(torch.device("cpu")):  # one thread: each step is a few tiny operations
        for t in range(1, steps + 1):
            grad = pullback(rung, parametrisation, opt.params,
                            rung.gradient(end_to_end(rung, parametrisation, opt.params)))
            mark = t == marks[next_mark]
            if mark:
                before, rec_grad = opt.params.clone(), grad.norm(dim=1)
            opt.step(grad)
            if mark:
                change = (opt.params - before) / lr
                x = end_to_end(rung, parametrisation, opt.params)
                rec["loss"].append(rung.loss(x))
                rec["margin"].append(rung.margins(x))
                rec["x"].append(x.numpy().copy())
                rec["grad"].append(rec_grad)
                rec["umax"].append(change.abs().amax(1))
                rec["unorm"].append(change.norm(dim=1))
                if rule == "adam":
                    denom = opt.adam_denominator()
                    rec["amed"].append(denom.median(1).values)
                    rec["amax"].append(denom.amax(1))
                next_mark += 1
    seconds = time.perf_counter() - start
    xs = np.stack(rec["x"], 1)  # (S, C, D)
    stack = lambda k: torch.stack(rec[k], 1).numpy() if rec[k] else None  # noqa: E731
    margin = stack("margin")
    S = len(seeds)
    pairs = [(i, j) for i in range(S) for j in range(i + 1, S)]
    seed_to_seed = (np.mean([cosine(xs[i], xs[j]) for i, j in pairs], 0) if pairs else np.full(len(marks), np.nan))
    return Trajectory(
        rung=rung.name, rule=rule, parametrisation=parametrisation, lr=lr, seeds=list(seeds), steps=marks,
        cosine={g: cosine(xs, sol) for g, sol in solutions.items()},
        margin_ratio={g: margin * norm_of(sol, SOLVER_NORM[g], rung.shape) / norm_of(xs, SOLVER_NORM[g], rung.shape)
                      for g, sol in solutions.items()},
        random={g: cosine(rand, sol) for g, sol in solutions.items()},
        seed_to_seed=seed_to_seed, loss=stack("loss"), norm=np.linalg.norm(xs, axis=-1), margin=margin,
        grad_norm=stack("grad"), update_max=stack("umax"), update_norm=stack("unorm"),
        adam_median=stack("amed"), adam_max=stack("amax"), eps=eps, seconds=seconds, final=xs[:, -1],
    )


@dataclass(frozen=True)
class Recipe:
    """One trajectory's settings for ``run``: the rule, its step size and horizon, and what it trains."""

    rule: str
    lr: float
    steps: int
    parametrisation: str = "linear"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    init_scale: float = 0.1

    @property
    def signlike(self) -> bool:
        """Adam with b2 = b1 (and, in ``LADDER``, a negligible eps): the sign-like form of its update."""
        return self.rule == "adam" and self.betas[0] == self.betas[1]

    @property
    def label(self) -> str:
        extra = "" if self.betas == (0.9, 0.999) and self.eps == 1e-8 else f", b2={self.betas[1]:g}, eps={self.eps:g}"
        fact = f", factorised, init {self.init_scale:g}" if self.parametrisation == "factorised" else ""
        return f"{self.rule} (lr {self.lr:g}{extra}{fact}, {self.steps} steps)"


# The ladder's check, per rung: every rule at a step size and horizon where it settles (measured on this
# machine; ``ladder(..., scale=0.1)`` shortens every horizon for quick runs). The factorisations train with gradient
# descent (the rule the pair-norm and nuclear-norm results are stated for; slow, like GD's 1/log t) and with
# normalised gradient descent from a small start (the same geometry reached within the budget: its end-to-end
# norm grows like t^2, so its step is small to keep the loss inside float64's range). Adam appears twice: with the book's
# defaults, and with b2 = b1 and eps = 1e-300 (eps negligible, as the l-infinity result assumes; not 0, which makes
# 0 / 0 on parameters whose gradient is always 0, such as W's rows for tokens that never sit at the query).
LADDER = {
    "kernel": [Recipe("gd", 1.0, 100_000), Recipe("ngd", 0.1, 10_000), Recipe("sign", 0.01, 10_000),
               Recipe("signum", 0.01, 10_000), Recipe("adam", 0.01, 100_000),
               Recipe("adam", 0.01, 20_000, betas=(0.9, 0.9), eps=1e-300), Recipe("gd", 1.0, 100_000, "factorised"),
               Recipe("ngd", 0.001, 50_000, "factorised", init_scale=1e-3)],
    "attention": [Recipe("gd", 1.0, 100_000), Recipe("ngd", 0.05, 10_000), Recipe("sign", 0.01, 10_000),
                  Recipe("signum", 0.01, 10_000), Recipe("adam", 0.01, 100_000),
                  Recipe("adam", 0.01, 20_000, betas=(0.9, 0.9), eps=1e-300), Recipe("gd", 1.0, 100_000, "factorised"),
                  Recipe("ngd", 0.001, 40_000, "factorised", init_scale=1e-3)],
}


def ladder(rung: Rung, recipes: list[Recipe] | None = None, scale: float = 1.0, seeds=(0, 1),
           checkpoints: int = 30) -> list[Trajectory]:
    """``run`` every recipe (default ``LADDER[rung.name]``) on ``rung``, horizons multiplied by ``scale``."""
    recipes = LADDER[rung.name] if recipes is None else recipes
    return [run(rung, r.rule, r.lr, max(1, round(r.steps * scale)), seeds, r.parametrisation, checkpoints,
                r.init_scale, r.betas, r.eps) for r in recipes]


def summary(tr: Trajectory, rung: Rung) -> dict:
    """One row of the ladder's table: the last checkpoint's cosines and margin ratios per geometry (mean and
    smallest over seeds), the baselines, and whether the rule reached its own geometry: ``reached_own`` (cosine
    >= 0.99 to the solver's solution, every seed) and ``own_margin`` (margin ratio >= 0.99, every seed: the right
    test where the solution is a face, not a point, as l-infinity's can be: ``maxmargin.linf_spread``)."""
    own = expected_geometry(rung, tr.rule, tr.parametrisation)
    row = {"rung": tr.rung, "rule": tr.rule, "parametrisation": tr.parametrisation, "lr": tr.lr,
           "steps": int(tr.steps[-1]), "own": own, "seconds": tr.seconds, "loss": float(tr.loss[:, -1].mean()),
           "seed_to_seed": float(tr.seed_to_seed[-1])}
    for g in rung.geometries:
        row[f"cos_{g}"] = float(tr.cosine[g][:, -1].mean())
        row[f"cos_{g}_min"] = float(tr.cosine[g][:, -1].min())
        row[f"ratio_{g}"] = float(tr.margin_ratio[g][:, -1].mean())
        row[f"ratio_{g}_min"] = float(tr.margin_ratio[g][:, -1].min())
        row[f"random_{g}"] = tr.random_level[g]
    row["reached_own"] = None if own is None else bool(row[f"cos_{own}_min"] >= 0.99)
    row["own_margin"] = None if own is None else bool(row[f"ratio_{own}_min"] >= 0.99)
    return row


# The ladder's table and the numbers read from it ----------------------------------------------------------------

def reached(row: dict) -> bool:
    """Whether a ``summary`` row's rule reached its own geometry, by the cosine or by the margin ratio."""
    return bool(row["reached_own"] or row["own_margin"])


def ladder_rows(runs: list[Trajectory], rung: Rung, recipes: list[Recipe] | None = None) -> list[dict]:
    """``summary`` of each run of ``ladder(rung, recipes)`` (default ``LADDER[rung.name]``), with the recipe's
    ``signlike`` and a short ``label`` (the rule, ", factorised", ", b2 = b1, eps ~ 0" for sign-like Adam)."""
    recipes = LADDER[rung.name] if recipes is None else recipes
    rows = []
    for tr, rec in zip(runs, recipes, strict=True):
        row = summary(tr, rung)
        row["label"] = row["rule"] + (", factorised" if row["parametrisation"] == "factorised" else "") + (
            ", b2 = b1, eps ~ 0" if rec.signlike else "")
        row["signlike"] = rec.signlike
        rows.append(row)
    return rows


def ladder_header(rung: Rung) -> list[str]:
    """The columns of ``ladder_table`` for ``rung``'s geometries."""
    return (["rule", "lr", "steps", "its geometry"] + [f"cosine to {g}" for g in rung.geometries]
            + ["margin ratio (own)", "random (mean |cos|)", "seed to seed", "reached its own", "seconds"])


def ladder_table(rows: list[dict], rung: Rung) -> list[list[str]]:
    """One formatted row (``ladder_header``) per ``ladder_rows`` row: the cosine to every geometry at the end, the
    margin ratio to the rule's own geometry, the largest random baseline, seed to seed, reached or not, seconds."""
    geos = rung.geometries
    return [[r["label"], f"{r['lr']:g}", str(r["steps"]), r["own"] or "none named"]
            + [f"{r[f'cos_{g}']:.3f}" for g in geos]
            + ["-" if r["own"] is None else f"{r['ratio_' + r['own']]:.3f}"]
            + [f"{max(r[f'random_{g}'] for g in geos):.2f}", f"{r['seed_to_seed']:.3f}",
               "-" if r["own"] is None else ("yes" if reached(r) else "no"), f"{r['seconds']:.1f}"]
            for r in rows]


def ladder_numbers(rows: list[dict]) -> dict[str, int | str]:
    """Over the rules that have a geometry of their own: how many there are (``named``), how many reached it
    (``reached``), and the others with their steps, cosine and margin ratio (``missed``, "none" when none)."""
    named = [r for r in rows if r["own"] is not None]
    missed = [f"{r['label']} ({r['steps']} steps: cosine {r['cos_' + r['own']]:.3f}, margin ratio "
              f"{r['ratio_' + r['own']]:.3f})" for r in named if not reached(r)]
    return {"reached": sum(reached(r) for r in named), "named": len(named), "missed": "; ".join(missed) or "none"}


def adam_numbers(tr: Trajectory) -> dict[str, float]:
    """Adam's update at the last checkpoint of ``tr`` (means over seeds): its ``eps``, the median sqrt(v_hat) over
    eps (``median_over_eps``), the largest update in units of lr (``update_max``) and the gradient norm."""
    if tr.adam_median is None:
        raise ConfigError(f"rule {tr.rule!r}: Adam's numbers need an Adam run (rule='adam')")
    return {"eps": tr.eps, "median_over_eps": float(tr.adam_median[:, -1].mean() / tr.eps),
            "update_max": float(tr.update_max[:, -1].mean()), "grad_norm": float(tr.grad_norm[:, -1].mean())}


def adam_reading(tr: Trajectory) -> str:
    """What Adam's update at the end of ``tr`` is (markdown with math): gradient-like when eps dominates the
    denominator (median sqrt(v_hat) <= eps / 10), neither when they are of one order, else how far below sign
    descent's it is; when eps dominates, also when the turn away from the sign-like step began (the first
    checkpoint whose largest update fell below lr / 2) against when the median sqrt(v_hat) fell below eps."""
    numbers = adam_numbers(tr)
    ratio, umax = numbers["median_over_eps"], numbers["update_max"]
    shrinking = bool((tr.grad_norm[:, -1] < tr.grad_norm[:, -2]).all())
    if ratio <= 0.1:
        reading = ("So $\\epsilon$ dominates the denominator: the update is close to $\\hat m/\\epsilon$, a momentum form of "
                   "gradient descent (step $\\mathrm{lr}/\\epsilon$), whose geometry is $\\ell_2$'s, not the sign-like step "
                   "the $\\ell_\\infty$ result assumes; with $\\beta_2 = \\beta_1$ and a negligible $\\epsilon$ it is sign-like.")
    elif ratio < 10:
        reading = "So $\\epsilon$ and $\\sqrt{\\hat v}$ are of the same order: the update is neither sign-like nor gradient-like."
    elif umax < 0.5 and shrinking:
        reading = ("So $\\epsilon$ is not what holds Adam back here. The update is well below sign descent's: $\\hat v$ "
                   "averages the squared gradient over about $1/(1-\\beta_2) = 1000$ steps while the gradient keeps shrinking "
                   "(the figure), so each coordinate is divided by an older, larger gradient scale, and the step is not the "
                   "sign-like one the $\\ell_\\infty$ result assumes; with $\\beta_2 = \\beta_1$ it is.")
    else:
        reading = "So $\\epsilon$ is not what holds Adam back here, and the update is " + (
            "close to sign descent's." if umax >= 0.5 else "well below sign descent's.")
    steps = np.asarray(tr.steps)
    halved = steps[tr.update_max.mean(0) < 0.5]
    crossed = steps[tr.adam_median.mean(0) < tr.eps]
    if ratio <= 0.1 and len(halved) and (not len(crossed) or halved[0] < crossed[0]):
        until = f"until step {int(crossed[0]):,}" if len(crossed) else "throughout"
        reading += (f" The turn away from the sign-like step started earlier, though: the largest update fell below half "
                    f"of lr by step {int(halved[0]):,}, while the median $\\sqrt{{\\hat v}}$ stayed above $\\epsilon$ "
                    f"{until}; $\\hat v$ averages the squared gradient over about $1/(1-\\beta_2) = 1000$ steps of a "
                    "shrinking gradient, so each coordinate is divided by an older, larger scale.")
    return reading


def kernel_rung_numbers(rows: list[dict], rung: Rung) -> dict[str, float]:
    """The kernel rung's numbers the prose cites: default Adam's cosine to l-infinity and to L2
    (``adam_default``, ``adam_default_l2``), sign-like Adam's to l-infinity (``adam_signlike``), and how close the
    l-infinity and pair-norm solutions are to the L2 one (``linf_l2``, ``pairs_l2``)."""
    adam = {r["signlike"]: r for r in rows if r["rule"] == "adam"}
    return {"adam_default": adam[False]["cos_linf"], "adam_default_l2": adam[False]["cos_l2"],
            "adam_signlike": adam[True]["cos_linf"],
            "linf_l2": float(cosine(rung.solution("linf"), rung.solution("l2"))),
            "pairs_l2": float(cosine(rung.solution("pairs"), rung.solution("l2")))}
