"""The prediction made before training: what a rule's geometry and growth say about accuracy beyond the window.

Three predictions, none reading a trained model or a trained result:

* the **limit prediction** (``first_reach``): the implicit-bias results give a direction in the limit of
  infinite norm. There the attention puts all its weight on the highest logit, so the max-margin kernel of
  the rule's geometry keeps the target right at every length until the first beyond-window offset whose
  c(delta) reaches the target's c(-K), and no further. No scale enters: the answer is a length, or none up to
  a horizon (``LIMIT_HORIZON`` training lengths).
* the **finite-step prediction** (``growth``, ``forecast_config``): the scale comes from the optimiser. The
  kernel is taken on its limit direction w_hat (in-window margin 1) at scale s, c = s f . w_hat, and s grows by
  the rule's own step computed on that ray with the kernel rung's loss (the cross-entropy of the target offset,
  ``selection.kernel_rung``): a sign-type step moves every coordinate by lr, so s grows by lr / |w_hat|_inf a
  step; a normalised step moves the Euclidean norm by lr (lr / |w_hat|_2); Adam's step is its update on the
  ray's gradient (moments and eps included), measured in l-infinity; gradient descent moves s by the gradient's
  component along w_hat, which shrinks like e^-s and so gives s ~ log t (Soudry et al. 2018). ``growth_check``
  sets each law against the exact kernel rung (``selection.run``). The dilution law (``maxmargin.predict``)
  turns the kernel at the reached scale into accuracy by length.
* the **spread over seeds** (``lead``): the target's lead in logits over the best other offset of each length's
  window at the reached scale. Where it is large every seed's kernel, close to the limit direction, keeps the
  target; where it is small, how far a seed's kernel departs from that direction decides on which side a peak
  falls, so the account orders the rows by how much their seeds should disagree (it gives no size for it).

``heldout_predictions`` makes every prediction of a grid from its configs alone; ``score_rows`` joins them with
trained records afterwards, and the scores (mean absolute error by length, within-rule Spearman, yes/no verdicts
at every bar) are set against two baselines: each rule's mean accuracy on the development grid, and the
development grid's mean over all rules (a predictor that ignores the rule).
What chapter 10b shows of all this (tables, cited numbers, readings) is built in
``lengthgen.chapters.ch10b_prediction``.

Shapes: d kernel coefficients (2 x the RoPE pairs), n lengths, S seeds.
"""

from __future__ import annotations

import functools
import json
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from .config import Config, ConfigError
from .maxmargin import MaxMargin, features, norm_of, predict, solve
from .optim import GEOMETRY
from .train import cpu_threads

LIMIT_HORIZON = 64  # the limit prediction looks this many training lengths far
TIE = 1e-9  # a beyond-window offset "reaches" the target within this many in-window margins (float64 rounding)
LIMIT_SCALE = 1e3  # the limit prediction's accuracy: the kernel at this many in-window margins (all weight on the top)
GROWTH_RULES = ("gd", "ngd", "sign", "signum", "adam")
# Gaussian draws per target class in this module's accuracy predictions: V x 128 samples per length, a standard
# error of at most 0.011 at V = 16 (0.002 near accuracy 0.99); a quarter of maxmargin's default, for speed.
PREDICT_DRAWS = 128
BARS = (0.5, 0.8, 0.9, 0.95, 0.99)  # the yes/no verdict "accuracy >= bar", shown at every bar (none is chosen)


def one_thread(fn: Callable) -> Callable:
    """Run ``fn`` with one intra-op CPU thread (``train.cpu_threads``): the predictions are many small tensor
    operations, several times slower when split over threads on a busy machine."""
    @functools.wraps(fn)
    def wrapped(*args: object, **kwargs: object) -> object:
        with cpu_threads(torch.device("cpu")):
            return fn(*args, **kwargs)
    return wrapped


# The limit prediction --------------------------------------------------------------------------------------------

def first_reach(solution: MaxMargin, max_multiple: int = LIMIT_HORIZON) -> int | None:
    """The first evaluation length L whose window holds a beyond-window offset delta in [-(L-1), -T] with
    c(delta) >= c(-K) (within ``TIE`` in-window margins): where the limit kernel stops picking the target.
    None when no offset out to ``max_multiple`` x the training length reaches it. Needs nothing trained."""
    T = solution.train_length
    if max_multiple < 1:
        raise ConfigError(f"max_multiple={max_multiple}: look at least one training length far (>= 1)")
    kern = solution.kernel(-np.arange(max_multiple * T))
    scale = solution.in_window_margin()
    reach = np.flatnonzero(kern[T:] >= kern[solution.offset] - TIE * scale)
    return int(T + reach[0] + 1) if len(reach) else None


