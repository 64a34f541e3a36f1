"""What training selects on the real one-layer model, and the prediction made before training.

Rung (c) of the ladder: the real one-layer RoPE model, trained with one update rule. Along training
(log-spaced checkpoints) its carrier kernel's pair coefficients w = (Re z, Im z) in R^d
(``kernel.pair_spectrum``) are compared with each geometry's max-margin kernel by the cosine, next to two
baselines: random directions (what a cosine means by chance in d dimensions) and seed-to-seed (how
reproducible the direction is). ``max_abs`` records the largest parameter, which AdamW's weight decay
bounds by 1/lambda.

The prediction table joins, per setting (vocabulary, offset, RoPE base) and rule, the accuracy predicted
before training from the rule's own geometry with the accuracy the trained models reach (sweep records),
and ranks them (Spearman).

Shapes: S members (seeds), d model width (= 2 x the number of RoPE pairs), n checkpoints.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from .compare import CRITERION, paired_change, spread
from .config import Config, ConfigError
from .kernel import BEYOND_MULTIPLE, pair_spectrum
from .maxmargin import MaxMargin, coefficients, cosine, far_field, predict, solve
from .model import Model
from .optim import GEOMETRY
from .train import Trained, cpu_threads, train


def kernel_coefficients(model: Model) -> np.ndarray:
    """(S, d) the carrier kernel's pair coefficients w = (Re z, Im z), unit length per member."""
    spec = pair_spectrum(model)
    w = coefficients(spec.amplitude, spec.phase)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


@torch.no_grad()
def max_abs_parameter(model: Model) -> np.ndarray:
    """(S,) the largest |entry| over every parameter of each member (AdamW bounds it by 1/lambda)."""
    return torch.stack([p.detach().abs().flatten(1).amax(1) for p in model.parameters()]).amax(0).double().cpu().numpy()


