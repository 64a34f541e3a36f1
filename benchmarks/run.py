"""Speed benchmarks: ``python -m benchmarks.run`` prints a table and writes benchmarks/results.json.

The headline (issue 11) is the time to a model that *extrapolates*: RoPE on the default task, trained
with the book's small-step recipe (``lengthgen.recipes.SMALL_STEPS``) until its accuracy at 4x the
training length, measured on held-out samples every ``CHECK_EVERY`` steps, is at least 0.99 for every
seed. Every other row is a median of ``--repeats`` runs or a ratio taken in this same run, so a shared or
busy machine inflates all rows alike; the load average and the CPU seconds (which a busy machine moves
far less than wall seconds) are recorded next to the wall seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, TypeVar
from unittest import mock

import torch
from torch.utils.flop_counter import FlopCounterMode

from lengthgen import Config, evaluate, train
from lengthgen.model import Model, log_likelihood_gradient
from lengthgen.recipes import SMALL_STEPS
from lengthgen.tables import TableStep, fast_forward
from lengthgen.task import eval_tokens, targets

from .baseline import Baseline, train_baseline

train_module = importlib.import_module("lengthgen.train")  # the module (the package exports the function)
RESULTS = Path(__file__).with_name("results.json")
ROOT = Path(__file__).resolve().parent.parent
SEEDS = (0, 1, 2, 3, 4)
MULTIPLE, TARGET = 4, 0.99  # the headline: accuracy >= TARGET at MULTIPLE x the training length
CHECK_EVERY, CHECK_SAMPLES, CHECK_SEED = 100, 1000, 1  # checkpoints during training, on held-out samples
BASELINE_STEPS = 100  # steps timed per thread setting for seconds per step (the baseline is ~20x slower)
EVAL_LENGTH, EVAL_SAMPLES = 8192, 1000
MATMUL_SIZE = 2048
# Long float64 runs: full batch on a fixed training set, each rule at a step size it trains with
LONG_N, LONG_STEPS, LONG_TARGET_STEPS = 256, 1000, 100_000
LONG_RULES = {"gd": 0.1, "ngd": 0.05, "sign": 1e-3, "adam": 1e-3}
SWEEP_MODELS, SWEEP_STEPS = 1000, 50  # the sweep-throughput grid: 4 step sizes x 250 seeds, 50 steps each
R = TypeVar("R")


def timed(run: Callable[[], R], repeats: int) -> tuple[dict, R]:
    """Medians over ``repeats`` calls of ``run``: wall-clock and process CPU seconds; and the last result."""
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


def small_steps(c: Config) -> Config:
    """``c`` trained with the book's small-step recipe (read from lengthgen.recipes, never copied)."""
    return c.replace(**SMALL_STEPS)