@functools.lru_cache(maxsize=None)
def solution_for(offset: int, train_length: int, dim: int, rope_base: float, geometry: str) -> MaxMargin:
    """``maxmargin.solve``, once per process."""
    return solve(offset, train_length, dim, rope_base, geometry)


def limit_table(settings: Sequence[tuple[int, int, int, float]], geometries: Sequence[str],
                horizon: int = LIMIT_HORIZON) -> list[dict]:
    """One row per (offset, train_length, dim, rope_base) of ``settings``: ``first_reach`` of every geometry
    (``reach[g]``, a length or None) and the beyond-window margin out to ``horizon`` x in units of the in-window
    margin (``far[g]``: negative once an offset has reached the target)."""
    rows = []
    for K, T, d, base in settings:
        sols = {g: solution_for(K, T, d, base, g) for g in geometries}
        rows.append({"offset": K, "train_length": T, "dim": d, "rope_base": base,
                     "reach": {g: first_reach(s, horizon) for g, s in sols.items()},
                     "far": {g: s.beyond_margin(horizon * T - 1) / s.in_window_margin() for g, s in sols.items()}})
    return rows


# The scale from the optimiser ------------------------------------------------------------------------------------

def ray_loss_gradient(solution: MaxMargin) -> Callable[[float], tuple[float, np.ndarray]]:
    """s -> (loss, gradient (d,)) of the kernel rung's loss (``selection.Rung.loss``: cross-entropy of the target
    offset among the window's, one query) at w = s w_hat, exact in float64 at any loss."""
    T, K = solution.train_length, solution.offset
    f = features(solution.theta, -np.arange(T))
    rows = np.delete(f - f[K], K, 0)  # (T-1, d) f(delta) - f(-K) for the other offsets
    gaps = rows @ solution.w  # (T-1,) <= -1: the other offsets' logit minus the target's at s = 1

    def at(s: float) -> tuple[float, np.ndarray]:
        z = s * gaps
        top = z.max()
        lse = top + np.log(np.exp(z - top).sum())
        weight = np.exp(z - lse) / (1 + np.exp(-lse))  # sigmoid(lse) x softmax(z): d loss / d z
        return float(np.logaddexp(0.0, lse)), weight @ rows
    return at


def growth(solution: MaxMargin, rule: str, lr: float, steps: int, betas: tuple[float, float] = (0.9, 0.999),
           eps: float = 1e-8, power: float = 0.0) -> np.ndarray:
    """(steps,) the in-window margin s after each step of ``rule`` on the ray w = s w_hat (w_hat = ``solution.w``,
    margin 1), from s = 0, with step size lr t^-power at the t-th step (t = 1, 2, ...; power = 0: constant; Zhang
    et al.'s Adam theorem takes 0 < power <= 1). See the module docstring for each rule's law."""
    if rule not in GROWTH_RULES:
        raise ConfigError(f"rule={rule!r}: the growth laws cover {', '.join(GROWTH_RULES)}")
    if steps < 1 or lr <= 0 or not 0 <= power <= 1:
        raise ConfigError(f"need steps >= 1 ({steps}), lr > 0 ({lr}) and 0 <= power <= 1 ({power})")
    w = solution.w
    rate = lr * np.arange(1, steps + 1, dtype=np.float64) ** -power  # (steps,) step size at each step
    if rule in ("sign", "signum"):  # every coordinate moves by the step: |w|_inf grows by it
        return np.cumsum(rate) / norm_of(w, "linf")
    if rule == "ngd":  # the Euclidean norm grows by the step
        return np.cumsum(rate) / norm_of(w, "l2")
    grad_at = ray_loss_gradient(solution)
    b1, b2 = betas
    m, v = np.zeros_like(w), np.zeros_like(w)
    s, out = 0.0, np.empty(steps)
    for t in range(1, steps + 1):
        g = grad_at(s)[1]
        if rule == "gd":  # the step's component along w_hat
            s -= rate[t - 1] * float(g @ w) / float(w @ w)
        else:  # Adam's update on the ray's gradient, its l-infinity size
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
            s += rate[t - 1] * float(np.abs(update).max()) / norm_of(w, "linf")
        out[t - 1] = s
    return out


