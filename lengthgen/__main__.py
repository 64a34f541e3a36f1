"""Command line: ``python -m lengthgen`` runs the headline experiment; sub-commands do the rest.

    python -m lengthgen                      RoPE vs APE on the default task, a table by length
    python -m lengthgen train --encoding ape --json
    python -m lengthgen analyze --encoding rope --seeds 3
    python -m lengthgen sweep sweeps/encodings.json --quick --workers 2
    python -m lengthgen maxmargin --geometry linf --offset 2 --train-length 32
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import numpy as np

from .config import (DECAY_SCOPES, DTYPES, ENCODINGS, OPTIMIZER_NAMES, Config, ConfigError, check_length, check_memory,
                     usable_cores)
from .evaluate import Evaluation, evaluate
from .recipes import RECIPES, with_recipe
from .train import train

HEADLINE_SEEDS = (0, 1, 2)
HEADLINE_MULTIPLES = (1, 2, 4, 8, 16)
MAXMARGIN_COEFFICIENTS = 2**20  # train length x width of the largest hard-margin problem maxmargin solves (l2: ~1 min)
MAXMARGIN_KERNEL = 2**26  # multiple x train length x width: the beyond-window kernel's cosines and sines (1 GB)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """The flags shared by every sub-command that trains: one per Config field that readers change."""
    d = Config()
    p.add_argument("--encoding", default=d.encoding, help=f"one of {', '.join(ENCODINGS)}")
    p.add_argument("--vocab", type=int, default=d.vocab, help="vocabulary size V")
    p.add_argument("--dim", type=int, default=d.dim, help="model width d (even)")
    p.add_argument("--train-length", type=int, default=d.train_length, help="training sequence length")
    p.add_argument("--min-train-length", type=int, default=None, help="train at lengths drawn from [this, train-length]")
    p.add_argument("--offset", type=int, default=d.offset, help="retrieve the token K back (K)")
    p.add_argument("--layers", type=int, default=d.layers, help="number of attention layers")
    p.add_argument("--mlp", action="store_true", help="add a ReLU MLP after each attention layer")
    p.add_argument("--optimizer", default=d.optimizer,
                   help="update rule: " + "; ".join(f"{k}: {v}" for k, v in OPTIMIZER_NAMES.items()))
    p.add_argument("--steps", type=int, default=d.steps, help="maximum training steps")
    p.add_argument("--batch", type=int, default=None, help=f"sequences per step (default {d.batch}, or --train-set)")
    p.add_argument("--train-set", type=int, default=None,
                   help="a fixed training set of N sequences per seed, all of it at every step (full batch)")
    p.add_argument("--dtype", default=d.dtype, help=f"one of {', '.join(DTYPES)}: the model's and optimiser's dtype")
    p.add_argument("--lr", type=float, default=d.lr, help="step size (learning rate)")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="decoupled weight decay (AdamW for adam)")
    p.add_argument("--decay-scope", default=d.decay_scope,
                   help=f"what weight decay acts on: {' or '.join(DECAY_SCOPES)} (matrices: not the token/position tables)")
    p.add_argument("--target-accuracy", type=parse_target, default=d.target_accuracy,
                   help=f"early stop at this training accuracy (default {d.target_accuracy}); 'none' trains all --steps")
    p.add_argument("--rope-base", type=float, default=d.rope_base, help="RoPE frequency base")
    p.add_argument("--max-length", type=int, default=d.max_length, help="rows of the APE table")
    p.add_argument("--init-scale", type=float, default=d.init_scale,
                   help="initial norm of embedding and APE rows (std init_scale/sqrt(dim))")
    p.add_argument("--seeds", type=int, default=len(HEADLINE_SEEDS),
                   help="how many seeds: N trains seeds 0..N-1 (a count, not a seed value)")
    p.add_argument("--eval-lengths", type=str, default=None,
                   help="comma-separated lengths (default: 1,2,4,8,16 x train length)")
    p.add_argument("--samples", type=int, default=1000, help="held-out samples per evaluation length")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def parse_target(text: str) -> float | None:
    """--target-accuracy: a number in (0, 1], or none/off/0 for no early stop."""
    if text.strip().lower() in ("none", "off", "0"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a training accuracy in (0, 1], or 'none' for no early stop")


def config_from_args(a: argparse.Namespace) -> Config:
    return Config(
        encoding=a.encoding, vocab=a.vocab, dim=a.dim, train_length=a.train_length,
        min_train_length=a.min_train_length, offset=a.offset, layers=a.layers, mlp=a.mlp,
        optimizer=a.optimizer, steps=a.steps, lr=a.lr, weight_decay=a.weight_decay,
        batch=a.batch if a.batch is not None else (a.train_set or Config.batch), train_set=a.train_set, dtype=a.dtype,
        decay_scope=a.decay_scope, target_accuracy=a.target_accuracy,
        rope_base=a.rope_base, max_length=a.max_length, init_scale=a.init_scale,
    )


def eval_lengths_from_args(a: argparse.Namespace, c: Config) -> list[int]:
    if a.eval_lengths is None:
        lengths = [m * c.train_length for m in HEADLINE_MULTIPLES]
    else:
        try:
            lengths = [int(x) for x in a.eval_lengths.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--eval-lengths {a.eval_lengths!r}: give comma-separated integers, e.g. 32,64,128")
    if not lengths:
        raise ConfigError("--eval-lengths is empty: give at least one length")
    for length in lengths:
        check_length(c, length)
    return lengths


def run_report(c: Config, seeds: Sequence[int], lengths: list[int], samples: int) -> dict:
    """Train, evaluate and return the JSON-ready summary of the ``train`` contract."""
    trained = train(c, seeds)
    ev: Evaluation = evaluate(trained, lengths, samples)
    return {
        "config": c.to_dict(),
        "seeds": list(seeds),
        "chance": c.chance,
        "steps_trained": trained.steps.tolist(),
        "train_seconds": round(trained.seconds, 3),
        "accuracy": {str(L): float(r.accuracy.mean()) for L, r in ev.by_length.items()},
        "accuracy_per_seed": {str(L): r.accuracy.tolist() for L, r in ev.by_length.items()},
        "target_attention": {str(L): float(r.target_weight.mean()) for L, r in ev.by_length.items()},
    }


def format_table(reports: dict[str, dict]) -> str:
    """Rows: evaluation length (and multiple of training length); columns: encodings (mean ± sd)."""
    first = next(iter(reports.values()))
    L0 = first["config"]["train_length"]
    names = list(reports)
    width = max(16, *(len(n) for n in names))
    lines = [f"{'length':>8} {'x train':>8} " + " ".join(f"{n:>{width}}" for n in names)]
    for L in first["accuracy"]:
        cells = []
        for n in names:
            per = np.array(reports[n]["accuracy_per_seed"][L])
            cells.append(f"{per.mean():>8.3f} ± {per.std():.3f}")
        lines.append(f"{L:>8} {int(L) / L0:>8.3g} " + " ".join(f"{c:>{width}}" for c in cells))
    lines.append(f"chance level 1/V = {first['chance']:.4f}; accuracy is mean ± sd over seeds {first['seeds']}")
    for n in names:
        recipe = Config(**reports[n]["config"]).recipe()
        lines.append(f"{n}: trained with {recipe}; steps per seed {reports[n]['steps_trained']}")
    return "\n".join(lines)


def cmd_headline(a: argparse.Namespace) -> None:
    """RoPE and APE on the default task, each with the book's two recipes (lengthgen.recipes)."""
    base = Config()
    lengths = [m * base.train_length for m in HEADLINE_MULTIPLES]
    print("Headline numbers from two training regimes (lengthgen/recipes.py), one column each: "
          + "; ".join(f"{name}: {with_recipe(base, name).recipe()}" for name in RECIPES)
          + ". Small steps is the regime the implicit-bias account is about.")
    print(f"Fixed-offset retrieval: V={base.vocab}, d={base.dim}, train length {base.train_length}, "
          f"offset K={base.offset}, {len(HEADLINE_SEEDS)} seeds. Accuracy on held-out sequences:")
    reports = {f"{enc} ({name})": run_report(with_recipe(base.replace(encoding=enc), name), HEADLINE_SEEDS, lengths, 1000)
               for name in RECIPES for enc in ("rope", "ape")}
    print(format_table(reports))