class Extrapolates:
    """A checkpoint callback: accuracy at MULTIPLE x the training length on held-out samples; True (stop)
    once every member is at TARGET. Keeps the log and the seconds it spent evaluating."""

    def __init__(self, c: Config, samples: int = CHECK_SAMPLES):
        self.tokens = eval_tokens(c, MULTIPLE * c.train_length, samples, CHECK_SEED)  # never drawn by training
        self.y = targets(self.tokens, c.offset)
        self.log: list[tuple[int, list[float]]] = []
        self.seconds = 0.0

    def accuracy(self, model: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad(), train_module.cpu_threads(torch.device("cpu")):
            return (fast_forward(model, self.tokens).logits.argmax(-1) == self.y).float().mean(-1)  # as evaluate()

    def __call__(self, step: int, model: Model) -> bool:
        start = time.perf_counter()
        acc = self.accuracy(model)
        self.log.append((step, [round(float(a), 4) for a in acc]))
        self.seconds += time.perf_counter() - start
        return bool((acc >= TARGET).all())


def to_extrapolation(c: Config, seeds: list[int]) -> dict:
    """Train ``seeds`` as one ensemble with the small-step recipe until all are at TARGET at MULTIPLE x."""
    check = Extrapolates(c)
    w, cpu = time.perf_counter(), time.process_time()
    trained = train(c, seeds, progress=False, on_checkpoint=check, checkpoint_every=CHECK_EVERY)
    wall, cpu = time.perf_counter() - w, time.process_time() - cpu
    reached = bool(check.log) and min(check.log[-1][1]) >= TARGET
    return {"seeds": seeds, "wall": wall, "cpu": cpu, "steps": int(trained.steps.max()), "reached": reached,
            "accuracy_at_stop": check.log[-1][1] if check.log else None, "eval_seconds": check.seconds,
            "checkpoints": len(check.log), "budget": c.steps}


def headline(c: Config) -> dict:
    """The time to an extrapolating model: the five seeds as one batched ensemble (how the book trains
    seeds), and each seed alone; the full budget's per-step cost follows from the steps per second. One short
    ensemble first (``CHECK_EVERY`` steps and a checkpoint, untimed in the rows) compiles the step, or loads it from
    numba's cache, so that a bench in a new cache folder does not time the compiler in its headline."""
    warm_up = to_extrapolation(c.replace(steps=CHECK_EVERY), list(SEEDS))["wall"]
    batched = to_extrapolation(c, list(SEEDS))
    alone = {s: to_extrapolation(c, [s]) for s in SEEDS}
    per_model = {k: batched[k] / len(SEEDS) for k in ("wall", "cpu")}
    return {"warm_up_seconds": warm_up, "recipe": dict(SMALL_STEPS), "multiple": MULTIPLE, "target": TARGET,
            "check_every": CHECK_EVERY, "check_samples": CHECK_SAMPLES, "batched": batched,
            "per_model_batched": per_model, "alone": alone,
            "alone_median": {k: statistics.median(r[k] for r in alone.values()) for k in ("wall", "cpu", "steps")}}


def vs_baseline(c: Config, head: dict, default_threads: int) -> dict:
    """lengthgen against the plain nn.Module baseline trained with the same recipe (small steps: Adam at
    the same lr, same batch, same task). First seconds per step, alternated, at one thread and at the
    default thread count; then the baseline, at its faster setting, for as many steps as seed 0 alone
    needed to extrapolate, with its accuracy at MULTIPLE x then. The baseline does not extrapolate with
    this recipe in that time (its init and plain parameterisation differ), so its time to the target is
    not defined: the ratio is taken at the same number of steps."""
    few = c.replace(steps=BASELINE_STEPS, target_accuracy=None)
    per_step = {}
    for n in sorted({1, default_threads}):
        with threads(n):
            ours, base = paired(lambda: train(few, [0], progress=False),
                                lambda: train_baseline(few, seed=0, steps=few.steps), 2 if n == 1 else 1)
        per_step[n] = {"ours": {k: v / few.steps for k, v in ours.items()},
                       "baseline": {k: v / few.steps for k, v in base.items()}}
    fastest = min(per_step, key=lambda n: per_step[n]["baseline"]["wall"])
    steps = head["alone"][0]["steps"]
    check = Extrapolates(c)
    with threads(fastest):
        t, model = timed(lambda: train_baseline(c.replace(steps=steps), seed=0, steps=steps), 1)
        with torch.no_grad():
            accuracy = float((model(check.tokens).argmax(-1) == check.y).float().mean())
    return {"steps_timed": few.steps, "per_step_by_threads": per_step,
            "per_step_ratio_1_thread": ratio(per_step[1]["baseline"], per_step[1]["ours"]),
            "baseline_threads": fastest,
            "baseline_same_steps": {"steps": steps, **t, "accuracy_at_multiple": accuracy},
            "ratio_vs_seed0_alone": ratio(t, head["alone"][0]),
            "ratio_vs_per_model_batched": ratio(t, head["per_model_batched"])}


def one_model(c: Config, repeats: int, vs: dict) -> dict:
    """One RoPE model (seed 0) trained with the recipe of ``c`` (the small-step recipe: every step; the first-fit
    recipe: up to its early stop, in stretches that end where the stop may come), and against the baseline: its
    seconds per step at its faster thread setting (from ``vs_baseline``, measured in this run) times the steps this
    model took."""
    t, trained = timed(lambda: train(c, [0], progress=False), repeats)
    steps = int(trained.steps[0])
    base = vs["per_step_by_threads"][vs["baseline_threads"]]["baseline"]
    baseline = {k: base[k] * steps for k in ("wall", "cpu")}
    return {"steps": steps, "recipe": c.recipe(), **t, "baseline_estimate": baseline, "ratio": ratio(baseline, t)}


VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma")  # listed by processor() with every avx512* flag
AS_AVX2 = "LENGTHGEN_BENCH_AS_AVX2"  # set by --as-avx2 in the process it starts
NOT_AVX2 = ("avx512", "amx", "avx10", "avxvnni")  # LLVM's names of the extensions an AVX2 machine lacks


def processor() -> dict:
    """The processor this runs on, from /proc/cpuinfo where there is one: vendor, model name, family/model, and the
    vector extensions the compiled step can use (SSE4.2 to AVX-512, FMA), and whether this process runs the code an
    AVX2 machine would (``as_avx2``: ``--as-avx2``). Printed with every table: the compiled step's speed depends on
    them (README, "Speed": AVX2 against AVX-512)."""
    out = {"machine": platform.machine(), "cores": os.cpu_count(), "vendor": "", "model": platform.processor(),
           "family": "", "vector": [], "as_avx2": bool(os.environ.get(AS_AVX2))}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    first = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    first = {k.strip(): v.strip() for k, v in first.items()}
    flags = first.get("flags", "").split()
    out.update(vendor=first.get("vendor_id", ""), model=first.get("model name", out["model"]),
               family=f"family {first.get('cpu family', '?')} model {first.get('model', '?')}",
               vector=[f for f in flags if f in VECTOR_FLAGS or f.startswith("avx512")])
    return out


def processor_line(p: dict) -> str:
    code = "; code compiled for AVX2 without AVX-512 (--as-avx2)" if p.get("as_avx2") else ""
    return (f"processor: {p['vendor']} {p['model']} ({p['family']}), {p['cores']} cores; vector extensions: "
            f"{' '.join(p['vector']) or 'none listed'}{code}")


def as_avx2_env() -> dict[str, str]:
    """The environment under which the step's code is what a machine with AVX2 and FMA but no AVX-512 runs, on this
    machine: numba compiles for Haswell with this CPU's features less ``NOT_AVX2`` (``NUMBA_CPU_NAME``,
    ``NUMBA_CPU_FEATURES``; numba caches code per CPU name and features, so this code is cached beside the native
    code); OpenBLAS, whose products the step calls through numpy's and scipy's copies, uses its Haswell kernels (the
    ones it also picks on an AMD Zen); MKL, which torch's baseline may use, AVX2 at most. The microarchitecture
    stays this machine's: on an Intel Xeon with AVX-512 this measured the AVX2 code 1.26x slower than the native
    code, all of it in OpenBLAS's kernels (benchmarks/README.md), while the same code on the AMD EPYC it stands for
    is slower again."""
    import llvmlite.binding as ll

    features = ",".join(("+" if on and not name.startswith(NOT_AVX2) else "-") + name
                        for name, on in ll.get_host_cpu_features().items())
    return {AS_AVX2: "1", "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features,
            "OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def restart_as_avx2(module: str) -> None:
    """Run ``python -m module`` with this process's arguments again, under ``as_avx2_env`` (numba and OpenBLAS read
    their settings as they load, so the process starts again); nothing where it already runs so."""
    if not os.environ.get(AS_AVX2):
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], {**os.environ, **as_avx2_env()})


