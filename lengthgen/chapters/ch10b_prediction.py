"""Chapter 10b (``book/10b_prediction_before_training``): what the page shows of the prediction before training.

The tables (the limit prediction per setting and geometry, the growth law against the exact kernel rung, the
held-out scores, verdicts and rows), the numbers the prose cites, the scatter's points and the reading sentences,
all built from what ``lengthgen.forecast`` computes (``limit_table``, ``growth_check``, ``score_rows``); nothing
here trains, solves or measures.

Shapes: n lengths (multiples of the training length).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..forecast import BARS, LIMIT_HORIZON, mae, seed_scores, verdicts, within_rule
from ..optim import GEOMETRY
from ..thresholds import EVERY_SEED_TRANSFER, FORECAST_ERROR


def reach_text(length: int | None, train_length: int, horizon: int = LIMIT_HORIZON) -> str:
    """A ``first_reach`` as the tables show it: "L (m x)" or "none up to {horizon}x"."""
    return f"none up to {horizon}x" if length is None else f"{length} ({length / train_length:.2f}x)"


PREDICTORS = {"forecast": "finite-step forecast (scale from the optimiser)",
              "limit": "limit prediction (no scale)",
              "rule_mean": "baseline: the rule's mean on the development grid",
              "ignores_rule": "baseline: the development grid's mean (ignores the rule)"}


def format_rho(x: float) -> str:
    """A rank correlation as the tables show it: signed, two decimals, or "none (no spread)" when undefined."""
    return f"{x:+.2f}" if np.isfinite(x) else "none (no spread)"


def limit_header(geometries: Sequence[str]) -> list[str]:
    """The columns of ``limit_rows_text``."""
    return ["K", "T", "base"] + [f"{g}: first reach" for g in geometries] + [f"{g}: far margin" for g in geometries]


def limit_rows_text(rows: Sequence[dict]) -> list[list[str]]:
    """``limit_table`` rows formatted (``limit_header``): the setting, each geometry's ``reach_text`` and its
    beyond-window margin to the horizon in in-window margins."""
    return [[str(r["offset"]), str(r["train_length"]), f"{r['rope_base']:g}"]
            + [reach_text(L, r["train_length"]) for L in r["reach"].values()] + [f"{f:+.3f}" for f in r["far"].values()]
            for r in rows]


def limit_numbers(rows: Sequence[dict]) -> dict[str, int | str]:
    """Per geometry g: how many settings it reaches the target in within the horizon (``reach_n_{g}``) and the
    nearest such reach as a multiple ("none" when none: ``reach_first_{g}``); the number of settings (``settings``)."""
    out: dict[str, int | str] = {"settings": len(rows)}
    for g in rows[0]["reach"]:
        hits = [r["reach"][g] / r["train_length"] for r in rows if r["reach"][g] is not None]
        out[f"reach_n_{g}"] = len(hits)
        out[f"reach_first_{g}"] = f"{min(hits):.1f}x" if hits else "none"
    return out


def growth_header() -> list[str]:
    """The columns of ``growth_rows_text``."""
    return ["rule (on the kernel rung)", "its geometry", "margin measured at the end", "law", "law / measured at the end",
            "law / measured, furthest past the first tenth"]


def growth_rows_text(rows: Sequence[dict]) -> list[list[str]]:
    """``growth_check`` rows formatted (``growth_header``)."""
    return [[r["label"], r["geometry"], f"{r['measured'][-1]:.3g}", f"{r['law'][-1]:.3g}", f"{r['ratio_end']:.3f}",
             f"{r['worst']:.3f}"] for r in rows]


def score_header(multiples: Sequence[float]) -> list[str]:
    """The columns of ``score_rows_text``."""
    return ["predictor"] + [f"MAE {m:g}x" for m in multiples] + ["MAE 2x-8x"]


def score_rows_text(rows: Sequence[dict], multiples: Sequence[float]) -> list[list[str]]:
    """Per predictor of ``PREDICTORS``: its mean absolute error at each multiple and over the multiples 2 to 8."""
    band = [i for i, m in enumerate(multiples) if 2 <= m <= 8]
    return [[label] + [f"{e:.3f}" for e in mae(rows, key)] + [f"{mae(rows, key)[band].mean():.3f}"]
            for key, label in PREDICTORS.items()]


def verdict_rows_text(rows: Sequence[dict], bars: Sequence[float] = BARS) -> list[list[str]]:
    """One row per bar: the share of rows whose verdict "accuracy >= bar" agrees, by multiple, for the forecast and
    for the first baseline (``verdicts``), as "forecast / baseline"."""
    f, b = verdicts(rows, "forecast", bars), verdicts(rows, "rule_mean", bars)
    return [[f"{bar:g}"] + [f"{x:.2f} / {y:.2f}" for x, y in zip(fr, br)] for bar, fr, br in zip(bars, f, b)]


def within_rule_rows_text(rows: Sequence[dict]) -> list[list[str]]:
    """One row per recipe (rule, lr): its rows and ``within_rule`` Spearman by multiple."""
    counts: dict[tuple[str, float], int] = {}
    for r in rows:
        counts[r["rule"], r["lr"]] = counts.get((r["rule"], r["lr"]), 0) + 1
    return [[f"{rule}, lr {lr:g}", str(counts[rule, lr])] + [format_rho(x) for x in rho]
            for (rule, lr), rho in within_rule(rows).items()]


def row_header(multiples: Sequence[float]) -> list[str]:
    """The columns of ``rows_text``."""
    return (["V", "T", "K", "base", "recipe", "margin reached (law)", "limit: first reach"]
            + [f"{m:g}x forecast / measured (sd)" for m in multiples])


def rows_text(rows: Sequence[dict], multiples: Sequence[float]) -> list[list[str]]:
    """``score_rows`` formatted (``row_header``): the setting, the rule with its lr and steps, the law's margin,
    the limit prediction, and forecast / measured mean (standard deviation over seeds) at every multiple."""
    return [[str(r["vocab"]), str(r["train_length"]), str(r["offset"]), f"{r['rope_base']:g}",
             f"{r['rule']}, lr {r['lr']:g}, {r['steps']} steps", f"{r['scale']:.2f}", reach_text(r["reach"], r["train_length"])]
            + [f"{f:.2f} / {m:.2f} ({sd:.2f})" for f, m, sd in zip(r["forecast"], r["measured"], r["measured_std"])]
            for r in rows]


def scatter_points(rows: Sequence[dict], index: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """rule -> (measured, forecast) accuracy at multiple number ``index`` over the rule's ``score_rows``."""
    points: dict[str, tuple[list, list]] = {}
    for r in rows:
        got = points.setdefault(f"{r['rule']}, lr {r['lr']:g}", ([], []))
        got[0].append(r["measured"][index])
        got[1].append(r["forecast"][index])
    return {k: (np.array(a), np.array(b)) for k, (a, b) in points.items()}


