"""Chapter 5 (``book/05_dilution_law``): the statistics it states about the dilution laws over many trained
models (``dilution.Comparison`` s): tables, figure data and cited numbers.

Comparisons are keyed by (recipe name, offset K), in the order they were made; a recipe's summaries pool its
offsets (each comparison holds every seed at every evaluation length). Every number is returned as a plain
Python int, float or str, ready for ``glue.each``.

Shapes: S seeds, n evaluation lengths, O offsets of one recipe.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..dilution import LAWS, Comparison, pooled

Key = tuple[str, int]  # (recipe name, offset K)


def recipes_of(comparisons: Mapping[Key, Comparison]) -> list[str]:
    """The recipe names of ``comparisons``, in order."""
    return list(dict.fromkeys(key[0] for key in comparisons))


def of_recipe(comparisons: Mapping[Key, Comparison], recipe: str) -> list[Comparison]:
    """One recipe's comparisons, offsets in order."""
    found = [cmp for key, cmp in comparisons.items() if key[0] == recipe]
    if not found:
        raise KeyError(f"no comparison with recipe {recipe!r}; there are {recipes_of(comparisons)}")
    return found


def multiples(cmp: Comparison) -> np.ndarray:
    """(n,) each evaluation length as a multiple of the training length."""
    return np.array([L / cmp.train_length for L in cmp.lengths])


def law_table(comparisons: Mapping[Key, Comparison]) -> str:
    """R^2 of each law and the accuracy prediction's error (mean, worst), one line per (recipe, offset) and one
    pooled over each recipe's offsets."""
    lines = ["R^2 of predicted against measured target weight (all seeds and lengths), and accuracy error",
             "recipe         K  " + "  ".join(f"{law:>10s}" for law in LAWS) + "  acc MAE  acc worst"]
    for name in recipes_of(comparisons):
        for cmp in of_recipe(comparisons, name):
            mae, worst = cmp.accuracy_error()
            lines.append(f"{name:11s} {cmp.offset:4d}  " + "  ".join(f"{cmp.r2(law):10.3f}" for law in LAWS)
                         + f"  {mae:7.3f}  {worst:9.3f}")
        p = pooled(of_recipe(comparisons, name))
        lines.append(f"{name:11s}  all  " + "  ".join(f"{p['r2'][law]:10.3f}" for law in LAWS)
                     + f"  {p['accuracy_mae']:7.3f}  {p['accuracy_worst']:9.3f}")
    return "\n".join(lines)


def fit_summary(comparisons: Mapping[Key, Comparison], recipe: str) -> dict[str, int | float]:
    """One recipe's (model, length) points: how many, each law's R^2 pooled over offsets (``r2_LAW``) and its
    range over offsets (``_min``, ``_max``), and the range of the rate rho fitted at the training length."""
    cmps = of_recipe(comparisons, recipe)
    p = pooled(cmps)
    rho = np.concatenate([cmp.rho for cmp in cmps])
    out: dict[str, int | float] = {"n_points": p["points"]}
    for law in LAWS:
        out[f"r2_{law}"] = p["r2"][law]
        out[f"r2_{law}_min"] = min(cmp.r2(law) for cmp in cmps)
        out[f"r2_{law}_max"] = max(cmp.r2(law) for cmp in cmps)
    return out | {"rho_min": float(rho.min()), "rho_max": float(rho.max())}


def weight_frames(comparisons: Mapping[Key, Comparison], drawn: int) -> dict[str, tuple]:
    """``plots.dilution_curves``' frames for the first ``drawn`` seeds of every comparison: label ->
    (lengths, measured weight (n,), law -> predicted weight (n,))."""
    frames = {}
    for (name, k), cmp in comparisons.items():
        for s, seed in enumerate(cmp.seeds[:drawn]):
            frames[f"{name}, K={k}, seed {seed}"] = (cmp.lengths, cmp.measured_weight[:, s],
                                                     {law: cmp.predicted_weight[law][:, s] for law in LAWS})
    return frames


def weight_points(comparisons: Mapping[Key, Comparison], laws: Sequence[str]) -> dict[str, tuple]:
    """``plots.law_scatter``'s points per law and recipe: "LAW law, RECIPE" -> (measured weight, predicted weight),
    every (model, length) of the recipe."""
    points = {}
    for law in laws:
        for name in recipes_of(comparisons):
            cmps = of_recipe(comparisons, name)
            points[f"{law} law, {name}"] = (np.concatenate([c.measured_weight.ravel() for c in cmps]),
                                            np.concatenate([c.predicted_weight[law].ravel() for c in cmps]))
    return points


def signed_errors(comparisons: Mapping[Key, Comparison], recipe: str) -> dict[str, np.ndarray]:
    """law -> (O, n, S) predicted minus measured target weight, over one recipe's offsets."""
    cmps = of_recipe(comparisons, recipe)
    return {law: np.stack([cmp.predicted_weight[law] - cmp.measured_weight for cmp in cmps]) for law in LAWS}