@contextlib.contextmanager
def busy_beside() -> Iterator[None]:
    """A second process that keeps one core busy (a pure-Python loop) for the block's duration."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started and running before the clock
        yield
    finally:
        spin.kill()
        spin.wait()


def member_step_cpu(c: Config, members: int = len(SEEDS), steps: int = 1000, pairs: int = 5) -> dict:
    """CPU seconds per member-step: one model against ``members`` seeds as one ensemble, each trained ``steps`` steps of
    ``c`` with a checkpoint every CHECK_EVERY steps (as the headline's ensembles; the members on ``run_threads()``
    threads), alternated ``pairs`` times, medians; on idle cores, then beside a process that keeps one core busy. An
    ensemble should never cost more CPU per member-step than a lone model (threads that spin while they wait would).
    Five pairs, not two: one run in twenty that the host slowed by a third moved the median of two pairs as far as
    1.43x on an AMD EPYC Zen 4 (benchmarks/README.md)."""
    cfg = c.replace(steps=steps, target_accuracy=None)
    checkpoint = {"on_checkpoint": lambda step, model: False, "checkpoint_every": CHECK_EVERY}
    lone = lambda: train(cfg, [0], progress=False, **checkpoint)  # noqa: E731
    ensemble = lambda: train(cfg, list(range(members)), progress=False, **checkpoint)  # noqa: E731
    out: dict = {"members": members, "steps": steps, "pairs": pairs, "threads": train_module.run_threads()}
    train(cfg.replace(steps=CHECK_EVERY), list(range(members)), progress=False)  # first calls load the compiled code
    for label in ("idle", "busy"):
        with busy_beside() if label == "busy" else contextlib.nullcontext():
            one, many = paired(lone, ensemble, pairs)
        per = {"lone": one["cpu"] / steps, "ensemble": many["cpu"] / (members * steps)}
        out[label] = {**per, "ratio": per["ensemble"] / per["lone"], "wall_lone": one["wall"], "wall_ensemble": many["wall"]}
    return out


def ensemble_config(batch: int = 1024, steps: int = 100) -> Config:
    """An ensemble's config as the sweeps train them: RoPE, batch ``batch``, gradient descent at lr 0.3, fixed steps."""
    return Config(optimizer="gd", lr=0.3, batch=batch, steps=steps, target_accuracy=None)


