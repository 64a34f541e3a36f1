"""The prediction made before training, set against trained models.

The prediction table joins, per setting (vocabulary, offset, RoPE base) and rule, the accuracy predicted
before training from the rule's own geometry with the accuracy the trained models reach (sweep records),
and ranks them (Spearman). The real model's direction along training is ``limit_path.py``'s.
"""

from __future__ import annotations

import functools
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from .compare import CRITERION
from .config import ConfigError
from .kernel import BEYOND_MULTIPLE
from .maxmargin import MaxMargin, far_field, predict, solve
from .optim import GEOMETRY
from .train import cpu_threads


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


# The prediction table -------------------------------------------------------------------------------------------

FIT_ACCURACY = 0.99  # the kernel "fits" the training length when its predicted accuracy there reaches this
# Gaussian draws per (target token) class in this module's predictions: V x 128 samples per length, a standard
# error of at most 0.011 at V = 16 (0.002 near accuracy 0.99); a quarter of maxmargin's default, for speed.
PREDICT_DRAWS = 128


def one_thread(fn: Callable) -> Callable:
    """Run ``fn`` with one intra-op CPU thread (``train.cpu_threads``): the predictions are many small tensor
    operations, several times slower when split over threads on a busy machine."""
    @functools.wraps(fn)
    def wrapped(*args: object, **kwargs: object) -> object:
        with cpu_threads(torch.device("cpu")):
            return fn(*args, **kwargs)
    return wrapped
EXTRAPOLATES = (8, CRITERION[8.0])  # "extrapolates to 8x": accuracy at 8x the training length >= 0.95


@one_thread
def fit_norm(solution: MaxMargin, vocab: int, accuracy: float = FIT_ACCURACY, low: float = 0.1, high: float = 1e3,
             iterations: int = 10) -> float:
    """The smallest kernel norm |w|_2 at which ``solution``'s predicted accuracy (``maxmargin.predict``: kernel
    law, ideal read-out) at the training length reaches ``accuracy``: the scale at which the kernel alone first
    fits the training length. Bisection in log norm on [low, high]; needs nothing trained."""
    at = lambda n: float(predict(solution, [n], [solution.train_length], vocab, PREDICT_DRAWS).accuracy[0, 0])  # noqa: E731
    if at(high) < accuracy:
        raise ConfigError(f"the {solution.norm} kernel does not reach accuracy {accuracy} at the training length "
                          f"even at norm {high}; lower the accuracy or raise high")
    for _ in range(iterations):
        mid = float(np.sqrt(low * high))
        low, high = (low, mid) if at(mid) >= accuracy else (mid, high)
    return high


@functools.lru_cache(maxsize=None)
def fitted_solution(offset: int, train_length: int, dim: int, rope_base: float, geometry: str,
                    vocab: int) -> tuple[MaxMargin, float]:
    """(the max-margin kernel of ``geometry``, its ``fit_norm`` at ``vocab``), solved once per process."""
    sol = solve(offset, train_length, dim, rope_base, geometry)
    return sol, fit_norm(sol, vocab)


def setting_of(config: dict) -> tuple:
    """(vocab, offset, rope_base, optimizer): a prediction-table row's key, from a sweep record's config."""
    return config["vocab"], config["offset"], config["rope_base"], config["optimizer"]


