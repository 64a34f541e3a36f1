"""The built book in headless Chromium, page by page, the way a reader sees it (issue 5).

For every page of the table of contents, served from _build/html on 127.0.0.1: it loads; every plotly
figure is drawn with data, a title, axis titles and a caption; every formula is typeset; every saved
widget shows; every slider step and every menu button (the recipe buttons) changes the plotted data without
a JavaScript error; no request leaves
127.0.0.1; no console error outside ALLOWED_ERRORS; every internal href/src resolves; plotly.js is
loaded once; the page's own bytes stay under MAX_PAGE_BYTES. A screenshot of each page goes to
_build/screenshots/NAME.png and the page weights to the test output. And every text of every figure (titles,
axis and subplot titles, tick, legend, slider and button labels) fits inside the figure at each of BOOK_WIDTHS,
before and after every control is moved, with no title over another text (issue 31, item 5).

`make test` builds the book first and sets LENGTHGEN_BROWSER_TEST=required, so a missing build or
browser fails there; run alone, these tests skip with the command to run instead.

The second half runs the same checkers on small synthetic pages (figures made by lengthgen.plots),
each broken in one way, so that every check is shown to fail when it should.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Iterator

import nbformat
import plotly
import plotly.graph_objects as go
import pytest
from playwright.sync_api import BrowserContext

from browser_util import (
    CHROMIUM, SETTLE_MS, VIEWPORT, Visit, chromium, console_problems, figure_problems, fit_problems, launch_problems,
    link_problems, math_problems, menu_problems, open_page, outside_requests, page_weight, plotly_loads, serve,
    slider_problems, widget_problems,
)
from lengthgen import book, plots

pytestmark = pytest.mark.browser

SCREENSHOTS = book.BUILD / "screenshots"
MAX_PAGE_BYTES = 200_000  # a page's own HTML, JSON and images, besides the shared scripts (issue 5)
REQUIRED = os.environ.get("LENGTHGEN_BROWSER_TEST") == "required"

# Console errors the built book is allowed to show: regex -> why it is harmless.
ALLOWED_ERRORS = {
    r"console error: Got invalid theme mode: \. Resetting to auto":
        "pydata-sphinx-theme on a fresh profile (no saved light/dark mode): it falls back to auto",
}


def launch_urls(name: str) -> dict[str, str]:
    """The Colab and Binder links a chapter's launch menu should hold, from _config.yml (repository, launch_buttons)."""
    import yaml

    config = yaml.safe_load((book.ROOT / "_config.yml").read_text())
    repo, buttons = config["repository"], config["launch_buttons"]
    owner_repo = repo["url"].removeprefix("https://github.com/").strip("/")
    path = f"{repo.get('path_to_book', '') or ''}{name}.ipynb".lstrip("/")
    tree = "lab/tree" if buttons.get("notebook_interface") == "jupyterlab" else "tree"
    return {
        "Colab": f"{buttons['colab_url']}/github/{owner_repo}/blob/{repo['branch']}/{path}",
        "Binder": f"{buttons['binderhub_url']}/v2/gh/{owner_repo}/{repo['branch']}?urlpath={tree}/{path}",
    }


def unavailable(reason: str) -> None:
    """Skip with ``reason`` when run by hand; fail inside `make test`, where the browser test must run."""
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def context() -> Iterator[BrowserContext]:
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing: run scripts/install_chromium.sh (make test does)")
    with chromium() as ctx:
        yield ctx


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    if not (book.HTML / "index.html").exists():
        unavailable(f"no built book in {book.HTML}: run `make book-quick` first (make test builds it)")
    with serve(book.HTML) as base:
        yield base


def report(visit: Visit, base: str) -> dict[str, list[str]]:
    """Every problem of an open page, by kind (the slider and menu checks move the controls, so they run last)."""
    return {
        "figures": figure_problems(visit.page),
        "math": math_problems(visit.page),
        "widgets": widget_problems(visit.page),
        "links": link_problems(visit.page, base),
        "sliders": slider_problems(visit.page, visit),
        "menus": menu_problems(visit.page, visit),
        "requests": outside_requests(visit),
        "console": console_problems(visit, ALLOWED_ERRORS),
    }


