"""Chapter 10 (``book/10_what_training_selects``): what the page shows of what training selects.

The real model along training (``lengthgen.limit_path``): each rule's verdict against the geometries, the tables
of the rules, of the training-set sizes and of weight decay, the figures' curves and the numbers the prose cites;
all built from what ``limit_path`` measured (``DirectionPath``, ``approaches``, ``bound_ratios``); nothing here
trains, solves or measures.

Shapes: S members (seeds), n checkpoints.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..compare import paired_change, spread
from ..limit_path import Approach, DirectionPath, bound_drift, bound_ratios, final_ratios, seed_agreement
from ..maxmargin import MaxMargin, cosine
from ..selection import Rung, Trajectory, adam_course, adam_ends, adam_numbers, decades, reached, summary
from ..thresholds import FITTED_RATIO, ON_DECAY_BOUND, POSITION_SHARE, REACHABLE_DECADES
from ..uncertainty import standard_error


def _spread(x: np.ndarray) -> str:
    """``compare.spread`` over seeds, or the one value when there is one seed."""
    return spread(x) if len(x) > 1 else f"{float(x[0]):.3f}"


def approach_sentence(a: Approach) -> str:
    """One rule's verdict in words: it reaches the closest geometry (margin ratio >= target); it was still fitting the
    window when the last decade began (margin ratio below ``FITTED_RATIO``: a rate from there says nothing about the
    limit); it is still approaching the
    geometry (its last decade's rate would get there within ``REACHABLE_DECADES`` more decades of steps); or it
    approaches none at the rate measured."""
    g, r = a.geometry, a.ratio[a.geometry]
    where = f"{g} (margin ratio {r:.3f}, cosine {a.cos[g]:.3f})"
    if r >= a.target:
        return f"{a.rule} reaches {where}"
    rate = f"{a.ratio_slope[g]:+.4f} a decade"
    if a.ratio_start[g] < FITTED_RATIO:
        return (f"{a.rule} was still fitting the window when its last decade began (margin ratio {a.ratio_start[g]:.3f} "
                f"then), so its rate, {rate}, says nothing yet about a limit; it ends closest to {where}")
    if a.decades <= REACHABLE_DECADES:
        return f"{a.rule} is still approaching {where}, gaining {rate}: about {a.decades:.1f} more decades of steps to {a.target:g}"
    need = f"{a.decades:.0f} more decades of steps to {a.target:g} at that rate" if np.isfinite(a.decades) else "not gaining"
    return f"{a.rule} approaches no geometry at the rate measured: closest to {where}, gaining {rate} ({need})"


def limit_verdict(found: Mapping[str, Approach]) -> str:
    """The sentence the chapter prints from ``approaches``: one clause per rule."""
    return "; ".join(approach_sentence(a) for a in found.values()) + "."


def limit_header(geometries: Sequence[str]) -> list[str]:
    """The columns of ``limit_rows``."""
    return (["rule", "recipe", "final loss", "position share"]
            + [f"{g}: cosine / margin ratio (gain a decade)" for g in geometries] + ["seed to seed"])


def limit_rows(paths: Mapping[str, DirectionPath], found: Mapping[str, Approach]) -> list[list[str]]:
    """One formatted row (``limit_header``) per rule: recipe, final loss, position share, and per geometry the final
    cosine / margin ratio with the ratio's gain over the last decade of steps; seed to seed."""
    return [[name, p.recipe, f"{np.nanmean(p.trained.loss[-1]):.1e}", f"{found[name].share:.3f}"]
            + [f"{a.cos[g]:.3f} / {a.ratio[g]:.3f} ({a.ratio_slope[g]:+.3f})" for g in a.cos]
            + [f"{a.agree:.3f}"] for name, p in paths.items() for a in [found[name]]]


def scan_header(geometries: Sequence[str]) -> list[str]:
    """The columns of ``scan_rows``."""
    return (["N (training sequences)", "final loss", "training accuracy", "held-out accuracy 1x", "position share"]
            + [f"cosine to {g}" for g in geometries] + ["seconds per step"])


def scan_rows(scan: Mapping[int, DirectionPath], heldout: Mapping[int, np.ndarray],
              solutions: Mapping[str, MaxMargin]) -> list[list[str]]:
    """One formatted row (``scan_header``) per training-set size: final loss, training accuracy, held-out accuracy
    at the training length (``heldout[N]`` (S,)), position share and the cosine to every geometry (each
    ``compare.spread`` over seeds), and the measured seconds per step and seed."""
    return [[f"{N}", f"{np.nanmean(p.trained.loss[-1]):.1e}", _spread(p.trained.accuracy[-1]), _spread(heldout[N]),
             _spread(p.share[-1])] + [_spread(p.cosines(s.w)[-1]) for s in solutions.values()]
            + [f"{p.seconds_per_step * 1e3:.1f} ms"] for N, p in scan.items()]


def path_frames(paths: Mapping[str, DirectionPath], solutions: Mapping[str, MaxMargin],
                random: float) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The along-training figure's data (``plots.sweep_lines``): rule -> curve -> (steps, mean, standard error):
    the cosine to every geometry after the initialisation, the seed-to-seed cosine, the position share, and the
    flat ``random`` level."""
    frames = {}
    for name, p in paths.items():
        cos = {g: p.cosines(s.w) for g, s in solutions.items()}  # (n, S) each
        frames[name] = {f"cosine to {g}": (p.steps[1:], c[1:].mean(1), standard_error(c[1:], axis=1))
                        for g, c in cos.items()}
        if p.w.shape[1] > 1:
            frames[name]["seed to seed"] = (p.steps[1:], np.array([seed_agreement(w).mean() for w in p.w[1:]]),
                                            np.zeros(len(p.steps) - 1))
        frames[name]["position share"] = (p.steps[1:], p.share[1:].mean(1), standard_error(p.share[1:], axis=1))
        frames[name]["random direction (95% of |cosine|)"] = (p.steps[[1, -1]], np.full(2, random), np.zeros(2))
    return frames


def limit_numbers(scan: Mapping[int, DirectionPath], heldout: Mapping[int, np.ndarray],
                  found: Mapping[str, Approach], share_bar: float = POSITION_SHARE) -> dict[str, str | float | int]:
    """What the prose cites: the smallest and largest N of the scan with their position share and held-out accuracy
    (``small_*``, ``large_*``), the smallest N whose position share reaches ``share_bar`` (``share_n``; "none" when
    none does), the rules that reach a geometry (``reached``, "none" when none does) and the closest rule with its
    geometry, margin ratio and cosine (``closest_*``)."""
    sizes = sorted(scan)
    share = {N: float(scan[N].share[-1].mean()) for N in sizes}
    over = [N for N in sizes if share[N] >= share_bar]
    top = max(found.values(), key=lambda a: a.ratio[a.geometry])
    reached = [a.rule for a in found.values() if a.ratio[a.geometry] >= a.target]
    return {"small_n": sizes[0], "small_share": share[sizes[0]], "small_heldout": float(heldout[sizes[0]].mean()),
            "large_n": sizes[-1], "large_share": share[sizes[-1]], "large_heldout": float(heldout[sizes[-1]].mean()),
            "share_bar": share_bar, "share_n": over[0] if over else "none",
            "reached": ", ".join(reached) if reached else "none", "closest_rule": top.rule,
            "closest_geometry": top.geometry, "closest_ratio": top.ratio[top.geometry], "closest_cos": top.cos[top.geometry]}


def share_drift(paths: Mapping[str, DirectionPath]) -> dict[str, str | float]:
    """The rule whose position share ends lowest (``drift_rule``), that final share and the highest it had along
    training (``drift_final``, ``drift_peak``; means over seeds): a share that falls late means the content part is
    fitting what position left, so the set is not large enough to keep position the only rule at that horizon."""
    final = {name: float(p.share[-1].mean()) for name, p in paths.items()}
    rule = min(final, key=final.get)
    return {"drift_rule": rule, "drift_final": final[rule], "drift_peak": float(paths[rule].share.mean(1).max())}


def full_scale_hours(seconds_per_step: float, steps: int, runs: int) -> float:
    """Hours of one CPU thread for ``runs`` runs (rules x seeds) of ``steps`` steps at ``seconds_per_step`` each."""
    return seconds_per_step * steps * runs / 3600


def decay_verdict(ratios: Sequence[float], tolerance: float = ON_DECAY_BOUND) -> str:
    """A sentence on whether the largest parameter sits at AdamW's bound 1/lambda: ``ratios`` are the final
    max |p| x lambda per decay setting; within ``tolerance`` of 1 counts as on the bound."""
    r = np.asarray(ratios, dtype=np.float64)
    on, above = int((np.abs(r - 1) <= tolerance).sum()), int((r > 1 + tolerance).sum())
    below = len(r) - on - above
    parts = [f"{n} of {len(r)} settings {what}" for n, what in
             ((on, f"sit on the bound (within {tolerance:.0%})"), (above, "exceed it"), (below, "stay below it")) if n]
    return "; ".join(parts).capitalize() + "."


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
        sem = standard_error(p.max_abs, axis=1)
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
    drift = [bound_drift(p) for p in decayed.values()]
    return {"decay_time_min": min(wd * lr * steps for wd in decayed),
            "decay_ratio_range": f"{min(ratios):.2f} to {max(ratios):.2f}",
            "nodecay_8x": spread(accuracy[0.0][1]),
            "decay_8x": "; ".join(f"lambda {wd:g}: {spread(accuracy[wd][1])}" for wd in decayed),
            "decay_best": f"{top:g}", "decay_best_change": f"{changes[top].mean:+.3f} ± {changes[top].sem:.3f}",
            "decay_best_verdict": changes[top].verdict, "decay_drift": f"{min(drift):.1%} to {max(drift):.1%}"}


# The ladder of exact rungs (lengthgen.selection) -------------------------------------------------------------------

def label(row: dict) -> str:
    """A ``summary`` row's short name: the rule, ", factorised", and Adam's schedule and eps."""
    out = row["rule"] + (", factorised" if row["parametrisation"] == "factorised" else "")
    if row["rule"] == "adam":
        step = f"{row['lr']:g} (t+2)^-{row['power']:g}" if row["power"] else f"lr {row['lr']:g}"
        out += f", {step}, eps {row['eps']:g}"
    return out


def ladder_rows(runs: list[Trajectory], rung: Rung) -> list[dict]:
    """``summary`` of each run of ``ladder(rung, ...)`` with its short ``label``."""
    return [{**summary(tr, rung), "label": label(summary(tr, rung))} for tr in runs]


def ladder_header(rung: Rung) -> list[str]:
    """The columns of ``ladder_table`` for ``rung``'s geometries."""
    return (["rule", "lr", "steps", "its geometry"] + [f"cosine to {g}" for g in rung.geometries]
            + ["margin ratio (own)", "gain per decade", "random (mean |cos|)", "seed to seed", "reached its own",
               "seconds"])


def ladder_table(rows: list[dict], rung: Rung) -> list[list[str]]:
    """One formatted row (``ladder_header``) per ``ladder_rows`` row: the cosine to every geometry at the end, the
    margin ratio to the rule's own geometry and its gain per decade of steps (``rate``), the largest random
    baseline, seed to seed, reached or not (with "outside its conditions" / "by analogy" for Adam), seconds."""
    geos = rung.geometries
    note = {"theorem": "", "outside": " (outside its theorem)", "analogy": " (by analogy)"}

    def verdict(r: dict) -> str:
        return "-" if r["own"] is None else ("yes" if reached(r) else "no") + note[r["conditions"]]

    return [[r["label"], f"{r['lr']:g}", str(r["steps"]), r["own"] or "not derived"]
            + [f"{r[f'cos_{g}']:.3f}" for g in geos]
            + ["-" if r["own"] is None else f"{r['ratio_' + r['own']]:.3f}",
               "-" if r["own"] is None else f"{r['rate']:+.3f}"]
            + [f"{max(r[f'random_{g}'] for g in geos):.2f}", f"{r['seed_to_seed']:.3f}", verdict(r),
               f"{r['seconds']:.1f}"]
            for r in rows]


def ladder_numbers(rows: list[dict]) -> dict[str, int | str]:
    """Over the rules that have a geometry of their own and run inside the conditions of its result (or by analogy):
    how many there are (``named``), how many reached it (``reached``), and the others with their steps, cosine and
    margin ratio (``missed``, "none" when none); runs outside their result's conditions are counted apart
    (``outside``: their labels)."""
    named = [r for r in rows if r["own"] is not None and r["conditions"] != "outside"]
    missed = [f"{r['label']} ({r['steps']} steps: cosine {r['cos_' + r['own']]:.3f}, margin ratio "
              f"{r['ratio_' + r['own']]:.3f})" for r in named if not reached(r)]
    outside = [r["label"] for r in rows if r["conditions"] == "outside"]
    return {"reached": sum(reached(r) for r in named), "named": len(named), "missed": "; ".join(missed) or "none",
            "outside": "; ".join(outside) or "none"}


def adam_table_header(steps: np.ndarray) -> list[str]:
    """The columns of ``adam_table`` for checkpoints ``steps``."""
    return (["step size", "eps"] + [f"t = {t:.0e}".replace("e+0", "e") for t in decades(steps)]
            + ["cosine to linf", "cosine to l2", "largest update / step", "median sqrt(v_hat) / eps", "ends by"])


def adam_table(runs: list[Trajectory]) -> list[list[str]]:
    """One row per Adam run on the kernel rung (``ADAM_TABLE``): its schedule and eps, the l-infinity margin ratio
    (mean over seeds) at every power of ten of steps, the last cosines to the l-infinity and L2 solutions, the
    anatomy at the end (``adam_numbers``) and what decides where it ends (``adam_course``)."""
    rows = []
    for tr in runs:
        n = adam_numbers(tr)
        at = [int(np.flatnonzero(tr.steps == t)[0]) for t in decades(tr.steps)]
        step = f"{tr.lr:g} (t+2)^-{tr.power:g}" if tr.power else f"{tr.lr:g} (lr / (1 - b2) = {tr.lr / 1e-3:g})"
        rows.append([step, f"{tr.eps:g}"] + [f"{tr.margin_ratio['linf'][:, i].mean():.3f}" for i in at]
                    + [f"{tr.cosine['linf'][:, -1].mean():.3f}", f"{tr.cosine['l2'][:, -1].mean():.3f}",
                       f"{n['update_max']:.2g}", "-" if not tr.eps else f"{n['median_over_eps']:.2g}", adam_course(tr)])
    return rows


def adam_table_numbers(runs: list[Trajectory]) -> dict[str, float | str]:
    """The numbers the prose cites from ``adam_table``'s runs: the best l-infinity margin ratio at the end under
    the theorem's conditions (decaying step, eps = 0: ``theorem_best`` with its schedule ``theorem_best_schedule``)
    and outside them (constant step: ``constant_best``, ``constant_best_schedule``); the same decaying schedules
    with eps = 1e-8 (``theorem_eps_best``); and how many runs end by each cause (``by_eps``, ``by_memory``,
    ``by_step``, ``by_range``; for a run that ends at float64's range, what held it before: ``adam_course``)."""
    def best(keep) -> tuple[float, str]:
        chosen = [tr for tr in runs if keep(tr)]
        if not chosen:
            return float("nan"), "none"
        tr = max(chosen, key=lambda t: t.margin_ratio["linf"][:, -1].mean())
        return float(tr.margin_ratio["linf"][:, -1].mean()), (f"{tr.lr:g} (t+2)^-{tr.power:g}" if tr.power
                                                               else f"lr {tr.lr:g}")

    theorem = best(lambda t: t.power > 0 and t.eps == 0)
    constant = best(lambda t: t.power == 0)
    with_eps = best(lambda t: t.power > 0 and t.eps > 0)
    ends = [adam_course(tr).split(", then")[0] for tr in runs]
    return {"theorem_best": theorem[0], "theorem_best_schedule": theorem[1], "constant_best": constant[0],
            "constant_best_schedule": constant[1], "theorem_eps_best": with_eps[0],
            "by_eps": ends.count("eps"), "by_memory": ends.count("memory of v"), "by_step": ends.count("step size"),
            "by_range": ends.count("float64 range"), "steps": int(runs[0].steps[-1])}


def adam_reading(tr: Trajectory) -> str:
    """What Adam's update at the end of ``tr`` is and what keeps it from l-infinity's limit (markdown with math).

    Zhang, Zou & Cao (2024) prove the l-infinity limit for full-batch Adam with its usual betas, a decaying step
    size eta_t = Theta(t^-a), a in (0, 1], and eps neglected: no condition beta2 = beta1. What the decaying step buys
    is that eventually the iterate moves little within v's memory of ~1/(1 - beta2) steps, so that v follows the
    current, shrinking gradient and the update is sign-like. The reading says which of eps (``adam_ends``), v's
    memory, or the step size decides the run, with the numbers of ``adam_numbers``."""
    n = adam_numbers(tr)
    ends = adam_ends(tr)
    inside = tr.power > 0 and tr.eps == 0
    if ends != "eps" and n["median_over_eps"] < 10:
        return adam_reading_eps_order(tr, inside)
    where = ("This run is inside the conditions of the $\\ell_\\infty$ result (decaying step, $\\epsilon = 0$). "
             if inside else "This run is outside the conditions of the $\\ell_\\infty$ result, which asks for a "
             "decaying step size and a negligible $\\epsilon$ (with the usual $\\beta$s). ")
    if ends == "eps":
        return where + ("Here $\\epsilon$ dominates the denominator: the update is close to $\\hat m/\\epsilon$, "
                        "a momentum form of gradient descent with step $\\mathrm{lr}/\\epsilon$, whose geometry is "
                        "$\\ell_2$'s, not the sign-like step behind the $\\ell_\\infty$ limit.")
    if ends == "float64 range":
        return where + ("Here the margin has grown so far that the squared gradient is near float64's smallest "
                        "numbers: $\\hat v$ no longer resolves it, and the run stops being Adam's arithmetic.")
    if ends == "memory of v":
        return where + (f"Here $\\epsilon$ is not what holds Adam back: the largest update is {n['update_max']:.2g} "
                        "of the step size, well below sign descent's 1. $\\hat v$ averages the squared gradient over "
                        "about $1/(1-\\beta_2) = 1000$ steps, while the loss, and with it the gradient, keeps shrinking; "
                        "each coordinate is divided by an older, larger gradient scale. The step moves the iterate by "
                        f"{n['lr_over_memory']:.2g} within that memory: a decaying step makes this small, which is "
                        "what the theorem's schedule is for.")
    return where + (f"Here the update is sign-like (the largest is {n['update_max']:.2g} of the step size): "
                    "$\\hat v$ follows the current gradient, and how far the direction has come toward "
                    "$\\ell_\\infty$'s is set by the sum of the step sizes.")


def adam_reading_eps_order(tr: Trajectory, inside: bool) -> str:
    """``adam_reading`` where eps and the median sqrt(v_hat) are of one order (within a factor 10)."""
    return ("This run is " + ("inside" if inside else "outside") + " the conditions of the $\\ell_\\infty$ result. "
            "Here $\\epsilon$ and $\\sqrt{\\hat v}$ are of the same order: the update is neither sign-like nor "
            "gradient-like.")


def kernel_rung_numbers(rows: list[dict], rung: Rung) -> dict[str, float]:
    """The kernel rung's numbers the prose cites: Adam at the book's constant step (``adam_default``,
    ``adam_default_l2``: cosines to l-infinity and L2; ``adam_default_ratio``: its l-infinity margin ratio) and
    under its theorem (``adam_theorem``, ``adam_theorem_ratio``), sign descent on the factors against
    ``factors_linf`` and against l-infinity on w (``sign_factors_ratio``, ``sign_factors_linf_ratio``), and how
    close the solutions are to each other (``linf_l2``, ``pairs_l2``, ``factors_linf_linf``)."""
    adam = {r["conditions"]: r for r in rows if r["rule"] == "adam" and r["parametrisation"] == "linear"}
    sign = next(r for r in rows if r["rule"] == "sign" and r["parametrisation"] == "factorised")
    return {"adam_default": adam["outside"]["cos_linf"], "adam_default_l2": adam["outside"]["cos_l2"],
            "adam_default_ratio": adam["outside"]["ratio_linf"], "adam_theorem": adam["theorem"]["cos_linf"],
            "adam_theorem_ratio": adam["theorem"]["ratio_linf"], "sign_factors_ratio": sign["ratio_factors_linf"],
            "sign_factors_linf_ratio": sign["ratio_linf"],
            "linf_l2": float(cosine(rung.solution("linf"), rung.solution("l2"))),
            "pairs_l2": float(cosine(rung.solution("pairs"), rung.solution("l2"))),
            "factors_linf_linf": float(cosine(rung.solution("factors_linf"), rung.solution("linf")))}
