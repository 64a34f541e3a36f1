"""Chapter 6 (``book/06_robustness``): the statistics it states about RoPE and APE across settings, widths, depth,
position schemes and variable-length training, from trained ensembles and their evaluations.

A run is ``(Trained, Evaluation)``; the evaluation's lengths are the run's training length times ``multiples``
(in that order), so row ``multiples.index(m)`` of ``Evaluation.accuracy()`` is the accuracy at m x T. The RoPE
grid is keyed by (recipe name, width d, training length T, offset K), trained T-major then K. Every number is
returned as a plain Python int, float or str, ready for ``glue.each``; the tables are the text the chapter prints.

Shapes: S seeds per run.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..compare import accuracy_at, share_beyond, spread
from ..evaluate import Evaluation
from ..pinning import PinningResult
from ..train import Trained

Run = tuple[Trained, Evaluation]
GridKey = tuple[str, int, int, int]  # (recipe name, width d, training length T, offset K)
Points = tuple[np.ndarray, np.ndarray, list[str]]  # (accuracy at T (n,), accuracy at 2T (n,), hover text (n,))


def row(multiples: Sequence[float], m: float) -> int:
    """The row of ``Evaluation.accuracy()`` that holds m x T."""
    if m not in multiples:
        raise ValueError(f"{m}x the training length was not evaluated: the multiples are {list(multiples)}")
    return list(multiples).index(m)


def _spreads(ev: Evaluation) -> str:
    return "  ".join(spread(a) for a in ev.accuracy())


def grid_table(rope: Mapping[GridKey, Run], ape: Mapping[tuple[int, int], Run], multiples: Sequence[float]) -> str:
    """One line per RoPE and APE setting (first fit for APE): steps (min-max) and the accuracy at each multiple
    as mean [min, max] over seeds."""
    lines = ["recipe       enc   d    T   K  steps (min-max)  " + "  ".join(f"{m}x mean [min, max]" for m in multiples)]
    rows = [(name, "rope", (d, t, k), r) for (name, d, t, k), r in rope.items()]
    rows += [("first fit", "ape", (r[0].config.dim, t, k), r) for (t, k), r in ape.items()]
    for name, enc, (d, t, k), (tr, ev) in rows:
        steps = f"{tr.steps.min():5d}-{tr.steps.max():<5d}"
        lines.append(f"{name:11s}  {enc:4s} {d:3d} {t:4d} {k:3d}  {steps}  {_spreads(ev)}")
    return "\n".join(lines)


def _column(rope: Mapping[GridKey, Run], recipe: str, width: int, m_row: int) -> np.ndarray:
    """(settings, S) accuracy at one multiple for every setting of one (recipe, width) column of the grid."""
    keys = [key for key in rope if key[:2] == (recipe, width)]
    if not keys:
        raise KeyError(f"no RoPE run with recipe {recipe!r} and width {width}")
    return np.stack([rope[key][1].accuracy()[m_row] for key in keys])


def setting_frames(rope: Mapping[GridKey, Run], columns: Sequence[tuple[str, int]], train_lengths: Sequence[int],
                   offsets: Sequence[int], multiples: Sequence[float]) -> dict[str, np.ndarray]:
    """``plots.setting_heatmap``'s frames: "RECIPE, d=D, Mx" -> (len(train_lengths), len(offsets), S) accuracy."""
    return {f"{name}, d={d}, {m}x": np.array([[rope[name, d, t, k][1].accuracy()[row(multiples, m)] for k in offsets]
                                               for t in train_lengths])
            for name, d in columns for m in multiples}