@pytest.mark.parametrize("name", book.toc_files())
def test_book_page(site: str, context: BrowserContext, name: str, capsys: pytest.CaptureFixture) -> None:
    if not (book.HTML / f"{name}.html").exists():
        pytest.fail(f"{name} is in _toc.yml but not in {book.HTML}: rebuild it (make book-quick)")
    visit = open_page(context, f"{site}{name}.html")
    try:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        visit.page.screenshot(path=SCREENSHOTS / f"{Path(name).name}.png", full_page=True)
        figures = visit.page.locator(".plotly-graph-div").count()
        widgets = visit.page.locator(".widget-subarea").count()
        problems = report(visit, site)
        own, shared = page_weight(visit)
        with capsys.disabled():
            print(f"\n  page weight {name}: {own / 1000:.1f} KB own (HTML, JSON, images) + "
                  f"{shared / 1e6:.1f} MB shared scripts, styles, fonts; {figures} figures, {widgets} widgets", end="")
        loads = plotly_loads(visit)
        if loads > 1 or (figures and loads == 0):
            problems["plotly.js"] = [f"plotly.js loaded {loads} times (once per page wanted)"]
        if own > MAX_PAGE_BYTES:
            problems["weight"] = [f"{own} bytes of HTML/JSON/images, over the {MAX_PAGE_BYTES} budget"]
        if (book.ROOT / f"{name}.ipynb").exists():
            download = visit.page.locator(f'a[href$="_sources/{name}.ipynb"]').count()
            problems["downloads"] = [] if download else ["no .ipynb download button"]
            problems["launch buttons"] = launch_problems(visit.page, launch_urls(name))
    finally:
        visit.page.close()
    found = [f"{kind}: {p}" for kind, ps in problems.items() for p in ps]
    assert not found, f"{name}: {len(found)} problems\n" + "\n".join(found)


# The window widths a reader's figures are checked at: the browser tests' desktop window (the content column beside
# the table of contents) and a narrow one (the table of contents folded away, the column narrower than a laptop's).
BOOK_WIDTHS = (VIEWPORT["width"], 800)


@pytest.mark.parametrize("width", BOOK_WIDTHS)
@pytest.mark.parametrize("name", book.toc_files())
def test_figures_fit_the_page(site: str, context: BrowserContext, name: str, width: int) -> None:
    """Issue 31, item 5: no text of any figure (title, axis and subplot titles, tick, legend, slider and button
    labels) is cut at the figure's edge, and no title overlaps another text, at the book's widths: as the page
    opens, and after every click on a slider step or a menu button (grid figures retitle themselves)."""
    if not (book.HTML / f"{name}.html").exists():
        pytest.fail(f"{name} is in _toc.yml but not in {book.HTML}: rebuild it (make book-quick)")
    visit = open_page(context, f"{site}{name}.html", width=width)
    found = dict.fromkeys(fit_problems(visit.page), "as the page opens")  # problem -> the first state showing it

    def after(where: str) -> None:
        for p in fit_problems(visit.page):
            found.setdefault(p, f"after {where}")

    try:  # what the clicks themselves must do is test_book_page's to check
        menu_problems(visit.page, visit, after)
        slider_problems(visit.page, visit, after)
    finally:
        visit.page.close()
    assert not found, f"{name} at {width} px: {len(found)} texts do not fit\n" + "\n".join(
        f"{p} ({when})" for p, when in found.items())


def test_every_page_of_the_toc_is_checked() -> None:
    """The page loop runs over the whole toc, the findings page included (issue 16)."""
    assert "book/findings" in book.toc_files(), "book/findings left _toc.yml: the browser test no longer checks it"


def test_site_root_opens_the_introduction(site: str, context: BrowserContext) -> None:
    """The site's root sends a reader to the introduction: the URL becomes the introduction's and the page shows
    its title. The wait ends when the URL changes; its limit (SETTLE_MS) only bounds a busy machine's delay."""
    first = book.toc_files()[0]
    intro = nbformat.read(book.ROOT / f"{first}.ipynb", as_version=4).cells[0].source
    title = next(line[2:].strip() for line in intro.splitlines() if line.startswith("# "))
    page = context.new_page()
    try:
        page.goto(site, wait_until="commit")
        page.wait_for_url(f"{site}{first}.html", timeout=SETTLE_MS, wait_until="domcontentloaded")
        heading = page.locator("main h1, article h1").first
        heading.wait_for(state="attached", timeout=SETTLE_MS)
        assert title in heading.inner_text(), f"the root opened {page.url}, titled {heading.inner_text()!r}"
    finally:
        page.close()


# --- The checkers on synthetic pages: each page is broken in one way -------------------------------------

