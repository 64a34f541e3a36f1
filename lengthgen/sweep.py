"""Sweeps: a grid of Config fields x seeds, trained as batched ensembles, every run cached on disk.

A grid file is JSON::

    {"name": "frontier",
     "base": {"steps": 400},                         # overrides of Config() shared by every run
     "product": {"encoding": ["rope", "ape"]},       # every combination of these values ...
     "recipes": [{"lr": 1e-2, "steps": 200}],        # ... times each of these training recipes ...
     "variants": [{}, {"rope_base": 100}],           # ... times each of these override sets ({} = as is)
     "seeds": 10,                                    # seeds 0..9, or an explicit list
     "eval": {"multiples": [1, 2, 4], "samples": 1000, "seed": 0},   # or "lengths": [32, 64]
     "record": ["kernel"],                           # extras: "kernel" (RoPE only), "argmax", "pinning"
     "quick": {"seeds": 3, "base": {"steps": 100}}}  # top-level keys replaced in quick mode

Runs that share their shape and step budget (they differ only in seed, step size, weight decay, early
stop or offset: ``train.MEMBER_FIELDS``) train as one batched ensemble (``train.train_runs``), up to
``MAX_MEMBERS`` runs at a time (``SPLIT_MEMBERS`` without weight decay: ``plan``); a member of an ensemble trains exactly as it would alone, so each
(config, seed) is cached on its own, keyed by config, seed, evaluation settings, extras and results version (cache.RESULTS_VERSION). A sweep stopped at any point
resumes where it stopped; a finished one reruns from the cache without training.

``Sweep.frame()`` gives the results as a pandas DataFrame, one row per (config, seed, evaluation length);
``summary`` gives the mean and standard error over seeds per group (``compare`` builds the book's statistics on it).

Groups run in this process by default, on a local process pool with ``workers=N``, or on a Dask
distributed cluster with ``scheduler="tcp://host:port"``. Workers only compute; this process writes
the cache, so remote workers need no shared disk. ``run_grids`` runs the missing jobs of many grids as one
queue, longest first (``job_cost``), so that no worker idles at the tail of each grid.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import itertools
import json
import multiprocessing
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .cache import PACKAGE, Cache
from .config import Config, ConfigError, check_length
from .kernel import predicted_failure_length, target_margin
from .pinning import measure_lengths
from .train import THREADS_ENV, Trained, shape_key, train_runs
from .uncertainty import standard_error

GRID_KEYS = ("name", "description", "base", "product", "recipes", "variants", "seeds", "eval", "record", "quick")
EXTRAS = ("kernel", "argmax", "pinning")
DEFAULT_MULTIPLES = (1, 2, 4, 8, 16)
# The grid files of the book's chapters: sweeps/ in a source checkout, lengthgen/sweeps/ in an installed package.
SWEEPS = PACKAGE.parent / "sweeps" if (PACKAGE.parent / "sweeps").is_dir() else PACKAGE / "sweeps"
MAX_MEMBERS = 24  # runs per batched ensemble: a step costs about members x one member, so smaller ensembles
# lose little and keep every worker of a pool busy
SPLIT_MEMBERS = 10  # ensembles without weight decay are cut to this size (``plan``): smaller jobs balance the
# workers' queue. A member-step costs the same at 5, 10 and 20 members with the compiled step (engine/); with the
# torch step before it, 10 cost 7-14% less per member than 20 (CPU time, one thread, sizes alternated, 2026-12-03)


class GridError(ConfigError):
    """A malformed grid file; the message says which key to fix."""


@dataclass(frozen=True)
class Grid:
    """A parsed grid: the configs to run, the seeds of each, and what to measure."""

    name: str
    configs: tuple[Config, ...]
    seeds: tuple[int, ...]
    multiples: tuple[float, ...] | None  # evaluation lengths as multiples of each config's train_length ...
    lengths: tuple[int, ...] | None  # ... or fixed lengths
    samples: int
    eval_seed: int
    record: tuple[str, ...]

    def eval_lengths(self, c: Config) -> list[int]:
        """The evaluation lengths of config ``c`` (each checked against it)."""
        out = [round(m * c.train_length) for m in self.multiples] if self.multiples else list(self.lengths)
        for length in out:
            check_length(c, length)
        return out

    def groups(self) -> list[tuple[Config, tuple[int, ...]]]:
        """(config, seeds) per config: the batched ensembles of the sweep."""
        return [(c, self.seeds) for c in self.configs]

    def varied(self) -> list[str]:
        """Config fields whose value differs between configs of the grid."""
        dicts = [c.to_dict() for c in self.configs]
        return [k for k in dicts[0] if len({json.dumps(d[k]) for d in dicts}) > 1]


def _typed(overrides: dict) -> dict:
    """JSON has one number type: give float fields floats, so that 100 and 100.0 share a cache key."""
    floats = {f.name for f in dataclasses.fields(Config) if isinstance(f.default, float)}
    return {k: float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in overrides.items()}


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise GridError(message)


def grid_from_dict(spec: dict, quick: bool = False, name: str = "grid") -> Grid:
    """Parse a grid description (see the module docstring); ``quick`` applies its "quick" overrides."""
    _need(isinstance(spec, dict), "a grid is a JSON object (a dict) with keys " + ", ".join(GRID_KEYS))
    unknown = set(spec) - set(GRID_KEYS)
    _need(not unknown, f"unknown grid key(s) {sorted(unknown)}; known: {', '.join(GRID_KEYS)}")
    if quick:
        spec = {**spec, **spec.get("quick", {})}
    base = Config().replace(**_typed(spec.get("base", {})))
    product = spec.get("product", {})
    _need(isinstance(product, dict) and all(isinstance(v, list) and v for v in product.values()),
          '"product" maps Config fields to non-empty lists, e.g. {"encoding": ["rope", "ape"]}')
    variants, recipes = spec.get("variants", [{}]), spec.get("recipes", [{}])
    for key, sets in (("variants", variants), ("recipes", recipes)):
        _need(isinstance(sets, list) and sets and all(isinstance(v, dict) for v in sets),
              f'"{key}" is a non-empty list of override dicts; use {{}} for the base itself')
    configs: list[Config] = []
    for values in itertools.product(*product.values()):
        point = base.replace(**_typed(dict(zip(product, values))))
        for recipe in recipes:
            for v in variants:
                c = point.replace(**_typed({**recipe, **v}))
                if c not in configs:
                    configs.append(c)
    seeds = spec.get("seeds", 1)
    seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(int(s) for s in seeds)
    _need(len(seeds) > 0 and len(set(seeds)) == len(seeds), f'"seeds": {spec.get("seeds")!r}: give N >= 1 or a list of distinct ints')
    ev = spec.get("eval", {})
    _need(not ("multiples" in ev and "lengths" in ev), '"eval": give "multiples" or "lengths", not both')
    lengths = tuple(int(x) for x in ev["lengths"]) if "lengths" in ev else None
    multiples = None if lengths else tuple(ev.get("multiples", DEFAULT_MULTIPLES))
    samples = ev.get("samples", 1000)
    _need(isinstance(samples, int) and samples >= 1, f'"eval": "samples": {samples!r}: use an integer >= 1')
    record = tuple(sorted(spec.get("record", [])))
    _need(set(record) <= set(EXTRAS), f'"record": {list(record)}; the extras are {", ".join(EXTRAS)}')
    grid = Grid(spec.get("name", name), tuple(configs), seeds, multiples, lengths,
                samples, int(ev.get("seed", 0)), record)
    for c in configs:
        grid.eval_lengths(c)  # fail now, before any training, on a length a config cannot run
    return grid


def load_grid(path: str | Path, quick: bool = False) -> Grid:
    """Read a grid file (JSON): a path, or the name of a grid in ``sweeps/`` (e.g. "budget")."""
    path = Path(path)
    if path.suffix != ".json" and not path.exists():
        path = SWEEPS / f"{path}.json"
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise GridError(f"grid file {path} not found; pass a path to a JSON grid (see sweeps/)") from None
    except json.JSONDecodeError as e:
        raise GridError(f"grid file {path} is not valid JSON: {e}") from None
    return grid_from_dict(spec, quick, name=path.stem)


def run_key(grid: Grid, c: Config, seed: int) -> dict:
    """What a cached run depends on (the cache adds the results version)."""
    return {"config": c.to_dict(), "seed": seed, "lengths": grid.eval_lengths(c), "samples": grid.samples,
            "eval_seed": grid.eval_seed, "record": list(grid.record)}


def kernel_record(trained: Trained, lengths: list[int]) -> list[dict]:
    """Per member: the first layer's carrier-kernel margins (kernel.target_margin), the first length at
    which an offset beyond the window outscores the target (kernel.predicted_failure_length, searched up
    to the longest evaluation length; None: none up to there), and |W_q W_k^T|_F of the first layer."""
    c, model = trained.config, trained.model
    margin = target_margin(model, c.offset, c.train_length)
    failure = predicted_failure_length(model, c.offset, c.train_length, max(max(lengths), c.train_length + 1))
    layer = model.layers[0]
    qk_norm = torch.linalg.matrix_norm(layer.wq @ layer.wk.transpose(-1, -2)).detach().cpu().numpy()
    return [{"margin_target": float(margin.target[s]), "margin_in_window": float(margin.in_window[s]),
             "margin_beyond": float(margin.beyond[s]), "predicted_failure_length": failure[s],
             "qk_norm": float(qk_norm[s])} for s in range(model.members)]


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def measured_record(trained: Trained, lengths: list[int], samples: int, eval_seed: int,
                    record: Sequence[str]) -> list[dict]:
    """Per member, per evaluation length, from one pass over held-out samples (pinning.measure_lengths):
    accuracy, the last layer's attention weight on the target x_(L-K), and with the extras "argmax" the share
    of samples whose last-layer attention argmax is the target, "pinning" the share whose argmax (per layer,
    first to last) is the position x_(T-K) that held the target in training and the share of predictions
    equal to the token there."""
    pins = measure_lengths(trained, lengths, samples, eval_seed).values()
    out = []
    for s in range(trained.model.members):
        r = {"accuracy": [float(p.accuracy[s]) for p in pins],
             "target_weight": [float(p.layers[-1].target_weight[s]) for p in pins]}
        if "argmax" in record:
            r["argmax_at_target"] = [float(p.layers[-1].share_at(p.target_index)[s]) for p in pins]
        if "pinning" in record:
            r["argmax_at_pinned"] = [[_finite(layer.share_at(p.pinned)[s]) for layer in p.layers] for p in pins]
            r["predicts_pinned"] = [_finite(p.predicts_pinned[s]) for p in pins]
        out.append(r)
    return out


Job = list[tuple[Config, tuple[int, ...]]]  # (config, seeds) pairs trained as one ensemble


def batches(groups: Sequence[tuple[Config, tuple[int, ...]]], limit: int | None = None) -> list[Job]:
    """Pack (config, seeds) groups into ensembles of at most ``limit`` (default MAX_MEMBERS) runs that share
    shape and step budget (first-seen order). A group larger than ``limit`` is split by seeds; a group that
    does not fit in the current ensemble starts the next one."""
    limit = MAX_MEMBERS if limit is None else limit
    out: dict[tuple[str, int], list[Job]] = {}
    for c, seeds in groups:
        for i in range(0, len(seeds), limit):
            part = tuple(seeds[i : i + limit])
            jobs = out.setdefault((shape_key(c), c.steps), [[]])
            if sum(len(s) for _, s in jobs[-1]) + len(part) > limit:
                jobs.append([])
            jobs[-1].append((c, part))
    return [job for jobs in out.values() for job in jobs]


def plan(groups: Sequence[tuple[Config, tuple[int, ...]]]) -> list[Job]:
    """The ensembles that train ``groups``: ``batches``, then every ensemble in which no run has weight decay cut
    into parts of at most ``SPLIT_MEMBERS`` runs (by whole groups, a group larger than that by seeds).

    Cutting changes no number: without weight decay a member's updates do not depend on the other members
    (tests/test_sweep.py checks it bitwise). Ensembles with weight decay stay as packed: they were packed so when
    this rule was measured (then weight decay switched the whole ensemble to another Adam path, other rounding),
    and cutting them has not been checked bitwise.
    """
    out: list[Job] = []
    for job in batches(groups):
        if any(c.weight_decay > 0 for c, _ in job):
            out.append(job)
            continue
        out += batches(job, SPLIT_MEMBERS)
    return out


def job_cost(job: Job, lengths: Sequence[Sequence[int]], samples: int) -> float:
    """Estimated CPU seconds of ``run_job`` (one thread), to run the longest jobs first.

    Per member and step 0.3 ms for a one-layer model at batch 256, V = 16, T = 32, scaled as measured by batch^(2/3),
    V^0.8, T^0.5 and 90x per extra layer (autograd); an early stop is counted at a quarter of the budget (the
    first fit stops after 30-100 of its 400 steps). Evaluation: small on the tables, O(samples L^2 d) per member
    otherwise (there it is most of a two-layer job).
    """
    seconds = 0.0
    for (c, seeds), ls in zip(job, lengths):
        scale = (c.batch / 256) ** (2 / 3) * (c.vocab / 16) ** 0.8 * (c.train_length / 32) ** 0.5
        steps = c.steps if c.target_accuracy is None else c.steps / 4
        step = 3e-4 * scale * (1 + 90 * (c.layers - 1))
        evaluation = 6e-10 * samples * sum(L * L for L in ls) * c.dim if c.layers > 1 else 2.5e-8 * samples * sum(ls)
        seconds += len(seeds) * (steps * step + evaluation)
    return seconds


def run_job(job: Job, lengths: list[list[int]], samples: int, eval_seed: int, record: Sequence[str] = (),
            threads: int | None = None) -> list[list[dict]]:
    """Train every (config, seeds) of ``job`` as one ensemble, evaluate each config at its ``lengths``, and
    return one list of JSON-ready results (one per seed) per config.

    Runs anywhere (this process, a pool worker, a Dask worker); ``threads`` sets torch's thread count there
    (training and evaluation run on one thread, BLAS included, whatever it is: ``train.cpu_threads``) and the
    threads an ensemble's members are split over (``train.run_threads``; in a worker process of its own).
    """
    if threads is not None:
        torch.set_num_threads(threads)
        os.environ[THREADS_ENV] = str(threads)  # and the members of an ensemble (train.run_threads)
    runs = [(c, s) for c, seeds in job for s in seeds]
    trained = train_runs(runs, progress=False)
    out = []
    for t, ls in zip(trained, lengths):
        last = t.accuracy[-1] if len(t.accuracy) else np.full(len(t.seeds), np.nan)
        final_loss = t.loss[-1] if len(t.loss) else np.full(len(t.seeds), np.nan)
        res = [{"steps": int(t.steps[s]), "final_train_accuracy": float(last[s]),
                "final_train_loss": _finite(final_loss[s]), "batch_seconds": round(t.seconds, 3),
                "batch_members": len(runs), **m}
               for s, m in enumerate(measured_record(t, ls, samples, eval_seed, record))]
        if "kernel" in record and t.config.encoding == "rope":
            for r, k in zip(res, kernel_record(t, ls)):
                r["kernel"] = k
        out.append(res)
    return out


@dataclass
class Sweep:
    """The results of a grid: one record per (config, seed), in grid order."""

    grid: Grid
    records: list[dict]  # {"config", "seed", "lengths", "steps", "accuracy", "target_weight", ...}
    computed: int  # runs trained by this call (the rest came from the cache)
    seconds: float = 0.0  # when its last missing run was cached, in seconds after the call started (0: none missing)

    def frame(self) -> pd.DataFrame:
        """The results as a table, one row per (config, seed, evaluation length): see :func:`frame`."""
        return frame(self.records)


KERNEL_FIELDS = ("margin_target", "margin_in_window", "margin_beyond", "predicted_failure_length", "qk_norm")


def frame(records: Sequence[dict]) -> pd.DataFrame:
    """Sweep results as a table: one row per (config, seed, evaluation length).

    ``records``: ``Sweep.records`` (records of several grids may be concatenated). Columns: every
    Config field (``steps`` is the budget), ``seed``, ``run`` (an id of the config and seed, the same in every
    grid), ``recipe`` (``Config.recipe()``), ``length``, ``multiple`` (of the training length), ``chance``,
    ``accuracy``, ``target_weight``, ``steps_trained`` (the early stop), ``seconds`` (training time per model:
    its ensemble's time over its members), and what the grid recorded: ``argmax_at_target``,
    ``argmax_at_pinned_layer1..n``, ``predicts_pinned``, and the kernel's ``KERNEL_FIELDS`` (RoPE; NaN where
    none was recorded or, for ``predicted_failure_length``, none was predicted).
    """
    out = []
    for r in records:
        c = r["config"]
        key = json.dumps(c, sort_keys=True) + f"/{r['seed']}"
        common = {**c, "seed": r["seed"], "run": hashlib.sha256(key.encode()).hexdigest()[:12],
                  "recipe": Config(**c).recipe(), "steps_trained": r["steps"], "chance": 1.0 / c["vocab"],
                  "seconds": r["batch_seconds"] / r["batch_members"] if "batch_seconds" in r else np.nan,
                  **{k: r.get("kernel", {}).get(k) for k in KERNEL_FIELDS}}
        for i, length in enumerate(r["lengths"]):
            row = {**common, "length": length, "multiple": length / c["train_length"], "accuracy": r["accuracy"][i],
                   "target_weight": r["target_weight"][i]}
            if "argmax_at_target" in r:
                row["argmax_at_target"] = r["argmax_at_target"][i]
            if "argmax_at_pinned" in r:
                row.update({f"argmax_at_pinned_layer{j + 1}": v for j, v in enumerate(r["argmax_at_pinned"][i])})
                row["predicts_pinned"] = r["predicts_pinned"][i]
            out.append(row)
    df = pd.DataFrame(out)
    return df.astype({k: float for k in KERNEL_FIELDS if k in df})


def stats(x: np.ndarray) -> dict:
    """mean, standard error (ddof=1; 0 for one value), min, max and n of (n,) values (NaN left out)."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return dict(mean=np.nan, sem=np.nan, min=np.nan, max=np.nan, n=0)
    return dict(mean=float(x.mean()), sem=float(standard_error(x)), min=float(x.min()), max=float(x.max()), n=len(x))