def growth_check(rung_settings: Mapping[str, float | int], recipes: Sequence, seeds: Sequence[int] = (0, 1),
                 checkpoints: int = 12) -> list[dict]:
    """Each recipe (``selection.RuleSettings``, linear parametrisation) on the exact kernel rung (``selection.run``)
    against its growth law (``growth`` on the rule's own geometry): per recipe the checkpoint steps, the measured
    smallest margin (mean over seeds) and the law's, and their ratio at the last checkpoint (``ratio_end``) and
    its largest deviation from 1 over checkpoints past the first tenth of the run where the margin is positive
    (``worst``, as law / measured)."""
    from .selection import kernel_rung, run

    rung = kernel_rung(**rung_settings)
    sol = solution_for(int(rung_settings["offset"]), int(rung_settings["train_length"]), int(rung_settings["dim"]),
                       float(rung_settings.get("rope_base", 10000.0)), "l2")
    rows = []
    for r in recipes:
        geo = GEOMETRY[r.rule]
        own = sol if geo == "l2" else solution_for(sol.offset, sol.train_length, 2 * len(sol.theta),
                                                   float(rung_settings.get("rope_base", 10000.0)), geo)
        tr = run(rung, r.rule, r.lr, r.steps, seeds, "linear", checkpoints, r.init_scale, r.betas, r.eps)
        law = growth(own, r.rule, r.lr, r.steps, r.betas, r.eps)[tr.steps - 1]
        measured = tr.margin.mean(0)
        late = (tr.steps >= r.steps / 10) & (measured > 0)
        ratio = law[late] / measured[late]
        rows.append({"label": r.label, "rule": r.rule, "lr": r.lr, "geometry": geo, "steps": tr.steps,
                     "measured": measured, "law": law, "ratio_end": float(law[-1] / measured[-1]),
                     "worst": float(ratio[np.argmax(np.abs(np.log(ratio)))])})
    return rows


# The finite-step prediction of one config --------------------------------------------------------------------------

def lead(solution: MaxMargin, scale: float, lengths: Sequence[int]) -> np.ndarray:
    """(n,) the target's lead in logits over the best other offset of each length's window, for the kernel at
    in-window margin ``scale``: scale x (c(-K) - the best other c(delta), delta in [-(L-1), 0]). Where it is small
    (or negative), how a seed's kernel departs from the limit direction decides whether the target still wins."""
    kern = solution.kernel(-np.arange(max(lengths)))
    target = kern[solution.offset]
    others = np.delete(kern, solution.offset)
    return np.array([scale * (target - others[: L - 1].max()) for L in lengths]) / solution.in_window_margin()


@one_thread
def forecast_config(c: Config, lengths: Sequence[int], horizon: int = LIMIT_HORIZON) -> dict:
    """Everything the account predicts for one config before training: its rule's geometry, the limit
    prediction (``reach``, a length or None; ``limit`` (n,) accuracy at LIMIT_SCALE in-window margins), the
    in-window margin the rule reaches in ``c.steps`` steps (``scale``, ``growth``), the accuracy at that scale by
    length (``accuracy`` (n,), ideal read-out) and the target's ``lead`` (n,) in logits there, the account's
    statement on seeds (a small lead: seeds split). Mini-batches do not enter: the kernel's positional gradient is
    the same for every batch."""
    if c.encoding != "rope" or c.layers != 1 or c.optimizer not in GROWTH_RULES:
        raise ConfigError(f"encoding={c.encoding!r}, layers={c.layers}, optimizer={c.optimizer!r}: the forecast is "
                          f"for one-layer RoPE models trained with one of {', '.join(GROWTH_RULES)}")
    geo = GEOMETRY[c.optimizer]
    sol = solution_for(c.offset, c.train_length, c.dim, c.rope_base, geo)
    scale = float(growth(sol, c.optimizer, c.lr, c.steps)[-1])
    unit = float(np.linalg.norm(sol.w))
    acc = predict(sol, [max(scale, 1e-9) * unit, LIMIT_SCALE * unit], lengths, c.vocab, PREDICT_DRAWS).accuracy
    return {"geometry": geo, "reach": first_reach(sol, horizon), "scale": scale, "lengths": [int(L) for L in lengths],
            "accuracy": acc[:, 0], "limit": acc[:, 1], "lead": lead(sol, scale, lengths)}


