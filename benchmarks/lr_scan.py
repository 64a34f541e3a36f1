"""Steps to 99% training accuracy against the learning rate: ``python -m benchmarks.lr_scan``.

Training time is steps x seconds per step, and the steps depend strongly on the learning rate. 16
seeds train as one batched ensemble (each member stops on its own, exactly as if trained alone),
with twice the default step budget so that slow seeds show up as slow rather than as failures.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from lengthgen import Config, train

RATES = (3e-3, 1e-2, 2e-2, 3e-2, 5e-2, 1e-1)


def scan(c: Config, rates: tuple[float, ...], seeds: int) -> dict[float, dict]:
    """Per learning rate: steps each seed needed to reach 99% (the budget where it never did)."""
    out = {}
    for lr in rates:
        trained = train(c.replace(lr=lr), range(seeds), progress=False)
        steps = trained.steps
        out[lr] = {"steps": steps.tolist(), "median_steps": float(np.median(steps)),
                   "reached": int((steps < c.steps).sum()), "seconds": trained.seconds}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = p.parse_args()
    base = Config()
    c = base.replace(target_accuracy=0.99, steps=2 * base.steps)
    result = scan(c, RATES, a.seeds)
    if a.json:
        print(json.dumps({"config": c.to_dict(), "by_lr": result}, indent=1))
        return
    print(f"RoPE, {a.seeds} seeds, steps to 99% (budget {c.steps}); default lr {base.lr}")
    print(f"{'lr':>8}  {'median':>6}  {'reached':>7}  steps per seed")
    for lr, r in result.items():
        print(f"{lr:>8g}  {r['median_steps']:>6.0f}  {r['reached']:>4}/{a.seeds:<2}  {sorted(r['steps'])}")


if __name__ == "__main__":
    main()
