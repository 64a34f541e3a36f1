"""The mechanism report behind ``python -m lengthgen analyze``: kernel, pinning, dilution, depth.

``analyze`` trains one config on several seeds and returns one JSON-ready dict; ``format_report``
prints it as text. ``dilution_grid`` pools the dilution laws over several offsets (the issue's goal grid).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import dilution, kernel, pinning
from .config import Config
from .encodings import TRAITS
from .train import Trained, train

ALIAS_MARGIN = 1.0  # list beyond-window offsets within 1 logit of c(-K): each then takes >= e^-1 of the target's weight
MAX_LISTED_PEAKS = 8  # peaks listed per member in the report (all are counted)


def floats(x: np.ndarray) -> list:
    return [None if not np.isfinite(v) else round(float(v), 4) for v in np.asarray(x, dtype=np.float64).ravel()]


def kernel_summary(trained: Trained, max_length: int) -> dict:
    """Margins, predicted failure length and aliased peaks of the first layer's kernel; RoPE spectrum."""
    model, c = trained.model, trained.config
    reach = max_length - 1
    margin = kernel.target_margin(model, c.offset, c.train_length, reach)
    peaks = kernel.aliased_peaks(model, c.offset, c.train_length, reach, ALIAS_MARGIN)
    out = {
        "target_value": floats(margin.target),
        "margin_in_window": floats(margin.in_window),
        "margin_beyond_window": floats(margin.beyond),
        "max_delta": reach,
        "predicted_failure_length": kernel.predicted_failure_length(model, c.offset, c.train_length, max_length),
        "alias_margin": ALIAS_MARGIN,
        "aliased_peak_count": [len(p) for p in peaks],
        "aliased_peaks": [
            [{"delta": p.delta, "gap": round(p.gap, 4), "pairs": p.pairs[:2]} for p in member[:MAX_LISTED_PEAKS]]
            for member in peaks
        ],
    }
    sv = kernel.singular_values(model, -c.offset, c.train_length)
    out["logit_matrix_rank_one_share"] = floats(kernel.rank_one_share(sv))
    if c.encoding == "rope":
        spec = kernel.pair_spectrum(model)
        out["energy_top_pairs"] = {str(k): floats(v) for k, v in spec.energy_top.items()}
        out["participation_ratio"] = floats(spec.participation)
        out["position_share"] = floats(spec.position_share)
        out["dominant_pair_period"] = [float(spec.period[spec.dominant(s, 1)[0]]) for s in range(model.members)]
    return out


def pinning_summary(trained: Trained, lengths: Sequence[int], samples: int) -> dict:
    """Where the last layer's attention lands by length; APE table norms."""
    c = trained.config
    results = pinning.measure_lengths(trained, lengths, samples)
    out = {
        "pinned_position": c.train_length - c.offset,  # 1-indexed
        "by_length": {str(L): r.summary() for L, r in results.items()},
    }
    if len(trained.model.layers) > 1:
        out["by_layer"] = {
            str(L): [r.summary(i) for i in range(len(r.layers))] for L, r in results.items()
        }
    if TRAITS[c.encoding].learned_table:
        norms = pinning.table_norms(trained.model, c.train_length)
        fields = ("trained", "untrained", "moved_trained", "moved_untrained")
        out["table_norms"] = {k: floats(getattr(norms, k)) for k in fields}
    return out


def dilution_summary(cmp: dilution.Comparison) -> dict:
    mae, worst = cmp.accuracy_error()
    return {
        "r2": {law: round(cmp.r2(law), 4) for law in dilution.LAWS},
        "rho": floats(cmp.rho),
        "accuracy_mae": round(mae, 4),
        "accuracy_worst": round(worst, 4),
        "measured_weight": {str(L): floats(w) for L, w in zip(cmp.lengths, cmp.measured_weight)},
        "predicted_weight": {
            law: {str(L): floats(w) for L, w in zip(cmp.lengths, pred)} for law, pred in cmp.predicted_weight.items()
        },
        "measured_accuracy": {str(L): floats(a) for L, a in zip(cmp.lengths, cmp.measured_accuracy)},
        "predicted_accuracy": {str(L): floats(a) for L, a in zip(cmp.lengths, cmp.predicted_accuracy)},
    }


def analyze(c: Config, seeds: Sequence[int], lengths: Sequence[int], samples: int = 1000) -> dict:
    """Train ``c`` on ``seeds`` and measure the whole mechanism at ``lengths``. JSON-ready."""
    trained = train(c, list(seeds))
    one_layer = c.layers == 1 and not c.mlp
    return {
        "config": c.to_dict(),
        "seeds": list(seeds),
        "lengths": [int(L) for L in lengths],
        "steps_trained": trained.steps.tolist(),
        "kernel": kernel_summary(trained, max(max(lengths), c.train_length + 1)),
        "attention": pinning_summary(trained, lengths, samples),
        "dilution": dilution_summary(dilution.compare_laws(trained, lengths, samples)) if one_layer else None,
    }


