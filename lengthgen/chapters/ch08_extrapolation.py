"""Chapter 8 (``book/08_when_rope_extrapolates``): what the page shows of its sweep frames.

Each function takes rows of ``Sweep.frame()`` (one row per model and evaluation length) and returns what the
chapter shows: the lines of a figure (``compare.line`` triples for ``plots.sweep_lines``), the rows of a table
(formatted cells for ``plots.md_table``), and the numbers and sentences (markdown) its prose cites, keyed by
the glue name the prose uses (dicts for ``glue.each``). Settings are compared by the two-standard-error rule
(``compare.versus``), longer against shorter runs of the same seeds by ``compare.paired``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..compare import VERDICTS, Lines, at, failure_verdict, line, paired, pm, versus, where


def accuracy_listing(df: pd.DataFrame, rows: dict[str, dict], multiples: Sequence[float], width: int) -> str:
    """Mean accuracy as plain text: one line per entry of ``rows`` (label -> the column values that select its
    rows of ``df``), one column per evaluation multiple; labels padded to ``width``."""
    out = [f"{'':{width}s}" + "".join(f"{f'{m:g}x':>8s}" for m in multiples)]
    for label, eq in rows.items():
        out.append(f"{label:{width}s}" + "".join(f"{at(df, multiple=m, **eq)['mean']:8.3f}" for m in multiples))
    return "\n".join(out)


# --- 1. the training budget (one step size's runs at several budgets, the same seeds) ---

def budget_lines(b: pd.DataFrame, shown: Sequence[float]) -> tuple[Lines, Lines]:
    """Against the number of steps: accuracy at each ``shown`` multiple, and the kernel's in-window and
    beyond-window margins (one value per model)."""
    models = where(b, multiple=1)  # one row per model: its kernel's numbers
    return ({f"{m:g}x": line(b, "steps", multiple=m) for m in shown},
            {"target vs. best in-window offset": line(models, "steps", "margin_in_window"),
             "target vs. best offset beyond the window (to 16x)": line(models, "steps", "margin_beyond")})


def budget_rows(b: pd.DataFrame, steps: Sequence[int], shown: Sequence[float]) -> list[list[str]]:
    """One row per budget: step size, steps, in-window margin and accuracy at each ``shown`` multiple."""
    models = where(b, multiple=1)
    return [[f"{b.lr.iloc[0]:g}", str(v), pm(at(models, "margin_in_window", steps=v))]
            + [pm(at(b, steps=v, multiple=m)) for m in shown] for v in steps]


def budget_listing(budget: pd.DataFrame, shown: Sequence[float]) -> str:
    """The budget table as plain text: mean in-window margin and accuracy per (step size, steps)."""
    out = ["lr      steps  margin_in  " + "  ".join(f"{m:>5g}x" for m in shown)]
    for lr in sorted(budget.lr.unique().tolist(), reverse=True):
        for v in sorted(budget.steps.unique().tolist()):
            cells = [at(budget, lr=lr, steps=v, multiple=m)["mean"] for m in shown]
            margin = at(budget, "margin_in_window", lr=lr, steps=v, multiple=1)["mean"]
            out.append(f"{lr:<7g} {v:5d}  {margin:9.3f}  " + "  ".join(f"{c:6.3f}" for c in cells))
    return "\n".join(out)


def budget_changes(b: pd.DataFrame, first: int, ref: int, last: int, far: float) -> tuple[dict[str, Any], dict[str, str]]:
    """The numbers of section 1 for one step size: the margins, the share of models whose kernel predicts a
    failure and the norm of W_q W_k^T after ``first``, ``ref`` and ``last`` steps; and, paired over seeds, the
    change from ``ref`` to ``last`` steps of accuracy at 2x, 4x and ``far`` x T, of the in-window margin
    (``budget_diff_margin``) and of the norm (``budget_diff_norm``), with their verdicts (markdown)."""
    models = where(b, multiple=1)
    numbers: dict[str, Any] = {}
    for name, v in (("first", first), ("ref", ref), ("last", last)):
        numbers |= {f"steps_{name}": v, f"margin_in_{name}": at(models, "margin_in_window", steps=v)["mean"],
                    f"margin_beyond_{name}": at(models, "margin_beyond", steps=v)["mean"],
                    f"predicted_share_{name}": float(where(models, steps=v).predicted_failure_length.notna().mean())}
    numbers["qk_norm_ref"] = at(models, "qk_norm", steps=ref)["mean"]
    changes = {f"budget_diff_{m:g}x": paired(where(b, steps=ref, multiple=m), where(b, steps=last, multiple=m))
               for m in (2, 4, far)}  # the same seeds: the longer run continues the shorter one
    for key, value in (("margin", "margin_in_window"), ("norm", "qk_norm")):
        changes[f"budget_diff_{key}"] = paired(where(models, steps=ref), where(models, steps=last), value)
    verdicts = {}
    for key, ch in changes.items():
        numbers |= {key: ch.mean, f"{key}_sem": ch.sem}
        if key.endswith("x"):  # accuracies: how many seeds went up and down
            numbers |= {f"{key}_up": ch.up, f"{key}_down": ch.down}
        verdicts[f"{key}_verdict"] = ch.verdict
    numbers["acc_4x_last"] = at(b, steps=last, multiple=4)["mean"]
    return numbers, verdicts


# --- 2. the frontier predicted from the kernel ---

def failure_outcomes(learned: pd.DataFrame, tol: float) -> tuple[dict[str, int], dict[str, Any]]:
    """Per-model outcomes of the kernel's prediction (``compare.failure_verdict`` with factor ``tol``) over the
    models of ``learned`` (rows of ``compare.failure_multiples``): the count of each of VERDICTS, and the numbers
    of section 2."""
    verdicts = [failure_verdict(p, m, tol) for p, m in zip(learned.predicted, learned.measured)]
    counts = {v: verdicts.count(v) for v in VERDICTS}
    return counts, {
        "q2_learned": len(learned), "q2_cap": float(learned.reach.max()),
        "q2_fails_earlier": counts["fails earlier"], "q2_agrees": counts["agrees"],
        "q2_fails_none_predicted": counts["fails, none predicted"],
        "q2_share_fails_none_predicted": counts["fails, none predicted"] / len(learned),
        "q2_with_pred": int(learned.predicted.notna().sum()),
        "q2_early_total": counts["fails earlier"] + counts["fails, none predicted"],
        "q2_with_pred_fail": int((learned.measured <= learned.predicted * tol).sum()),
    }


# --- 3. what moves the frontier (one setting changed at a time, under one recipe) ---

# The settings the prose discusses: glue key -> the setting's label (compare.setting_label).
NAMED_SETTINGS = {"rope_base": "rope_base=100", "rope_base_big": "rope_base=100000", "varlen": "min_train_length=8",
                  "decay": "weight_decay=1", "decay_all": "weight_decay=1, decay_scope=all"}
ALIASING = {  # the small RoPE base's change at the focus length -> what it says about aliasing
    "higher": "That is the opposite of what aliasing alone predicts. The models choose their carrier: with fast pairs "
              "available, the kernel of {clear} of the {n} models has no offset out to 16x that scores as high as the "
              "target, so fast rotations do not by themselves bring the far peaks closer.",
    "lower": "That agrees with the aliasing expectation.",
}
UNDECIDED = "At this number of seeds the data cannot tell whether it helps or hurts."


@dataclass
class SettingEffects:
    """One recipe's settings against its defaults: the figure's data, the table's rows, and what the prose cites
    (``numbers``; ``sentences`` in markdown), keyed by glue name."""

    effects: Lines  # for plots.setting_effects: length -> ([], means, standard errors) over the settings
    rows: list[list[str]]
    numbers: dict[str, Any]
    sentences: dict[str, str]


def setting_effects(front: pd.DataFrame, settings: dict[str, dict], cols: Sequence[float], focus: float,
                    learned: float) -> SettingEffects:
    """``settings``: label -> the column values that select its rows of ``front`` (one recipe's entry of
    ``compare.settings_by_recipe``, "defaults" first). Accuracy per setting at ``cols`` (the figure at the first
    three and the last), the models whose kernel predicts a failure, the change against the defaults at 2x and
    4x; at ``focus`` x T the best and worst setting, the NAMED_SETTINGS, which settings change, and which
    settings do not reach ``learned`` at the training length."""
    labels, others = list(settings), list(settings)[1:]
    cell = lambda label, m: at(front, multiple=m, **settings[label])  # noqa: E731
    change = lambda label, m: versus(cell(label, m), cell("defaults", m))  # noqa: E731
    effects = {f"{m:g}x": ([], [cell(k, m)["mean"] for k in labels], [cell(k, m)["sem"] for k in labels])
               for m in list(cols[:3]) + list(cols[-1:])}
    rows = []
    for label in labels:
        models = where(front, multiple=1, **settings[label])  # one row per model
        fails = (models.predicted_failure_length / models.train_length).dropna()
        rows.append([label] + [pm(cell(label, m)) for m in cols]
                    + [f"{len(fails)}/{len(models)}", f"{np.median(fails):.2g}" if len(fails) else "-"]
                    + ["-" if label == "defaults" else change(label, m) for m in (2, 4)])
    at_focus = {label: cell(label, focus) for label in others}
    best, worst = max(others, key=lambda k: at_focus[k]["mean"]), min(others, key=lambda k: at_focus[k]["mean"])
    numbers: dict[str, Any] = {}
    sentences = {"f_best": f"`{best}`", "f_worst": f"`{worst}`"}
    for key, label in (("best", best), ("worst", worst), ("defaults", "defaults")):
        numbers |= {f"f_{key}_2x": cell(label, focus)["mean"], f"f_{key}_2x_sem": cell(label, focus)["sem"]}
    for key, label in NAMED_SETTINGS.items():
        numbers |= {f"f_{key}_2x": at_focus[label]["mean"], f"f_{key}_2x_sem": at_focus[label]["sem"]}
        sentences[f"f_{key}_change"] = change(label, focus)
    small = where(front, multiple=1, **settings[NAMED_SETTINGS["rope_base"]])
    sentences["f_rope_base_verdict"] = ALIASING.get(change(NAMED_SETTINGS["rope_base"], focus), UNDECIDED).format(
        clear=int(small.predicted_failure_length.isna().sum()), n=len(small))
    unlearned = [f"`{label}` ({cell(label, 1)['mean']:.3f})" for label in others if cell(label, 1)["mean"] < learned]
    sentences["f_unlearned"] = (
        f"In {', '.join(unlearned)} the mean accuracy at the training length is below {learned}: some seeds stall in "
        "this budget, and part of the deficit beyond $T$ is inherited from there." if unlearned else
        f"Every setting learns the task: mean accuracy at the training length at least {learned}.")
    changed = [label for label in others if change(label, focus) != "no clear difference"]
    sentences["f_changed"] = ", ".join(f"`{label}`" for label in changed) if changed else "none"
    numbers |= {"f_n_settings": len(others), "f_n_changed": len(changed)}
    return SettingEffects(effects, rows, numbers, sentences)


# --- 4. depth ---

def depth_report(depth: pd.DataFrame, cols: Sequence[float]) -> tuple[Lines, list[list[str]], dict[str, Any], dict[str, str]]:
    """RoPE and APE with one and two layers: accuracy against length (lines); per model kind, accuracy at ``cols``
    and, averaged over the lengths beyond T, how often each layer's attention argmax lands on the pinned
    position x_(T-K), the last layer's on the target and how often the output is the token at x_(T-K) (rows);
    the numbers of section 4 and the two-standard-error comparisons (markdown)."""
    far = [m for m in cols if m > 1]
    d = lambda enc, n, m, value="accuracy": at(depth, value, encoding=enc, layers=n, multiple=m)  # noqa: E731
    far_mean = lambda enc, n, value: float(np.mean([d(enc, n, m, value)["mean"] for m in far]))  # noqa: E731
    lines, rows = {}, []
    for enc in ("rope", "ape"):
        for n in (1, 2):
            lines[f"{enc}, {n} layer{'s' if n > 1 else ''}"] = line(depth, "multiple", encoding=enc, layers=n)
            pinned = [far_mean(enc, n, f"argmax_at_pinned_layer{j}") for j in range(1, n + 1)]
            rows.append([enc, str(n)] + [pm(d(enc, n, m)) for m in cols]
                        + [" / ".join(f"{p:.2f}" for p in pinned), f"{far_mean(enc, n, 'argmax_at_target'):.2f}",
                           f"{far_mean(enc, n, 'predicts_pinned'):.2f}"])
    far_m = cols[-1]
    numbers: dict[str, Any] = {"d_far": far_m}
    for n in (1, 2):
        numbers |= {f"d_rope{n}_{m}x": d("rope", n, m)["mean"] for m in (1, 2)}
        numbers |= {f"d_rope{n}_2x_sem": d("rope", n, 2)["sem"], f"d_rope{n}_far": d("rope", n, far_m)["mean"],
                    f"d_rope{n}_far_sem": d("rope", n, far_m)["sem"]}
        numbers |= {f"d_ape{n}_pinned_layer{j}": far_mean("ape", n, f"argmax_at_pinned_layer{j}") for j in range(1, n + 1)}
        numbers[f"d_ape{n}_predicts_pinned"] = far_mean("ape", n, "predicts_pinned")
    numbers["d_ape2_2x"] = d("ape", 2, 2)["mean"]
    sentences = {"d_rope2_vs_rope1": versus(d("rope", 2, 2), d("rope", 1, 2)),
                 "d_rope2_vs_rope1_far": versus(d("rope", 2, far_m), d("rope", 1, far_m)),
                 "d_rope2_vs_ape2": versus(d("rope", 2, 2), d("ape", 2, 2))}
    return lines, rows, numbers, sentences


# --- 5. other encodings ---

CITED_ENCODINGS = (("alibi", 1), ("alibi", 2), ("nope", 2), ("sinusoidal", 2), ("rope", 2))  # (encoding, K) in the prose


def encodings_report(encs: pd.DataFrame, cols: Sequence[float]) -> tuple[dict[str, Lines], list[list[str]], dict[str, Any]]:
    """Every encoding at every offset: accuracy against length per offset (lines), accuracy at ``cols`` per
    (encoding, offset) (rows), and accuracy at 1x, 2x and the last of ``cols`` for CITED_ENCODINGS (numbers)."""
    offsets, encodings = sorted(encs.offset.unique().tolist()), encs.encoding.unique().tolist()
    e = lambda enc, k, m: at(encs, encoding=enc, offset=k, multiple=m)  # noqa: E731
    lines = {f"K={k}": {enc: line(encs, "multiple", encoding=enc, offset=k) for enc in encodings} for k in offsets}
    rows = [[enc, str(k)] + [pm(e(enc, k, m)) for m in cols] for enc in encodings for k in offsets]
    numbers = {f"e_{enc}_K{k}_{m}x": e(enc, k, m)["mean"] for enc, k in CITED_ENCODINGS
               if enc in encodings and k in offsets for m in (1, 2, cols[-1])}
    return lines, rows, numbers
