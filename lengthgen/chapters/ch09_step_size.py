"""Chapter 9 (``book/09_step_size``): what the page shows of its sweep frames.

Each function takes rows of ``Sweep.frame()`` (one row per model and evaluation length) and returns what the
chapter shows: the rows of a table (already formatted cells, for ``plots.md_table``), the lines of a figure
(``compare.line`` triples for ``plots.sweep_lines``) and the numbers its prose cites, keyed by the glue name
the prose uses (a ``dict`` for ``glue.each``). Every comparison of two recipes is paired over (vocabulary,
offset, seed, length) with ``compare.paired`` and decided by the two-standard-error rule.

The step-size frames: ``fixed``, the runs with a fixed budget lr x steps and no early stop, and ``first_fit``,
the first-fit recipe's runs next to them.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ..compare import CriterionCheck, Lines, PairedChange, at, line, paired, pm, where
from ..recipes import Recipe
from ..sweep import summary
from ..thresholds import EVERY_SEED_TRANSFER, FITS_TRAINING_LENGTH



def lrs_of(d: pd.DataFrame) -> list[float]:
    """The step sizes of frame ``d``, largest first."""
    return sorted(d.lr.unique().tolist(), reverse=True)


def pair(before: pd.DataFrame, after: pd.DataFrame, multiple: float) -> PairedChange:
    """Accuracy at ``multiple`` x T changed from ``before`` to ``after``, paired over (vocab, offset, seed)."""
    return paired(where(before, multiple=multiple), where(after, multiple=multiple))


def _change(prefix: str, ch: PairedChange) -> dict[str, Any]:
    """A paired change as the glue names ``prefix``, ``prefix_sem`` and ``prefix_verdict``."""
    return {prefix: ch.mean, f"{prefix}_sem": ch.sem, f"{prefix}_verdict": ch.verdict}


def overview(fixed: pd.DataFrame, first_fit: pd.DataFrame) -> dict[str, Any]:
    """The settings the chapter opens with: vocabularies, offsets, the first-fit recipe, the step sizes and
    the budget lr x steps of the fixed-budget runs."""
    lrs = lrs_of(fixed)
    return {"vocabs": " and ".join(str(v) for v in sorted(fixed.vocab.unique().tolist())),
            "offsets": ", ".join(str(k) for k in sorted(fixed.offset.unique().tolist())),
            "first_fit_recipe": first_fit.recipe.iloc[0], "lr_range": f"{lrs[0]:g} to {lrs[-1]:g}",
            "time_budget": float(fixed.lr.iloc[0] * fixed.steps.iloc[0])}


def accuracy_lines(fixed: pd.DataFrame, shown: Sequence[float]) -> dict[str, Lines]:
    """Per (vocabulary, offset): accuracy at each ``shown`` multiple against the step size, and the worst seed at
    8x (its standard error drawn as 0)."""
    frames = {}
    for V in sorted(fixed.vocab.unique().tolist()):
        for K in sorted(fixed.offset.unique().tolist()):
            series = {f"{m:g}x": line(fixed, "lr", vocab=V, offset=K, multiple=m) for m in shown}
            worst = summary(where(fixed, vocab=V, offset=K, multiple=8), "lr")
            series["8x, worst seed"] = (list(worst.index), list(worst["min"]), [0.0] * len(worst))
            frames[f"V={V}, K={K}"] = series
    return frames


def recipe_rows(fixed: pd.DataFrame, first_fit: pd.DataFrame, shown: Sequence[float]) -> list[list[str]]:
    """Per vocabulary, the first-fit recipe and then each step size: accuracy (mean ± se) at each ``shown``
    multiple, the worst seed at 8x, the number of models and the training seconds per model."""
    rows = []
    for V in sorted(fixed.vocab.unique().tolist()):
        recipes = [("first fit", where(first_fit, vocab=V))] + [
            (f"lr {lr:g}, {where(fixed, lr=lr).steps.iloc[0]} steps", where(fixed, lr=lr, vocab=V)) for lr in lrs_of(fixed)]
        for label, d in recipes:
            if len(d):
                models = where(d, multiple=1)
                rows.append([str(V), label] + [pm(at(d, multiple=m)) for m in shown]
                            + [f"{at(d, multiple=8)['min']:.3f}", f"{len(models)}", f"{models.seconds.mean():.2f}"])
    return rows


def lr_listing(fixed: pd.DataFrame, shown: Sequence[float]) -> str:
    """The step-size table as plain text: mean accuracy per (vocabulary, step size) at each ``shown`` multiple
    and the worst seed at 8x."""
    out = [f"{'V':>3} {'recipe':>18}" + "".join(f"{f'{m}x':>8}" for m in shown) + "  worst 8x"]
    for V in sorted(fixed.vocab.unique().tolist()):
        for lr in lrs_of(fixed):
            d = where(fixed, lr=lr, vocab=V)
            if len(d):
                out.append(f"{V:>3} {f'lr {lr:g}':>18}" + "".join(f"{at(d, multiple=m)['mean']:8.3f}" for m in shown)
                           + f"  {at(d, multiple=8)['min']:.3f}")
    return "\n".join(out)


def seed_listing(d: pd.DataFrame) -> str:
    """Every model of ``d``, per (vocabulary, offset, recipe): accuracy per seed (in seed order) at each
    evaluation length, and the training seconds per model."""
    out = []
    for (V, K, text), g in d.groupby(["vocab", "offset", "recipe"], sort=False):
        g = g.sort_values("seed", kind="stable")
        out.append(f"V={V} K={K} {text} ({where(g, multiple=1).seconds.mean():.2f} s per model)")
        for m, at_m in g.groupby("multiple", sort=False):
            out.append(f"   {int(m):>2}x: " + " ".join(f"{a:.3f}" for a in at_m.accuracy))
    return "\n".join(out)


def convergence(fixed: pd.DataFrame, first_fit: pd.DataFrame) -> tuple[list[list[str]], dict[str, Any]]:
    """Does accuracy far out converge as the step shrinks? Each step size against the next smaller one at 8x and
    16x (table rows), and the numbers of section 1: the smallest step against the second smallest and against
    the first-fit recipe on the same vocabularies, and the largest step against the first fit."""
    lrs = lrs_of(fixed)
    by_lr = lambda lr: where(fixed, lr=lr)  # noqa: E731
    rows = []
    for big, small in zip(lrs, lrs[1:]):
        for m in (8, 16):
            ch = pair(by_lr(big), by_lr(small), m)
            rows.append([f"{big:g} -> {small:g}", f"{m}x", f"{ch.mean:+.3f} ± {ch.sem:.3f}", f"{ch.up} / {ch.down}",
                         ch.verdict])
    numbers: dict[str, Any] = {
        "conv_steps_8x": ", ".join(f"{pair(by_lr(a), by_lr(b), 8).mean:+.3f}" for a, b in zip(lrs, lrs[1:]))}
    smallest = by_lr(lrs[-1])
    ff = first_fit[first_fit.vocab.isin(smallest.vocab.unique())]
    for m in (8, 16):
        numbers |= _change(f"conv_last_{m}x", pair(by_lr(lrs[-2]), smallest, m))
        numbers |= {f"limit_{m}x": at(smallest, multiple=m)["mean"], f"limit_{m}x_min": at(smallest, multiple=m)["min"],
                    f"firstfit_{m}x": at(ff, multiple=m)["mean"]}
    numbers |= {"lr_smallest": lrs[-1], "lr_second": lrs[-2],
                "limit_vocabs": " and ".join(str(v) for v in sorted(smallest.vocab.unique().tolist()))}
    for m in (4, 8):
        numbers[f"big_lr_{m}x"] = at(by_lr(lrs[0]), multiple=m)["mean"]
        ch = pair(first_fit, by_lr(lrs[0]), m)
        numbers |= {f"longer_at_big_lr_{m}x": ch.mean, f"longer_at_big_lr_{m}x_verdict": ch.verdict}
    numbers["big_lr"] = lrs[0]
    return rows, numbers


TIME_SENTENCE = {  # the verdict of the longer small-step run against the shorter run at a smaller step
    "no clear change": "the smaller step buys in a quarter of the training time what four times the time buys at the "
                       "larger one.",
    "up": "the smaller step buys more in a quarter of the training time than four times the time does at the larger "
          "one.",
    "down": "four times the time at the larger step does better than the smaller step at the base budget.",
}


def time_or_step(longer: pd.DataFrame, fixed: pd.DataFrame) -> tuple[list[list[str]], dict[str, Any], dict[str, str]]:
    """Step size or training time? ``longer``: the same seeds trained four times longer at two step sizes. Per
    step size and length (4x, 8x), the shorter run against the longer (table rows, numbers ``time_big_*`` and
    ``time_small_*``); the longer run at the small step against the shorter run at the next smaller step of
    ``fixed`` (``time_vs_step_*``, where it exists), and the sentence that draws the conclusion (markdown)."""
    lrs, time_lrs = lrs_of(fixed), lrs_of(longer)
    rows, numbers, sentences = [], {}, {}
    for lr in time_lrs:
        long, short = where(longer, lr=lr), where(fixed, lr=lr)
        if not len(short):
            continue
        for m in (4, 8):
            ch = pair(short, long, m)
            rows.append([f"{lr:g}", f"{short.steps.iloc[0]} -> {long.steps.iloc[0]}", f"{m}x", pm(at(short, multiple=m)),
                         pm(at(long, multiple=m)), f"{ch.mean:+.3f} ± {ch.sem:.3f}", ch.verdict])
            numbers |= _change(f"time_{'big' if lr == max(time_lrs) else 'small'}_{m}x", ch)
    numbers |= {"time_lr_big": max(time_lrs), "time_lr_small": min(time_lrs)}
    smaller = [lr for lr in lrs if lr < min(time_lrs)]
    if smaller:
        long_small, next_step = where(longer, lr=min(time_lrs)), where(fixed, lr=smaller[0])
        for m in (4, 8):
            numbers |= _change(f"time_vs_step_{m}x", pair(long_small, next_step, m))
        numbers["time_vs_step_lr"] = smaller[0]
        sentences["time_sentence"] = (
            "So time and step size are not interchangeable: with a large step no amount of time helps; with a small "
            "one both help, and " + TIME_SENTENCE[pair(long_small, next_step, 8).verdict])
        numbers |= {"time_vs_step_steps": int(next_step.steps.iloc[0]), "time_long_steps": int(long_small.steps.iloc[0])}
    return rows, numbers, sentences


def fitted(d: pd.DataFrame) -> int:
    """The models of ``d`` with accuracy at least FITS_TRAINING_LENGTH at the training length."""
    return int((where(d, multiple=1).accuracy >= FITS_TRAINING_LENGTH).sum())


def gradient_descent(gd: pd.DataFrame, multiples: Sequence[float]) -> tuple[list[list[str]], dict[str, Any]]:
    """Plain gradient descent at several step sizes: per (step size, offset), the seeds that fit and accuracy
    at ``multiples`` (table rows); the numbers of section 3 (the largest step against the smallest, paired)."""
    lrs, offsets = lrs_of(gd), sorted(gd.offset.unique().tolist())
    rows = [[f"{lr:g}", str(K), f"{fitted(where(gd, lr=lr, offset=K))}/{len(where(gd, lr=lr, offset=K, multiple=1))}"]
            + [pm(at(gd, lr=lr, offset=K, multiple=m)) for m in multiples] for lr in lrs for K in offsets]
    small, big = where(gd, lr=lrs[-1]), where(gd, lr=lrs[0])
    second = where(gd, lr=lrs[-2]) if len(lrs) > 1 else big
    numbers: dict[str, Any] = {"gd_batch": int(gd.batch.iloc[0]), "gd_budget": float(gd.lr.iloc[0] * gd.steps.iloc[0]),
                               "gd_lrs": ", ".join(f"{lr:g}" for lr in lrs)}
    for m in (4, 8):
        numbers |= _change(f"gd_change_{m}x", pair(big, small, m))
    numbers |= {"gd_learned_small": fitted(small), "gd_learned_big": fitted(big),
                "gd_n_small": len(where(small, multiple=1)), "gd_lr_big": lrs[0]}
    numbers |= _change("gd_last_change_8x", pair(second, small, 8))
    numbers |= {"gd_lr_second": lrs[-2] if len(lrs) > 1 else lrs[0], "gd_small_8x": at(small, multiple=8)["mean"],
                "gd_big_4x": at(big, multiple=4)["mean"], "gd_small_4x": at(small, multiple=4)["mean"],
                "gd_lr_small": lrs[-1]}
    return rows, numbers


def decay_label(lr: float, wd: float, scope: str) -> str:
    """A weight-decay setting in words, e.g. "lr 0.01, decay 1 on all"."""
    return f"lr {lr:g}, " + ("no decay" if wd == 0 else f"decay {wd:g} on {scope}")


def weight_decay(decay: pd.DataFrame) -> tuple[list[str], Lines, list[list[str]], dict[str, Any]]:
    """Weight decay on the matrices or on every parameter, at each step size: the settings' labels and their
    accuracy (mean, se) at 2x, 4x and 8x (for ``plots.setting_effects``), table rows (accuracy at 1x, 4x, 8x and
    the paired change against no decay at the same step size) and the numbers of section 4 (how many settings
    raise or lower 8x accuracy, and the largest change)."""
    lrs = lrs_of(decay)
    decayed = decay[decay.weight_decay > 0]
    settings = [(0.0, "matrices")] + list(dict.fromkeys(zip(decayed.weight_decay.tolist(), decayed.decay_scope.tolist())))
    pick = lambda lr, wd, scope: where(decay, lr=lr, weight_decay=wd, **({} if wd == 0 else {"decay_scope": scope}))  # noqa: E731
    labels, effects, rows, verdicts = [], {f"{m}x": ([], [], []) for m in (2, 4, 8)}, [], {}
    for lr in lrs:
        none = pick(lr, 0.0, "matrices")
        for wd, scope in settings:
            d = pick(lr, wd, scope)
            labels.append(decay_label(lr, wd, scope))
            for m in (2, 4, 8):
                effects[f"{m}x"][1].append(at(d, multiple=m)["mean"])
                effects[f"{m}x"][2].append(at(d, multiple=m)["sem"])
            changes = ["-", "-"] if wd == 0 else [
                f"{ch.mean:+.3f} ± {ch.sem:.3f} ({ch.verdict})" for ch in (pair(none, d, m) for m in (4, 8))]
            rows.append([decay_label(lr, wd, scope)] + [pm(at(d, multiple=m)) for m in (1, 4, 8)] + changes)
            if wd > 0:
                verdicts[lr, wd, scope] = pair(none, d, 8)
    best = max(verdicts, key=lambda k: verdicts[k].mean)
    numbers = {"decay_best": decay_label(*best), "decay_best_change": verdicts[best].mean,
               "decay_best_sem": verdicts[best].sem, "decay_best_verdict": verdicts[best].verdict,
               "decay_n_up": sum(v.verdict == "up" for v in verdicts.values()),
               "decay_n_down": sum(v.verdict == "down" for v in verdicts.values()), "decay_n": len(verdicts),
               "decay_recipes": " or ".join(f"lr {lr:g} ({where(decay, lr=lr).steps.iloc[0]} steps)" for lr in lrs),
               "decay_budget": float(decay.lr.iloc[0] * decay.steps.iloc[0])}
    return labels, effects, rows, numbers


def criterion_text(criterion: dict[float, float] = EVERY_SEED_TRANSFER) -> str:
    """The bar in words, e.g. ">= 0.99 at 4x, >= 0.95 at 8x"."""
    return ", ".join(f">= {b:g} at {m:g}x" for m, b in criterion.items())


def regime_rows(checks: Sequence[CriterionCheck]) -> list[list[str]]:
    """One table row per recipe checked against the bar: its settings, models, worst accuracy at each multiple
    of the bar, the models below it, whether every model passes, and the training seconds per model."""
    return [[c.text, f"{c.settings}", f"{c.models}"] + [f"{c.worst[m]:.3f}" for m in EVERY_SEED_TRANSFER]
            + [f"{c.failing}", "yes" if c.passes else "no", f"{c.seconds_per_model:.2f}"] for c in checks]


def _check_numbers(prefix: str, c: CriterionCheck) -> dict[str, Any]:
    return {f"{prefix}_passes": "reaches" if c.passes else "does not reach", f"{prefix}_failing": c.failing,
            f"{prefix}_models": c.models}


def regime(complete: Sequence[CriterionCheck], with_base: Sequence[CriterionCheck], base_frame: pd.DataFrame,
           book_recipe: Recipe) -> tuple[dict[str, Any], dict[str, str]]:
    """Section 5's numbers and sentences (markdown): the closest recipe of ``complete`` (the checks run on every
    vocabulary and offset, best first), whether ``book_recipe`` is that recipe, and the best recipe and the
    first-fit recipe with the small RoPE base (``with_base``, run on ``base_frame``)."""
    named, best = complete[0], with_base[0]
    first_fit = next(c for c in with_base if c.recipe.target_accuracy is not None)
    big_vocab = where(base_frame, vocab=base_frame.vocab.max(), multiple=1)
    big_vocab = big_vocab[big_vocab.target_accuracy.notna()]  # the first-fit models
    numbers: dict[str, Any] = {"base_regime": best.text, **_check_numbers("base", best)}
    numbers |= {f"base_worst_{m:g}x": best.worst[m] for m in EVERY_SEED_TRANSFER}
    numbers |= {"base_value": float(base_frame.rope_base.iloc[0]), **_check_numbers("base_ff", first_fit),
                "base_ff_unfit": int((big_vocab.accuracy < FITS_TRAINING_LENGTH).sum()), "base_ff_nbig": len(big_vocab),
                "regime": named.text, **_check_numbers("regime", named), "regime_settings": named.settings}
    numbers |= {f"regime_worst_{m:g}x": named.worst[m] for m in EVERY_SEED_TRANSFER}
    numbers |= {"regime_seconds": named.seconds_per_model, "n_passing": sum(c.passes for c in complete),
                "n_complete": len(complete), "book_recipe_is_regime": "is" if book_recipe == named.recipe else "is not"}
    # the bar in words, as the sentences below say it: each multiple of EVERY_SEED_TRANSFER with its threshold
    bar = " and ".join(f"{b:g} at {m:g}x" for m, b in EVERY_SEED_TRANSFER.items())
    sentences = {
        "base_sentence": f"the bar is reached by small steps *and* fast-turning pairs together (`{best.text}`), by "
                         "neither alone." if best.passes and not first_fit.passes and not named.passes else
                         f"the best recipe with the small base is `{best.text}`, and it "
                         + ("reaches" if best.passes else "does not reach") + " the bar.",
        "regime_conclusion": "So there is a regime in which RoPE extrapolates to 8x for every seed, vocabulary and "
                             "offset tried: the small-step regime the account is about." if named.passes else
                             "So the account's regime helps a lot, and \"RoPE extrapolates\" is much truer of models "
                             "trained in it than of first fits, but none of the recipes tried here makes extrapolation "
                             "to 8x reliable for every seed, vocabulary and offset. The table shows by how much each "
                             "misses.",
        "regime_bullet": f"The recipe `{named.text}` keeps at least {bar} for every model "
                         "(section 5)." if named.passes else
                         f"No recipe tried keeps {bar} for every seed, vocabulary and offset; the "
                         f"closest, `{named.text}`, misses on {named.failing} of {named.models} models (section 5).",
    }
    return numbers, sentences