def dilution_grid(base: Config, offsets: Sequence[int], seeds: Sequence[int], lengths: Sequence[int],
                  samples: int = 1000) -> dict:
    """Train ``base`` at each offset and pool the dilution laws over offsets, seeds and lengths."""
    comparisons = [dilution.compare_laws(train(base.replace(offset=K), list(seeds)), lengths, samples) for K in offsets]
    return {
        "per_offset": {str(x.offset): dilution_summary(x) for x in comparisons},
        "pooled": dilution.pooled(comparisons),
    }


def fmt(values: list) -> str:
    return " ".join("   -  " if v is None else f"{v:6.3f}" for v in values)


def format_report(r: dict) -> str:
    """The report as text: one block per part of the mechanism."""
    c, k = r["config"], r["kernel"]
    lines = [f"Mechanism of {c['encoding']} (V={c['vocab']}, d={c['dim']}, layers={c['layers']}, train length "
             f"{c['train_length']}, K={c['offset']}), seeds {r['seeds']}, steps {r['steps_trained']}",
             "", "Carrier kernel c(delta) of layer 1 (per seed):",
             f"  c(-K)                         {fmt(k['target_value'])}",
             f"  margin over in-window offsets {fmt(k['margin_in_window'])}",
             f"  margin beyond the window      {fmt(k['margin_beyond_window'])}  (offsets down to -{k['max_delta']})",
             f"  predicted failure length      {k['predicted_failure_length']}",
             f"  logit matrix rank-one share   {fmt(k['logit_matrix_rank_one_share'])}"]
    if not TRAITS[c["encoding"]].translation_invariant:
        lines.append(f"  ({c['encoding']}: the kernel depends on the query's position; margins and peaks above are taken "
                     f"with the query at position {k['max_delta'] + 1}, failure lengths at each length)")
    if "energy_top_pairs" in k:
        for n, v in k["energy_top_pairs"].items():
            lines.append(f"  energy in top {n} pair(s)       {fmt(v)}")
        lines += [f"  participation ratio (pairs)   {fmt(k['participation_ratio'])}",
                  f"  position share of variance    {fmt(k['position_share'])}",
                  f"  period of strongest pair      {fmt(k['dominant_pair_period'])}"]
    lines.append(f"  offsets beyond the window within {k['alias_margin']} of c(-K): {k['aliased_peak_count']}")
    for s, peaks in zip(r["seeds"], k["aliased_peaks"]):
        if peaks:
            why = [f"{p['delta']} ({p['gap']:+.2f}" + (f"; pair {p['pairs'][0]['pair']} period "
                   f"{p['pairs'][0]['period']:.1f}, {p['pairs'][0]['turns']:.2f} turns" if p["pairs"] else "") + ")"
                   for p in peaks]
            lines.append(f"    seed {s}: " + ", ".join(why))
    a = r["attention"]
    lines += ["", f"Where the last layer's attention lands (pinned position {a['pinned_position']}, 1-indexed; "
              f"means over seeds):",
              f"{'length':>8} {'accuracy':>9} {'argmax@pin':>11} {'argmax@tgt':>11} {'w@pin':>7} {'w@tgt':>7} "
              f"{'pred=pin':>9}"]
    for L, s in a["by_length"].items():
        row = [s["accuracy"], s["argmax_at_pinned"], s["argmax_at_target"], s["weight_at_pinned"],
               s["weight_at_target"], s["predicts_pinned_token"]]
        lines.append(f"{L:>8} " + " ".join("      -" if v is None else f"{v:7.3f}" for v in row))
    if "by_layer" in a:
        lines.append("  by layer (argmax@tgt, w@tgt): " + "; ".join(
            f"L={L}: " + ", ".join(f"layer {i + 1} {x['argmax_at_target']:.2f}/{x['weight_at_target']:.2f}"
                                   for i, x in enumerate(layers)) for L, layers in a["by_layer"].items()))
    if "table_norms" in a:
        t = a["table_norms"]
        lines.append(f"  APE row norms: trained {fmt(t['trained'])} | untrained {fmt(t['untrained'])} | "
                     f"moved from init: trained {fmt(t['moved_trained'])}, untrained {fmt(t['moved_untrained'])}")
    d = r["dilution"]
    if d is None:
        lines += ["", "Dilution law: defined for one layer without MLP (not this model)."]
    else:
        lines += ["", "Attention dilution (target weight: R^2 of predicted against measured, all seeds and lengths):",
                  "  " + ", ".join(f"{law} law {v:.3f}" for law, v in d["r2"].items()),
                  f"  accuracy predicted from the kernel and read-out: mean abs error {d['accuracy_mae']:.3f}, "
                  f"worst {d['accuracy_worst']:.3f}",
                  f"{'length':>8} {'w meas':>7} " + " ".join(f"{law:>7}" for law in d["predicted_weight"])
                  + f" {'acc':>7} {'acc pred':>8}"]
        for L in d["measured_weight"]:
            mean = lambda x: float(np.mean(x))  # noqa: E731
            cells = [mean(d["measured_weight"][L])] + [mean(p[L]) for p in d["predicted_weight"].values()]
            cells += [mean(d["measured_accuracy"][L]), mean(d["predicted_accuracy"][L])]
            lines.append(f"{L:>8} " + " ".join(f"{v:7.3f}" for v in cells))
    return "\n".join(lines)