@one_thread
def prediction_table(records: Sequence[dict], multiples: Sequence[int] = (2, 4, 8, 16),
                     geometry: dict[str, str] = GEOMETRY) -> list[dict]:
    """One row per (vocab, offset, rope_base, optimizer) of ``records`` (sweep records of one-layer RoPE runs
    with the "kernel" extra, evaluated at the training length and at ``multiples`` of it).

    Each row holds, at every multiple m: ``predicted[m]``, the accuracy the rule's geometry (``geometry[rule]``)
    predicts before training at the norm where it first fits the training length (``fit_norm``);
    ``at_trained[m]``, the same kernel shape at the trained models' own in-window kernel margin (mean over
    seeds; a check of the shape alone, not a prediction before training); ``measured[m]`` and ``sem[m]``,
    the trained models' accuracy over seeds. Also ``fit`` (measured accuracy at 1x), ``far_field`` (the
    geometry's beyond-window margin to 16x in units of its in-window margin), and ``predicted_extrapolates``
    and ``measured_extrapolates`` (accuracy at EXTRAPOLATES[0] x >= EXTRAPOLATES[1]).
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(setting_of(r["config"]), []).append(r)
    rows = []
    for (V, K, base, rule), recs in groups.items():
        c = recs[0]["config"]
        T, geo = c["train_length"], geometry[rule]
        sol, norm = fitted_solution(K, T, c["dim"], base, geo, V)
        lengths = [T * m for m in multiples]
        index = [recs[0]["lengths"].index(L) for L in [T] + lengths]
        acc = np.array([[r["accuracy"][i] for i in index] for r in recs])  # (seeds, 1 + len(multiples))
        margin = float(np.mean([r["kernel"]["margin_in_window"] for r in recs]))
        before = predict(sol, [norm], lengths, V, PREDICT_DRAWS).accuracy[:, 0]
        trained = predict(sol, [max(margin, 1e-6) * np.linalg.norm(sol.w)], lengths, V, PREDICT_DRAWS).accuracy[:, 0]
        sem = acc.std(0, ddof=1) / np.sqrt(len(acc)) if len(acc) > 1 else np.zeros(acc.shape[1])
        m8, bar = EXTRAPOLATES
        rows.append({
            "vocab": V, "offset": K, "rope_base": base, "optimizer": rule, "geometry": geo, "seeds": len(recs),
            "fit": float(acc[:, 0].mean()), "norm": norm, "far_field": far_field(sol),
            "trained_margin": margin,
            "predicted": dict(zip(multiples, before.tolist())), "at_trained": dict(zip(multiples, trained.tolist())),
            "measured": dict(zip(multiples, acc[:, 1:].mean(0).tolist())), "sem": dict(zip(multiples, sem[1:].tolist())),
            "predicted_extrapolates": bool(before[list(multiples).index(m8)] >= bar),
            "measured_extrapolates": bool(acc[:, 1 + list(multiples).index(m8)].mean() >= bar),
        })
    return rows


def rank_agreement(rows: Sequence[dict], multiple: int, predicted: str = "predicted") -> float:
    """Spearman's rank correlation over the rows of ``prediction_table`` between ``row[predicted][multiple]``
    and the measured mean accuracy at that multiple."""
    return spearman([r[predicted][multiple] for r in rows], [r["measured"][multiple] for r in rows])


def format_rho(x: float) -> str:
    """A rank correlation as the tables show it: signed, two decimals, or "none (no spread)" when undefined."""
    return f"{x:+.2f}" if np.isfinite(x) else "none (no spread)"


def table_header(multiples: Sequence[int]) -> list[str]:
    """The columns of ``table_rows``."""
    return (["V", "K", "base", "rule", "geometry", "accuracy 1x (trained)"]
            + [f"{m}x predicted / measured" for m in multiples] + ["extrapolates to 8x: predicted", "measured"])


def table_rows(rows: Sequence[dict], multiples: Sequence[int]) -> list[list[str]]:
    """``prediction_table`` rows formatted (``table_header``): the setting, the rule and its geometry, the measured
    accuracy at 1x, "predicted / measured ± sem" at every multiple, and the two extrapolation verdicts."""
    cell = lambda r, m: f"{r['predicted'][m]:.3f} / {r['measured'][m]:.3f} ± {r['sem'][m]:.3f}"  # noqa: E731
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    return [[f"{r['vocab']}", f"{r['offset']}", f"{r['rope_base']:g}", r["optimizer"], r["geometry"], f"{r['fit']:.3f}"]
            + [cell(r, m) for m in multiples] + [yes(r["predicted_extrapolates"]), yes(r["measured_extrapolates"])]
            for r in rows]


def scatter_points(rows: Sequence[dict], multiple: int = 8) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """rule -> (measured, predicted) accuracy at ``multiple`` over the rule's ``prediction_table`` rows."""
    points: dict[str, tuple[list, list]] = {}
    for r in rows:
        points.setdefault(r["optimizer"], ([], []))
        points[r["optimizer"]][0].append(r["measured"][multiple])
        points[r["optimizer"]][1].append(r["predicted"][multiple])
    return {k: (np.array(a), np.array(b)) for k, (a, b) in points.items()}


