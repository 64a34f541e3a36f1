"""Rerunning a chapter in JupyterLab reads and works like the page (issues 19 and 31).

A real JupyterLab server (the `make lab` command, on 127.0.0.1 with a free port and a token) serves copies of
every chapter with ``QUICK = True`` in their parameters cell, in a git repository with the clean filter `make
venv` sets up; headless Chromium (Playwright, Debian's /usr/bin/chromium) opens each, runs all cells as
Run > Run All Cells does, saves it, and checks what the notebook shows: every markdown cell that cites values
holds their results (jupyterlab-myst evaluated it), no raw MyST role, unknown directive or unevaluated
``glue.`` expression in the rendered markdown, every glued value the prose cites shown in its cell (the
kernel's own value of each inline expression), no error under any cell or in any expression, and ``git diff``
empty after the save (a rerun leaves the sources as committed). In chapter 3 a grid figure shows no dead
controls in the prose and its live recipe buttons (plots.grid_viewer) redraw it; in chapter 7 the live
playground retrains and redraws after a slider move. A small fixture notebook with a raw glue role shows that
the markdown check fails when it should, and only then.

`make test` runs it in its browser step (LENGTHGEN_BROWSER_TEST=required); run alone it skips without chromium:

    scripts/install_chromium.sh
    .venv/bin/python -m pytest -q -m browser tests/test_jupyterlab.py
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from playwright.sync_api import BrowserContext, Locator, Page

from browser_util import CHROMIUM, chromium
from jupyterlab_util import (
    LAB_OVERRIDES, Lab, error_outputs, jupyterlab, kernel_repr, markdown_text, open_notebook, run_all, save,
    stage_notebook, unevaluated_cells,
)
from lengthgen import book

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("LENGTHGEN_BROWSER_TEST") == "required"
SCREENSHOTS = ROOT / "_build" / "screenshots" / "jupyterlab"
# Roles jupyterlab-myst renders (the rest show their raw content as plain text)
KNOWN_ROLES = {"eval", "ref", "numref", "doc", "cite", "cite:p", "cite:t", "math", "sub", "sup", "abbr", "term"}
ROLE = re.compile(r"\{([A-Za-z:_-]+)\}`([^`]*)`")
SHOWN = re.compile(r'glue\.(text|any)\("[^"]+"\)')  # inline expressions whose value is plain text
RAW_MARKERS = ("Unknown Directive", "Unknown Role", "Unexecuted inline expression", "{eval}", "{glue")
UNEVALUATED = re.compile(r'glue\.(text|any|md|figure|cite)\("[^"]*"\)')  # an expression shown as its code
CHAPTERS = [f"book/{path.name}" for path in book.chapters()]  # every notebook of the toc, in its order
OWN_TESTS = ("book/01_the_gap.ipynb", "book/03_ape_memorizes.ipynb", "book/07_playground.ipynb")  # tested below
RETRAIN_S = 60  # longest wait for the live playground to retrain and redraw after a slider move


def unavailable(reason: str) -> None:
    """Skip with ``reason`` when run by hand; fail inside `make test`, where this test must run."""
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def unquoted(value: str) -> str:
    """A text/plain that is a Python string's repr (``'0.804'``) as jupyterlab-myst shows it: without the quotes."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return ast.literal_eval(value)
    return value


def markdown_problems(page: Page, sources: list[str]) -> list[str]:
    """What the rendered markdown cells show that a reader of the page would not see: a raw role's text, an
    unknown directive or role, an inline expression not evaluated, or a cited value missing from its cell.
    ``sources``: the notebook's markdown cell sources, in order."""
    shown = markdown_text(page)
    if len(shown) != len(sources):
        return [f"{len(shown)} markdown cells rendered, the notebook has {len(sources)}"]
    problems = []
    for i, (source, text) in enumerate(zip(sources, shown)):
        for marker in RAW_MARKERS:
            if marker in text:
                problems.append(f"markdown cell {i} shows {marker!r}")
        for shown in dict.fromkeys(m.group(0) for m in UNEVALUATED.finditer(text)):
            problems.append(f"markdown cell {i} shows the expression {shown} unevaluated")
        for name, content in ROLE.findall(source):
            if name not in KNOWN_ROLES and content in text:
                problems.append(f"markdown cell {i} shows the raw role {{{name}}}`{content}` as {content!r}")
        for expression in dict.fromkeys(m.group(0) for m in SHOWN.finditer(source)):
            value = kernel_repr(page, expression)
            if value is None:
                problems.append(f"markdown cell {i}: {expression} fails in the kernel")
            elif value not in text and unquoted(value) not in text:
                problems.append(f"markdown cell {i}: {expression} = {value!r} is not shown")
    return problems


