"""The speed table on a GPU, where one is lent: each measure on the GPU and on the same machine's CPU, one after
the other in one run (``python -m benchmarks.gpu``; prints a table, writes ``benchmarks/results-gpu.json`` or
``--out``). It needs only what training needs (no widgets, no Dask), so it runs in a GPU machine's own Python.

Measures (RoPE on the default task unless said; wall-clock medians; the recipe in each row):
- one model with the book's small-step recipe (``recipes.SMALL_STEPS``: every step, no early stop);
- the playground's redraw without its figure: 2 seeds with that recipe, then ``evaluate`` at 1x-16x;
- float64 full-batch training (N=256) with each update rule of the implicit-bias work, timed on 1000 steps;
- an ensemble step as the sweeps train them (10 members, batch 1024, gradient descent);
- a wide ensemble: 1000 seeds as one model, 50 steps of the first-fit recipe's Adam step (models per second);
- ``evaluate`` at L=8192 on 1000 samples.
On the CPU, training takes the compiled step; on the GPU, the table model's torch operations (``tables.TableStep``).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Callable

import torch

from lengthgen import Config, evaluate, train

from lengthgen.train import default_device

from .run import (EVAL_LENGTH, EVAL_SAMPLES, LONG_N, LONG_RULES, LONG_STEPS, LONG_TARGET_STEPS, ensemble_config,
                  long_config, processor, processor_line, small_steps, timed)

RESULTS = Path(__file__).with_name("results-gpu.json")
WIDE_SEEDS, WIDE_STEPS = 1000, 50


def measures(dev: str) -> dict[str, tuple[str, Callable[[], object], float]]:
    """name -> (what, the run, the work it does in the unit reported: 1 for seconds, else a count)."""
    c = Config(encoding="rope")
    small = small_steps(c)
    long = {rule: long_config(rule) for rule in LONG_RULES}
    ens = ensemble_config()
    wide = c.replace(steps=WIDE_STEPS, target_accuracy=None)

    def playground() -> None:
        evaluate(train(small, [0, 1], device=dev, progress=False), [32, 64, 128, 256, 512], 200)

    out = {"small_steps_model": (f"one model, {small.recipe()}", lambda: train(small, [0], device=dev, progress=False), 1),
           "playground": ("2 seeds, the same recipe, then evaluate at 1x-16x (200 samples)", playground, 1)}
    for rule, cfg in long.items():
        out[f"float64_{rule}"] = (f"float64, full batch N={LONG_N}, {rule} at lr {cfg.lr}: s per {LONG_TARGET_STEPS:.0e} "
                                  f"steps (timed on {LONG_STEPS})",
                                  lambda cfg=cfg: train(cfg, [0], device=dev, progress=False), LONG_STEPS / LONG_TARGET_STEPS)
    out["ensemble_step"] = (f"ensemble step, 10 members, batch {ens.batch}, gd at lr {ens.lr}: ms per step",
                            lambda: train(ens, range(10), device=dev, progress=False), ens.steps / 1e3)
    out["wide"] = (f"{WIDE_SEEDS} seeds as one ensemble, {WIDE_STEPS} steps ({wide.recipe()}): models per s",
                   lambda: train(wide, range(WIDE_SEEDS), device=dev, progress=False), -WIDE_SEEDS)
    trained = {}

    def evaluation() -> None:
        if "t" not in trained:
            trained["t"] = train(c, [0], device=dev, progress=False)
        evaluate(trained["t"], [EVAL_LENGTH], EVAL_SAMPLES)

    out["evaluate"] = (f"evaluate at L={EVAL_LENGTH}, {EVAL_SAMPLES} samples, a model trained with {c.recipe()}",
                       evaluation, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per timing (the median is reported)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no GPU here (torch.cuda.is_available() is False): run `make bench` for the CPU table")
    c = Config(encoding="rope")
    r: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "platform": platform.platform(),
               "processor": processor(), "rows": {},
               # what train() picks without device= (train.default_device): one model, and the wide ensemble
               "default_device": {"small_steps_model": str(default_device(1, small_steps(c))),
                                  "wide": str(default_device(WIDE_SEEDS, c))}}
    print(f"{r['gpu']}, torch {r['torch']}; {processor_line(r['processor'])}", flush=True)
    print(f"train() without device= picks: {r['default_device']}", flush=True)
    for dev in ("cuda", "cpu"):
        for name, (what, run, unit) in measures(dev).items():
            try:
                run()  # first call: compiles, allocates, warms
                t = timed(lambda: (run(), torch.cuda.synchronize()), a.repeats)[0]["wall"]
                value = -unit / t if unit < 0 else t / unit
            except Exception as e:  # noqa: BLE001 - reported in the table, the other rows still run
                value = f"failed: {type(e).__name__}: {e}"
            r["rows"].setdefault(name, {"what": what})[dev] = value
            print(f"{dev:4} {name}: {value}", flush=True)
            a.out.write_text(json.dumps(r, indent=1))
    print(f"\n{r['gpu']}; {processor_line(r['processor'])}")
    print(f"{'measure':<100}  {'GPU':>10}  {'CPU':>10}")
    for row in r["rows"].values():
        cells = [f"{row.get(d):>10.3f}" if isinstance(row.get(d), float) else f"{str(row.get(d))[:40]:>10}"
                 for d in ("cuda", "cpu")]
        print(f"{row['what']:<100}  {cells[0]}  {cells[1]}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