def error_table(comparisons: Mapping[Key, Comparison]) -> str:
    """Mean |predicted - measured| target weight of each law, one line per (recipe, evaluation length)."""
    lines = ["mean |predicted - measured| target weight by evaluation length (over offsets and seeds)",
             "recipe        L/T  " + "  ".join(f"{law:>10s}" for law in LAWS)]
    for name in recipes_of(comparisons):
        errors = {law: np.abs(d) for law, d in signed_errors(comparisons, name).items()}
        for i, m in enumerate(multiples(of_recipe(comparisons, name)[0])):
            lines.append(f"{name:11s}  {m:5.2f}  " + "  ".join(f"{errors[law][:, i].mean():10.4f}" for law in LAWS))
    return "\n".join(lines)


def error_summary(comparisons: Mapping[Key, Comparison], recipe: str) -> dict[str, float]:
    """Where each law holds, over one recipe's models: its mean absolute error at T, beyond T and at the longest
    length (``err_LAW_T``, ``_far``, ``_last``); the share of points beyond T that the simple and kernel laws
    overestimate, the simple law's worst miss; the length where the mean-field law is worst (as a multiple of
    T), its error there and the content law's there."""
    signed = signed_errors(comparisons, recipe)
    errors = {law: np.abs(d) for law, d in signed.items()}
    mult = multiples(of_recipe(comparisons, recipe)[0])
    far = mult > 1
    out = {}
    for law in LAWS:
        out[f"err_{law}_T"] = float(errors[law][:, ~far].mean())
        out[f"err_{law}_far"] = float(errors[law][:, far].mean())
        out[f"err_{law}_last"] = float(errors[law][:, -1].mean())
    mf_by_length = errors["mean_field"].mean((0, 2))  # (n,)
    return out | {
        "simple_over_share": float((signed["simple"][:, far] > 0).mean()),
        "simple_worst": float(errors["simple"].max()),
        "kernel_over_share": float((signed["kernel"][:, far] > 0).mean()),
        "mf_worst_multiple": float(mult[mf_by_length.argmax()]),
        "mf_worst_err": float(mf_by_length.max()),
        "content_at_mf_worst": float(errors["content"].mean((0, 2))[mf_by_length.argmax()]),
    }


def accuracy_points(comparisons: Mapping[Key, Comparison]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``plots.law_scatter``'s points: "RECIPE, K=k" -> (measured accuracy, predicted accuracy), every seed and
    length."""
    return {f"{name}, K={k}": (cmp.measured_accuracy.ravel(), cmp.predicted_accuracy.ravel())
            for (name, k), cmp in comparisons.items()}


def accuracy_summary(comparisons: Mapping[Key, Comparison], recipe: str) -> dict[str, float]:
    """One recipe's accuracy prediction: its mean and worst absolute error, and the range of measured accuracies."""
    cmps = of_recipe(comparisons, recipe)
    p = pooled(cmps)
    measured = np.concatenate([cmp.measured_accuracy.ravel() for cmp in cmps])
    return {"acc_mae": p["accuracy_mae"], "acc_worst": p["accuracy_worst"],
            "acc_range_min": float(measured.min()), "acc_range_max": float(measured.max())}


def worst_accuracy(comparisons: Mapping[Key, Comparison]) -> dict[str, int | float | str]:
    """The (model, length) point, over every recipe, where the predicted accuracy misses the measured one most
    (the first such point on a tie): which it is, both accuracies, the miss (``acc_worst``), and how far the
    mean-field and content laws' target weights are off there."""
    def miss(point: tuple[Key, int, int]) -> float:
        key, i, s = point
        return abs(comparisons[key].predicted_accuracy[i, s] - comparisons[key].measured_accuracy[i, s])

    (name, k), i, s = max(((key, i, s) for key, cmp in comparisons.items()
                           for i in range(len(cmp.lengths)) for s in range(len(cmp.seeds))), key=miss)
    cmp = comparisons[name, k]
    return {
        "acc_worst_recipe": name,
        "acc_worst_K": k,
        "acc_worst_seed": cmp.seeds[s],
        "acc_worst_L": cmp.lengths[i],
        "acc_worst_measured": float(cmp.measured_accuracy[i, s]),
        "acc_worst_predicted": float(cmp.predicted_accuracy[i, s]),
        "acc_worst": float(abs(cmp.predicted_accuracy[i, s] - cmp.measured_accuracy[i, s])),
        "acc_worst_mf_err": float(abs(cmp.predicted_weight["mean_field"][i, s] - cmp.measured_weight[i, s])),
        "acc_worst_content_err": float(abs(cmp.predicted_weight["content"][i, s] - cmp.measured_weight[i, s])),
    }
