"""The book: sources committed clean, every chapter executed by papermill in quick mode, nbval reruns
the executed copies and compares the cells tagged ``nbval-check-output`` (determinism), and the HTML
builds with ``-W``. Also the figure renderer and the headless playground.

The quick book lands in _build/book (executed notebooks) and _build/html (the site), where the browser
test picks it up.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from lengthgen import Config, ConfigError, book, plots, recipes, widgets
from lengthgen.widgets import Playground

SOURCES = sorted((book.ROOT / "book").glob("*.ipynb"))


def rel(path: Path) -> str:
    return str(path.relative_to(book.ROOT))


def test_every_notebook_is_in_the_toc() -> None:
    listed = {book.ROOT / f"{name}.ipynb" for name in book.toc_files()}
    missing = [rel(p) for p in SOURCES if p not in listed]
    assert not missing, f"add {missing} to _toc.yml (or remove them): unlisted notebooks are never executed or built"


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_source_notebook_has_no_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, (
        f"{rel(path)}: code cells {dirty} carry outputs; commit sources clean: "
        f"jupyter nbconvert --clear-output --inplace {rel(path)}"
    )


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_first_code_cell_holds_the_parameters(path: Path) -> None:
    """The first code cell after the install cell (tests/test_launch.py, scripts/add_install_cell.py)."""
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code" and "install" not in c.metadata.get("tags", []))
    assert "parameters" in first.metadata.get("tags", []), f"{rel(path)}: tag the first code cell 'parameters'"
    assert "QUICK = False" in first.source, f"{rel(path)}: the parameters cell must default to QUICK = False (the full book)"


@pytest.fixture(scope="module")
def quick_book() -> dict[str, float | Exception]:
    """Execute every chapter of the toc with QUICK=True into _build/book: name -> seconds or the error."""
    book.stage()
    results: dict[str, float | Exception] = {}
    for nb in book.chapters():
        try:
            results[nb.stem] = book.execute(nb, quick=True)
        except Exception as e:  # reported by the chapter's own test below
            results[nb.stem] = e
    book.write_timings(True, {k: round(v, 1) for k, v in results.items() if isinstance(v, float)})
    return results


@pytest.mark.parametrize("name", [p.stem for p in book.chapters()])
def test_chapter_runs_in_quick_mode(quick_book: dict, name: str) -> None:
    result = quick_book[name]
    if isinstance(result, Exception):
        pytest.fail(f"{name} failed under papermill (QUICK=True): {result}")


def test_nbval_rerun_reproduces_checked_outputs(quick_book: dict) -> None:
    """nbval --nbval-lax reruns each executed (quick) notebook and compares the nbval-check-output cells."""
    executed = [str(book.STAGE / rel(p)) for p in book.chapters()]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
         *executed],
        cwd=book.STAGE / "book", capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_book_builds_without_warnings(quick_book: dict) -> None:
    start = time.perf_counter()
    try:
        book.build_html()
    except subprocess.CalledProcessError as e:
        pytest.fail(f"jupyter-book build -W failed ({e}); rerun `make book-quick` to see the warnings")
    print(f"book build: {time.perf_counter() - start:.0f} s")
    for name in book.toc_files(book.STAGE):  # the toc this build used
        assert (book.HTML / f"{name}.html").exists(), f"page {name}.html missing from the build"
    for asset in ["plotly.min.js", "require.js", "mathjax/tex-chtml.js", "html-manager/embed-amd.js"]:
        assert (book.HTML / "_static" / asset).exists(), f"vendored {asset} missing: the book would need a CDN"


def test_book_renderer_omits_plotlyjs_and_autoplay() -> None:
    html = plots.BookHTML().to_mimebundle(plots.shift_test([1, 2], {"rope": [1e-15, 2e-15]}, "t").to_dict())["text/html"]
    assert "Plotly.newPlot" in html
    assert "plotly.js v" not in html and len(html) < 20_000, "plotly.js must not be inlined in a figure"
    assert "cdn" not in html.lower(), "a figure must not reference a CDN"


def test_playground_is_headless_and_says_what_to_change() -> None:
    c = Config()
    pg = Playground(c.replace(steps=3, batch=8), seeds=1, multiples=(1, 2), samples=16)
    for control in (pg.train_length, pg.offset):
        control.unobserve_all()  # change the controls without retraining
    pg.train_length.value = pg.offset.value = pg.train_length.min  # offset K = T: no target
    with pytest.raises(ConfigError, match="offset"):
        pg.config()
    pg.train_length.value, pg.offset.value = c.train_length, c.offset
    fig = pg.run()
    assert pg.progress.value == 3, "the progress bar follows the training steps"
    assert len(fig.data) == 3  # seed dots, mean line, chance line


def test_playground_retrains_on_a_slider_change_at_the_defaults() -> None:
    """The callback a slider change triggers (train, evaluate, plot, display) at the chapter's full settings: the
    small-step recipe by default (chapter 7), its whole budget. How fast it is, is measured by ``make bench`` (its
    playground rows, against the baseline in the same run), not here."""
    pg = Playground(Config(), seeds=2, multiples=(1, 2, 4, 8), samples=500, recipes=recipes.RECIPES,
                    recipe=recipes.SMALL_STEPS.name)
    updates = []
    pg.progress.observe(lambda change: updates.append(change["new"]), names="value")
    pg.offset.value = Config().offset + 1  # retrains through the observer, like a reader's slider
    start = time.perf_counter()
    pg.offset.value = Config().offset  # the second change: imports and first-call costs are paid
    seconds = time.perf_counter() - start
    print(f"playground redraw at the defaults: {seconds:.2f} s")
    assert "trained" in pg.status.value and f"{recipes.SMALL_STEPS.steps} steps, no early stop" in pg.status.value
    assert pg.progress.value == recipes.SMALL_STEPS.steps
    steps = recipes.SMALL_STEPS.steps
    assert len(updates) <= 2 * (steps // widgets.PROGRESS_EVERY + 2), "update the progress bar every few steps"
    assert len(updates) >= 2 * (steps // widgets.PROGRESS_EVERY), "the progress bar follows training as it goes"


@pytest.mark.parametrize("name", [p.stem for p in book.chapters()])
def test_executed_chapter_hides_its_bookkeeping(quick_book: dict, name: str) -> None:
    """papermill's injected parameters cell is removed from the page (book/CONVENTIONS.md, cell tags)."""
    nb = nbformat.read(book.STAGE / "book" / f"{name}.ipynb", as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected, f"{name}: papermill injected no parameters cell in quick mode"
    assert all("remove-cell" in c.metadata["tags"] for c in injected), f"{name}: tag the injected cell remove-cell"