def grid_summary(rope: Mapping[GridKey, Run], recipe: str, width: int, multiples: Sequence[float],
                 solved: float) -> dict[str, float]:
    """One (recipe, width) column of the grid over its settings and seeds: the share that solved the task
    (accuracy >= ``solved`` at T), the accuracy at T, at 2T (mean, range of the settings' means, range over
    seeds) and at the longest multiple, and the spread over seeds within a setting against between settings."""
    one, two, far = (_column(rope, recipe, width, i) for i in (row(multiples, 1), row(multiples, 2), -1))
    return {
        "solved_share": float((one >= solved).mean()),
        "1x_mean": float(one.mean()),
        "1x_min": float(one.min()),
        "2x_mean": float(two.mean()),
        "2x_setting_min": float(two.mean(1).min()),
        "2x_setting_max": float(two.mean(1).max()),
        "2x_seed_min": float(two.min()),
        "2x_seed_max": float(two.max()),
        "far_mean": float(far.mean()),
        "far_seed_min": float(far.min()),
        "within_sd": float(two.std(1, ddof=1).mean()),  # spread over the seeds of one setting
        "between_sd": float(two.mean(1).std(ddof=1)),  # spread of the settings' means
        "far_within_sd": float(far.std(1, ddof=1).mean()),
    }


def ape_summary(ape: Mapping[tuple[int, int], Run]) -> dict[str, float]:
    """APE over every setting and seed: the lowest accuracy at T, and the best and mean accuracy at every
    longer multiple."""
    far = np.stack([ev.accuracy()[1:] for _, ev in ape.values()])  # every multiple >= 2
    return {"1x_min": float(min(ev.accuracy()[0].min() for _, ev in ape.values())),
            "far_max": float(far.max()), "far_mean": float(far.mean())}


def fit_transfer(rope: Mapping[GridKey, Run], recipe: str, width: int, multiples: Sequence[float]) -> Points:
    """Every seed of one (recipe, width) column: accuracy at T, accuracy at 2T, "T=.., K=.., seed .."."""
    keys = [key for key in rope if key[:2] == (recipe, width)]
    hover = [f"T={key[2]}, K={key[3]}, seed {s}" for key in keys for s in rope[key][0].seeds]
    at_T = _column(rope, recipe, width, row(multiples, 1)).ravel()
    return at_T, _column(rope, recipe, width, row(multiples, 2)).ravel(), hover


def transfer_summary(points: Points, solved: float) -> dict[str, int | float]:
    """Of one column's seeds, how many fit the training length (accuracy >= ``solved``) and the range of their
    accuracy at 2T (nan when none does)."""
    fit_T, at_2T, _ = points
    fit = fit_T >= solved
    return {"n_fit": int(fit.sum()),
            "fit_2x_min": float(at_2T[fit].min()) if fit.any() else float("nan"),
            "fit_2x_max": float(at_2T[fit].max()) if fit.any() else float("nan")}