def ensemble_step(repeats: int, members: int = 10, batch: int = 1024, steps: int = 100) -> dict:
    """Seconds per step of ``members`` members of ``ensemble_config``."""
    c = ensemble_config(batch, steps)
    t = timed(lambda: train(c, range(members), progress=False), repeats)[0]
    return {"members": members, "batch": batch, "steps": steps, **{k: v / steps for k, v in t.items()}}


def playground_time(c: Config, repeats: int, seeds: int = 2) -> dict:
    """A slider move in lengthgen.widgets.Playground at ``c``: retrain ``seeds`` seeds, evaluate, redraw (output
    captured). The offset slider moves between K + 1 and K (one untimed move first pays first-call costs), with
    the seeds' members on ``train.run_threads()`` threads and, alternated with it, on one ($LENGTHGEN_THREADS=1)."""
    from lengthgen.widgets import Playground

    pg = Playground(c, seeds=seeds)
    moves = iter(itertools.cycle([c.offset + 1, c.offset]))

    def drag() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            pg.offset.value = next(moves)

    def one_thread() -> None:
        with mock.patch.dict(os.environ, {train_module.THREADS_ENV: "1"}):
            drag()

    drag()
    threaded, single = paired(drag, one_thread, repeats)
    return {"what": "Playground slider callback (train, evaluate, figure via lengthgen.plots)", "seeds": seeds,
            "steps": c.steps, "threads": train_module.run_threads(), **threaded, "one_thread": single}


def time_to_99(c: Config, repeats: int) -> dict:
    """One RoPE model per seed with the first-fit recipe, until 99% training accuracy."""
    c99 = c.replace(target_accuracy=0.99)
    per_seed = {}
    for seed in SEEDS:
        t, trained = timed(lambda: train(c99, [seed], progress=False), repeats)
        per_seed[seed] = {**t, "steps": int(trained.steps[0]), "reached": bool(trained.steps[0] < c99.steps)}
    return {"per_seed": per_seed, **{k: statistics.median(r[k] for r in per_seed.values()) for k in ("wall", "cpu")}}


def batched_vs_in_a_row(c: Config, repeats: int, seeds: int = 16) -> dict:
    """``seeds`` seeds as one batched ensemble vs one after the other: fixed steps, and with early stop
    (stopped members leave the batch)."""
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


def flops(c: Config, repeats: int) -> dict:
    """Matmul FLOP/s of one training step (ours: TableStep; the baseline: autograd) against a large matmul."""
    tokens = torch.randint(c.vocab, (1, c.batch, c.train_length), generator=torch.Generator().manual_seed(0))
    y = targets(tokens, c.offset)
    model, base = Model(c, [0]), Baseline(c)
    step = TableStep(c, model.encoding, c.train_length)
    buf = step.pack(model)

    def ours_step() -> None:  # as training runs it (on the CPU: one compiled call)
        step(buf, tokens, y[..., None])

    def ours_counted() -> None:  # the same products as torch operations, which FlopCounterMode sees
        logits, saved = step.forward(buf, tokens)
        step.backward(saved, log_likelihood_gradient(logits, y[..., None])[1])

    def base_step() -> None:
        torch.nn.functional.cross_entropy(base(tokens[0]), y[0]).backward()

    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    out: dict = {"counted": "matmul FLOPs only (FlopCounterMode; ours on its torch path), forward + backward of "
                            "one training batch; seconds as training runs it"}
    with threads(1):
        for name, run, count in (("ours", ours_step, ours_counted), ("baseline", base_step, base_step)):
            with torch.inference_mode(name == "ours"), FlopCounterMode(display=False) as counter:
                count()
            per_step = counter.get_total_flops()
            run()  # warm (a first compiled call loads the compiled code)
            seconds = timed(lambda: [run() for _ in range(20)], repeats)[0]["wall"] / 20
            out[name] = {"flops_per_step": per_step, "seconds_per_step": seconds, "flop_per_s": per_step / seconds}
        out["matmul_1_thread_flop_per_s"] = 2 * MATMUL_SIZE**3 / timed(lambda: a @ a, repeats)[0]["wall"]
    return out


