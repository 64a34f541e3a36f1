"""Speed benchmarks of issue 6: ``python -m benchmarks.run`` prints a table and writes benchmarks/results.json.

Every figure is a median of ``--repeats`` runs, and every target is a ratio or a time taken in the
same run, so a shared or busy machine inflates all rows alike (the load average is recorded).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, TypeVar

import torch
from torch.utils.flop_counter import FlopCounterMode

from lengthgen import Config, evaluate, train
from lengthgen.task import eval_tokens, targets

from .baseline import Baseline, baseline_accuracy, train_baseline

train_module = importlib.import_module("lengthgen.train")  # the module (the package exports the function)
RESULTS = Path(__file__).with_name("results.json")
SEEDS_TO_99 = (0, 1, 2, 3, 4)
EVAL_LENGTH, EVAL_SAMPLES = 8192, 1000
MATMUL_SIZE = 2048
T = TypeVar("T")


def timed(run: Callable[[], T], repeats: int) -> tuple[float, T]:
    """Median wall-clock seconds of ``repeats`` calls of ``run``, and the last call's result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    return timed(run, repeats)[0]


@contextlib.contextmanager
def threads(n: int):
    """Run the block with ``n`` intra-op threads, inside and outside lengthgen.train."""
    before, train_threads = torch.get_num_threads(), train_module.TRAIN_THREADS
    torch.set_num_threads(n)
    train_module.TRAIN_THREADS = n
    try:
        yield
    finally:
        torch.set_num_threads(before)
        train_module.TRAIN_THREADS = train_threads


def time_to_99(c: Config, repeats: int) -> dict:
    """One RoPE model per seed, trained until 99% training accuracy: seconds and steps per seed."""
    c99 = c.replace(target_accuracy=0.99)
    seconds, steps, reached = [], [], []
    for seed in SEEDS_TO_99:
        s, trained = timed(lambda: train(c99, [seed], progress=False), repeats)
        seconds.append(s)
        steps.append(int(trained.steps[0]))
        reached.append(bool(trained.steps[0] < c99.steps))
    return {"seconds": seconds, "steps": steps, "reached": reached, "median_seconds": statistics.median(seconds)}


def steps_per_second_vs_baseline(c: Config, repeats: int, default_threads: int) -> dict:
    """lengthgen and the plain nn.Module baseline, ``c.steps`` steps each (no early stop), same task."""
    fixed = c.replace(target_accuracy=None)
    ours, trained = timed(lambda: train(fixed, [0], progress=False), repeats)
    base = {}
    for n in sorted({1, default_threads}):
        with threads(n):
            base[n], baseline = timed(lambda: train_baseline(fixed, seed=0, steps=fixed.steps), repeats)
    held_out = eval_tokens(fixed, fixed.train_length, EVAL_SAMPLES)  # the tokens evaluate() draws
    ours_acc = float(evaluate(trained, [fixed.train_length], EVAL_SAMPLES).accuracy()[0, 0])
    base_acc = baseline_accuracy(baseline, held_out, fixed.offset)
    fastest_base = min(base.values())
    return {
        "steps": fixed.steps,
        "ours_steps_per_s": fixed.steps / ours,
        "baseline_steps_per_s_by_threads": {n: fixed.steps / s for n, s in base.items()},
        "ratio_vs_fastest_baseline": fastest_base / ours,
        "ours_accuracy": ours_acc,
        "baseline_accuracy": base_acc,
    }


def batched_vs_in_a_row(c: Config, repeats: int, seeds: int = 16) -> dict:
    """``seeds`` seeds as one batched ensemble vs one after the other: fixed steps, and with early stop."""
    out = {}
    for label, cfg in (("fixed_steps", c.replace(steps=100, target_accuracy=None)), ("early_stop", c)):
        reps = repeats if label == "fixed_steps" else 1
        batched = median_seconds(lambda: train(cfg, range(seeds), progress=False), reps)
        in_a_row = median_seconds(lambda: [train(cfg, [s], progress=False) for s in range(seeds)], reps)
        out[label] = {"steps": cfg.steps, "batched_s": batched, "in_a_row_s": in_a_row, "ratio": in_a_row / batched}
    return out


def evaluation_time(c: Config, repeats: int, default_threads: int) -> dict:
    """evaluate() at length 8192 on 1000 held-out samples, for one trained model."""
    trained = train(c, [0], progress=False)
    by_threads = {}
    for n in sorted({1, default_threads}):
        with threads(n):
            by_threads[n] = median_seconds(lambda: evaluate(trained, [EVAL_LENGTH], EVAL_SAMPLES), repeats)
    return {"length": EVAL_LENGTH, "samples": EVAL_SAMPLES, "seconds_by_threads": by_threads}


def playground_time(c: Config, repeats: int) -> dict:
    """A slider change in lengthgen.widgets.Playground: retrain, evaluate, redraw (output captured)."""
    from lengthgen.widgets import Playground

    pg = Playground(c)
    lengths = iter([c.train_length + 4 * (i + 1) for i in range(repeats)])

    def drag() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            pg.train_length.value = next(lengths)

    return {"what": "Playground(Config()) training-length slider callback", "seeds": pg.seeds.value,
            "median_seconds": median_seconds(drag, repeats)}