def score_numbers(rows: Sequence[dict], multiples: Sequence[float], target: float = FORECAST_ERROR
                  ) -> dict[str, float | str | int]:
    """What the prose cites from ``score_rows``: the rows (``rows``), each predictor's MAE over 2x-8x
    (``mae_{key}``), whether the forecast meets ``target`` there (``meets``: "meets"/"misses"), the share of rows
    measured below the 8x bar of ``EVERY_SEED_TRANSFER`` (0.95, ``fail_8x``), the forecast's smallest accuracy at any multiple (``forecast_min``), and
    the worst forecast error (``worst``)."""
    band = [i for i, m in enumerate(multiples) if 2 <= m <= 8]
    errors = {key: float(mae(rows, key)[band].mean()) for key in PREDICTORS}
    i8 = list(multiples).index(8)
    return {"rows": len(rows), **{f"mae_{k}": v for k, v in errors.items()},
            "meets": "meets" if errors["forecast"] <= target else "misses", "target": target,
            "fail_8x": float(np.mean([r["measured"][i8] < EVERY_SEED_TRANSFER[8.0] for r in rows])),
            "forecast_min": float(min(r["forecast"].min() for r in rows)),
            "worst": float(max(np.abs(r["forecast"] - r["measured"]).max() for r in rows))}