def markdown_sources(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def broken_notebook(path: Path) -> None:
    """A notebook whose prose cites one value correctly and one through a raw glue role."""
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [
        new_code_cell("from lengthgen.inline import glue\nglue('acc', 0.98765, display=False)"),
        new_markdown_cell('Right: {eval}`glue.text("acc:.3f")`. Raw: {glue:text}`acc:.3f`.'),
    ]
    nbformat.write(nb, path)


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def clean_filter() -> str:
    """The clean filter command `make venv` installs (the Makefile's NB_CLEAN), with this Python."""
    flags = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-nb-clean: ; @echo '$(NB_CLEAN)'",
                            "print-nb-clean"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return shlex.join([sys.executable, *shlex.split(flags)])


def committed_repository(root: Path) -> None:
    """Make ``root`` a git repository with the project's clean filter on notebooks and commit what it holds."""
    for args in (["init", "-q"], ["config", "user.email", "test@localhost"], ["config", "user.name", "test"],
                 ["config", "filter.nbstripout.clean", clean_filter()], ["config", "filter.nbstripout.smudge", "cat"]):
        assert git(root, *args).returncode == 0
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "attributes").write_text("*.ipynb filter=nbstripout\n")
    assert git(root, "add", "book").returncode == 0 and git(root, "commit", "-q", "-m", "as committed").returncode == 0


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing: run scripts/install_chromium.sh (make test does)")
    if not LAB_OVERRIDES.exists():
        unavailable(f"{LAB_OVERRIDES} is missing: run make venv (it installs the JupyterLab settings)")
    with tempfile.TemporaryDirectory(prefix="lab-root-") as tmp:
        root = Path(tmp)
        for name in CHAPTERS:
            stage_notebook(ROOT / name, root)
        broken_notebook(root / "book" / "broken.ipynb")
        committed_repository(root)
        with jupyterlab(root) as server:
            yield server


@pytest.fixture(scope="module")
def context(lab: Lab) -> Iterator[BrowserContext]:
    with chromium() as ctx:
        yield ctx


def run_chapter(context: BrowserContext, lab: Lab, name: str) -> Page:
    """Open chapter ``name``, run all its cells, save it, keep a screenshot, and check what every chapter must
    show: every cited value evaluated, no error under any cell, no raw MyST in its rendered markdown, and no
    change to the committed source after the save."""
    page = open_notebook(context, lab, f"book/{name}")
    seconds = run_all(page)
    print(f"{name} (quick): all cells ran in {seconds:.1f} s")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{Path(name).stem}.png"))
    assert not error_outputs(page), error_outputs(page)
    assert not unevaluated_cells(page), f"markdown cells {unevaluated_cells(page)} hold no evaluated expressions"
    trimmed = page.locator(".jp-TrimmedOutputs").count()
    assert trimmed == 0, f"{trimmed} cells hide outputs behind 'Show more outputs' (data-only glue outputs?)"
    problems = markdown_problems(page, markdown_sources(lab.root / "book" / name))
    assert not problems, "\n".join(problems)
    save(page)
    diff = git(lab.root, "diff", "--stat", "--", f"book/{name}")
    assert diff.returncode == 0 and not diff.stdout.strip(), f"saving after a rerun changed the source: {diff.stdout}"
    return page


@pytest.mark.parametrize("name", [c for c in CHAPTERS if c not in OWN_TESTS], ids=lambda c: Path(c).stem)
def test_every_chapter_fills_every_cited_value(lab: Lab, context: BrowserContext, name: str) -> None:
    run_chapter(context, lab, Path(name).name).close()


def test_chapter_1_reads_like_the_page(lab: Lab, context: BrowserContext) -> None:
    page = run_chapter(context, lab, "01_the_gap.ipynb")
    figures = page.locator(".jp-MarkdownCell .js-plotly-plot").count()
    assert figures >= 3, f"chapter 1 shows {figures} figures in its prose, expected its 3 or more"
    copies = page.locator(".jp-CodeCell .jp-OutputArea .js-plotly-plot").count()
    assert copies == 0, f"chapter 1 shows {copies} figures under its code cells too: one copy, in the prose"
    page.close()