def flops(c: Config, repeats: int) -> dict:
    """Matmul FLOP/s of one training step (ours, baseline) against a large fp32 matmul, in this run."""
    from lengthgen.model import Model

    tokens = torch.randint(c.vocab, (1, c.batch, c.train_length), generator=torch.Generator().manual_seed(0))
    y = targets(tokens, c.offset)
    model, base = Model(c, [0]), Baseline(c)

    def ours_step() -> None:
        torch.nn.functional.cross_entropy(model(tokens).logits.flatten(0, 1), y.flatten()).backward()

    def base_step() -> None:
        torch.nn.functional.cross_entropy(base(tokens[0]), y[0]).backward()

    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    out: dict = {"counted": "matmul FLOPs only (FlopCounterMode), forward + backward, batch of one step"}
    for name, step in (("ours", ours_step), ("baseline", base_step)):
        with FlopCounterMode(display=False) as counter:
            step()
        per_step = counter.get_total_flops()
        with threads(1):
            seconds = median_seconds(lambda: [step() for _ in range(20)], repeats) / 20
        out[name] = {"flops_per_step": per_step, "seconds_per_step": seconds, "flop_per_s": per_step / seconds}
    with threads(1):
        out["matmul_1_thread_flop_per_s"] = 2 * MATMUL_SIZE**3 / median_seconds(lambda: a @ a, repeats)
    out["matmul_default_threads_flop_per_s"] = 2 * MATMUL_SIZE**3 / median_seconds(lambda: a @ a, repeats)
    return out


def rows(r: dict) -> list[tuple[str, str, str, bool]]:
    """(measure, result, target, met) for the table."""
    to99, vs, bat, ev, pg, fl = (r[k] for k in ("to_99", "vs_baseline", "batched", "eval", "playground", "flops"))
    eval_best = min(ev["seconds_by_threads"].values())
    return [
        ("RoPE to 99%, median over seeds " + ",".join(map(str, SEEDS_TO_99)),
         f"{to99['median_seconds']:.3f} s (steps {to99['steps']})", "<= 0.5 s", to99["median_seconds"] <= 0.5),
        (f"steps/s vs nn.Module baseline ({vs['steps']} steps)",
         f"{vs['ratio_vs_fastest_baseline']:.1f}x ({vs['ours_steps_per_s']:.0f} vs "
         f"{max(vs['baseline_steps_per_s_by_threads'].values()):.0f}/s; acc {vs['ours_accuracy']:.3f} vs "
         f"{vs['baseline_accuracy']:.3f})", ">= 5x, same acc",
         vs["ratio_vs_fastest_baseline"] >= 5 and abs(vs["ours_accuracy"] - vs["baseline_accuracy"]) <= 0.01),
        ("16 seeds batched vs in a row, 100 fixed steps",
         f"{bat['fixed_steps']['ratio']:.1f}x ({bat['fixed_steps']['batched_s']:.2f} vs "
         f"{bat['fixed_steps']['in_a_row_s']:.2f} s)", ">= 3x", bat["fixed_steps"]["ratio"] >= 3),
        ("16 seeds batched vs in a row, early stop",
         f"{bat['early_stop']['ratio']:.1f}x ({bat['early_stop']['batched_s']:.2f} vs "
         f"{bat['early_stop']['in_a_row_s']:.2f} s)", "(>= 3x)", bat["early_stop"]["ratio"] >= 3),
        (f"evaluate at L={ev['length']}, {ev['samples']} samples",
         " / ".join(f"{s:.3f} s ({n} thr)" for n, s in ev["seconds_by_threads"].items()), "< 1 s", eval_best < 1),
        ("playground slider callback", f"{pg['median_seconds']:.3f} s ({pg['seeds']} seeds)", "<= 1 s",
         pg["median_seconds"] <= 1),
        ("training step FLOP/s (matmuls) vs 2048^2 matmul",
         f"ours {fl['ours']['flop_per_s'] / 1e9:.2f} GFLOP/s, baseline {fl['baseline']['flop_per_s'] / 1e9:.2f}, "
         f"matmul {fl['matmul_1_thread_flop_per_s'] / 1e9:.1f} (1 thr) / "
         f"{fl['matmul_default_threads_flop_per_s'] / 1e9:.1f} (all)", "report", True),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per timing (the median is reported)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    a = p.parse_args()
    if a.repeats < 1:
        raise SystemExit(f"--repeats {a.repeats}: use at least 1")
    c = Config(encoding="rope")
    default_threads = torch.get_num_threads()
    r: dict = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "default_threads": default_threads, "load_average_at_start": os.getloadavg()},
        "config": c.to_dict(),
        "repeats": a.repeats,
    }
    steps = [("to_99", lambda: time_to_99(c, a.repeats)),
             ("vs_baseline", lambda: steps_per_second_vs_baseline(c, a.repeats, default_threads)),
             ("batched", lambda: batched_vs_in_a_row(c, a.repeats)),
             ("eval", lambda: evaluation_time(c, a.repeats, default_threads)),
             ("playground", lambda: playground_time(c, a.repeats)),
             ("flops", lambda: flops(c, a.repeats))]
    for key, measure in steps:
        start = time.perf_counter()
        r[key] = measure()
        print(f"  {key}: {time.perf_counter() - start:.0f} s", flush=True)
    r["machine"]["load_average_at_end"] = os.getloadavg()
    table = rows(r)
    r["table"] = [dict(measure=m, result=res, target=t, met=bool(ok)) for m, res, t, ok in table]
    width = max(len(m) for m, *_ in table)
    print(f"\n{'measure':<{width}}  {'target':<8}  met  result")
    for m, res, t, ok in table:
        print(f"{m:<{width}}  {t:<8}  {'yes' if ok else 'NO ':<3}  {res}")
    print(f"\nload average {r['machine']['load_average_at_start']} -> {r['machine']['load_average_at_end']} "
          f"on {r['machine']['cpus']} CPUs; torch {torch.__version__}")
    a.out.write_text(json.dumps(r, indent=1, default=float))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