def transfer_correlation(points: Sequence[Points]) -> dict[str, int | float]:
    """Over several columns' seeds pooled: the correlation of the accuracy at T with that at 2T, and the number
    of seeds per column."""
    fit_T = np.concatenate([p[0] for p in points])
    at_2T = np.concatenate([p[1] for p in points])
    return {"corr_fit_transfer": float(np.corrcoef(fit_T, at_2T)[0, 1]), "n_runs": int(fit_T.size // len(points))}


def depth_table(depth: Mapping[tuple[str, int], Run], by_layer: Mapping[int, PinningResult],
                multiples: Sequence[float], train_length: int) -> str:
    """One line per (encoding, layers): steps and accuracy by multiple; then, for two-layer RoPE at each length,
    each layer's mean weight on the target and share of its argmax at keys >= T back."""
    lines = ["enc   layers  steps (min-max)  " + "  ".join(f"{m}x mean [min, max]" for m in multiples)]
    for (enc, n), (tr, ev) in depth.items():
        lines.append(f"{enc:4s}  {n:6d}  {tr.steps.min():5d}-{tr.steps.max():<5d}  {_spreads(ev)}")
    lines += ["", "two-layer RoPE, last query: mean weight on the target / share of argmax at keys >= T back"]
    for L, r in by_layer.items():
        for i, layer in enumerate(r.layers):
            beyond = share_beyond(layer.argmax_counts, train_length)
            lines.append(f"  L={L:4d} layer {i + 1}: {layer.target_weight.mean():.3f} / {beyond.mean():.3f}")
    return "\n".join(lines)


def depth_summary(run: Run, multiples: Sequence[float]) -> dict[str, int | float]:
    """One (encoding, layers) run: mean accuracy at T, at 2T (and its best seed), at the longest multiple, and
    the most steps any seed trained."""
    tr, ev = run
    a = ev.accuracy()
    one, two = row(multiples, 1), row(multiples, 2)
    return {"1x": float(a[one].mean()), "2x": float(a[two].mean()), "2x_max": float(a[two].max()),
            "far": float(a[-1].mean()), "steps_max": int(tr.steps.max())}


def layer_summary(by_layer: Mapping[int, PinningResult], train_length: int) -> dict[str, float]:
    """Per length L (a multiple of T) and layer i: ``layer{i}_weight_{L/T}x``, the mean weight of the last query
    on the target, and ``layer{i}_beyond_{L/T}x``, the share of its argmax at keys at least T back."""
    out = {}
    for L, r in by_layer.items():
        for i, layer in enumerate(r.layers):
            tag = f"{L // train_length}x"
            out[f"layer{i + 1}_weight_{tag}"] = float(layer.target_weight.mean())
            out[f"layer{i + 1}_beyond_{tag}"] = float(share_beyond(layer.argmax_counts, train_length).mean())
    return out


def encoding_table(encodings: Mapping[tuple[int, int], Mapping[str, Evaluation]], multiples: Sequence[float]) -> str:
    """One line per (offset, position scheme): accuracy at each multiple as mean [min, max] over seeds."""
    lines = ["  K  encoding     " + "  ".join(f"{m}x mean [min, max]" for m in multiples)]
    for (_, k), by_enc in encodings.items():
        for enc, ev in by_enc.items():
            lines.append(f"{k:3d}  {enc:11s}  " + _spreads(ev))
    return "\n".join(lines)


def encoding_summary(ev: Evaluation, multiples: Sequence[float]) -> dict[str, float]:
    """One position scheme: mean (and worst seed's) accuracy at T, mean at 2T and at the longest multiple."""
    a = ev.accuracy()
    one = row(multiples, 1)
    return {"1x": float(a[one].mean()), "1x_min": float(a[one].min()), "2x": float(a[row(multiples, 2)].mean()),
            "far": float(a[-1].mean())}


def variable_table(variable: Mapping[str, tuple[str, str, Evaluation]], early: Trained, early_eval: Evaluation,
                   shown: Sequence[int]) -> str:
    """The early-stopped variable-length APE run (steps, accuracy by length), then one line per variant with its
    mean accuracy at the lengths ``shown``."""
    lines = [" ".join(map(str, ["early-stopped variable-length APE: steps", early.steps.tolist(), "accuracy at",
                                {L: np.round(r.accuracy, 3).tolist() for L, r in early_eval.by_length.items()}]))]
    for label, (_, _, ev) in variable.items():
        lines.append(f"{label:40s} {({L: f'{r.accuracy.mean():.3f}' for L, r in ev.by_length.items() if L in shown})}")
    return "\n".join(lines)


def variable_summary(ev: Evaluation, inside: Sequence[int], train_length: int, far_length: int,
                     solved: float) -> dict[str, float]:
    """One fixed- or variable-length variant: its accuracy over the lengths ``inside`` the training range (mean;
    worst seed and length, T included), at T (mean, share of seeds that solved it), at 2T (mean, range over
    seeds) and at ``far_length`` (mean, worst seed)."""
    at_T, at_2T, far = (ev.by_length[L].accuracy for L in (train_length, 2 * train_length, far_length))
    return {
        "inside": float(accuracy_at(ev, inside).mean()),
        "inside_min": float(accuracy_at(ev, [*inside, train_length]).min()),
        "T": float(at_T.mean()),
        "solved_share": float((at_T >= solved).mean()),
        "2x": float(at_2T.mean()),
        "2x_min": float(at_2T.min()),
        "2x_max": float(at_2T.max()),
        "far": float(far.mean()),
        "far_min": float(far.min()),
    }