def summary(df: pd.DataFrame, by: str | Sequence[str], value: str = "accuracy") -> pd.DataFrame:
    """Mean, standard error over seeds, min, max and n of ``value`` per group of ``by`` (first-seen order),
    as a frame indexed by ``by``."""
    by = [by] if isinstance(by, str) else list(by)
    out = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), **stats(g.to_numpy())}
           for key, g in df.groupby(by, sort=False, dropna=False)[value]]
    return pd.DataFrame(out, columns=by + ["mean", "sem", "min", "max", "n"]).set_index(by)


def failure_length(lengths: Sequence[int], accuracy: Sequence[float], chance: float) -> int | None:
    """The first length whose accuracy has lost half of its margin over chance at the first length:
    accuracy < (accuracy[0] + chance) / 2. None when no evaluated length gets there (or nothing to lose)."""
    threshold = (accuracy[0] + chance) / 2
    if accuracy[0] <= chance:
        return None
    return next((int(L) for L, a in zip(lengths, accuracy) if a < threshold), None)


def _executor(workers: int, scheduler: str | None, stack: ExitStack) -> cf.Executor | None:
    """None (run here), a local process pool, or a Dask cluster's concurrent.futures executor."""
    if scheduler is not None:
        from distributed import Client  # optional dependency: the "sweep" extra

        return stack.enter_context(Client(scheduler)).get_executor()
    if workers > 0:
        pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        return pool
    return None