def long_config(rule: str) -> Config:
    """A long run's config: float64, a fixed set of LONG_N sequences trained full batch with update rule ``rule`` at
    its step size of LONG_RULES, LONG_STEPS steps, no early stop."""
    return Config(train_set=LONG_N, batch=LONG_N, dtype="float64", optimizer=rule, lr=LONG_RULES[rule],
                  steps=LONG_STEPS, target_accuracy=None)


def long_runs(repeats: int) -> dict:
    """Full-batch float64 training (a fixed set of LONG_N sequences, batch = LONG_N) of the default model
    with each update rule the implicit-bias work uses, one thread: steps per second over LONG_STEPS steps
    (median of ``repeats``) and the seconds that makes for LONG_TARGET_STEPS steps."""
    out: dict = {"train_set": LONG_N, "steps_timed": LONG_STEPS, "for_steps": LONG_TARGET_STEPS, "rules": {}}
    with threads(1):
        for rule, lr in LONG_RULES.items():
            c = long_config(rule)
            t = timed(lambda: train(c, [0], progress=False), repeats)[0]
            out["rules"][rule] = {"lr": lr, **t, "steps_per_s": {k: LONG_STEPS / v for k, v in t.items()},
                                  "seconds_for_target": {k: v * LONG_TARGET_STEPS / LONG_STEPS for k, v in t.items()}}
    return out


def sweep_grid() -> dict:
    """The 1000-model grid: RoPE on the default task, 4 step sizes x 250 seeds, SWEEP_STEPS steps each,
    evaluated at 1x and 4x on 200 held-out samples."""
    rates = [1e-3, 3e-3, 1e-2, 3e-2]
    return {"name": "bench-sweep", "base": {"encoding": "rope", "steps": SWEEP_STEPS, "target_accuracy": None},
            "product": {"lr": rates}, "seeds": SWEEP_MODELS // len(rates),
            "eval": {"multiples": [1, MULTIPLE], "samples": 200, "seed": 0}}


def sweep_throughput() -> dict:
    """Models per second for the grid through lengthgen.sweep (batched ensembles per shape, cache in a
    temporary folder): in this process, on 2 local worker processes, and on a Dask LocalCluster with 2
    single-threaded workers (started and warmed up before the clock starts)."""
    from lengthgen.cache import Cache
    from lengthgen.sweep import MAX_MEMBERS, grid_from_dict, run_sweep

    grid = grid_from_dict(sweep_grid())
    models = len(grid.configs) * len(grid.seeds)
    out: dict = {"grid": sweep_grid(), "models": models, "max_members": MAX_MEMBERS}

    def run(label: str, **kw: object) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            w = time.perf_counter()
            sweep = run_sweep(grid, cache=Cache(tmp), progress=False, **kw)
            wall = time.perf_counter() - w
        assert sweep.computed == models
        out[label] = {"wall": wall, "models_per_s": models / wall}

    with threads(1):
        run("in_process")
    run("local_2_workers", workers=2)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        out["dask_2_workers"] = None
        return out
    with contextlib.redirect_stderr(io.StringIO()), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.run(lambda: importlib.import_module("lengthgen.sweep") and None)  # imports before the clock
        run("dask_2_workers", scheduler=cluster.scheduler_address, threads=1)
    return out


FIRST_CALL = "from lengthgen import Config, train; train(Config(steps=20, target_accuracy=None), [0], progress=False)"


def first_call() -> dict:
    """A new process's first training call (the default task, 20 Adam steps) from an empty compile cache, import
    included: what a reader's first training cell waits for after the install. One run, in a fresh
    ``$NUMBA_CACHE_DIR`` (the helper of ``engine.first_compile`` included)."""
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", FIRST_CALL], env={**os.environ, "NUMBA_CACHE_DIR": cache}, check=True)
        return {"wall": time.perf_counter() - start, "what": FIRST_CALL}