def figure_html(frames: dict[str, list[go.BaseTraceType]]) -> str:
    """A figure as the book renders it (lengthgen.plots), in a <figure> with a caption."""
    fig = plots.slider_figure(frames, "setting", title="Synthetic", xaxis_title="x (units)", yaxis_title="y (units)")
    div = plots.BookHTML().to_mimebundle(fig.to_dict())["text/html"]
    return f"<figure>{div}<figcaption>What to look for.</figcaption></figure>"


def recipe_html(recipes: dict[str, dict[str, list[go.BaseTraceType]]]) -> str:
    """A recipe-button figure as the book renders it (``plots.recipe_menu`` of slider figures, with GRID_JS)."""
    figs = {name: plots.slider_figure(frames, "setting", title="Synthetic", xaxis_title="x (units)",
                                      yaxis_title="y (units)") for name, frames in recipes.items()}
    div = plots.GridHTML().to_mimebundle(plots.recipe_menu(figs, "Synthetic, {0}, {1}").to_dict())["text/html"]
    return f"<figure>{div}<figcaption>What to look for.</figcaption></figure>"


Checked = tuple[Visit, dict[str, list[str]]]
GOOD_FIGURE = figure_html({"a": [go.Scatter(y=[1, 2, 3])], "b": [go.Scatter(y=[3, 1, 2])]})
PAGES = {
    "good": GOOD_FIGURE,
    "broken_figure": GOOD_FIGURE.replace("Plotly.newPlot(", "Plotly.newPlott("),
    "empty_figure": figure_html({"a": [go.Scatter(y=[])]}),
    "untitled_figure": plots.BookHTML().to_mimebundle(go.Figure(go.Scatter(y=[1, 2])).to_dict())["text/html"],
    "dead_slider": figure_html({"a": [go.Scatter(y=[1, 2, 3])], "b": [go.Scatter(y=[1, 2, 3])]}),
    "cdn": GOOD_FIGURE + '<script src="https://cdn.plot.ly/plotly-2.35.2.min.js"></script>',
    "plotly_twice": GOOD_FIGURE + '<script src="plotly.min.js?again"></script>',
    "bad_links": '<a href="good.html">ok</a> <a href="nowhere.html">x</a> <a href="good.html#nope">y</a>'
                 '<img src="missing.png">',
    "raw_math": '<p>Inline <span class="math">\\(x^2\\)</span> and display $$y$$.</p>',
    "recipe_menu": recipe_html({"fast": {"a": [go.Scatter(y=[1, 2, 3])], "b": [go.Scatter(y=[3, 1, 2])]},
                                "slow": {"a": [go.Scatter(y=[2, 2, 1])], "b": [go.Scatter(y=[1, 3, 3])]}}),
    "dead_recipe_menu": recipe_html({r: {"a": [go.Scatter(y=[1, 2, 3])], "b": [go.Scatter(y=[3, 1, 2])]}
                                     for r in ("fast", "slow")}),
    "hidden_widget": '<script type="application/vnd.jupyter.widget-view+json">{"model_id": "m"}</script>',
}
LONG = "accuracy at every length from K+1 to twice the training length, " * 3  # 198 characters


def plain_figure_html(layout: dict) -> str:
    """A one-trace figure with the book's template and ``layout`` as given (not through ``plots.finish``)."""
    fig = go.Figure(go.Scatter(y=[1, 2, 3]), layout=dict(template="lengthgen", height=plots.HEIGHT, **layout))
    return f"<figure>{plots.BookHTML().to_mimebundle(fig.to_dict())['text/html']}<figcaption>c</figcaption></figure>"