def run_sweep(grid: Grid, cache: Cache | None = None, workers: int = 0, scheduler: str | None = None,
              threads: int | None = None, progress: bool | None = None) -> Sweep:
    """Run every (config, seed) of ``grid`` not in ``cache`` (default: Cache()) and return all results.

    workers: 0 runs groups in this process; N > 0 on N local processes (one torch thread each unless
    ``threads``). scheduler: a Dask distributed address (e.g. "tcp://10.0.0.1:8786") instead.
    Each group's results are cached as soon as it finishes.
    """
    return run_grids([grid], cache, workers, scheduler, threads, progress)[0]


def run_grids(grids: Sequence[Grid], cache: Cache | None = None, workers: int = 0, scheduler: str | None = None,
              threads: int | None = None, progress: bool | None = None) -> list[Sweep]:
    """``run_sweep`` for many grids at once: the missing jobs of every grid (``plan``) go into one queue, longest
    first (``job_cost``), so that a pool's workers stay busy until the last job instead of waiting at the end of
    each grid. Returns one Sweep per grid (its ``seconds``: when the grid was complete)."""
    cache = cache if cache is not None else Cache()
    if workers < 0:
        raise ConfigError(f"workers={workers}: use 0 (this process) or a positive number of processes")
    if threads is None and workers > 0 and scheduler is None:
        threads = 1  # N single-threaded processes, not N processes fighting over every core
    tasks, missing = [], []
    waiting: dict[str, list[int]] = {}  # a missing run's key -> the grids that read it; a run two grids share (the
    left = [0] * len(grids)  # same key) is trained once, by the first; left: runs each grid still waits for
    for i, grid in enumerate(grids):
        todo = []
        for c, seeds in grid.groups():
            keys = {s: json.dumps(run_key(grid, c, s), sort_keys=True) for s in seeds}
            seeds = tuple(s for s in seeds if keys[s] not in waiting and cache.get(run_key(grid, c, s)) is None)
            new = {keys[s] for s in seeds}
            for k in keys.values():
                if k in waiting or k in new:
                    waiting.setdefault(k, []).append(i)
                    left[i] += 1
            if seeds:
                todo.append((c, seeds))
        missing.append(sum(len(s) for _, s in todo))
        for job in plan(todo):
            lengths = [grid.eval_lengths(c) for c, _ in job]
            tasks.append((job_cost(job, lengths, grid.samples), i,
                          (job, lengths, grid.samples, grid.eval_seed, grid.record, threads)))
    tasks.sort(key=lambda t: -t[0])  # stable: equal estimates keep grid order
    bar = tqdm(total=sum(missing), disable=(None if progress is None else not progress),
               desc=grids[0].name if len(grids) == 1 else "sweeps", unit="run")
    start = time.perf_counter()
    finished = [0.0] * len(grids)

    def store(i: int, job: Job, results: list[list[dict]]) -> None:
        for (c, seeds), per_seed in zip(job, results):
            for s, result in zip(seeds, per_seed):
                key = run_key(grids[i], c, s)
                cache.put(key, result)
                for j in waiting[json.dumps(key, sort_keys=True)]:
                    left[j] -= 1
                    if not left[j]:
                        finished[j] = time.perf_counter() - start
            bar.update(len(seeds))

    with ExitStack() as stack:
        stack.callback(bar.close)
        pool = _executor(workers, scheduler, stack)
        if pool is None:
            for _, i, args in tasks:
                store(i, args[0], run_job(*args))
        else:
            futures = {pool.submit(run_job, *args): (i, args[0]) for _, i, args in tasks}
            for future in cf.as_completed(futures):
                store(*futures[future], future.result())
    out = []
    for i, (grid, computed) in enumerate(zip(grids, missing)):
        records = []
        for c, seeds in grid.groups():
            for s in seeds:
                key = run_key(grid, c, s)
                records.append({"config": key["config"], "seed": s, "lengths": key["lengths"], **cache.get(key)})
        out.append(Sweep(grid, records, computed, finished[i]))
    return out


