"""Chapter 7's static playground in headless Chromium (issue 12, item 3): the grid figure's two sliders
(training length T, offset K) and its recipe buttons act independently, as a reader moves them. And its
"train here" panel (issue 30): the page trains RoPE and APE itself (lengthgen/plots/trainer.js in Web Workers).

On the built page (served from _build/html) the test clicks the controls one at a time, in an order
that only works if each keeps its value while another moves, and after every click checks that the
controls show the chosen (recipe, T, K), that the title names it, that the plotted data changed, and that
the mean accuracy lines of RoPE and APE equal the chapter's own printed summary table for exactly that
point (and the target line sits K back). A synthetic page shows that the check fails on a figure whose
controls cannot combine (the same figure without the page script).

On the built page the panel is driven as a reader would: at the book's default setting (first fit, T=32, K=2,
seed 0) RoPE reaches >= 0.99 at 1x and APE is within CHANCE_TOLERANCE of 1/V at every longer length; at a
setting on the grid (T=16, K=2) every length of the grid agrees with the grid's seeds within their
spread (the page's rule: 2 standard deviations of the seeds + 3 binomial standard errors of the held-out
samples), in each of the grid's recipes; a setting off the grid (T=20, K=5) trains and draws, with nothing to compare; K >= T and a fractional
K are refused with exactly the package's ConfigError message and the button off; nothing leaves 127.0.0.1.
A synthetic page checks the refusals without a build.

Skips, with the command to run, when there is no build or no chromium (fails under `make test`, like
tests/test_browser.py).
"""

from __future__ import annotations

import json
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import plotly
import pytest
from playwright.sync_api import BrowserContext, Locator, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from browser_util import Visit, console_problems, open_page, outside_requests, serve
from lengthgen import Config, ConfigError, book, playground, plots
from lengthgen.plots.playground_figure import TRAIN_HERE_ID, train_here_html
from test_browser import ALLOWED_ERRORS, context, unavailable  # noqa: F401 (context: the browser fixture)
from test_playground import fake_grid

pytestmark = pytest.mark.browser

PAGE = "book/07_playground"
Expected = Callable[[str, int, int], dict[str, np.ndarray]]  # (recipe, T, K) -> encoding -> mean accuracy (nM,)

# The grid figure's state as the reader sees it: each control's value, the title, the visible traces.
_STATE_JS = """gd => {
    const grid = gd.layout.meta.grid;
    const active = grid.controls.map(c => (c[0] === 'slider' ? gd._fullLayout.sliders
                                                              : gd._fullLayout.updatemenus)[c[1]].active);
    const visible = (gd._fullData || []).filter(t => t.visible === true);
    const arr = v => v == null ? null : Array.from(v);
    return {
        active: active,
        labels: grid.labels,
        title: gd._fullLayout.title.text,
        traces: visible.map(t => ({name: t.name, group: t.legendgroup, mode: t.mode,
                                   x: arr(t.x), y: arr(t.y), x0: t.x0, n: t._length})),
        snapshot: JSON.stringify(visible.map(t => [arr(t.x), arr(t.y), t.x0])),
    };
}"""


def grid_figure(page: Page) -> Locator:
    """The page's one figure with grid controls (layout.meta.grid)."""
    figures = page.locator(".plotly-graph-div")
    has_grid = "gd => !!(gd.layout.meta && gd.layout.meta.grid)"
    found = [i for i in range(figures.count()) if figures.nth(i).evaluate(has_grid)]
    assert len(found) == 1, f"expected one grid figure on the page, found {len(found)}"
    return figures.nth(found[0])


def click_slider(page: Page, gd: Locator, slider: int, step: int) -> None:
    """Click step ``step`` of slider ``slider`` on its rail, as a reader would."""
    group = gd.locator(".slider-group").nth(slider)
    group.scroll_into_view_if_needed()
    rail = group.locator(".slider-rail-touch-rect").bounding_box()
    tick = group.locator(".slider-tick-rect").nth(step).bounding_box()
    page.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)


def click_button(page: Page, gd: Locator, menu: int, button: int) -> None:
    """Click button ``button`` of button row ``menu``."""
    gd.locator(".updatemenu-container").nth(menu).locator("g.updatemenu-button").nth(button).click()