def score_reading(rows: Sequence[dict], multiples: Sequence[float]) -> str:
    """A sentence on why the forecast errs as it does (markdown): whether it stays near 1 where the trained models
    fail (the direction predicts no failure), or predicts failures, and how many of those the models show."""
    n = score_numbers(rows, multiples)
    i8 = list(multiples).index(8)
    bar = EVERY_SEED_TRANSFER[8.0]
    said_fail = [r for r in rows if r["forecast"][i8] < bar]
    if n["forecast_min"] >= bar:
        return (f"The reason is in the predictions: at the margins the rules reach, the forecast never falls below "
                f"{n['forecast_min']:.3f} at any length, like the limit prediction it approaches, while "
                f"{n['fail_8x']:.0%} of the held-out configurations measure below {bar:g} at 8x (its worst single error: "
                f"{n['worst']:.2f}). The max-margin direction keeps every far offset below the target at any scale, so "
                "this account cannot predict those failures: they come from what the direction leaves out (section 2 "
                "measures how far the trained kernel is from it).")
    right = sum(r["measured"][i8] < bar for r in said_fail)
    return (f"The forecast predicts accuracy below {bar:g} at 8x for {len(said_fail)} of {n['rows']} configurations, "
            f"{right} of which measure below it; {n['fail_8x']:.0%} of all configurations do (its worst single error: "
            f"{n['worst']:.2f}).")


def limit_reading(rows: Sequence[dict], rules: Mapping[str, str] = GEOMETRY) -> str:
    """A sentence on what the limit prediction says of the rules' own geometries (``rules``: rule -> geometry)
    over ``limit_table`` rows: whether any of them lets an offset reach the target within the horizon."""
    own = sorted({g for g in rules.values() if g in rows[0]["reach"]})
    hits = {g: sum(r["reach"][g] is not None for r in rows) for g in own}
    if not any(hits.values()):
        return ("In the limit, then, the account predicts that every rule keeps the target past "
                f"{LIMIT_HORIZON}x in every one of these settings: the rules' geometries ({', '.join(own)}) differ in how "
                "far below the target their far offsets stay, not in whether they stay below. Whatever separates the "
                "rules at 2x to 16x must come from the finite scale training reaches.")
    return ("In the limit, the rules' own geometries let an offset reach the target within "
            f"{LIMIT_HORIZON}x in " + ", ".join(f"{n} settings ({g})" for g, n in hits.items()) +
            "; elsewhere they differ in how far below the target their far offsets stay.")


def seed_reading(rows: Sequence[dict], multiples: Sequence[float], lead_bar: float = 1.0) -> str:
    """A sentence on the account's statement on seeds at 8x (``seed_scores``): the rank correlation between the
    target's lead and the measured spread over seeds, and the spread where the lead is small and where it is not."""
    i8 = list(multiples).index(8)
    s = seed_scores(rows, lead_bar)
    small = sum(r["lead"][i8] < lead_bar for r in rows)
    text = (f"At 8x the rank correlation between that lead and the measured standard deviation over seeds is "
            f"{format_rho(s['rho'][i8])} (the account says negative). ")
    if not small:
        return text + (f"No configuration has a lead under {lead_bar:g} logit at the reached scale, so the account expects "
                       f"the seeds to agree everywhere; their mean standard deviation is {s['std_large'][i8]:.3f}.")
    return text + (f"The {small} configurations with a lead under {lead_bar:g} logit have a mean standard deviation of "
                   f"{s['std_small'][i8]:.3f}, the other {len(rows) - small} {s['std_large'][i8]:.3f}.")
