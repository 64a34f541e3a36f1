"""Issue 29 item 4: the guard of the results cache's version (``cache.RESULTS_VERSION``).

The sweep cache is keyed by an explicit results version, not by the bytes of the sources, so a refactor keeps it.
The price is that a change which moves a cached number must bump the version. This test makes that a rule: it
reruns a few tiny grids whose runs pass through every code path behind a cached result (each encoding, each update
rule, early stop, weight decay on either scope, a fixed float64 training set, two layers, every record extra) and
compares every number they store with ``tests/results_reference.json``, written under the version it names.

- The numbers moved and the version did not: the test fails; bump ``RESULTS_VERSION`` in ``lengthgen/cache.py``.
- The version was bumped: the reference is out of date; rewrite it with
  ``.venv/bin/python -m tests.test_results_version`` (and say in the commit what moved).

Numbers are compared to a relative 1e-5 (float32 rounding can differ between processors' vector widths; a change
in what is computed moves them by far more).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lengthgen import cache as cache_mod
from lengthgen.cache import Cache
from lengthgen.sweep import grid_from_dict, run_sweep

REFERENCE = Path(__file__).with_name("results_reference.json")
HOW = ("batch_seconds", "batch_members")  # how a run was computed, not what: not compared
KEY = ("config",)  # which run it is (a new Config field with its default adds a key here, and no number): not compared
TINY = {"vocab": 4, "dim": 8, "train_length": 8, "offset": 2, "steps": 12, "batch": 16, "target_accuracy": None}
GRIDS = [
    {"name": "encodings_and_rules", "base": TINY,
     "product": {"encoding": ["rope", "ape", "sinusoidal", "nope", "alibi"]},
     "recipes": [{"optimizer": "adam", "lr": 0.01}, {"optimizer": "gd", "lr": 0.3}, {"optimizer": "ngd", "lr": 0.1},
                 {"optimizer": "sign", "lr": 0.01}, {"optimizer": "signum", "lr": 0.01}],
     "seeds": [0], "eval": {"multiples": [1, 2], "samples": 40, "seed": 0}, "record": ["argmax", "pinning"]},
    {"name": "kernel_and_variants", "base": {**TINY, "encoding": "rope"},
     "variants": [{}, {"target_accuracy": 0.5, "steps": 40}, {"weight_decay": 0.1},
                  {"weight_decay": 0.1, "decay_scope": "all"}, {"dtype": "float64", "train_set": 32, "batch": 32},
                  {"layers": 2}, {"rope_base": 100.0, "offset": 3}],
     "seeds": [0, 1], "eval": {"multiples": [1, 2], "samples": 40, "seed": 0}, "record": ["kernel"]},
    {"name": "rope_by_lookup", "base": {**TINY, "encoding": "rope", "vocab": 16},  # V^2 > 4 batch: engine.step.by_lookup
     "recipes": [{"optimizer": "adam", "lr": 0.01}, {"optimizer": "gd", "lr": 0.3}],
     "seeds": [0, 1], "eval": {"multiples": [1, 2], "samples": 40, "seed": 0}, "record": ["kernel"]},
]


def measured() -> list[dict]:
    """Every stored record of the reference grids, computed now in a throwaway cache."""
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as root:
        return [{k: v for k, v in r.items() if k not in HOW + KEY}
                for spec in GRIDS for r in run_sweep(grid_from_dict(spec), Cache(root), progress=False).records]


def differences(a: object, b: object, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ: numbers beyond a relative 1e-5 (absolute 1e-7), anything else at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7) else [f"{where}: {a!r} -> {b!r}"]
    return [] if a == b else [f"{where}: {a!r} -> {b!r}"]


def test_a_change_that_moves_a_cached_number_bumps_the_results_version() -> None:
    reference = json.loads(REFERENCE.read_text())
    assert reference["grids"] == GRIDS, "the reference grids changed: rewrite it (python -m tests.test_results_version)"
    now = measured()
    moved = differences(reference["records"], now)
    if reference["results_version"] == cache_mod.RESULTS_VERSION:
        assert not moved, (f"{len(moved)} cached numbers changed but RESULTS_VERSION is still "
                           f"{cache_mod.RESULTS_VERSION}: bump it in lengthgen/cache.py, then rewrite the reference "
                           f"(python -m tests.test_results_version). First changes: {moved[:5]}")
    else:
        raise AssertionError(f"RESULTS_VERSION is {cache_mod.RESULTS_VERSION} but tests/results_reference.json was "
                             f"written under {reference['results_version']}: rewrite it with "
                             f"python -m tests.test_results_version ({len(moved)} numbers differ)")


def test_the_guard_sees_a_moved_number() -> None:
    """The comparison is not blind: a 1e-4 relative move in one stored weight, or one accuracy, is a difference."""
    records = json.loads(REFERENCE.read_text())["records"]
    moved = json.loads(json.dumps(records))
    moved[0]["target_weight"][0] *= 1 + 1e-4
    assert differences(records, moved) == [f"[0].target_weight[0]: {records[0]['target_weight'][0]!r} -> "
                                           f"{moved[0]['target_weight'][0]!r}"]
    moved = json.loads(json.dumps(records))
    moved[-1]["accuracy"][-1] += 1 / 40
    assert len(differences(records, moved)) == 1


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps({"results_version": cache_mod.RESULTS_VERSION, "grids": GRIDS, "records": measured()},
                                    indent=1)
                         + "\n")
    print(f"wrote {REFERENCE} under results version {cache_mod.RESULTS_VERSION}")