def summary_table(text: str) -> dict[tuple[str, int, int], dict[str, np.ndarray]]:
    """The chapter's printed summary (PlaygroundGrid.summary) as (recipe, T, K) -> encoding -> mean accuracy (nM,)."""
    rows = {}
    pattern = re.compile(r"^(.+?)\s+T=\s*(\d+) K=\s*(\d+)\s+(.*)$")
    for line in text.splitlines():
        m = pattern.match(line.strip())
        if m:
            cells = dict(re.findall(r"(\w+): ([\d. ]+?)(?=\s+\w+:|$)", m.group(4)))
            rows[m.group(1).strip(), int(m.group(2)), int(m.group(3))] = {
                enc: np.array(v.split(), dtype=float) for enc, v in cells.items()}
    return rows


def move_problems(page: Page, gd: Locator, expected: Expected, errors: list[str], timeout_ms: int = 5000) -> list[str]:
    """Move the controls one at a time (slider K, slider T, the recipe, slider T, slider K) and check, after
    each move, every control's value, the title, that the data changed, and that the mean accuracy lines
    and the target line belong to the chosen (recipe, T, K)."""
    state = gd.evaluate(_STATE_JS)
    labels = state["labels"]  # [recipes, Ts, Ks]
    n = [len(v) for v in labels]
    assert min(n[1:]) >= 2 and n[0] >= 2, f"the grid needs two values per control to move them: {labels}"
    want = list(state["active"])
    moves = [("slider", 1, n[2] - 1, 2), ("slider", 0, 0, 1), ("menu", 0, 1 - want[0], 0),
             ("slider", 0, n[1] - 1, 1), ("slider", 1, 0, 2)]
    problems = []
    for kind, index, step, dim in moves:
        if want[dim] == step:  # already there: go one further so that the move changes something
            step = (step + 1) % n[dim]
        want[dim] = step
        recipe, T, K = labels[0][want[0]], int(labels[1][want[1]]), int(labels[2][want[2]])
        where = f"after moving {'the recipe' if kind == 'menu' else ['T', 'K'][index]} to {labels[dim][step]}"
        before, seen = state["snapshot"], len(errors)
        (click_button if kind == "menu" else click_slider)(page, gd, index, step)
        try:
            page.wait_for_function(f"([gd, before]) => ({_STATE_JS})(gd).snapshot !== before",
                                   arg=[gd.element_handle(), before], timeout=timeout_ms)
        except PlaywrightTimeout:
            problems.append(f"{where}: the plotted data did not change")
        state = gd.evaluate(_STATE_JS)
        if state["active"] != want:
            problems.append(f"{where}: controls show {state['active']}, expected {want} (a control lost its value)")
        if f"T={T}" not in state["title"] or f"K={K}" not in state["title"] or recipe not in state["title"]:
            problems.append(f"{where}: the title {state['title']!r} does not name recipe {recipe}, T={T}, K={K}")
        means = {t["group"]: np.array(t["y"]) for t in state["traces"] if t["mode"] == "lines+markers"}
        for enc, acc in expected(recipe, T, K).items():
            if enc not in means:
                problems.append(f"{where}: no visible mean line for {enc} (visible: {sorted(means)})")
            elif means[enc].shape != acc.shape or not np.allclose(means[enc], acc, atol=6e-4):
                problems.append(f"{where}: {enc} shows {np.round(means[enc], 3)}, the grid has {acc} at "
                                f"({recipe}, T={T}, K={K})")
        targets = [t for t in state["traces"] if t["group"] == "target"]
        if len(targets) != 1 or targets[0]["x"] != [K, K]:
            problems.append(f"{where}: the target line is at {[t['x'] for t in targets]}, not {K} back")
        lengths = {t["n"] for t in state["traces"] if t["mode"] == "lines" and t["group"] in ("rope", "ape")}
        if lengths != {2 * T - 1}:
            problems.append(f"{where}: attention profiles of {lengths} keys, expected {2 * T - 1} (L = 2T)")
        problems += [f"{where}: {e}" for e in errors[seen:]]
    return problems


# --- the built page -----------------------------------------------------------------------------------

