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
from typing import Callable, Iterator, TypeVar

import torch
from torch.utils.flop_counter import FlopCounterMode

from lengthgen import Config, evaluate, train
from lengthgen.model import Model
from lengthgen.task import eval_tokens, targets

from .baseline import Baseline, baseline_accuracy, train_baseline

train_module = importlib.import_module("lengthgen.train")  # the module (the package exports the function)
RESULTS = Path(__file__).with_name("results.json")
SEEDS_TO_99 = (0, 1, 2, 3, 4)
EVAL_LENGTH, EVAL_SAMPLES = 8192, 1000
MATMUL_SIZE = 2048
THREAD_CHECK_STEPS = 50  # steps timed at the default thread count (it can be very slow on a busy machine)
R = TypeVar("R")


def timed(run: Callable[[], R], repeats: int) -> tuple[dict, R]:
    """Medians over ``repeats`` calls of ``run``: wall-clock and process CPU seconds; and the last result.

    CPU seconds of a one-thread run barely move with the machine's load; wall seconds do.
    """
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        result = run()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}, result


def paired(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[dict, dict]:
    """Time ``a`` and ``b`` alternately (a, b, a, b, ...), so that both see the same load; medians."""
    runs = [(timed(a, 1)[0], timed(b, 1)[0]) for _ in range(repeats)]
    return tuple({k: statistics.median(r[i][k] for r in runs) for k in ("wall", "cpu")} for i in (0, 1))


def ratio(slow: dict, fast: dict) -> dict:
    return {k: slow[k] / fast[k] for k in ("wall", "cpu")}


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
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
    per_seed = {}
    for seed in SEEDS_TO_99:
        t, trained = timed(lambda: train(c99, [seed], progress=False), repeats)
        per_seed[seed] = {**t, "steps": int(trained.steps[0]), "reached": bool(trained.steps[0] < c99.steps)}
    return {"per_seed": per_seed, **{k: statistics.median(r[k] for r in per_seed.values()) for k in ("wall", "cpu")}}


def vs_baseline(c: Config, repeats: int, default_threads: int) -> dict:
    """lengthgen and the plain nn.Module baseline, ``c.steps`` steps each (no early stop), same task,
    alternated; then both at the default thread count over a few steps (slow on a busy machine)."""
    fixed = c.replace(target_accuracy=None)
    with threads(1):
        trained = train(fixed, [0], progress=False)
        baseline = train_baseline(fixed, seed=0, steps=fixed.steps)
        ours, base = paired(lambda: train(fixed, [0], progress=False),
                            lambda: train_baseline(fixed, seed=0, steps=fixed.steps), repeats)
    few = fixed.replace(steps=THREAD_CHECK_STEPS)
    with threads(default_threads):
        ours_default, base_default = paired(lambda: train(few, [0], progress=False),
                                            lambda: train_baseline(few, seed=0, steps=few.steps), 1)
    per_s = {  # steps per second (wall), by intra-op threads
        "ours": {1: fixed.steps / ours["wall"], default_threads: few.steps / ours_default["wall"]},
        "baseline": {1: fixed.steps / base["wall"], default_threads: few.steps / base_default["wall"]},
    }
    held_out = eval_tokens(fixed, fixed.train_length, EVAL_SAMPLES)  # the tokens evaluate() draws
    return {
        "steps": fixed.steps,
        "ours": ours,
        "baseline": base,
        "ratio_1_thread": ratio(base, ours),
        "steps_per_s_by_threads": per_s,
        "ratio_vs_fastest_baseline": per_s["ours"][1] / max(per_s["baseline"].values()),
        "ours_accuracy": float(evaluate(trained, [fixed.train_length], EVAL_SAMPLES).accuracy()[0, 0]),
        "baseline_accuracy": baseline_accuracy(baseline, held_out, fixed.offset),
    }


def batched_vs_in_a_row(c: Config, repeats: int, seeds: int = 16) -> dict:
    """``seeds`` seeds as one batched ensemble vs one after the other: fixed steps, and with early stop."""
    out = {}
    for label, cfg, reps in (("fixed_steps", c.replace(steps=100, target_accuracy=None), repeats), ("early_stop", c, 1)):
        batched, in_a_row = paired(lambda: train(cfg, range(seeds), progress=False),
                                   lambda: [train(cfg, [s], progress=False) for s in range(seeds)], reps)
        out[label] = {"steps": cfg.steps, "batched": batched, "in_a_row": in_a_row, "ratio": ratio(in_a_row, batched)}
    return out


def evaluation_time(c: Config, repeats: int, default_threads: int) -> dict:
    """evaluate() at length 8192 on 1000 held-out samples, for one trained model, by thread count."""
    trained = train(c, [0], progress=False)
    by_threads = {}
    for n in sorted({1, default_threads}):
        with threads(n):
            by_threads[n] = timed(lambda: evaluate(trained, [EVAL_LENGTH], EVAL_SAMPLES), repeats)[0]
    return {"length": EVAL_LENGTH, "samples": EVAL_SAMPLES, "by_threads": by_threads}


def playground_time(c: Config, repeats: int) -> dict:
    """A slider change in lengthgen.widgets.Playground: retrain, evaluate, redraw (output captured)."""
    from lengthgen.widgets import Playground

    pg = Playground(c)
    lengths = iter([c.train_length + 4 * (i + 1) for i in range(repeats)])

    def drag() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            pg.train_length.value = next(lengths)

    return {"what": "Playground(Config()) training-length slider callback", "seeds": pg.seeds.value,
            **timed(drag, repeats)[0]}


def flops(c: Config, repeats: int) -> dict:
    """Matmul FLOP/s of one training step (ours, baseline) against a large fp32 matmul, in this run."""
    tokens = torch.randint(c.vocab, (1, c.batch, c.train_length), generator=torch.Generator().manual_seed(0))
    y = targets(tokens, c.offset)
    model, base = Model(c, [0]), Baseline(c)

    def ours_step() -> None:
        torch.nn.functional.cross_entropy(model(tokens).logits.flatten(0, 1), y.flatten()).backward()

    def base_step() -> None:
        torch.nn.functional.cross_entropy(base(tokens[0]), y[0]).backward()

    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    out: dict = {"counted": "matmul FLOPs only (FlopCounterMode), forward + backward of one training batch"}
    with threads(1):
        for name, step in (("ours", ours_step), ("baseline", base_step)):
            with FlopCounterMode(display=False) as counter:
                step()
            per_step = counter.get_total_flops()
            seconds = timed(lambda: [step() for _ in range(20)], repeats)[0]["wall"] / 20
            out[name] = {"flops_per_step": per_step, "seconds_per_step": seconds, "flop_per_s": per_step / seconds}
        out["matmul_1_thread_flop_per_s"] = 2 * MATMUL_SIZE**3 / timed(lambda: a @ a, repeats)[0]["wall"]
    out["matmul_default_threads_flop_per_s"] = 2 * MATMUL_SIZE**3 / timed(lambda: a @ a, repeats)[0]["wall"]
    return out


def rows(r: dict) -> list[tuple[str, str, str, bool]]:
    """(measure, target, met, result) for the table; targets are judged on wall-clock medians."""
    to99, vs, bat, ev, pg, fl = (r[k] for k in ("to_99", "vs_baseline", "batched", "eval", "playground", "flops"))
    default = r["machine"]["default_threads"]
    steps = [v["steps"] for v in to99["per_seed"].values()]
    reached = [v["wall"] for v in to99["per_seed"].values() if v["reached"]]
    fixed, early = bat["fixed_steps"], bat["early_stop"]
    per_s = vs["steps_per_s_by_threads"]
    return [
        ("RoPE to 99%, median over seeds " + ",".join(map(str, SEEDS_TO_99)), "<= 0.5 s", to99["wall"] <= 0.5,
         f"{to99['wall']:.3f} s (cpu {to99['cpu']:.3f}); steps {steps}; reached 99% within {r['config']['steps']}: "
         f"{len(reached)}/{len(steps)}, median {statistics.median(reached) if reached else float('nan'):.3f} s"),
        (f"steps/s vs nn.Module baseline, {vs['steps']} steps", ">= 5x", vs["ratio_vs_fastest_baseline"] >= 5,
         f"{vs['ratio_vs_fastest_baseline']:.1f}x vs its fastest thread setting (1 thread: wall "
         f"{vs['ratio_1_thread']['wall']:.1f}x, cpu {vs['ratio_1_thread']['cpu']:.1f}x)"),
        ("  same accuracy at the training length", "|diff|<=0.01",
         abs(vs["ours_accuracy"] - vs["baseline_accuracy"]) <= 0.01,
         f"{vs['ours_accuracy']:.3f} vs {vs['baseline_accuracy']:.3f}"),
        (f"16 seeds batched vs in a row, {fixed['steps']} fixed steps", ">= 3x", fixed["ratio"]["wall"] >= 3,
         f"{fixed['ratio']['wall']:.1f}x ({fixed['batched']['wall']:.2f} vs {fixed['in_a_row']['wall']:.2f} s; "
         f"cpu {fixed['ratio']['cpu']:.1f}x)"),
        ("16 seeds batched vs in a row, early stop", "(>= 3x)", early["ratio"]["wall"] >= 3,
         f"{early['ratio']['wall']:.1f}x ({early['batched']['wall']:.2f} vs {early['in_a_row']['wall']:.2f} s; "
         f"cpu {early['ratio']['cpu']:.1f}x)"),
        (f"evaluate at L={ev['length']}, {ev['samples']} samples", "< 1 s", ev["by_threads"][default]["wall"] < 1,
         " / ".join(f"{t['wall']:.3f} s ({n} thr)" for n, t in ev["by_threads"].items())),
        ("playground slider callback", "<= 1 s", pg["wall"] <= 1,
         f"{pg['wall']:.3f} s (cpu {pg['cpu']:.3f}; {pg['seeds']} seeds)"),
        ("training steps/s by intra-op threads", "report", True,
         "ours " + " / ".join(f"{v:.0f}" for v in per_s["ours"].values()) + ", baseline "
         + " / ".join(f"{v:.0f}" for v in per_s["baseline"].values()) + f" ({' / '.join(map(str, per_s['ours']))} thr)"),
        ("training step FLOP/s (matmuls only)", "report", True,
         f"ours {fl['ours']['flop_per_s'] / 1e9:.2f} GFLOP/s, baseline {fl['baseline']['flop_per_s'] / 1e9:.2f}; "
         f"{MATMUL_SIZE}^2 matmul {fl['matmul_1_thread_flop_per_s'] / 1e9:.1f} (1 thr) / "
         f"{fl['matmul_default_threads_flop_per_s'] / 1e9:.1f} ({default} thr)"),
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
             ("vs_baseline", lambda: vs_baseline(c, a.repeats, default_threads)),
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
    r["table"] = [dict(measure=m, target=t, met=bool(ok), result=res) for m, t, ok, res in table]
    width = max(len(m) for m, *_ in table)
    print(f"\n{'measure':<{width}}  {'target':<12}  met  result (wall-clock medians)")
    for m, t, ok, res in table:
        print(f"{m:<{width}}  {t:<12}  {'yes' if ok else 'NO ':<3}  {res}")
    print(f"\nload average {r['machine']['load_average_at_start']} -> {r['machine']['load_average_at_end']} "
          f"on {r['machine']['cpus']} CPUs; torch {torch.__version__}")
    a.out.write_text(json.dumps(r, indent=1, default=float))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
