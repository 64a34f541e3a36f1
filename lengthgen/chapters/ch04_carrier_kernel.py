"""Chapter 4 (``book/04_carrier_kernel``): what the page shows of the carrier kernels of many trained RoPE models.

The table of every model, the figures' frames (kernels, pair spectra, singular values), the sentence on models
without a clear peak and the numbers the prose cites over recipes, offsets and seeds, all read from the
``kernel_study.KernelRun`` s the chapter measures (and ``kernel_study.margin_by_length``); nothing here trains or
measures a model. Every number is returned as a plain Python int, float or str, ready for ``glue.each``.

Shapes: S members (seeds) per run, V vocabulary, P rotation pairs, n offsets back (the run's reach).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from .. import kernel
from ..kernel import TOP_PAIRS
from ..kernel_study import Key, KernelRun, Points, keys_of, over_recipe, recipes_of


def table(runs: Mapping[Key, KernelRun], multiples: Sequence[float]) -> str:
    """One text line per model: steps, accuracy at T, c(-K), its margins, predicted failure length, aliased peaks,
    the strongest pair (period, energy share) and the accuracy at each further multiple of T."""
    lines = ["recipe       K seed steps  acc@T  c(-K)  margin:in  beyond  fails at  peaks  top pair (period, share)  "
             + "  ".join(f"acc@{m}T" for m in multiples[1:])]
    for (name, k), r in runs.items():
        acc, spec = r.evaluation.accuracy(), r.spectrum
        for s, seed in enumerate(r.seeds):
            top = spec.dominant(s, 1)[0]
            fails = r.failure[s] if r.failure[s] is not None else "-"
            lines.append(
                f"{name:11s} {k:2d} {seed:4d} {r.trained.steps[s]:5d}  {acc[0, s]:.3f}  {r.margin.target[s]:5.2f}  "
                f"{r.margin.in_window[s]:9.2f}  {r.margin.beyond[s]:6.2f}  {fails!s:>8}  {len(r.peaks[s]):5d}  "
                f"({spec.period[top]:8.1f}, {spec.energy_top[1][s]:.3f})  "
                + "  ".join(f"{a:7.3f}" for a in acc[1:, s]))
    return "\n".join(lines)


def kernel_frames(runs: Mapping[Key, KernelRun], drawn: int, shown: int) -> dict[str, tuple]:
    """``plots.carrier_kernel_figure``'s frames for the first ``drawn`` seeds of every run: label ->
    (kernel (shown,), its strongest pair's part (shown,), K, aliased peaks within ``shown`` back)."""
    frames = {}
    for (name, k), r in runs.items():
        for s, seed in enumerate(r.seeds[:drawn]):
            top = r.spectrum.dominant(s, 1)[0]
            frames[f"{name}, K={k}, seed {seed}"] = (r.kern[s, :shown], r.pairs[s, top, :shown], k,
                                                     [-p.delta for p in r.peaks[s] if -p.delta < shown])
    return frames


def pair_shares(runs: Mapping[Key, KernelRun], drawn: int) -> dict[str, np.ndarray]:
    """``plots.pair_spectrum_figure``'s frames: label -> (P,) each pair's share of the kernel's energy, for the
    first ``drawn`` seeds of every run."""
    shares = {}
    for (name, k), r in runs.items():
        for s, seed in enumerate(r.seeds[:drawn]):
            energy = r.spectrum.amplitude[s] ** 2
            shares[f"{name}, K={k}, seed {seed}"] = energy / energy.sum()
    return shares


def peak_summary(runs: Mapping[Key, KernelRun], recipe: str) -> dict[str, int | float]:
    """Inside the window, over one recipe's models: how many there are and have a clear peak, and for those the
    lowest accuracy at T, the lowest c(-K) and the smallest in-window margin."""
    fit = over_recipe(runs, recipe, lambda r: r.learned)
    acc_T = over_recipe(runs, recipe, lambda r: r.evaluation.accuracy()[0])
    if not fit.any():
        raise ValueError(f"no {recipe} model has a clear peak at the target: train longer or check the recipe")
    return {
        "n_models": int(fit.size),
        "n_peaked": int(fit.sum()),
        "acc_T_peaked_min": float(acc_T[fit].min()),
        "target_min": float(over_recipe(runs, recipe, lambda r: r.margin.target)[fit].min()),
        "in_margin_min": float(over_recipe(runs, recipe, lambda r: r.margin.in_window)[fit].min()),
    }


def unlearned_note(runs: Mapping[Key, KernelRun]) -> str:
    """A sentence on the models without a clear peak, per recipe, or that every model has one."""
    flat = []
    for name in recipes_of(runs):
        fit = over_recipe(runs, name, lambda r: r.learned)
        acc_T = over_recipe(runs, name, lambda r: r.evaluation.accuracy()[0])
        if (~fit).any():
            flat.append(f"{int((~fit).sum())} {name} model(s) (best accuracy at T among them {acc_T[~fit].max():.3f})")
    if flat:
        return "Without a peak: " + "; ".join(flat) + ". These are the seeds that did not learn the task."
    return ("Every model trained here, under either recipe, has such a peak; a seed that fails to learn the task (as "
            "some do in the robustness chapter) has none.")


def _points(runs: Mapping[Key, KernelRun], by_length: Mapping[tuple[str, int], Points],
            recipe: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One recipe's (model, length) points beyond the window, lengths in order: (learned (n,), margin (n,),
    accuracy (n,))."""
    fit = over_recipe(runs, recipe, lambda r: r.learned)
    lengths = [L for name, L in by_length if name == recipe]
    margin = np.concatenate([by_length[recipe, L][0] for L in lengths])
    acc = np.concatenate([by_length[recipe, L][1] for L in lengths])
    return np.tile(fit, len(lengths)), margin, acc


def _mean_or_none(x: np.ndarray) -> str:
    return f"{x.mean():.3f}" if x.size else "no such point"


def beyond_summary(runs: Mapping[Key, KernelRun], by_length: Mapping[tuple[str, int], Points],
                   recipe: str) -> dict[str, int | float | str]:
    """Beyond the window, over one recipe's models with a clear peak: the (model, length) points with a positive
    and a non-positive kernel margin (count, mean accuracy), the accuracy at the longest length, the predicted
    failures within reach, the models with an aliased peak, and how alike two seeds' kernels are there."""
    ok, margin, acc = _points(runs, by_length, recipe)
    fit = over_recipe(runs, recipe, lambda r: r.learned)
    if not fit.any():
        raise ValueError(f"no {recipe} model has a clear peak at the target: train longer or check the recipe")
    keys = keys_of(runs, recipe)
    T = runs[keys[0]].train_length
    failures = np.array([f for key in keys for s, f in enumerate(runs[key].failure)
                         if runs[key].learned[s] and f is not None])
    cos = np.concatenate([runs[key].agreement for key in keys])
    return {
        "n_points": int(ok.sum()),
        "n_pos_margin": int((ok & (margin > 0)).sum()),
        "n_neg_margin": int((ok & (margin <= 0)).sum()),
        "acc_pos_margin": _mean_or_none(acc[ok & (margin > 0)]),
        "acc_neg_margin": _mean_or_none(acc[ok & (margin <= 0)]),
        "acc_far_mean": float(acc[ok][-fit.sum():].mean()),  # the longest length
        "acc_far_min": float(acc[ok][-fit.sum():].min()),
        "n_fail": int(failures.size),
        "first_fail": f"{failures.min()} ({failures.min() / T:.1f}T)" if failures.size else "none",
        "n_with_peaks": int(sum(len(runs[key].peaks[s]) > 0
                                for key in keys for s in np.flatnonzero(runs[key].learned))),
        "agree_mean": float(cos.mean()),
        "agree_min": float(cos.min()),
    }


def margin_correlation(runs: Mapping[Key, KernelRun], by_length: Mapping[tuple[str, int], Points]) -> dict:
    """Over every recipe's (model, length) points with a clear peak: their number and the correlation between
    the kernel margin beyond the window and the measured accuracy."""
    ok, margin, acc = map(np.concatenate, zip(*(_points(runs, by_length, name) for name in recipes_of(runs))))
    return {"corr_margin_acc": float(np.corrcoef(margin[ok], acc[ok])[0, 1]), "n_points": int(ok.sum())}


def earliest_alias(runs: Mapping[Key, KernelRun]) -> dict[str, int | float | str]:
    """The model (any recipe, clear peak) whose kernel first reaches c(-K) beyond the window (else the one with the
    highest point there), that offset, its gap to the target, and how the model's strongest pair nearly repeats
    its target phase there (period, turns between the two offsets, phase mismatch in radians)."""
    candidates = [(key, s) for key in runs for s in np.flatnonzero(runs[key].learned)]
    if not candidates:
        raise ValueError("no model has a clear peak at the target, so none has an aliased one")
    key, s = min(candidates, key=lambda ks: (runs[ks[0]].failure[ks[1]] or np.inf, runs[ks[0]].margin.beyond[ks[1]]))
    (name, k), r = key, runs[key]
    T = r.train_length
    back = r.failure[s] - 1 if r.failure[s] is not None else T + int(np.argmax(r.kern[s, T:]))
    pair = kernel.explain(r.spectrum, s, -back, k, 1)[0]
    return {
        "recipe": name, "K": k, "seed": r.seeds[s], "back": back, "gap": float(r.kern[s, back] - r.kern[s, k]),
        "period": pair["period"], "turns": abs(pair["turns"]), "mismatch": abs(pair["mismatch"]), "length": back + 1,
    }


def spectrum_summary(runs: Mapping[Key, KernelRun], recipe: str) -> dict[str, float | str]:
    """Over one recipe's models with a clear peak: the energy share of the strongest 1, 2 and 4 pairs (mean,
    lowest), the participation ratio (mean, largest) and the most common strongest pair (period, how many)."""
    keys = keys_of(runs, recipe)
    periods = np.concatenate([runs[key].spectrum.period[[runs[key].spectrum.dominant(s, 1)[0]
                                                         for s in np.flatnonzero(runs[key].learned)]] for key in keys])
    values, counts = np.unique(np.round(periods, 1), return_counts=True)
    participation = over_recipe(runs, recipe, lambda r: r.spectrum.participation[r.learned])
    out: dict[str, float | str] = {}
    for n in TOP_PAIRS:
        top = over_recipe(runs, recipe, lambda r: r.spectrum.energy_top[n][r.learned])
        out[f"top{n}_mean"], out[f"top{n}_min"] = float(top.mean()), float(top.min())
    return out | {
        "participation_mean": float(participation.mean()),
        "participation_max": float(participation.max()),
        "common_period": float(values[counts.argmax()]),
        "common_period_count": f"{int(counts.max())} of {int(counts.sum())}",
    }


def rank_summary(runs: Mapping[Key, KernelRun], recipe: str) -> dict[str, float]:
    """Over one recipe's models with a clear peak: the largest share of the logit matrix's squared singular values
    outside the first, and the range of the share of in-window logit variance the offset alone explains."""
    rank_one = over_recipe(runs, recipe, lambda r: kernel.rank_one_share(torch.as_tensor(r.sv)).numpy()[r.learned])
    position = over_recipe(runs, recipe, lambda r: r.spectrum.position_share[r.learned])
    return {"rank_one_rest": float(1 - rank_one.min()),
            "position_min": float(position.min()), "position_max": float(position.max())}


def singular_value_curves(runs: Mapping[Key, KernelRun]) -> dict[str, np.ndarray]:
    """label -> (V,) singular values at the target offset, for every model with a clear peak."""
    return {f"{name}, K={k}, seed {r.seeds[s]}": r.sv[s]
            for (name, k), r in runs.items() for s in np.flatnonzero(r.learned)}