def shows(page: Page, element: Locator, title: str, timeout_s: float) -> None:
    """Wait until a live plotly figure inside ``element`` carries ``title`` in its title. JupyterLab's plotly renderer
    keeps a PNG of a figure it drew and may show that image in its place (a saved notebook, a re-rendered view)
    until the pointer enters it; entering it, as a reader's pointer does, draws the live figure again."""
    page.wait_for_function("""([el, want]) => {
        el.querySelectorAll('.plot-img').forEach(img => img.dispatchEvent(new MouseEvent('mouseenter')));
        return [...el.querySelectorAll('.js-plotly-plot .gtitle')].some(t => t.textContent.includes(want));
    }""", arg=[element.element_handle(), title], timeout=timeout_s * 1000, polling=250)


def test_the_live_playground_retrains_and_redraws(lab: Lab, context: BrowserContext) -> None:
    page = run_chapter(context, lab, "07_playground.ipynb")
    # no static grid (its controls need the page's script): the live controls stand in the figure's place
    figure_cell = page.locator(".jp-MarkdownCell", has_text="Top: accuracy against the evaluation length")
    assert figure_cell.locator(".widget-slider").count() > 0, "the grid figure's place holds no live controls"
    assert figure_cell.locator(".js-plotly-plot").count() == 0, "the static grid is shown in JupyterLab"

    live = page.locator(".jp-CodeCell .jp-OutputArea .widget-vbox").last  # the controls under "Live"
    status = live.locator(".widget-html")
    offset = live.locator(".widget-slider", has_text="offset K")
    before = offset.locator(".widget-readout").inner_text()
    start = time.monotonic()
    offset.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    expected = f"K={int(before) + 1}"
    shows(page, live, expected, timeout_s=RETRAIN_S)
    print(f"slider move to {expected}: retrained and redrawn in {time.monotonic() - start:.1f} s")
    assert "trained" in status.inner_text() and "cannot" not in status.inner_text(), status.inner_text()
    assert not error_outputs(page), error_outputs(page)
    page.close()


def test_a_recipe_control_changes_its_figure(lab: Lab, context: BrowserContext) -> None:
    """A grid figure (plots.recipe_menu) in JupyterLab, where the page's grid.js does not run: the prose shows it
    once, as plots.grid_viewer's live controls (no dead plotly buttons, no second copy under its cell), and they
    redraw it when clicked."""
    page = run_chapter(context, lab, "03_ape_memorizes.ipynb")
    assert page.locator(".jp-MarkdownCell .updatemenu-container").count() == 0, "a figure in the prose shows dead buttons"
    copies = page.locator(".jp-CodeCell .jp-OutputArea .widget-toggle-buttons").count()
    assert copies == 0, f"{copies} second copies under a cell"
    viewer = page.locator(".jp-MarkdownCell", has=page.locator(".widget-toggle-buttons")).first
    viewer.scroll_into_view_if_needed()
    buttons = viewer.locator(".widget-toggle-buttons button")
    assert buttons.count() >= 2, "the grid figure in the prose shows no recipe buttons in JupyterLab"
    first, other = (buttons.nth(i).inner_text().strip() for i in (0, 1))
    shows(page, viewer, first, timeout_s=30)
    titles = viewer.locator(".js-plotly-plot .gtitle").all_text_contents()
    assert not any(other in t for t in titles), (other, titles)
    buttons.nth(1).click()
    shows(page, viewer, other, timeout_s=20)
    assert not error_outputs(page), error_outputs(page)
    page.close()


def test_a_raw_role_fails_the_check(lab: Lab, context: BrowserContext) -> None:
    page = open_notebook(context, lab, "book/broken.ipynb")
    run_all(page)
    assert unevaluated_cells(page) == [], "the fixture's inline expression was evaluated"
    problems = markdown_problems(page, markdown_sources(lab.root / "book" / "broken.ipynb"))
    assert problems == ["markdown cell 0 shows the raw role {glue:text}`acc:.3f` as 'acc:.3f'"], problems
    assert "0.988" in markdown_text(page)[0]  # the inline expression beside it is shown
    page.close()