def _accuracy_table(sweep: Sweep) -> pd.DataFrame:
    """Accuracy summarized over seeds per config (its varied fields) and multiple; a missing value reads None."""
    table = summary(sweep.frame(), sweep.grid.varied() + ["multiple"]).reset_index()
    return table.astype(object).where(table.notna(), None)


def iter_table(sweep: Sweep) -> Iterator[str]:
    """Text table: one line per config (varied fields), accuracy mean ± sem over seeds per evaluation length."""
    by = sweep.grid.varied()
    table = _accuracy_table(sweep)
    multiples = list(dict.fromkeys(table.multiple))
    yield " ".join(f"{k:>16}" for k in by) + "".join(f"{f'{m:g}x':>16}" for m in multiples)
    for _, line in table.groupby(by, sort=False, dropna=False) if by else [(None, table)]:
        yield " ".join(f"{str(line[k].iloc[0]):>16}" for k in by) + "".join(
            f"{s['mean']:>9.3f} ± {s['sem']:.3f}" for _, s in line.iterrows())


def describe(sweep: Sweep) -> dict[str, Any]:
    """A JSON-ready summary: grid name, varied fields, runs computed vs cached, accuracy by config and length."""
    return {"name": sweep.grid.name, "varied": sweep.grid.varied(), "runs": len(sweep.records),
            "computed": sweep.computed, "seeds": list(sweep.grid.seeds),
            "accuracy": _accuracy_table(sweep).to_dict("records")}