def settings_from_args(a: argparse.Namespace) -> tuple[Config, list[int], list[int]]:
    """(config, seeds, evaluation lengths) from the shared flags, each checked."""
    c = config_from_args(a)
    lengths = eval_lengths_from_args(a, c)
    if a.seeds < 1:
        raise ConfigError(f"--seeds {a.seeds}: train at least one seed")
    if a.samples < 1:
        raise ConfigError(f"--samples {a.samples}: evaluate on at least 1 held-out sequence per length (default 1000)")
    check_memory(c, a.seeds)  # before anything is allocated: the ensemble is --seeds members wide
    for length in lengths:
        check_memory(c, a.seeds, length=length, samples=a.samples)
    return c, list(range(a.seeds)), lengths


def cmd_train(a: argparse.Namespace) -> None:
    c, seeds, lengths = settings_from_args(a)
    report = run_report(c, seeds, lengths, a.samples)
    print(json.dumps(report) if a.json else format_table({c.encoding: report}))


def cmd_sweep(a: argparse.Namespace) -> None:
    from .cache import Cache
    from .sweep import describe, iter_table, load_grid, run_sweep

    if a.workers < 0:
        raise ConfigError(f"--workers {a.workers}: use 0 (run in this process) or a number of local processes")
    if a.scheduler is None and a.workers > usable_cores():
        raise ConfigError(f"--workers {a.workers}: this process may use {usable_cores()} CPU core(s) and each worker "
                          f"trains on one; use at most {usable_cores()}")
    grid = load_grid(a.grid_file, quick=a.quick)
    result = run_sweep(grid, Cache(a.cache), workers=a.workers, scheduler=a.scheduler, progress=not a.json)
    if a.json:
        print(json.dumps(describe(result)))
        return
    print(f"sweep {grid.name}: {len(result.records)} runs, {result.computed} computed, "
          f"{len(result.records) - result.computed} from the cache. Accuracy (mean ± sem over seeds):")
    print("\n".join(iter_table(result)))