@contextmanager
def built_page(context: BrowserContext) -> Iterator[Visit]:
    """Chapter 7's page of the built book, served and open (closed afterwards); unavailable without a build."""
    if not (book.HTML / f"{PAGE}.html").exists():
        unavailable(f"no built {PAGE}.html in {book.HTML}: run `make book-quick` first (make test builds it)")
    with serve(book.HTML) as base:
        visit = open_page(context, f"{base}{PAGE}.html")
        try:
            yield visit
        finally:
            visit.page.close()


def test_playground_controls_move_independently(context: BrowserContext) -> None:
    with built_page(context) as visit:
        page = visit.page
        text = page.locator("pre", has_text="accuracy at").first.inner_text()
        table = summary_table(text)
        assert table, f"no summary table on the page: {text[:200]!r}"
        gd = grid_figure(page)
        labels = gd.evaluate(_STATE_JS)["labels"]
        points = {(r, int(T), int(K)) for r in labels[0] for T in labels[1] for K in labels[2]}
        assert points == set(table), f"the figure's grid {sorted(points)} is not the summary's {sorted(table)}"
        problems = move_problems(page, gd, lambda r, T, K: table[r, T, K], visit.errors)
        problems += console_problems(visit, ALLOWED_ERRORS)
    assert not problems, "\n".join(problems)


# --- the check on synthetic pages ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Expected]]:
    """A small fake grid's figure on two pages: with the page script (GridHTML) and without it (BookHTML)."""
    plots.use_book_renderer()
    g = fake_grid(Ts=(8, 12, 16), Ks=(1, 2, 3), S=2, multiples=(1, 2, 4))
    fig = plots.playground_grid(g)
    root = tmp_path_factory.mktemp("playground")
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", root)
    for name, renderer in [("scripted", plots.GridHTML()), ("plain", plots.BookHTML())]:
        div = renderer.to_mimebundle(fig.to_dict())["text/html"]
        (root / f"{name}.html").write_text('<!doctype html><html><head><meta charset="utf-8">'
                                           '<script src="plotly.min.js"></script></head>'
                                           f"<body>{div}</body></html>")

    def expected(recipe: str, T: int, K: int) -> dict[str, np.ndarray]:
        return {enc: acc.mean(1) for enc, (acc, _) in g.pair(recipe, T, K).items()}

    with serve(root) as base:
        yield base, expected


@pytest.mark.parametrize("name, fails", [("scripted", False), ("plain", True)])
def test_the_check_fails_when_controls_cannot_combine(context: BrowserContext, synthetic: tuple[str, Expected],
                                                      name: str, fails: bool) -> None:
    base, expected = synthetic
    visit = open_page(context, f"{base}{name}.html", settle_ms=500)
    try:
        problems = move_problems(visit.page, grid_figure(visit.page), expected, visit.errors,
                                 timeout_ms=5000 if not fails else 1000)
    finally:
        visit.page.close()
    if fails:
        assert any("did not change" in p for p in problems), problems
        assert any("the grid has" in p for p in problems), problems
    else:
        assert not problems, "\n".join(problems)


def test_summary_table_parses_the_chapter_format() -> None:
    text = fake_grid(Ts=(8,), Ks=(1, 2), S=2, multiples=(1, 2)).summary()
    table = summary_table(text)
    assert set(table) == {(r, 8, K) for r in ("first fit", "small steps") for K in (1, 2)}
    assert table["small steps", 8, 2]["ape"].shape == (2,)


# --- "train here": the page trains the model itself --------------------------------------------------------

PANEL = f"#{TRAIN_HERE_ID}"
CHANCE_TOLERANCE = 0.05  # APE past 1x: |accuracy - 1/V| (500 held-out sequences: ~4.5 binomial standard errors)
TRAIN_TIMEOUT_MS = 600_000  # a first-fit pair takes seconds, the full book's small steps (6667) minutes on a busy machine


def set_controls(page: Page, T: object = None, K: object = None, seed: object = None, recipe: str | None = None) -> None:
    """Type T, K and the seed into the panel's number boxes and pick the recipe, as a reader would."""
    panel = page.locator(PANEL)
    for name, value in (("T-value", T), ("K-value", K), ("seed", seed)):
        if value is not None:
            panel.locator(f'[data-lg="{name}"]').fill(str(value))
    if recipe is not None:
        panel.locator('[data-lg="recipe"]').select_option(recipe)