def table_numbers(table: Sequence[dict], fitted: Sequence[dict]) -> dict[str, int | str]:
    """The counts the prose cites from the ``prediction_table`` rows (``table``) and those that fit the training
    length (``fitted``), under the chapter's names: the settings and fitted rows (``grid_*``), the fitted rows
    whose yes/no extrapolation verdicts agree (``yesno_agree``), the rows predicted yes and no and how many of each
    were right (``n_said_*``), and per geometry (``l2``, ``linf``) the rows, how many extrapolate and (L2) the
    measured and predicted accuracy at 8x as "lowest to highest"."""
    said_yes = [r for r in fitted if r["predicted_extrapolates"]]
    said_no = [r for r in fitted if not r["predicted_extrapolates"]]
    by_geo = {g: [r for r in fitted if r["geometry"] == g] for g in ("l2", "linf")}
    span = lambda rows, key: f"{min(r[key][8] for r in rows):.3f} to {max(r[key][8] for r in rows):.3f}"  # noqa: E731
    out: dict[str, int | str] = {
        "grid_settings": len(table), "grid_fitted": len(fitted),
        "yesno_agree": sum(r["predicted_extrapolates"] == r["measured_extrapolates"] for r in fitted),
        "n_said_yes": len(said_yes), "n_said_yes_right": sum(r["measured_extrapolates"] for r in said_yes),
        "n_said_no": len(said_no), "n_said_no_right": sum(not r["measured_extrapolates"] for r in said_no)}
    for g, rows in by_geo.items():
        out[f"{g}_rows"], out[f"{g}_rows_extrapolate"] = len(rows), sum(r["measured_extrapolates"] for r in rows)
    out["l2_measured_8x"], out["l2_predicted_8x"] = span(by_geo["l2"], "measured"), span(by_geo["l2"], "predicted")
    return out


def far_field_range(explore_grid: Mapping[tuple[str, int, float], dict]) -> dict[str, tuple[float, float]]:
    """geometry -> (smallest, largest) far-field margin over the offsets and bases of an ``explore`` grid."""
    out: dict[str, tuple[float, float]] = {}
    for (g, _, _), e in explore_grid.items():
        lo, hi = out.get(g, (np.inf, -np.inf))
        out[g] = (min(lo, e["far_field"]), max(hi, e["far_field"]))
    return out


@one_thread
def explore(offsets: Sequence[int], bases: Sequence[float], geometries: Sequence[str], train_length: int, dim: int,
            vocab: int, lengths: Sequence[int], reach: int = BEYOND_MULTIPLE) -> dict[tuple[str, int, float], dict]:
    """The explorer's grid, all before training: for every (geometry, offset, base), the max-margin kernel c(delta)
    at delta = 0, -1, ..., -(reach T - 1) (in units of its in-window margin, which is 1), its ``PEAKS`` highest
    beyond-window offsets, its far-field margin (``maxmargin.far_field``), the norm where it first fits
    (``fit_norm``) and the accuracy it predicts there at ``lengths`` (``maxmargin.predict``)."""
    out = {}
    for g in geometries:
        for K in offsets:
            for base in bases:
                sol, norm = fitted_solution(K, train_length, dim, base, g, vocab)
                out[g, K, base] = {
                    "kernel": sol.kernel(-np.arange(reach * train_length)), "peaks": sol.peaks(reach * train_length - 1),
                    "far_field": far_field(sol, reach), "norm": norm, "lengths": list(lengths),
                    "accuracy": predict(sol, [norm], lengths, vocab, PREDICT_DRAWS).accuracy[:, 0],
                }
    return out