FIT_PAGES = {  # figures whose texts are cut (or not) in one way each, in a 672 px column as the book's
    "long_title": plain_figure_html(dict(title=dict(text=LONG, x=0.02, xanchor="left"), xaxis_title="x", yaxis_title="y")),
    "old_two_line_title": plain_figure_html(dict(title=dict(text="first line<br>second line", x=0.02, y=0.98,
                                                            yanchor="top"), xaxis_title="x", yaxis_title="y")),
    "long_y_title": plain_figure_html(dict(title_text="t", xaxis_title="x", yaxis_title=LONG[:120])),
    "finished": "<figure>" + plots.BookHTML().to_mimebundle(plots.render.finish(
        plots.slider_figure({"a long first slider label": [go.Scatter(y=[1, 2])], "b": [go.Scatter(y=[2, 1])]}, "s"),
        LONG, "x (units)", "y (units)").to_dict())["text/html"] + "<figcaption>c</figcaption></figure>",
}
PAGES.update({name: f'<div style="width: 672px">{body}</div>' for name, body in FIT_PAGES.items()})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The synthetic pages with plotly.js, served: (base URL, folder)."""
    root = tmp_path_factory.mktemp("pages")
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", root)
    for name, body in PAGES.items():
        (root / f"{name}.html").write_text(
            '<!doctype html><html><head><meta charset="utf-8"><script src="plotly.min.js"></script>'
            f"<title>{name}</title></head><body><main>{body}</main></body></html>"
        )
    with serve(root) as base:
        yield base, root


@pytest.fixture(scope="module")
def checked(synthetic: tuple[str, Path], context: BrowserContext) -> Iterator[Callable[[str], Checked]]:
    """Open a synthetic page once and run every check on it: name -> (its Visit, its problems by kind)."""
    base, _ = synthetic
    done: dict[str, Checked] = {}

    def get(name: str) -> Checked:
        if name not in done:
            visit = open_page(context, f"{base}{name}.html", settle_ms=500)
            done[name] = visit, report(visit, base)
        return done[name]

    yield get
    for visit, _ in done.values():
        visit.page.close()


def test_checkers_pass_a_good_page(synthetic: tuple[str, Path], checked: Callable[[str], Checked]) -> None:
    visit, problems = checked("good")
    assert not any(problems.values()), problems
    assert plotly_loads(visit) == 1
    _, root = synthetic
    assert page_weight(visit) == ((root / "good.html").stat().st_size, (root / "plotly.min.js").stat().st_size)


def test_recipe_buttons_of_a_good_figure_pass(checked: Callable[[str], Checked]) -> None:
    """Every recipe button was clicked (the last one is active) and nothing was wrong."""
    visit, problems = checked("recipe_menu")
    assert not any(problems.values()), problems
    assert visit.page.evaluate("() => document.querySelector('.plotly-graph-div')._fullLayout.updatemenus[0].active") == 1


@pytest.mark.parametrize("name, kind, expected", [
    ("broken_figure", "figures", "never drawn"),
    ("broken_figure", "console", "Plotly.newPlott is not a function"),
    ("empty_figure", "figures", "shows no data"),
    ("untitled_figure", "figures", "has no title"),
    ("untitled_figure", "figures", "have no title"),
    ("untitled_figure", "figures", "has no caption"),
    ("dead_slider", "sliders", "did not change the plotted data"),
    ("dead_recipe_menu", "menus", "clicking it did not change the plotted data"),
    ("cdn", "requests", "request to another host: https://cdn.plot.ly/"),
    ("cdn", "links", "<script> loads from outside the site"),
    ("bad_links", "links", "broken link: "),
    ("bad_links", "links", "link to a missing anchor: "),
    ("bad_links", "links", "broken img: "),
    ("raw_math", "math", "raw TeX left in the text"),
    ("raw_math", "math", "formula not typeset"),
    ("hidden_widget", "widgets", "saved widget does not show"),
])
def test_checkers_catch_a_broken_page(checked: Callable[[str], Checked], name: str, kind: str, expected: str) -> None:
    _, problems = checked(name)
    assert any(expected in p for p in problems[kind]), f"{name}: no {kind} problem says {expected!r}: {problems}"


@pytest.mark.parametrize("name, expected", [
    ("long_title", "title 'accuracy at every length"),
    ("long_title", "is cut at the right"),
    ("old_two_line_title", "is cut at the top"),
    ("long_y_title", "y axis title"),
])
def test_fit_check_catches_a_cut_text(checked: Callable[[str], Checked], name: str, expected: str) -> None:
    visit, _ = checked(name)
    problems = fit_problems(visit.page)
    assert any(expected in p for p in problems), f"{name}: no problem says {expected!r}: {problems}"


def test_a_finished_figure_fits(checked: Callable[[str], Checked]) -> None:
    """plots.finish wraps a 198-character title into lines that fit a 672 px column, gives its first line back
    the room plotly.js takes from a title of several lines, and pads the slider for its long first label."""
    visit, problems = checked("finished")
    assert not any(problems.values()), problems
    assert fit_problems(visit.page) == []
    assert visit.page.locator(".gtitle .line").count() == 4


def test_plotly_loaded_twice_is_counted(checked: Callable[[str], Checked]) -> None:
    visit, _ = checked("plotly_twice")
    assert plotly_loads(visit) == 2


# The launch menu as sphinx-book-theme writes it (a button that opens a dropdown of links), in three states.
LAUNCH_MENU = """<style>.dropdown-menu {{display: none}} .dropdown-menu.show {{display: block}}</style>
<div class="dropdown dropdown-launch-buttons"><button onclick="{toggle}">launch</button>
<ul class="dropdown-menu">{links}</ul></div>"""
OPEN = "this.nextElementSibling.classList.toggle('show')"
LAUNCH = {"Colab": "https://colab.example/github/o/r/blob/main/book/x.ipynb",
          "Binder": "https://binder.example/v2/gh/o/r/main?urlpath=lab/tree/book/x.ipynb"}
LINKS = "".join(f'<li><a href="{url}">{label}</a></li>' for label, url in LAUNCH.items())
LAUNCH_PAGES = {
    "launch_ok": LAUNCH_MENU.format(toggle=OPEN, links=LINKS),
    "launch_no_colab": LAUNCH_MENU.format(toggle=OPEN, links=LINKS.split("</li>")[1] + "</li>"),
    "launch_never_opens": LAUNCH_MENU.format(toggle="", links=LINKS),
    "launch_none": "<p>no menu</p>",
}


@pytest.mark.parametrize("name, expected", [
    ("launch_ok", None),
    ("launch_no_colab", "no Colab button"),
    ("launch_never_opens", "not visible after opening"),
    ("launch_none", "no launch menu"),
])
def test_launch_check_catches_missing_buttons(context: BrowserContext, tmp_path: Path, name: str,
                                             expected: str | None) -> None:
    (tmp_path / "page.html").write_text(f"<!doctype html><html><body>{LAUNCH_PAGES[name]}</body></html>")
    with serve(tmp_path) as base:
        page = context.new_page()
        try:
            page.goto(f"{base}page.html")
            problems = launch_problems(page, LAUNCH)
        finally:
            page.close()
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


# What plotly.js draws from a trace, after defaults and the template: the attributes share_styles moves.
_RESOLVED_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(gd => gd._fullData.map(t => ({
    name: t.name, mode: t.mode, visible: t.visible, xaxis: t.xaxis, yaxis: t.yaxis, hovertemplate: t.hovertemplate,
    line: [t.line?.color, t.line?.width, t.line?.dash], marker: [t.marker?.color, t.marker?.size, t.marker?.symbol],
    error: t.error_y ? [t.error_y.visible, t.error_y.thickness, t.error_y.color, t.error_y.array] : null,
    fill: [t.fill, t.fillcolor],
    x: Array.from(t.x || []), y: Array.from(t.y || []), showlegend: t.showlegend})))"""


