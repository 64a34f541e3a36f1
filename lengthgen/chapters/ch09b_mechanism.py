"""Chapter 9b (``book/09b_mechanism_in_both_regimes``): what the page shows of the mechanism in both regimes.

The step paths' table, figure data and cited numbers (from ``regimes.step_paths``: each step size's checkpoints
with their logit split and accuracy far out), the max-margin kernels' numbers and limit reach, and the
attention-dilution laws' table, numbers and scatter points per recipe (from ``dilution.compare_laws`` and
``dilution.pooled``); nothing here trains, solves or measures.

Shapes: S members (seeds), n checkpoints.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..dilution import LAWS, Comparison
from ..forecast import LIMIT_HORIZON, first_reach
from ..kernel import BEYOND_MULTIPLE, carrier_kernel, reach_envelope
from ..maxmargin import MaxMargin
from ..plots.mechanism import LAW_STYLE
from ..regimes import StepPath
from ..trajectory import alignment, direction_change, kernel_direction
from ..uncertainty import standard_error


QUANTITIES = {  # the logit split's fields a path follows, by the name the figure gives them
    "kernel margin in the window": "margin_in_window", "kernel margin beyond the window (to 16x)": "margin_beyond",
    "content spread at the target offset": "content_target", "content spread at the other offsets (window)": "content_window",
    "|W_q W_k^T|": "qk_norm",
}


PATH_HEADER = ["step", "lr x steps", "steps", "margin in", "margin beyond", "content at -K", "content elsewhere",
               "norm of WqWk^T", "1 - cos (WqWk^T)", "1 - cos (kernel)", "cos to max-margin (L2)",
               "cos to max-margin (pairs)", "accuracy 8x"]


LAW_HEADER = (["recipe", "in words"] + [f"R² {LAW_STYLE[law][0]}" for law in LAWS]
              + ["accuracy MAE", "worst error", "points"])


def path_frames(paths: Mapping[str, StepPath]) -> dict[str, dict[str, tuple[list, list, list]]]:
    """The data of the along-training figure (``plots.sweep_lines``): quantity -> step name -> (training
    times, mean over seeds, standard error), for every ``QUANTITIES`` field and the accuracy at 8x."""
    frames = {q: {name: (p.run_times(), [float(getattr(s, key).mean()) for s in p.splits],
                         [float(standard_error(getattr(s, key))) for s in p.splits]) for name, p in paths.items()}
              for q, key in QUANTITIES.items()}
    frames["accuracy at 8x"] = {name: (p.run_times(), [float(a.mean()) for a in p.far],
                                       [float(standard_error(a)) for a in p.far])
                                for name, p in paths.items()}
    return frames


def path_rows(paths: Mapping[str, StepPath], solutions: Mapping[str, MaxMargin]) -> list[list[str]]:
    """One formatted row (``PATH_HEADER``) per step and checkpoint: the logit split (means over seeds), how much
    W_q W_k^T and the kernel still turn since the previous checkpoint, the cosine to the L2 and pair-norm
    max-margin kernels (``solutions["l2"]``, ``solutions["pairs"]``) and the accuracy at 8x."""
    rows = []
    for name, p in paths.items():
        change, kchange = direction_change(p.runs), direction_change(p.runs, kernel_direction)
        for i, (t, s, time) in enumerate(zip(p.runs, p.splits, p.run_times())):
            align = {n: alignment(t, solutions[n]).mean() for n in ("l2", "pairs")}
            rows.append([name, f"{time:g}", str(t.config.steps), f"{s.margin_in_window.mean():.2f}",
                         f"{s.margin_beyond.mean():.2f}", f"{s.content_target.mean():.2f}",
                         f"{s.content_window.mean():.2f}", f"{s.qk_norm.mean():.1f}",
                         "-" if i == 0 else f"{change[i - 1].mean():.1e}", "-" if i == 0 else f"{kchange[i - 1].mean():.1e}",
                         f"{align['l2']:.3f}", f"{align['pairs']:.3f}", f"{p.far[i].mean():.3f}"])
    return rows


def path_numbers(paths: Mapping[str, StepPath], solutions: Mapping[str, MaxMargin],
                 keys: Mapping[str, str]) -> dict[str, float | int]:
    """The numbers the prose cites at the end of each path, under ``{key}_{what}`` for the short ``keys[name]``
    of each step: its lr, the logit split's means, how many seeds have a negative beyond-window margin, the
    accuracy at 8x, the last turn of W_q W_k^T (1 - cos), the cosine to each max-margin kernel and the training
    loss; also ``n_seeds`` and ``last_time`` (the last requested training time)."""
    out: dict[str, float | int] = {}
    for name, key in keys.items():
        p = paths[name]
        end = p.splits[-1]
        out[f"{key}_lr"] = p.lr
        out.update({f"{key}_{q}": float(getattr(end, q).mean()) for q in QUANTITIES.values()})
        out[f"{key}_beyond_negative"] = int((end.margin_beyond < 0).sum())
        out[f"{key}_8x"] = float(p.far[-1].mean())
        out[f"{key}_dirchange"] = float(direction_change(p.runs)[-1].mean())
        out.update({f"{key}_align_{n}": float(alignment(p.runs[-1], sol).mean()) for n, sol in solutions.items()})
        out[f"{key}_loss"] = float(p.runs[-1].loss[-1].mean())
    first = next(iter(paths.values()))
    out["n_seeds"] = len(first.runs[0].seeds)
    out["last_time"] = first.times[-1]
    return out


def alignment_sentence(big: float, small: float) -> str:
    """What the cosines to the L2 max-margin kernel say about the two steps (``big``: the step that does not
    extrapolate; ``small``: the one that does)."""
    if small <= big:
        return ("The step size that extrapolates is no closer to the L2 max-margin direction than the one that does "
                "not, so closeness to that direction is not what separates them.")
    return "The step size that extrapolates is the closer of the two to the L2 max-margin direction, but both are far from it."


def maxmargin_numbers(solutions: Mapping[str, MaxMargin], train_length: int) -> dict[str, float | int | str]:
    """Per max-margin kernel: ``{norm}_beyond``, its beyond-window margin out to 16x (in-window margin 1), and
    ``{norm}_pairs``, how many rotation pairs carry more than 1% of its largest amplitude; ``sign`` says whether
    every beyond-window margin is above zero."""
    last = BEYOND_MULTIPLE * train_length - 1
    out: dict[str, float | int | str] = {}
    for n, sol in solutions.items():
        out[f"{n}_beyond"] = sol.beyond_margin(last)
        out[f"{n}_pairs"] = int((sol.amplitude > 0.01 * sol.amplitude.max()).sum())
    out["sign"] = "both above zero" if min(sol.beyond_margin(last) for sol in solutions.values()) > 0 \
        else "not both above zero"
    return out


def limit_reach(solutions: Mapping[str, MaxMargin], max_multiple: int = LIMIT_HORIZON) -> str:
    """Per geometry, where its max-margin kernel stops picking the target in the limit (attention all on the highest
    logit): the first length at which a beyond-window offset reaches the target's value (``forecast.first_reach``),
    as "geometry: length L (m x T)" or "geometry: none up to ``max_multiple``x", joined by "; "."""
    def one(g: str, s: MaxMargin) -> str:
        L = first_reach(s, max_multiple)
        return f"{g}: none up to {max_multiple}x" if L is None else f"{g}: length {L} ({L / s.train_length:.1f}x)"
    return "; ".join(one(g, s) for g, s in solutions.items())


def kernel_shape_frames(paths: Mapping[str, StepPath], solutions: Mapping[str, MaxMargin], offset: int,
                        train_length: int) -> dict[str, dict[str, np.ndarray]]:
    """The data of ``plots.kernel_shapes``: per seed, the reach envelope (``kernel.reach_envelope``) of each path's
    last learned kernel and of each max-margin kernel, out to ``BEYOND_MULTIPLE`` training lengths."""
    reach = np.arange(BEYOND_MULTIPLE * train_length)
    envelope = lambda kern: reach_envelope(kern, offset, train_length)  # noqa: E731
    fixed = {f"max-margin kernel ({'L2' if n == 'l2' else 'pair'} norm)": envelope(sol.kernel(-reach))
             for n, sol in solutions.items()}
    learned = {name: carrier_kernel(p.runs[-1].model, -reach).double().numpy() for name, p in paths.items()}
    seeds = next(iter(paths.values())).runs[-1].seeds
    return {f"seed {seed}": {**{f"learned, {name} (lr {paths[name].lr:g})": envelope(k[s]) for name, k in learned.items()},
                             **fixed} for s, seed in enumerate(seeds)}


# The laws on each recipe's models ------------------------------------------------------------------------------

def law_rows(pooled: Mapping[str, dict], recipes: Mapping[str, str]) -> list[list[str]]:
    """One formatted row (``LAW_HEADER``) per recipe of ``dilution.pooled`` results: the recipe in words (``recipes[name]``), R^2
    of every law's target weight, and the accuracy prediction's mean and worst absolute error, over ``points``."""
    return [[name, recipes[name]] + [f"{p['r2'][law]:.3f}" for law in LAWS]
            + [f"{p['accuracy_mae']:.3f}", f"{p['accuracy_worst']:.3f}", str(p["points"])] for name, p in pooled.items()]


def law_numbers(pooled: Mapping[str, dict], keys: Mapping[str, str]) -> dict[str, float]:
    """``{key}_r2_{law}``, ``{key}_mae`` and ``{key}_worst`` for the short ``keys[name]`` of each recipe."""
    out = {}
    for name, key in keys.items():
        p = pooled[name]
        out.update({f"{key}_r2_{law}": p["r2"][law] for law in LAWS})
        out[f"{key}_mae"], out[f"{key}_worst"] = p["accuracy_mae"], p["accuracy_worst"]
    return out


def law_points(comparisons: Mapping[str, Sequence[Comparison]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per recipe, (measured, predicted) accuracy over every comparison, length and seed (``plots.law_scatter``)."""
    return {name: (np.concatenate([c.measured_accuracy.ravel() for c in cs]),
                   np.concatenate([c.predicted_accuracy.ravel() for c in cs])) for name, cs in comparisons.items()}