def heldout_predictions(grid) -> dict[str, dict]:
    """``forecast_config`` for every config of ``grid`` (a ``sweep.Grid``) at its evaluation lengths, keyed by
    ``Config.key()``: made from the grid file alone, before (and without) any trained result."""
    return {c.key(): forecast_config(c, grid.eval_lengths(c)) for c in grid.configs}


# Scoring against trained records -----------------------------------------------------------------------------------

def measured_by_config(records: Sequence[dict]) -> dict[str, dict]:
    """Config.key() -> {"lengths", "accuracy" (n, S) over seeds} from sweep records."""
    out: dict[str, dict] = {}
    for r in records:
        key = Config(**r["config"]).key()
        out.setdefault(key, {"lengths": r["lengths"], "accuracy": []})["accuracy"].append(r["accuracy"])
    return {k: {"lengths": v["lengths"], "accuracy": np.array(v["accuracy"]).T} for k, v in out.items()}


def rule_means(records: Sequence[dict], multiples: Sequence[float]) -> dict[str, np.ndarray]:
    """The first baseline: rule -> (len(multiples),) mean accuracy of that rule's runs over a (development) grid's
    records at each multiple of the training length; "all" -> the mean over every run (the second baseline,
    which ignores the rule)."""
    acc: dict[str, list] = {}
    for r in records:
        T = r["config"]["train_length"]
        row = [r["accuracy"][r["lengths"].index(round(m * T))] for m in multiples]
        acc.setdefault(r["config"]["optimizer"], []).append(row)
        acc.setdefault("all", []).append(row)
    return {k: np.mean(v, 0) for k, v in acc.items()}


def score_rows(predictions: Mapping[str, dict], records: Sequence[dict], development: Sequence[dict],
               multiples: Sequence[float]) -> list[dict]:
    """One row per predicted config: the setting and recipe, the forecast, the limit prediction and the two
    baselines (from the ``development`` records) at each multiple, and the measured mean and standard deviation
    over seeds. ``records``: the held-out grid's trained records, read only here."""
    measured = measured_by_config(records)
    base = rule_means(development, multiples)
    rows = []
    for key, p in predictions.items():
        c = Config(**json.loads(key))
        T = c.train_length
        idx = [p["lengths"].index(round(m * T)) for m in multiples]
        got = measured[key]
        acc = got["accuracy"][[got["lengths"].index(round(m * T)) for m in multiples]]  # (n, S)
        rows.append({
            "vocab": c.vocab, "train_length": T, "offset": c.offset, "rope_base": c.rope_base, "rule": c.optimizer,
            "lr": c.lr, "steps": c.steps, "recipe": c.recipe(), "geometry": p["geometry"], "scale": p["scale"],
            "reach": p["reach"],
            "forecast": p["accuracy"][idx], "limit": p["limit"][idx], "lead": p["lead"][idx],
            "rule_mean": base.get(c.optimizer, base["all"]), "ignores_rule": base["all"],
            "measured": acc.mean(1), "measured_std": acc.std(1, ddof=1) if acc.shape[1] > 1 else np.zeros(len(idx))})
    return rows


def mae(rows: Sequence[dict], predictor: str) -> np.ndarray:
    """(n,) mean absolute error of ``row[predictor]`` against the measured mean, by multiple."""
    return np.mean([np.abs(r[predictor] - r["measured"]) for r in rows], 0)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of two equal-length sequences: the Pearson correlation of their ranks
    (ties get their mean rank); nan when either is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise ConfigError(f"spearman needs two 1-D sequences of equal length >= 3; got {x.shape} and {y.shape}")
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")  # a constant sequence has no order
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    """(n,) ranks 1..n of x, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def within_rule(rows: Sequence[dict], predictor: str = "forecast") -> dict[tuple[str, float], np.ndarray]:
    """(rule, lr) -> (n,) Spearman between ``row[predictor]`` and the measured mean over that recipe's rows, by
    multiple (nan without spread or with fewer than 3 rows)."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["rule"], r["lr"]), []).append(r)
    out = {}
    for k, g in groups.items():
        n = len(g[0]["measured"])
        out[k] = np.array([spearman([r[predictor][i] for r in g], [r["measured"][i] for r in g]) if len(g) >= 3
                           else float("nan") for i in range(n)])
    return out


