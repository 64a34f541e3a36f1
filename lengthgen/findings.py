"""The findings page's rule: a claim's verdict from per-seed measurements under each training recipe.

A claim is checked at one or more *horizons* (e.g. 2x, 4x, 8x the training length), nearest first. At each
horizon a recipe's per-seed values give a mean and its standard error, and the two-standard-error rule decides:
the claim passes when the whole interval mean +/- 2 se is on the claim's side of its threshold, fails when the
whole interval is on the other side, and is undecided otherwise (as in ``compare.versus``). A recipe then
*holds* the claim when it passes at every horizon, *bounds* it when it passes at the nearest horizon but fails
further out, and does not hold it otherwise; the verdict across recipes is one of ``VERDICTS``. ``judge`` (and
``judge_all``, for a claim that must hold in several settings) applies all of this to per-seed values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .compare import two_se_rule
from .inline import counted, spread
from .sweep import stats

VERDICTS = ("holds", "holds in one regime", "bounded", "undecided", "does not hold")

HORIZONS = (2, 4, 8)  # multiples of the training length a transfer claim is checked at, nearest first
QUICK_HORIZONS = HORIZONS[:2]  # the same in quick runs


@dataclass(frozen=True)
class Estimate:
    """Mean, standard error of the mean and count of per-seed values."""

    mean: float
    se: float
    n: int

    def text(self, digits: int = 3, unit: str = "seed") -> str:
        """``mean ± 2 se (n seeds)``, the form the findings table prints (``unit``: what the n values are, in the
        singular); one value has no spread, and says so instead of ``± 0``."""
        return self.cell(f".{digits}f", unit)

    def cell(self, fmt: str = ".3f", unit: str = "seed") -> str:
        """``text`` with the numbers in format ``fmt`` (e.g. ``".1e"``); ``unit`` may add a setting after a comma
        ("seed, T=64" -> "3 seeds, T=64")."""
        noun, comma, setting = unit.partition(",")
        if self.n == 1:
            return f"{self.mean:{fmt}} ({counted(1, noun)}{comma}{setting}: no spread)"
        return f"{spread(self.mean, 2 * self.se, self.n, fmt)} ({counted(self.n, noun)}{comma}{setting})"


def estimate(values: Sequence[float] | np.ndarray) -> Estimate:
    """The Estimate of per-seed values (S,); se is 0 for a single seed."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"estimate: give finite per-seed values, got {x.tolist()}")
    s = stats(x)
    return Estimate(s["mean"], s["sem"], int(s["n"]))


def decide(e: Estimate, threshold: float, above: bool) -> bool | None:
    """Two-standard-error rule (``compare``'s): True when mean +/- 2 se lies entirely above ``threshold``
    (``above``) or below it (not ``above``), False when entirely on the other side, None when it reaches it."""
    side = two_se_rule(e.mean - threshold, e.se, "above", "below", "straddles")
    return None if side == "straddles" else (side == "above") == above


def recipe_status(decisions: Sequence[bool | None]) -> str:
    """One recipe's status over the horizons (nearest first): "holds" (passes at every one), "bounded" (passes at
    the nearest, fails at one further out), "fails" (fails somewhere without passing at the nearest) or
    "undecided" (no failure, not every horizon passed)."""
    if not decisions:
        raise ValueError("recipe_status: give at least one horizon's decision")
    if all(d is True for d in decisions):
        return "holds"
    if decisions[0] is True and any(d is False for d in decisions):
        return "bounded"
    if any(d is False for d in decisions):
        return "fails"
    return "undecided"


def verdict(decisions: Mapping[str, Sequence[bool | None]]) -> str:
    """The verdict across recipes (recipe name -> decisions over the horizons, nearest first): "holds" under
    every recipe; "holds in one regime (NAME)" when it holds under some only; "bounded" when no recipe holds it
    everywhere but one holds it at the nearest horizon; "undecided" when the seeds cannot tell; else "does not
    hold"."""
    status = {name: recipe_status(d) for name, d in decisions.items()}
    holding = [name for name, s in status.items() if s == "holds"]
    if holding and len(holding) == len(status):
        return "holds"
    if holding:
        return f"holds in one regime ({', '.join(holding)})"
    if any(s == "bounded" for s in status.values()):
        return "bounded"
    if any(s == "undecided" for s in status.values()):
        return "undecided"
    return "does not hold"


def all_of(decisions: Sequence[bool | None]) -> bool | None:
    """One decision for a claim that must pass in every setting: False when any setting fails, True when all
    pass, None otherwise."""
    if any(d is False for d in decisions):
        return False
    return True if all(d is True for d in decisions) else None


@dataclass(frozen=True)
class Finding:
    """A claim judged under each recipe (recipe name -> ...): the decision at each horizon, nearest first, and the
    per-seed values shown for it (at the farthest horizon; in the worst setting for ``judge_all``)."""

    decisions: dict[str, list[bool | None]]
    far: dict[str, np.ndarray]  # (S,) per recipe, as given (not converted)
    unit: dict[str, str] = field(default_factory=dict)  # what one shown value is, e.g. "seed, T=64"

    @property
    def verdict(self) -> str:
        """The verdict across recipes (``verdict``)."""
        return verdict(self.decisions)

    def cell(self, name: str, fmt: str = ".3f") -> str:
        """Recipe ``name``'s table cell: ``mean ± 2 se (n unit): status`` at the farthest horizon, numbers in
        ``fmt`` (e.g. ``".1e"`` for values near zero)."""
        e = estimate(self.far[name])
        return f"{e.cell(fmt, self.unit.get(name, 'seed'))}: {recipe_status(self.decisions[name])}"


def _horizons(values: np.ndarray) -> np.ndarray:
    """Per-seed values as (n_horizons, S); a (S,) array is one horizon."""
    values = np.asarray(values)
    return values[None] if values.ndim == 1 else values


def judge(values: Mapping[str, np.ndarray], threshold: float, above: bool, unit: str = "seed") -> Finding:
    """Judge a claim from per-seed values per recipe, (n_horizons, S) nearest horizon first or (S,) for a claim
    with no horizon: the two-standard-error decision against ``threshold`` at each horizon (``above``: the
    values must lie above it). ``unit``: what one value is, in the singular (seed, seed pair)."""
    rows = {name: _horizons(v) for name, v in values.items()}
    return Finding({name: [decide(estimate(h), threshold, above) for h in v] for name, v in rows.items()},
                   {name: v[-1] for name, v in rows.items()}, {name: unit for name in rows})


def judge_all(values: Mapping[str, Mapping[str, np.ndarray]], threshold: float, above: bool) -> Finding:
    """Judge a claim that must hold in every setting (recipe -> setting -> per-seed values (n_horizons, S)): at
    each horizon it passes when every setting passes, fails when one fails (``all_of``). The values shown are
    the worst setting's at the farthest horizon (lowest mean when ``above``, else highest)."""
    decisions, far, unit = {}, {}, {}
    for name, settings in values.items():
        rows = {s: _horizons(v) for s, v in settings.items()}
        n = len(next(iter(rows.values())))
        decisions[name] = [all_of([decide(estimate(v[h]), threshold, above) for v in rows.values()]) for h in range(n)]
        worst = (min if above else max)(rows, key=lambda s: rows[s][-1].mean())
        far[name], unit[name] = rows[worst][-1], f"seed, {worst}"
    return Finding(decisions, far, unit)