def log_checkpoints(steps: int, every: int, per_decade: int = 4) -> list[int]:
    """Multiples of ``every`` up to ``steps``, about ``per_decade`` per decade, log-spaced (always ``steps``)."""
    if every < 1 or steps < every or steps % every:
        raise ConfigError(f"steps={steps}, every={every}: give every >= 1 dividing steps")
    n = max(2, int(np.ceil(per_decade * np.log10(steps / every))) + 1)
    picks = np.unique(np.round(np.geomspace(1, steps // every, n)).astype(int)) * every
    return [int(s) for s in picks]


@dataclass
class DirectionPath:
    """One rule's run with its kernel direction and largest parameter at each checkpoint."""

    steps: np.ndarray  # (n,) steps done at each checkpoint (0: the initialisation)
    w: np.ndarray  # (n, S, d) unit kernel coefficients
    max_abs: np.ndarray  # (n, S) largest |parameter|
    trained: Trained  # the run at its end

    def cosines(self, solution: np.ndarray) -> np.ndarray:
        """(n, S) cosine of each checkpoint's kernel with a max-margin kernel's coefficients (d,)."""
        return cosine(self.w, np.asarray(solution)[None, None])

    def turning(self) -> np.ndarray:
        """(n-1, S) 1 - cosine between consecutive checkpoints: -> 0 when the direction stops turning."""
        return 1 - cosine(self.w[1:], self.w[:-1])


def direction_path(c: Config, seeds: Sequence[int], every: int, per_decade: int = 4) -> DirectionPath:
    """Train ``c`` (no early stop) and record the kernel direction at ``log_checkpoints(c.steps, every)``."""
    if c.encoding != "rope" or c.layers != 1:
        raise ConfigError(f"encoding={c.encoding!r}, layers={c.layers}: the kernel direction is defined for "
                          f"a one-layer RoPE model (encoding='rope', layers=1)")
    c = c.replace(target_accuracy=None)
    wanted = set(log_checkpoints(c.steps, every, per_decade))
    start = Model(c, seeds)
    steps, ws, big = [0], [kernel_coefficients(start)], [max_abs_parameter(start)]

    def record(done: int, model: Model) -> None:
        if done in wanted:
            steps.append(done)
            ws.append(kernel_coefficients(model))
            big.append(max_abs_parameter(model))

    trained = train(c, seeds, progress=False, on_checkpoint=record, checkpoint_every=every)
    return DirectionPath(np.array(steps), np.stack(ws), np.stack(big), trained)


def seed_agreement(w: np.ndarray) -> np.ndarray:
    """(S (S-1) / 2,) cosines between the directions (S, d) of every pair of seeds."""
    S = len(w)
    return np.array([float(cosine(w[i], w[j])) for i in range(S) for j in range(i + 1, S)])


def random_cosines(reference: np.ndarray, draws: int = 10000, seed: int = 0) -> np.ndarray:
    """(draws,) cosines of isotropic random directions with ``reference`` (d,): the chance level of a cosine."""
    gen = np.random.default_rng(seed)
    return cosine(gen.standard_normal((draws, len(reference))), np.asarray(reference)[None])


def random_level(solutions: Mapping[str, MaxMargin], quantile: float = 0.95) -> float:
    """The largest, over ``solutions``, ``quantile`` of |cosine| between a random direction and the solution's
    coefficients: a cosine below it means nothing."""
    return max(float(np.quantile(np.abs(random_cosines(s.w)), quantile)) for s in solutions.values())


def closest_geometries(paths: Mapping[str, DirectionPath],
                       solutions: Mapping[str, MaxMargin]) -> dict[str, tuple[str, float, float]]:
    """rule -> (the geometry whose max-margin kernel the final kernel is closest to, that mean cosine over
    seeds, the mean seed-to-seed cosine), the input of ``selection_verdict``."""
    best = {}
    for name, p in paths.items():
        final = {g: p.cosines(s.w)[-1] for g, s in solutions.items()}
        top = max(final, key=lambda g: final[g].mean())
        best[name] = (top, float(final[top].mean()), float(seed_agreement(p.w[-1]).mean()))
    return best


def path_header(geometries: Sequence[str]) -> list[str]:
    """The columns of ``path_rows``."""
    return (["rule", "recipe", "final loss"] + [f"cosine to {g}" for g in geometries]
            + ["seed to seed", "last turn (1 - cos)", "position share"])


def path_rows(paths: Mapping[str, DirectionPath], solutions: Mapping[str, MaxMargin],
              position_share: Mapping[str, np.ndarray]) -> list[list[str]]:
    """One formatted row (``path_header``) per rule: its recipe, final loss, the final cosine to every geometry
    (``compare.spread`` over seeds), seed to seed, the last turn of the direction, and the position share
    (``position_share[rule]`` (S,), e.g. ``kernel.pair_spectrum(model).position_share``)."""
    return [[name, p.trained.config.recipe(), f"{np.nanmean(p.trained.loss[-1]):.1e}"]
            + [spread(p.cosines(s.w)[-1]) for s in solutions.values()]
            + [f"{seed_agreement(p.w[-1]).mean():.3f}", f"{p.turning()[-1].mean():.1e}",
               f"{position_share[name].mean():.2f}"] for name, p in paths.items()]


def path_frames(paths: Mapping[str, DirectionPath], solutions: Mapping[str, MaxMargin],
                random: float) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The along-training figure's data (``plots.sweep_lines``): rule -> curve -> (steps, mean, standard error):
    the cosine to every geometry after the initialisation, the seed-to-seed cosine, and the flat ``random`` level."""
    sem = lambda x: x.std(1, ddof=1) / np.sqrt(x.shape[1])  # noqa: E731
    frames = {}
    for name, p in paths.items():
        cos = {g: p.cosines(s.w) for g, s in solutions.items()}  # (n, S) each
        frames[name] = {f"cosine to {g}": (p.steps[1:], c[1:].mean(1), sem(c[1:])) for g, c in cos.items()}
        frames[name]["seed to seed"] = (p.steps[1:], np.array([seed_agreement(w).mean() for w in p.w[1:]]),
                                        np.zeros(len(p.steps) - 1))
        frames[name]["random direction (95% of |cosine|)"] = (p.steps[[1, -1]], np.full(2, random), np.zeros(2))
    return frames


def path_numbers(best: Mapping[str, tuple[str, float, float]], position_share: Mapping[str, np.ndarray],
                 minibatch: str) -> dict[str, str | float]:
    """What the prose cites from ``closest_geometries``: the closest rule, its geometry and cosine
    (``closest_*``); over the full-batch rules (all but ``minibatch``) the best cosine (``full_best``), the range
    of seed-to-seed cosines (``agree_range``) and the mean position share (``full_share``); the mini-batch run's
    seed to seed, geometry, cosine and position share (``mb_*``)."""
    closest = max(best, key=lambda n: best[n][1])
    full = [n for n in best if n != minibatch]
    return {"closest_rule": closest, "closest_geometry": best[closest][0], "closest_cos": best[closest][1],
            "full_best": max(best[n][1] for n in full),
            "agree_range": f"{min(best[n][2] for n in full):.2f} to {max(best[n][2] for n in full):.2f}",
            "mb_agree": best[minibatch][2], "mb_geometry": best[minibatch][0], "mb_cos": best[minibatch][1],
            "mb_share": float(position_share[minibatch].mean()),
            "full_share": float(np.mean([position_share[n].mean() for n in full]))}


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


def selection_verdict(best: dict[str, tuple[str, float, float]], threshold: float = 0.9) -> str:
    """A sentence on which geometry each rule's kernel approaches. best: rule -> (closest geometry, its mean
    cosine, seed-to-seed cosine); a rule "approaches" a geometry when that cosine is >= ``threshold``."""
    near = [f"{rule} ({g}, cosine {cos:.2f})" for rule, (g, cos, _) in best.items() if cos >= threshold]
    if not near:
        top = max(best, key=lambda r: best[r][1])
        return (f"No rule's kernel comes within a cosine of {threshold:g} of any geometry's max-margin kernel; the "
                f"closest is {top} to {best[top][0]}, at {best[top][1]:.2f}.")
    return f"Within a cosine of {threshold:g} of a geometry's max-margin kernel: {', '.join(near)}; the other rules are not."


def decay_verdict(ratios: Sequence[float], tolerance: float = 0.1) -> str:
    """A sentence on whether the largest parameter sits at AdamW's bound 1/lambda: ``ratios`` are the final
    max |p| x lambda per decay setting; within ``tolerance`` of 1 counts as on the bound."""
    r = np.asarray(ratios, dtype=np.float64)
    on, above = int((np.abs(r - 1) <= tolerance).sum()), int((r > 1 + tolerance).sum())
    below = len(r) - on - above
    parts = [f"{n} of {len(r)} settings {what}" for n, what in
             ((on, f"sit on the bound (within {tolerance:.0%})"), (above, "exceed it"), (below, "stay below it")) if n]
    return "; ".join(parts).capitalize() + "."


def bound_ratios(decayed: Mapping[float, DirectionPath]) -> dict[float, np.ndarray]:
    """weight decay lambda -> (n, S) the largest |parameter| over AdamW's bound 1/lambda at every checkpoint."""
    return {wd: p.max_abs / (1 / wd) for wd, p in decayed.items()}


def final_ratios(decayed: Mapping[float, DirectionPath]) -> list[float]:
    """Per lambda, the final largest |parameter| over 1/lambda, mean over seeds (the input of ``decay_verdict``)."""
    return [float(r[-1].mean()) for r in bound_ratios(decayed).values()]


def decay_header(geometries: Sequence[str]) -> list[str]:
    """The columns of ``decay_rows``."""
    return (["lambda", "1/lambda", "lambda x lr x steps", "largest |parameter|", "its ratio to 1/lambda",
             "accuracy 1x", "accuracy 8x"] + [f"cosine to {g}" for g in geometries])


def decay_rows(decayed: Mapping[float, DirectionPath], accuracy: Mapping[float, np.ndarray],
               solutions: Mapping[str, MaxMargin], lr: float, steps: int) -> list[list[str]]:
    """One formatted row (``decay_header``) per weight decay lambda of AdamW runs at ``lr`` for ``steps``: the bound
    1/lambda, lambda x lr x steps, the final largest |parameter| and its ratio to the bound, accuracy at 1x and 8x
    (``accuracy[lambda]`` (2, S)) and the final cosine to every geometry, each as ``compare.spread`` over seeds."""
    ratios = bound_ratios(decayed)
    return [[f"{wd:g}", f"{1 / wd:g}", f"{wd * lr * steps:g}", spread(p.max_abs[-1]), spread(ratios[wd][-1]),
             spread(accuracy[wd][0]), spread(accuracy[wd][1])] + [spread(p.cosines(s.w)[-1]) for s in solutions.values()]
            for wd, p in decayed.items()]


def decay_frames(decayed: Mapping[float, DirectionPath]) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The weight-decay figure's data (``plots.sweep_lines``): per lambda, the largest |parameter| along training
    (mean and standard error over seeds, after the initialisation) and the flat bound 1/lambda."""
    frames = {}
    for wd, p in decayed.items():
        sem = p.max_abs.std(1, ddof=1) / np.sqrt(p.max_abs.shape[1])
        frames[f"lambda = {wd:g}"] = {"largest |parameter|": (p.steps[1:], p.max_abs[1:].mean(1), sem[1:]),
                                      "1 / lambda": (p.steps[[1, -1]], np.full(2, 1 / wd), np.zeros(2))}
    return frames


def decay_numbers(decayed: Mapping[float, DirectionPath], accuracy: Mapping[float, np.ndarray], lr: float,
                  steps: int) -> dict[str, str | float]:
    """What the prose cites on weight decay, under the chapter's names. ``accuracy``: lambda -> (2, S) accuracy at
    1x and 8x, with lambda = 0 the run without decay. The smallest lambda x lr x steps (``decay_time_min``), the
    range of final ratios to the bound (``decay_ratio_range``), accuracy at 8x without and with decay
    (``nodecay_8x``, ``decay_8x``), the decay that raised it most over the same seeds with its paired change and
    verdict (``decay_best*``), and how much the largest parameter still moved over the last checkpoint
    (``decay_drift``, relative, the range over lambdas)."""
    ratios = final_ratios(decayed)
    changes = {wd: paired_change(accuracy[0.0][1], accuracy[wd][1]) for wd in decayed}
    top = max(decayed, key=lambda wd: changes[wd].mean)
    drift = [float(np.mean(np.abs(p.max_abs[-1] - p.max_abs[-2]) / p.max_abs[-1])) for p in decayed.values()]
    return {"decay_time_min": min(wd * lr * steps for wd in decayed),
            "decay_ratio_range": f"{min(ratios):.2f} to {max(ratios):.2f}",
            "nodecay_8x": spread(accuracy[0.0][1]),
            "decay_8x": "; ".join(f"lambda {wd:g}: {spread(accuracy[wd][1])}" for wd in decayed),
            "decay_best": f"{top:g}", "decay_best_change": f"{changes[top].mean:+.3f} ± {changes[top].sem:.3f}",
            "decay_best_verdict": changes[top].verdict, "decay_drift": f"{min(drift):.1%} to {max(drift):.1%}"}
