"""The book build: fill the sweep cache, execute the chapters, build the HTML; every step resumable.

``python -m lengthgen.book [--quick]`` (``make book``, ``make book-quick``):

1. **Sweeps**: every grid file in ``sweeps/`` (what chapters read with ``load_grid``; a new file is picked up as
   it is) runs into the results cache on the machine's cores, with a progress bar; the quick grids in quick mode.
   The missing jobs of all grids form one queue, longest first (``sweep.run_grids``), so no core waits at the end
   of a grid. Each finished run is cached, so an interrupted step resumes. ``--sweeps-only`` (``make sweeps``) stops here.
2. **Chapters**: each chapter of ``_toc.yml`` is executed by papermill into ``_build/book`` (``QUICK=True`` in
   quick mode), reading the cache and computing only what is missing, with no cell time limit (``--cell-timeout``
   sets one); as many chapters at once as there are workers (``--workers``), the longest first. A chapter whose staged copy came from the same source, parameters, package and grid files
   (``chapter_key``) is not executed again. papermill writes into ``_build/executing`` and the finished copy is
   moved into ``_build/book`` atomically: a killed build leaves no half-executed chapter behind.
3. **Budgets**: a chapter over its budget (``BUDGETS``, quick and full seconds) is reported by name with its
   time, its slowest cell and the command that fills what was missing (or, when nothing was, that the time is its
   own). Over budget warns, in both modes, and the build goes on: shared runners' timings vary twofold, and a site
   that does not deploy helps no reader. ``--strict`` fails instead (exit status 3, after the build). No test
   asserts a time (beside another busy process the quick chapters took 784 s against 600); CI's guard on time is
   its job's limit. The sweep step's and each chapter's seconds go to ``_build/timings-quick.json`` or ``_build/timings-full.json``.
4. **HTML**: plotly.js (from the plotly package), MathJax 3, require.js and the ipywidgets HTML manager (``npm
   pack``, cached in ``_build/npm``) are vendored into ``_build/book/_vendor``, then ``jupyter-book build -W
   --keep-going`` writes ``_build/html``; it refuses chapters executed with other parameters or sources.

The staged root mirrors the repository, so page paths and links are those of the sources. Paths come from a
``BookFolders`` (this repository by default), so a small book elsewhere builds the same way (tests/test_book_build.py).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import nbformat
import papermill
import yaml

from .cache import PACKAGE, Cache
from .config import ConfigError, usable_cores
from .plots import BOOK_BUILD_ENV
from .site import VENDOR, vendor
from .sweep import SWEEPS, load_grid, run_grids, run_key
from .train import THREADS_ENV

if TYPE_CHECKING:
    from .sweep import Grid

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
ROOT_FILES = ("_config.yml", "_toc.yml", "references.bib")
BUILD_META = "lengthgen_build"  # notebook metadata of an executed copy: its chapter_key, mode and seconds

# Seconds of papermill execution per chapter, (quick, full), with the sweep cache filled by step 1: targets, set
# at two to three times the times measured on this project's 2-core machine under load (README, "Budgets,
# measured"); chapters 8 and 9 without their sweeps (full times with a filled cache not yet measured), and
# chapter 10 a placeholder until it is measured.
BUDGETS: dict[str, tuple[float, float]] = {
    "00_intro": (60, 90),
    "01_the_gap": (30, 60),
    "02_rope_equivariance": (40, 180),
    "03_ape_memorizes": (40, 150),
    "04_carrier_kernel": (60, 180),
    "05_dilution_law": (60, 540),
    "06_robustness": (60, 360),
    "07_playground": (30, 480),
    "08_when_rope_extrapolates": (60, 120),
    "09_step_size": (150, 600),
    "09b_mechanism_in_both_regimes": (60, 300),
    "10_what_training_selects": (120, 900),
    "10b_prediction_before_training": (60, 300),
    "findings": (45, 240),
}
DEFAULT_BUDGET = (60.0, 300.0)  # a chapter missing from BUDGETS (reported: add it there)


@dataclass(frozen=True)
class BookFolders:
    """Where a build reads (book root, grid files) and writes (build folder); the defaults are this repository."""

    root: Path = ROOT
    build: Path = BUILD
    sweeps: Path = SWEEPS

    @property
    def stage(self) -> Path:
        return self.build / "book"

    @property
    def html(self) -> Path:
        return self.build / "html"

    @property
    def executing(self) -> Path:
        """Where papermill writes a chapter while it runs (a failed chapter's copy stays here)."""
        return self.build / "executing"

    def timings(self, quick: bool) -> Path:
        return self.build / f"timings-{'quick' if quick else 'full'}.json"


DEFAULT = BookFolders()
STAGE, HTML = DEFAULT.stage, DEFAULT.html  # this repository's staged book and site


class BuildError(RuntimeError):
    """A build step failed; the message says which and what to run."""


def toc_files(root: Path = ROOT) -> list[str]:
    """Every document of ``root/_toc.yml`` in reading order, as paths without suffix (e.g. 'book/01_the_gap')."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []) + entry.get("chapters", []))  # a part holds chapters

    walk(toc.get("parts", []) + toc.get("chapters", []))
    return files


def chapters(layout: BookFolders = DEFAULT) -> list[Path]:
    """The notebooks of the toc, in reading order (source paths)."""
    notebooks = [layout.root / f"{name}.ipynb" for name in toc_files(layout.root)]
    return [p for p in notebooks if p.exists()]


def parameters(quick: bool) -> dict[str, Any]:
    """papermill's parameters: the chapters' defaults give the full book."""
    return {"QUICK": True} if quick else {}


def budget(name: str, quick: bool, budgets: dict[str, tuple[float, float]] = BUDGETS) -> float:
    """The chapter's budget in seconds (``DEFAULT_BUDGET`` when the table lacks it)."""
    return float(budgets.get(name, DEFAULT_BUDGET)[0 if quick else 1])


def grid_files(layout: BookFolders = DEFAULT) -> list[Path]:
    """The grid files of the sweep step, by name."""
    return sorted(layout.sweeps.glob("*.json"))


# -- step 1: sweeps ------------------------------------------------------------------------------------------


def missing_runs(grid: Grid, cache: Cache) -> int:
    """How many (config, seed) runs of ``grid`` ``cache`` lacks (a damaged entry counts as lacking)."""
    return sum(cache.get(run_key(grid, c, s)) is None for c, seeds in grid.groups() for s in seeds)


def default_workers() -> int:
    """The cores this process may use."""
    return usable_cores()


def fill_sweeps(layout: BookFolders = DEFAULT, quick: bool = False, workers: int | None = None) -> dict[str, Any]:
    """Step 1: run every grid file into the results cache, all grids' missing jobs in one queue, longest first
    (``sweep.run_grids``). Returns the step's seconds and per grid: runs, runs computed, and the seconds after which
    the grid was complete."""
    start = time.perf_counter()
    workers = default_workers() if workers is None else workers
    cache = Cache()
    grids = {path.stem: load_grid(path, quick=quick) for path in grid_files(layout)}  # GridError names the file
    missing = {name: missing_runs(grid, cache) for name, grid in grids.items()}
    total = sum(len(g.configs) * len(g.seeds) for g in grids.values())
    print(f"sweeps: {len(grids)} grids in {layout.sweeps} ({'quick' if quick else 'full'}), {sum(missing.values())} "
          f"of {total} runs missing from {cache.folder} (a run two grids share counts in each); {workers} workers",
          flush=True)
    todo = [name for name in grids if missing[name]]
    sweeps = dict(zip(todo, run_grids([grids[name] for name in todo], cache, workers=workers, progress=True)))
    out = {name: {"runs": len(grid.configs) * len(grid.seeds),
                  "computed": sweeps[name].computed if name in sweeps else 0,
                  "seconds": round(sweeps[name].seconds, 1) if name in sweeps else 0.0} for name, grid in grids.items()}
    seconds = round(time.perf_counter() - start, 1)
    print(f"sweeps: {sum(g['computed'] for g in out.values())} runs computed in {seconds} s; each grid complete after "
          + ", ".join(f"{name} {g['seconds']} s" for name, g in out.items()), flush=True)
    return {"seconds": seconds, "workers": workers, "grids": out}


def grids_read_by(notebook: Path, layout: BookFolders = DEFAULT) -> list[str]:
    """The grid files a chapter reads: names of ``sweeps/*.json`` given as strings in its statements that call
    ``load_grid`` (e.g. ``{n: load_grid(n) for n in ("budget", "depth")}``)."""
    names: set[str] = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code" or "load_grid" not in cell.source:
            continue
        try:
            statements = ast.parse(cell.source).body
        except SyntaxError:  # IPython syntax (magics): not a cell that loads grids the plain way
            continue
        for st in statements:
            nodes = list(ast.walk(st))
            if any(getattr(n, "id", getattr(n, "attr", None)) == "load_grid" for n in nodes):  # or sweep.load_grid
                names |= {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return [p.stem for p in grid_files(layout) if p.stem in names]


def missing_for(notebook: Path, quick: bool, layout: BookFolders = DEFAULT) -> dict[str, int]:
    """Runs missing from the cache per grid the chapter reads (only grids with some missing)."""
    cache = Cache()
    counts = {name: missing_runs(load_grid(layout.sweeps / f"{name}.json", quick=quick), cache)
              for name in grids_read_by(notebook, layout)}
    return {name: n for name, n in counts.items() if n}


# -- step 2: chapters ----------------------------------------------------------------------------------------


def package_digest() -> str:
    """sha256 of the package's files (sources and package data): what a chapter's outputs depend on."""
    h = hashlib.sha256()
    for path in sorted(p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def chapter_key(notebook: Path, quick: bool, layout: BookFolders = DEFAULT) -> str:
    """What an executed copy depends on: the source notebook, the parameters, the package, the grid files."""
    h = hashlib.sha256(notebook.read_bytes())
    h.update(json.dumps(parameters(quick), sort_keys=True).encode())
    h.update(package_digest().encode())
    for path in grid_files(layout):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:20]


def staged_meta(notebook: Path, layout: BookFolders = DEFAULT) -> dict[str, Any]:
    """The build metadata of the chapter's staged copy ({} when there is none or it is not ours)."""
    out = layout.stage / notebook.relative_to(layout.root)
    if not out.exists():
        return {}
    return dict(nbformat.read(out, as_version=4).metadata.get(BUILD_META, {}))


def stage(layout: BookFolders = DEFAULT) -> None:
    """Copy the book root's files (not the notebooks) into the staged root; drop temporary files of a killed run."""
    layout.stage.mkdir(parents=True, exist_ok=True)
    for name in ROOT_FILES:
        if (layout.root / name).exists():
            shutil.copy2(layout.root / name, layout.stage / name)
    (layout.stage / "book").mkdir(exist_ok=True)
    for page in (layout.root / "book").glob("*.md"):
        shutil.copy2(page, layout.stage / "book" / page.name)
    for tmp in layout.stage.rglob(".*.tmp"):
        tmp.unlink()


def write_atomic(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write notebook ``nb`` to ``path`` through a temporary file and os.replace: whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)


# The thread pools of torch (OpenMP), numpy's and SciPy's OpenBLAS and MKL: a kernel's code outside training and
# evaluation (which take one thread, train.cpu_threads) would use one thread per core. With two chapters side by
# side on two cores, their idle pool threads spin (sched_yield) against the other kernel's work: chapters 5 and 9b
# took 306 and 322 s side by side with the default pools, 43 and 62 s with one thread each (chapter 5 alone: 33 s).
POOL_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def kernel_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment, which the kernels papermill starts inherit, and afterwards what
    was there before (a variable that was not set is removed again): a build leaves the process as it found it."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute(notebook: Path, quick: bool, layout: BookFolders = DEFAULT, cell_timeout: float | None = None) -> float:
    """Run one source chapter with papermill into the staged root; returns the seconds it took.

    No cell time limit unless ``cell_timeout`` (seconds). The executed copy carries its ``chapter_key``.
    """
    rel = notebook.relative_to(layout.root)
    out, running = layout.stage / rel, layout.executing / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    running.parent.mkdir(parents=True, exist_ok=True)
    key = chapter_key(notebook, quick, layout)
    start = time.perf_counter()
    with kernel_environment({BOOK_BUILD_ENV: "1"}):  # figures appear only where glued
        papermill.execute_notebook(str(notebook), str(running), parameters=parameters(quick), kernel_name="python3",
                                   cwd=str(out.parent), execution_timeout=cell_timeout, progress_bar=False)
    seconds = time.perf_counter() - start
    nb = nbformat.read(running, as_version=4)
    hide_injected_parameters(nb)
    nb.metadata[BUILD_META] = {"key": key, "quick": quick, "seconds": round(seconds, 1)}
    write_atomic(nb, out)
    running.unlink()
    return seconds


def hide_injected_parameters(nb: nbformat.NotebookNode) -> None:
    """Tag papermill's injected "# Parameters" cell ``remove-cell``: bookkeeping, not for the page."""
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]


def slowest_cell(path: Path) -> tuple[int, float, str]:
    """(execution count, seconds, first line) of the slowest code cell of an executed notebook (papermill's
    durations); the count is the cell's [n] in Jupyter."""
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    cells = [(c.get("execution_count") or 0, c.metadata.get("papermill", {}).get("duration") or 0.0,
              c.source.strip().split("\n")[0]) for c in code]
    return max(cells, key=lambda c: c[1], default=(0, 0.0, ""))


def over_budget_message(name: str, seconds: float, limit: float, quick: bool, cell: tuple[int, float, str],
                        missing: dict[str, int], workers: int) -> str:
    """One line: which chapter, how long against its budget, the step and slowest cell, and what to run."""
    mode = "quick" if quick else "full"
    flag = " --quick" if quick else ""
    count, cell_s, first = cell
    text = (f"over budget: chapter {name} took {seconds:.1f} s, its {mode} budget is {limit:g} s "
            f"(step: chapter execution; slowest cell [{count}], {cell_s:.1f} s: {first[:70]!r}). ")
    if missing:
        grids = ", ".join(f"{g} ({n} runs)" for g, n in missing.items())
        fill = "make sweeps" if not quick else "python -m lengthgen.book --quick --sweeps-only"
        one = f"python -m lengthgen sweep sweeps/{next(iter(missing))}.json{flag} --workers {workers}"
        return text + (f"Its sweep grids were missing runs when it started: {grids}. Fill them first with "
                       f"`{fill}` (or one grid: `{one}`), then rerun `python -m lengthgen.book{flag}`.")
    return text + (f"Nothing it reads was missing from the sweep cache: the time is its own computation. Time it "
                   f"alone with `python -m lengthgen.book{flag} --only {name} --no-build`; on a slower machine, "
                   f"raise its budget in BUDGETS (lengthgen/book.py).")


def warn(message: str) -> None:
    """Print a warning; on GitHub Actions also as an annotation on the run's summary."""
    print(f"WARNING {message}", flush=True)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::warning title=book build::{message}", flush=True)


def write_timings(quick: bool, chapters: dict[str, float], layout: BookFolders = DEFAULT, **extra: Any) -> Path:
    """``_build/timings-{quick,full}.json``: {"mode", "chapters": {name: seconds}, ...extra}."""
    path = layout.timings(quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": "quick" if quick else "full", "chapters": chapters, **extra}, indent=1))
    return path


def previous_seconds(layout: BookFolders, quick: bool) -> dict[str, float]:
    """Each chapter's seconds in the last build of this mode (``timings``), {} when there was none."""
    try:
        return dict(json.loads(layout.timings(quick).read_text())["chapters"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def run_chapters(layout: BookFolders, quick: bool, names: Sequence[str] | None, budgets: dict[str, tuple[float, float]],
                 workers: int, cell_timeout: float | None, force: bool, report: dict[str, Any]) -> None:
    """Step 2 and 3: execute each chapter whose staged copy is not current, check budgets; fills ``report``.

    With ``workers`` >= 2 that many chapters execute at once (each in its own kernel, one core each: the chapters
    train on one thread), the longest first by the last build's times (else by budget); the report lists them in
    reading order. A failed chapter stops the build once the chapters already running have finished (they are kept).
    """
    todo: list[tuple[Path, dict[str, int]]] = []
    for nb in chapters(layout):
        name = nb.stem
        if names and name not in names:
            continue
        report["budgets"][name] = limit = budget(name, quick, budgets)
        if name not in budgets:
            warn(f"chapter {name} has no budget: it gets {limit:g} s; add it to BUDGETS in lengthgen/book.py")
        meta = staged_meta(nb, layout)
        if not force and meta.get("key") == chapter_key(nb, quick, layout):
            report["chapters"][name] = meta["seconds"]
            print(f"{name}: up to date ({meta['seconds']} s when executed)", flush=True)
            continue
        todo.append((nb, missing_for(nb, quick, layout)))
    env = {BOOK_BUILD_ENV: "1"}  # figures appear only where glued
    if workers > 1:  # chapters side by side: one thread each, for an ensemble's members and every thread pool
        env.update({name: os.environ.get(name, "1") for name in (THREADS_ENV, *POOL_THREADS)})
    before = previous_seconds(layout, quick)
    todo.sort(key=lambda t: -before.get(t[0].stem, report["budgets"][t[0].stem]) if workers > 1 else 0)
    order = {nb.stem: i for i, nb in enumerate(chapters(layout))}

    def finish(nb: Path, missing: dict[str, int], seconds: float) -> None:
        name, limit = nb.stem, report["budgets"][nb.stem]
        report["chapters"][name] = seconds = round(seconds, 1)
        for key, add in (("executed", True), ("over_budget", seconds > limit)):
            report[key] = sorted(report[key] + [name] * add, key=order.get)  # reading order
        print(f"{name}: {seconds} s (budget {limit:g} s)", flush=True)
        if seconds > limit:
            cell = slowest_cell(layout.stage / nb.relative_to(layout.root))
            warn(over_budget_message(name, seconds, limit, quick, cell, missing, workers))

    def failed(nb: Path, e: papermill.PapermillExecutionError) -> BuildError:
        running = layout.executing / nb.relative_to(layout.root)
        return BuildError(f"chapter {nb.stem} failed in cell [{e.exec_count}]: {e.ename}: {e.evalue}. Its copy up "
                          f"to the error: {running}. Fix it and rerun: chapters already executed are kept.")

    # held while every chapter runs, so that the execute() calls side by side never unset it for each other
    with kernel_environment(env):
        if workers <= 1 or len(todo) <= 1:
            for nb, missing in todo:
                try:
                    finish(nb, missing, execute(nb, quick, layout, cell_timeout))
                except papermill.PapermillExecutionError as e:
                    raise failed(nb, e) from None
            return
        error: BuildError | None = None
        with cf.ThreadPoolExecutor(workers) as pool:  # papermill runs each kernel as its own process
            futures = {pool.submit(execute, nb, quick, layout, cell_timeout): (nb, missing) for nb, missing in todo}
            for future in cf.as_completed(futures):
                if future.cancelled():
                    continue
                nb, missing = futures[future]
                try:
                    finish(nb, missing, future.result())
                except papermill.PapermillExecutionError as e:
                    error = error or failed(nb, e)
                    for f in futures:
                        f.cancel()  # those not started yet; the running ones finish and are kept
        if error is not None:
            raise error


def build(layout: BookFolders = DEFAULT, quick: bool = False, only: Sequence[str] | None = None, html: bool = True,
          sweeps: bool = True, workers: int | None = None, budgets: dict[str, tuple[float, float]] = BUDGETS,
          cell_timeout: float | None = None, force: bool = False) -> dict[str, Any]:
    """Steps 1-4 (module docstring); returns what it wrote to the timings file."""
    known = [nb.stem for nb in chapters(layout)]
    unknown = sorted(set(only or ()) - set(known))
    if unknown:
        raise BuildError(f"--only {unknown}: not chapters of {layout.root / '_toc.yml'}; they are {known}")
    workers = default_workers() if workers is None else workers
    report: dict[str, Any] = {"complete": False, "sweeps": None, "budgets": {}, "executed": [], "over_budget": []}
    chapter_seconds = report["chapters"] = {}
    start = time.perf_counter()
    try:
        if sweeps:
            report["sweeps"] = fill_sweeps(layout, quick, workers)
        stage(layout)
        chapters_start = time.perf_counter()
        run_chapters(layout, quick, only, budgets, workers, cell_timeout, force, report)
        report["chapters_wall"] = round(time.perf_counter() - chapters_start, 1)  # chapters run side by side
        report["complete"] = not only
    finally:  # an interrupted build still says what it did
        report["seconds"] = round(time.perf_counter() - start, 1)
        extra = {k: v for k, v in report.items() if k != "chapters"}
        path = write_timings(quick, chapter_seconds, layout, **extra)
    sweep_s = report["sweeps"]["seconds"] if report["sweeps"] else 0.0
    print(f"sweeps {sweep_s} s; chapters executed {len(report['executed'])} of {len(known)} in "
          f"{sum(chapter_seconds[n] for n in report['executed']):.1f} s, {report.get('chapters_wall', 0.0)} s of wall "
          f"time on {max(workers, 1)} workers ({'quick' if quick else 'full'}); timings: {path}", flush=True)
    if html:
        metas = {nb: staged_meta(nb, layout) for nb in chapters(layout)}
        other = [nb.stem for nb, m in metas.items() if m.get("quick") is not quick]  # or not executed at all
        if other:
            raise BuildError(f"not executed with the {'quick' if quick else 'full'} parameters: {other}; run "
                             f"`python -m lengthgen.book{' --quick' if quick else ''}` without --only")
        old = [nb.stem for nb, m in metas.items() if m["key"] != chapter_key(nb, quick, layout)]
        if old:
            warn(f"chapters executed from older sources (edited during the build?): {old}; the next build runs them")
        build_html(layout)
        print(f"HTML: {layout.html / 'index.html'}", flush=True)
    return report


# -- step 4: HTML --------------------------------------------------------------------------------------------


def build_html(layout: BookFolders = DEFAULT) -> None:
    """Vendor the assets into the staged root, then ``jupyter-book build`` it, warnings as errors; the HTML lands
    in ``_build/html``."""
    vendor(layout.stage / VENDOR)
    jb = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jb), "build", str(layout.stage), "--path-output", str(layout.build / "jb"), "-W",
                    "--keep-going", "--all"], check=True)
    if layout.html.exists():
        shutil.rmtree(layout.html)
    shutil.move(layout.build / "jb" / "_build" / "html", layout.html)


def main(argv: list[str] | None = None, layout: BookFolders = DEFAULT) -> None:
    p = argparse.ArgumentParser(prog="python -m lengthgen.book", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the quick grids and QUICK=True in every chapter (CI)")
    p.add_argument("--only", nargs="*", default=None, help="chapter names to execute (default: all)")
    p.add_argument("--no-build", action="store_true", help="execute only, do not build the HTML")
    p.add_argument("--sweeps-only", action="store_true", help="fill the sweep cache and stop (make sweeps)")
    p.add_argument("--no-sweeps", action="store_true", help="skip the sweep step (chapters compute what is missing)")
    p.add_argument("--prune-cache", action="store_true", help="first delete cached results of other results versions (cache.RESULTS_VERSION)")
    p.add_argument("--workers", type=int, default=None,
                   help="processes for the sweeps and chapters executed at once (default: this machine's cores)")
    p.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (default: no limit)")
    p.add_argument("--force", action="store_true", help="execute every chapter, even those up to date")
    p.add_argument("--strict", action="store_true", help="exit with status 3 when a chapter is over its budget")
    a = p.parse_args(argv)
    if a.workers is not None and a.workers < 0:
        p.error(f"--workers {a.workers}: use 0 (this process) or a number of processes")
    if a.prune_cache:
        pruned = Cache().prune()
        print(f"cache: removed {len(pruned)} folders of other results versions: {[p.name for p in pruned]}", flush=True)
    try:
        if a.sweeps_only:
            fill_sweeps(layout, a.quick, a.workers)
            return
        report = build(layout, a.quick, a.only, html=not a.no_build, sweeps=not a.no_sweeps, workers=a.workers,
                       cell_timeout=a.cell_timeout, force=a.force)
    except (BuildError, ConfigError) as e:  # ConfigError: a grid file that does not parse (it is named)
        raise SystemExit(f"error: {e}") from None
    if a.strict and report["over_budget"]:
        raise SystemExit(3)


if __name__ == "__main__":
    main()