def test_shared_styles_draw_the_same_figure(context: BrowserContext, tmp_path: Path) -> None:
    """plotly.js resolves every trace of ``share_styles(fig)`` as it does ``fig``'s (names, modes, colours,
    hover texts, subplot axes, error bars, data), on three repeats of three styled traces over two subplots and a
    trace of another type that keeps its style (all shown: plotly.js resolves the style of shown traces only)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2)
    for i in range(3):
        for j, (name, color) in enumerate((("kernel", "#1f77b4"), ("peaks", "black"))):
            fig.add_trace(go.Scatter(y=[i, j, i + j], name=name, mode="lines" if j == 0 else "markers",
                                     line=dict(color=color, width=1.5), marker=dict(symbol="x", size=8),
                                     hovertemplate="%{x}: %{y}<extra>" + name + "</extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=[1, 2], y=[0.5, i / 3], name="accuracy", line=dict(dash="dash"),
                                 error_y=dict(type="data", array=[0.1, 0.2], thickness=1)), row=1, col=2)
    fig.add_trace(go.Bar(x=[1, 2], y=[0.2, 0.4], name="alone", error_y=dict(array=[0.1, 0.2])), row=1, col=2)
    shared = plots.share_styles(fig)
    names = [t.name for t in shared.data]
    assert names == [None] * 9 + ["alone"]  # the repeated styles moved to the template, the lone one stayed
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", tmp_path)
    divs = "".join(plots.BookHTML().to_mimebundle(f.to_dict())["text/html"] for f in (fig, shared))
    (tmp_path / "page.html").write_text('<!doctype html><html><head><meta charset="utf-8">'
                                        f'<script src="plotly.min.js"></script></head><body>{divs}</body></html>')
    with serve(tmp_path) as base:
        visit = open_page(context, f"{base}page.html", settle_ms=500)
        try:
            original, compact = visit.page.evaluate(_RESOLVED_JS)
        finally:
            visit.page.close()
    assert len(original) == 10 and original == compact