def cmd_analyze(a: argparse.Namespace) -> None:
    from .analyze import analyze, format_report

    c, seeds, lengths = settings_from_args(a)
    report = analyze(c, seeds, lengths, a.samples)
    print(json.dumps(report) if a.json else format_report(report))


def check_maxmargin_args(a: argparse.Namespace) -> None:
    """The maxmargin flags, checked before the solver runs: the same rules as ``Config`` for the offset, training
    length, width and RoPE base (an odd width has no RoPE pairs, a base <= 1 no frequencies), and sizes that the
    solver and the beyond-window kernel can handle."""
    from .maxmargin import NORMS

    if a.geometry not in NORMS:
        raise ConfigError(f"--geometry {a.geometry!r}: use one of {', '.join(NORMS)}")
    if a.multiple < 2:
        raise ConfigError(f"--multiple {a.multiple}: look at least 2 x the training length beyond the window")
    T, d = max(a.train_length, 1), max(a.dim, 1)  # values below 1: Config's checks below say what to change
    if T * d > MAXMARGIN_COEFFICIENTS:
        raise ConfigError(f"--train-length {T} x --dim {d} is a hard-margin problem of {T * d:,} coefficients, "
                          f"over the {MAXMARGIN_COEFFICIENTS:,} this command solves; lower --train-length or --dim")
    if a.multiple * T * d > MAXMARGIN_KERNEL:
        raise ConfigError(f"--multiple {a.multiple} x --train-length {T} x --dim {d}: the kernel beyond the window "
                          f"would take {a.multiple * T * d:,} values, over {MAXMARGIN_KERNEL:,}; lower --multiple")
    # the smallest model with these settings: Config's checks and messages for offset, train_length, dim, rope_base
    Config(vocab=2, batch=1, offset=a.offset, train_length=a.train_length, dim=a.dim, rope_base=a.rope_base)


def cmd_maxmargin(a: argparse.Namespace) -> None:
    from .maxmargin import report, format_report, solve

    check_maxmargin_args(a)
    rep = report(solve(a.offset, a.train_length, a.dim, a.rope_base, a.geometry), a.multiple)
    rep["rope_base"] = a.rope_base
    print(json.dumps(rep) if a.json else format_report(rep))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lengthgen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_headline)
    sub = p.add_subparsers(title="sub-commands")
    t = sub.add_parser("train", help="train one encoding and report accuracy by length")
    add_config_flags(t)
    t.set_defaults(func=cmd_train)
    w = sub.add_parser("sweep", help="run a grid file (JSON, see sweeps/) with an on-disk results cache")
    w.add_argument("grid_file", help="path to the grid, e.g. sweeps/encodings.json")
    w.add_argument("--quick", action="store_true", help="apply the grid's \"quick\" overrides")
    w.add_argument("--workers", type=int, default=0, help="local processes (0: run in this process)")
    w.add_argument("--scheduler", default=None, help="Dask distributed scheduler address, e.g. tcp://host:8786")
    w.add_argument("--cache", default=None, help="cache folder (default: $LENGTHGEN_CACHE or .lengthgen-cache/)")
    w.add_argument("--json", action="store_true", help="print one JSON summary instead of a table")
    w.set_defaults(func=cmd_sweep)
    m = sub.add_parser("analyze", help="the mechanism: carrier kernel, APE pinning, attention-dilution laws")
    add_config_flags(m)
    m.set_defaults(func=cmd_analyze)
    d = Config()
    x = sub.add_parser("maxmargin", help="the hard-margin carrier kernel of one geometry: margins in and beyond the window")
    x.add_argument("--geometry", default="l2", help="l2 (gradient descent), linf (sign descent, Adam) or pairs")
    x.add_argument("--offset", type=int, default=d.offset, help="retrieve the token K back (K)")
    x.add_argument("--train-length", type=int, default=d.train_length, help="training sequence length T")
    x.add_argument("--dim", type=int, default=d.dim, help="model width d (d/2 RoPE pairs)")
    x.add_argument("--rope-base", type=float, default=d.rope_base, help="RoPE frequency base")
    x.add_argument("--multiple", type=int, default=16, help="look beyond the window out to this multiple of T")
    x.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    x.set_defaults(func=cmd_maxmargin)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