def full_book() -> dict | None:
    """The last full-book build's timings (``python -m lengthgen.book`` writes them), if present: the wall seconds
    of its sweep step and chapters together (``seconds``), each step's own, and whether every chapter ran. A
    resumed build times only what it redid, so the row is the book's time only for a build from an empty cache."""
    path = ROOT / "_build" / "timings-full.json"
    if not path.exists():
        return None
    t = json.loads(path.read_text())  # lengthgen.book.build's report
    book = len(list((ROOT / "book").glob("*.ipynb")))  # every chapter is one notebook
    return {"path": str(path.relative_to(ROOT)), "chapters": len(t["chapters"]), "book_chapters": book,
            "complete": bool(t.get("complete")) and len(t["chapters"]) >= book, "seconds": t["seconds"],
            "sweeps": (t.get("sweeps") or {}).get("seconds", 0.0), "chapters_wall": t.get("chapters_wall"),
            "workers": (t.get("sweeps") or {}).get("workers"),
            "written": datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="minutes")}


def rows(r: dict) -> list[tuple[str, str, bool, str]]:
    """(measure, target, met, result) for the table; targets are judged on wall-clock medians."""
    h, vs, pg, pgs = r["headline"], r["vs_baseline"], r["playground"], r["playground_small_steps"]
    b, alone, sm, ens = h["batched"], h["alone"], r["small_steps_model"], r["ensemble_step"]
    ff = r["first_fit_model"]
    out = [
        (f"RoPE, one model, the small-step recipe ({sm['recipe']})", "<= 0.5 s",
         sm["wall"] <= 0.5,
         f"{sm['wall']:.3f} s (cpu {sm['cpu']:.3f}); baseline, same recipe, {sm['baseline_estimate']['wall']:.0f} s "
         f"(its s/step x steps): {sm['ratio']['wall']:.0f}x"),
        (f"RoPE, one model, the first-fit recipe ({ff['recipe']}): {ff['steps']} steps", "report", True,
         f"{ff['wall'] * 1e3:.0f} ms (cpu {ff['cpu'] * 1e3:.0f}), {ff['cpu'] / ff['steps'] * 1e6:.0f} us of CPU a step; "
         f"baseline, same steps, {ff['baseline_estimate']['wall']:.1f} s: {ff['ratio']['wall']:.0f}x"),
        (f"  ensemble step: {ens['members']} members, batch {ens['batch']}, gd", "report", True,
         f"{ens['wall'] * 1e3:.2f} ms/step (cpu {ens['cpu'] * 1e3:.2f})"),
    ]
    ms = r["member_step_cpu"]
    for label in ("idle", "busy"):
        m = ms[label]
        out.append((f"  CPU per member-step, {ms['members']} seeds as one ensemble vs one model, "
                    f"{'idle cores' if label == 'idle' else 'one core busy beside'}", "<= 1.2x", m["ratio"] <= 1.2,
                    f"{m['ratio']:.2f}x ({m['ensemble'] * 1e6:.0f} vs {m['lone'] * 1e6:.0f} us; {ms['steps']} steps of "
                    f"the small-step recipe, checkpoint every {CHECK_EVERY}, members on {ms['threads']} threads; "
                    f"medians of {ms['pairs']} alternated pairs)"))
    out += [
        (f"RoPE to >= {TARGET} at {MULTIPLE}x, seeds {','.join(map(str, SEEDS))} as one ensemble, per model",
         "<= 0.5 s", h["per_model_batched"]["wall"] <= 0.5 and b["reached"],
         f"{h['per_model_batched']['wall']:.2f} s (cpu {h['per_model_batched']['cpu']:.2f}); all {len(SEEDS)} at "
         f"{min(b['accuracy_at_stop']):.3f}+ after {b['steps']} of {b['budget']} steps; {b['wall']:.1f} s in all, "
         f"{b['eval_seconds']:.2f} s of it checkpoints"),
        ("  the same, each seed alone, median over seeds", "(<= 0.5 s)",
         h["alone_median"]["wall"] <= 0.5 and all(x["reached"] for x in alone.values()),
         f"{h['alone_median']['wall']:.2f} s (cpu {h['alone_median']['cpu']:.2f}); steps "
         f"{[x['steps'] for x in alone.values()]}; reached {sum(x['reached'] for x in alone.values())}/{len(alone)}"),
        ("  plain nn.Module baseline, same recipe, same steps as seed 0 alone", ">= 10x",
         vs["ratio_vs_seed0_alone"]["wall"] >= 10,
         f"{vs['ratio_vs_seed0_alone']['wall']:.1f}x vs seed 0 alone, {vs['ratio_vs_per_model_batched']['wall']:.1f}x "
         f"vs per model batched (baseline {vs['baseline_same_steps']['wall']:.1f} s for {vs['baseline_same_steps']['steps']} "
         f"steps at {vs['baseline_threads']} thr; its {MULTIPLE}x accuracy then "
         f"{vs['baseline_same_steps']['accuracy_at_multiple']:.3f})"),
        ("  steps/s vs baseline, same recipe, 1 thread each", "report", True,
         f"{vs['per_step_ratio_1_thread']['wall']:.1f}x wall, {vs['per_step_ratio_1_thread']['cpu']:.1f}x cpu "
         + "; ms/step " + ", ".join(f"{n} thr: ours {v['ours']['wall'] * 1e3:.2f} baseline {v['baseline']['wall'] * 1e3:.1f}"
                                    for n, v in vs["per_step_by_threads"].items())),
        (f"playground retrain, small steps ({pgs['steps']} steps, {pgs['seeds']} seeds, evaluate, figure)", "<= 1 s",
         pgs["wall"] <= 1, f"{pgs['wall']:.2f} s (cpu {pgs['cpu']:.2f}), members on {pgs['threads']} threads; on one "
         f"thread {pgs['one_thread']['wall']:.2f} s (cpu {pgs['one_thread']['cpu']:.2f})"),
        ("playground retrain, first fit (Config())", "<= 1 s", pg["wall"] <= 1,
         f"{pg['wall']:.3f} s (cpu {pg['cpu']:.3f}; {pg['seeds']} seeds); on one thread {pg['one_thread']['wall']:.3f} s"),
    ]
    lr_ = r["long_runs"]
    for rule, v in lr_["rules"].items():
        out.append((f"float64 full batch (N={lr_['train_set']}), {rule}, {lr_['for_steps']:.0e} steps", "<= 60 s",
                    v["seconds_for_target"]["wall"] <= 60,
                    f"{v['seconds_for_target']['wall']:.0f} s (cpu {v['seconds_for_target']['cpu']:.0f}); "
                    f"{v['steps_per_s']['wall']:.0f} steps/s wall, {v['steps_per_s']['cpu']:.0f} cpu "
                    f"(timed on {lr_['steps_timed']} steps)"))
    sw = r["sweep"]
    for label in ("in_process", "local_2_workers", "dask_2_workers"):
        if sw.get(label):
            out.append((f"sweep: {sw['models']} models x {SWEEP_STEPS} steps, {label.replace('_', ' ')}", "report", True,
                        f"{sw[label]['models_per_s']:.1f} models/s ({sw[label]['wall']:.1f} s)"))
    to99, bat, ev, fl = r["to_99"], r["batched"], r["eval"], r["flops"]
    fixed, early = bat["fixed_steps"], bat["early_stop"]
    reached = [v["wall"] for v in to99["per_seed"].values() if v["reached"]]
    default = r["machine"]["default_threads"]
    out += [
        ("RoPE to 99% training accuracy, first fit, median over seeds", "<= 0.5 s", to99["wall"] <= 0.5,
         f"{to99['wall']:.3f} s (cpu {to99['cpu']:.3f}); steps {[v['steps'] for v in to99['per_seed'].values()]}; "
         f"reached {len(reached)}/{len(to99['per_seed'])}"),
        (f"16 seeds batched vs in a row, {fixed['steps']} fixed steps", ">= 3x", fixed["ratio"]["wall"] >= 3,
         f"{fixed['ratio']['wall']:.1f}x ({fixed['batched']['wall']:.2f} vs {fixed['in_a_row']['wall']:.2f} s; "
         f"cpu {fixed['ratio']['cpu']:.1f}x)"),
        ("16 seeds batched vs in a row, early stop", "(>= 3x)", early["ratio"]["wall"] >= 3,
         f"{early['ratio']['wall']:.1f}x ({early['batched']['wall']:.2f} vs {early['in_a_row']['wall']:.2f} s; "
         f"cpu {early['ratio']['cpu']:.1f}x)"),
        (f"evaluate at L={ev['length']}, {ev['samples']} samples", "< 1 s", ev["by_threads"][default]["wall"] < 1,
         " / ".join(f"{t['wall']:.3f} s ({n} thr)" for n, t in ev["by_threads"].items())),
        ("training step FLOP/s (matmuls only)", "report", True,
         f"ours {fl['ours']['flop_per_s'] / 1e9:.2f} GFLOP/s ({fl['ours']['seconds_per_step'] * 1e3:.2f} ms/step), "
         f"baseline {fl['baseline']['flop_per_s'] / 1e9:.2f} ({fl['baseline']['seconds_per_step'] * 1e3:.2f} ms); "
         f"{MATMUL_SIZE}^2 matmul {fl['matmul_1_thread_flop_per_s'] / 1e9:.1f} (1 thr)"),
    ]
    out.append(("first training call of a new process, empty compile cache (import included; one run)", "<= 15 s",
                r["first_call"]["wall"] <= 15, f"{r['first_call']['wall']:.1f} s"))
    book = r["full_book"]
    out.append(("full book (python -m lengthgen.book, full parameters; read, not built)", "< 30 min",
                book is not None and book["complete"] and book["seconds"] < 1800,
                "no _build/timings-full.json (not built)" if book is None else
                f"{book['seconds']:.0f} s wall (sweep step {book['sweeps']:.0f} s, chapters {book['chapters_wall']} s side "
                f"by side) over {book['chapters']} of {book['book_chapters']} chapters"
                f"{'' if book['complete'] else ' (a partial build)'}; file written {book['written']}"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per timing (the median is reported)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    p.add_argument("--no-sweep", action="store_true", help="leave out the sweep throughput (about a minute)")
    p.add_argument("--as-avx2", action="store_true",
                   help="run the compiled step and the products as an AVX2 machine without AVX-512 would (as_avx2_env)")
    a = p.parse_args()
    if a.repeats < 1:
        raise SystemExit(f"--repeats {a.repeats}: use at least 1")
    if a.as_avx2:
        restart_as_avx2("benchmarks.run")
    c = Config(encoding="rope")
    small = small_steps(c)
    default_threads = torch.get_num_threads()
    r: dict = {
        "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "processor": processor(),
                    "default_threads": default_threads, "load_average_at_start": os.getloadavg()},
        "config": c.to_dict(),
        "repeats": a.repeats,
    }
    steps = [("headline", lambda: headline(small)),
             ("vs_baseline", lambda: vs_baseline(small, r["headline"], default_threads)),
             ("small_steps_model", lambda: one_model(small, a.repeats, r["vs_baseline"])),
             ("first_fit_model", lambda: one_model(c, a.repeats, r["vs_baseline"])),
             ("ensemble_step", lambda: ensemble_step(a.repeats)),
             ("member_step_cpu", lambda: member_step_cpu(small)),
             ("playground_small_steps", lambda: playground_time(small, a.repeats)),
             ("playground", lambda: playground_time(c, a.repeats)),
             ("long_runs", lambda: long_runs(a.repeats)),
             ("sweep", (lambda: {}) if a.no_sweep else sweep_throughput),
             ("to_99", lambda: time_to_99(c, a.repeats)),
             ("batched", lambda: batched_vs_in_a_row(c, a.repeats)),
             ("eval", lambda: evaluation_time(c, a.repeats, default_threads)),
             ("flops", lambda: flops(c, a.repeats)),
             ("first_call", first_call),
             ("full_book", full_book)]
    for key, measure in steps:
        start = time.perf_counter()
        r[key] = measure()
        print(f"  {key}: {time.perf_counter() - start:.0f} s", flush=True)
    r["machine"]["load_average_at_end"] = os.getloadavg()
    table = rows(r)
    r["table"] = [dict(measure=m, target=t, met=bool(ok), result=res) for m, t, ok, res in table]
    width = max(len(m) for m, *_ in table)
    print(f"\n{processor_line(r['machine']['processor'])}")
    print(f"{'measure':<{width}}  {'target':<10}  met  result (wall-clock medians)")
    for m, t, ok, res in table:
        print(f"{m:<{width}}  {t:<10}  {'yes' if ok else 'NO ':<3}  {res}")
    print(f"\n{r['date']}; load average {r['machine']['load_average_at_start']} -> {r['machine']['load_average_at_end']} "
          f"on {r['machine']['cpus']} CPUs; torch {torch.__version__}")
    a.out.write_text(json.dumps(r, indent=1, default=float))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