def train_in_page(page: Page) -> dict:
    """Press train and wait for both encodings: the panel's result (data-result)."""
    panel = page.locator(PANEL)
    panel.locator('[data-lg="train"]').click()
    page.wait_for_function(f"() => ['done', 'error'].includes(document.querySelector('{PANEL}').dataset.state)",
                           timeout=TRAIN_TIMEOUT_MS)
    assert panel.get_attribute("data-state") == "done", panel.locator('[data-lg="status"]').inner_text()
    return json.loads(panel.get_attribute("data-result"))


def drawn(page: Page, name: str) -> dict:
    """A panel figure as drawn: its title and the number of points of each trace."""
    return page.locator(PANEL).locator(f'[data-lg="{name}"]').evaluate(
        "gd => ({title: gd._fullLayout ? gd._fullLayout.title.text : '', n: (gd._fullData || []).map(t => t._length)})")


def refusal_problems(page: Page) -> list[str]:
    """K >= T and a fractional K: the panel shows the package's own message and keeps the button off; a good
    setting clears it."""
    problems = []
    for T, K in [(32, 40), (16, 16), (32, 2.5), (32, 0)]:
        with pytest.raises(ConfigError) as caught:
            Config(train_length=T, offset=K)
        set_controls(page, T=T, K=K)
        panel = page.locator(PANEL)
        shown = panel.locator('[data-lg="message"]').inner_text()
        if shown != str(caught.value):
            problems.append(f"T={T}, K={K}: the panel says {shown!r}, the package {str(caught.value)!r}")
        if not panel.locator('[data-lg="train"]').is_disabled() or panel.get_attribute("data-state") != "refused":
            problems.append(f"T={T}, K={K}: the train button is not off")
    set_controls(page, T=32, K=2)
    if page.locator(PANEL).locator('[data-lg="message"]').inner_text() or page.locator(PANEL).get_attribute("data-state") == "refused":
        problems.append("T=32, K=2: still refused after a good setting")
    return problems