def verdicts(rows: Sequence[dict], predictor: str = "forecast", bars: Sequence[float] = BARS) -> np.ndarray:
    """(len(bars), n) the share of rows whose yes/no verdict "accuracy >= bar" agrees between ``row[predictor]``
    and the measured mean, by bar and multiple."""
    return np.array([[np.mean([(r[predictor][i] >= b) == (r["measured"][i] >= b) for r in rows])
                      for i in range(len(rows[0]["measured"]))] for b in bars])


def seed_scores(rows: Sequence[dict], lead_bar: float = 1.0) -> dict[str, np.ndarray]:
    """The spread over seeds by multiple (n,): Spearman over rows between the target's predicted lead and the
    measured standard deviation over seeds (``rho``: the account says negative, a small lead splitting seeds), and
    the mean measured standard deviation where the lead is below ``lead_bar`` logits and where it is not
    (``std_small``, ``std_large``; nan where no row is)."""
    lead = np.array([r["lead"] for r in rows])  # (rows, n)
    std = np.array([r["measured_std"] for r in rows])
    mean = lambda x: float(x.mean()) if len(x) else float("nan")  # noqa: E731
    n = lead.shape[1]
    return {"rho": np.array([spearman(lead[:, i], std[:, i]) if len(rows) >= 3 else float("nan") for i in range(n)]),
            "std_small": np.array([mean(std[lead[:, i] < lead_bar, i]) for i in range(n)]),
            "std_large": np.array([mean(std[lead[:, i] >= lead_bar, i]) for i in range(n)])}


# The explorer's grid -----------------------------------------------------------------------------------------------

@one_thread
def explore(rates: Mapping[str, float], factors: Sequence[float], steps: Sequence[int], offsets: Sequence[int],
            bases: Sequence[float], train_length: int, dim: int, vocab: int, multiples: Sequence[int],
            reach: int = 8) -> dict:
    """The explorer's grid, all before training, for every rule of ``rates`` (rule -> its usual step size, taken
    times each of ``factors``), offset and RoPE base: the rule's max-margin kernel c(delta) at delta = 0, ...,
    -(reach T - 1) in units of its in-window margin with its ``PEAKS`` highest beyond-window offsets and its
    ``first_reach``; the limit prediction's accuracy at ``multiples`` x T; and for every step size and number of
    ``steps`` the reached in-window margin (``growth``) and the accuracy predicted there. Keys: "kernels" (rule, K,
    base) -> {"kernel", "peaks", "reach", "limit"}; "curves" (rule, factor index, steps, K, base) -> {"lr",
    "scale", "accuracy"}; and the axes ("rates", "factors", "steps", "offsets", "bases", "multiples",
    "train_length", "vocab")."""
    T, lengths = train_length, [m * train_length for m in multiples]
    kernels, curves = {}, {}
    for rule, usual in rates.items():
        lrs = [usual * f for f in factors]
        for K in offsets:
            for base in bases:
                sol = solution_for(K, T, dim, base, GEOMETRY[rule])
                unit = float(np.linalg.norm(sol.w))
                scales = [growth(sol, rule, lr, max(steps))[np.asarray(steps) - 1] for lr in lrs]  # (steps,) each
                norms = np.concatenate([np.maximum(s, 1e-9) * unit for s in scales] + [[LIMIT_SCALE * unit]])
                acc = predict(sol, norms, lengths, vocab, PREDICT_DRAWS).accuracy  # (n, len(lrs) len(steps) + 1)
                kernels[rule, K, base] = {"kernel": sol.kernel(-np.arange(reach * T)), "peaks": sol.peaks(reach * T - 1),
                                          "reach": first_reach(sol), "limit": acc[:, -1]}
                for i, lr in enumerate(lrs):
                    for j, n in enumerate(steps):
                        curves[rule, i, n, K, base] = {"lr": lr, "scale": float(scales[i][j]),
                                                       "accuracy": acc[:, i * len(steps) + j]}
    return {"kernels": kernels, "curves": curves, "rates": dict(rates), "factors": list(factors), "steps": list(steps), "offsets": list(offsets), "bases": list(bases), "multiples": list(multiples),
            "train_length": T, "vocab": vocab}