def test_train_here_trains_in_the_built_page(context: BrowserContext, capsys: pytest.CaptureFixture) -> None:
    with built_page(context) as visit:
        page = visit.page
        spec = json.loads(page.locator(PANEL).locator("script.lg-spec").text_content())
        first = next(iter(spec["recipes"]))
        problems = refusal_problems(page)
        for name in ("T", "K"):  # issue 31, item 5: a track long enough for the slider's range
            slider = page.locator(PANEL).locator(f'[data-lg="{name}-range"]')
            values = int(slider.get_attribute("max")) - int(slider.get_attribute("min"))
            width = slider.bounding_box()["width"]
            if width < 7.5 * values:
                problems.append(f"the {name} slider has {width:.0f} px of track for {values + 1} values")
        # the book's default setting
        set_controls(page, T=Config().train_length, K=Config().offset, seed=0, recipe=first)
        default = train_in_page(page)
        rope, ape, multiples = default["rope"]["accuracy"], default["ape"]["accuracy"], default["multiples"]
        if rope[0] < 0.99:
            problems.append(f"RoPE at the default setting: {rope[0]:.3f} at 1x, below 0.99")
        for m, a in zip(multiples[1:], ape[1:]):
            if abs(a - spec["chance"]) > CHANCE_TOLERANCE:
                problems.append(f"APE at {m}x: {a:.3f}, not within {CHANCE_TOLERANCE} of chance {spec['chance']:.3f}")
        result = drawn(page, "result")
        if "T=32, K=2" not in result["title"] or len(result["n"]) < 3 or min(result["n"]) < 2:
            problems.append(f"the result figure is not drawn for T=32, K=2: {result}")
        if not drawn(page, "training")["n"] or min(drawn(page, "training")["n"]) < 1:
            problems.append("the training figure shows no loss")
        # on the grid, in each of its recipes: agreement within the seeds' spread
        with capsys.disabled():
            print(f"\ndefault setting: RoPE {[round(a, 3) for a in rope]}, APE {[round(a, 3) for a in ape]} "
                  f"at {multiples}x; wall {default['seconds']:.2f} s")
        for recipe in [name for name, r in spec["recipes"].items() if r["on_grid"]]:
            set_controls(page, T=16, K=2, recipe=recipe)
            rows = train_in_page(page)["comparison"]
            if len(rows) != 2 * len(spec["grid"]["multiples"]):
                problems.append(f"{recipe}, T=16, K=2 is on the grid, but {len(rows)} values were compared")
            problems += [f"{recipe}, T=16, K=2, {r['encoding']} at {r['multiple']}x: {r['here']:.3f} against the "
                         f"grid's {r['mean']:.3f} +- {r['sd']:.3f}, off by more than {r['allowed']:.3f}"
                         for r in rows if not r["agrees"]]
            with capsys.disabled():
                print(f"train here, {recipe}, T=16, K=2, seed 0 against the grid's seeds {spec['grid']['seeds']}:")
                for r in rows:
                    print(f"  {r['encoding']:4s} {r['multiple']:2d}x  here {r['here']:.3f}  grid {r['mean']:.3f} +- "
                          f"{r['sd']:.3f}  allowed {r['allowed']:.3f}  {'agrees' if r['agrees'] else 'DIFFERS'}")
        # off the grid
        set_controls(page, T=20, K=5)
        if "not on the precomputed grid" not in page.locator(PANEL).locator('[data-lg="on-grid"]').inner_text():
            problems.append("T=20, K=5: the panel does not say it is off the grid")
        off = train_in_page(page)
        result = drawn(page, "result")
        if off["comparison"] or "T=20, K=5" not in result["title"] or len(result["n"]) != 3:
            problems.append(f"T=20, K=5 (off the grid): compared {len(off['comparison'])} values, figure {result}")
        if len(off["rope"]["accuracy"]) != len(spec["multiples"]):
            problems.append(f"T=20, K=5: accuracies {off['rope']['accuracy']} for multiples {spec['multiples']}")
        problems += outside_requests(visit) + console_problems(visit, ALLOWED_ERRORS)
    assert not problems, "\n".join(problems)


def test_train_here_refuses_what_the_package_refuses(context: BrowserContext, tmp_path: Path) -> None:
    """The refusals on a small synthetic page (no book build needed)."""
    g = fake_grid(Ts=(8, 16), Ks=(1, 2), S=2, multiples=(1, 2))
    root = tmp_path / "here"
    root.mkdir()
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", root)
    panel = train_here_html(playground.train_here(g, Config(), {"first fit": {}}, samples=50))
    (root / "index.html").write_text('<!doctype html><html><head><meta charset="utf-8"><script src="plotly.min.js">'
                                     f"</script></head><body>{panel}</body></html>")
    with serve(root) as base:
        visit = open_page(context, f"{base}index.html", settle_ms=500)
        try:
            problems = refusal_problems(visit.page) + outside_requests(visit) + console_problems(visit, ALLOWED_ERRORS)
        finally:
            visit.page.close()
    assert not problems, "\n".join(problems)


def test_train_here_trains_from_a_file_offline(context: BrowserContext, tmp_path: Path) -> None:
    """The panel opened as a file (file://) with the network off still trains: its workers come from a Blob of the
    trainer's source carried in the page."""
    g = fake_grid(Ts=(8,), Ks=(1,), S=2, multiples=(1, 2))
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", tmp_path)
    panel = train_here_html(playground.train_here(g, Config(), {"first fit": {}}, samples=50))
    (tmp_path / "index.html").write_text('<!doctype html><html><head><meta charset="utf-8"><script src="plotly.min.js">'
                                         f"</script></head><body>{panel}</body></html>")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    context.set_offline(True)
    try:
        page.goto((tmp_path / "index.html").as_uri())
        set_controls(page, T=8, K=1)
        result = train_in_page(page)
    finally:
        context.set_offline(False)
        page.close()
    assert not errors, errors
    assert result["T"] == 8 and len(result["rope"]["accuracy"]) == len(playground.HERE_MULTIPLES)
    assert result["rope"]["accuracy"][0] >= 0.9, result["rope"]
