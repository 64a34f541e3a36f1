"""Look at built HTML pages the way a reader does: serve a folder on 127.0.0.1, open a page in headless
Chromium (Debian's /usr/bin/chromium driven by Playwright), and check what the page shows.

Every ``*_problems`` function returns a list of problems in words (empty: the page passed), so a test can
report all of them at once. ``open_page`` records every request, response size, console error and
uncaught exception of the page while it is open; requests to any host but 127.0.0.1 are recorded and
aborted. Used by tests/test_browser.py, on the book and on small synthetic pages.
"""

from __future__ import annotations

import functools
import http.server
import re
import tempfile
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping
from urllib.parse import unquote, urldefrag, urlsplit

from playwright.sync_api import BrowserContext, ConsoleMessage, Locator, Page, Request, Response, Route, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM = Path("/usr/bin/chromium")
# Flags that work as root in a container (../shared/TOOLCHAIN.md); Playwright adds --headless.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--disable-sync", "--disable-quic",
]
LOCAL_HOST = "127.0.0.1"
VIEWPORT = {"width": 1280, "height": 900}
SETTLE_MS = 15_000  # longest wait for saved widgets to show
PLOTLY_JS = re.compile(r"/plotly(-[\d.]+)?(\.min)?\.js$")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on a free port of 127.0.0.1 from a thread; yields the base URL ('http://127.0.0.1:N/')."""
    if not root.is_dir():
        raise FileNotFoundError(f"nothing to serve: {root} is not a folder")
    server = http.server.ThreadingHTTPServer((LOCAL_HOST, 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOCAL_HOST}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def chromium(executable: Path = CHROMIUM) -> Iterator[BrowserContext]:
    """A headless Chromium context with a fresh profile (deleted afterwards)."""
    if not executable.exists():
        raise FileNotFoundError(f"{executable} is missing: run scripts/install_chromium.sh")
    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=str(executable), headless=True, args=CHROMIUM_FLAGS, viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


@dataclass
class Visit:
    """One open page and what it did: every request, its size, and every error it reported."""

    page: Page
    requests: list[str] = field(default_factory=list)  # every URL requested, in order
    sizes: dict[str, int] = field(default_factory=dict)  # URL -> bytes of the response body
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed requests
    pending: set[Request] = field(default_factory=set)  # requests not answered yet

    def listen(self) -> None:
        """Record everything the page does from now on; requests leaving 127.0.0.1 are aborted."""
        self.page.on("request", self._on_request)
        self.page.on("requestfinished", lambda r: self.pending.discard(r))
        self.page.on("requestfailed", self._on_failed)
        self.page.on("response", self._on_response)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught exception: {e}"))
        self.page.route("**/*", _local_only)

    def _on_request(self, request: Request) -> None:
        self.requests.append(request.url)
        self.pending.add(request)

    def _on_response(self, response: Response) -> None:
        if response.status >= 400:
            self.errors.append(f"HTTP {response.status} for {response.url}")
        length = response.headers.get("content-length")
        if length is None and response.status == 200:
            length = len(response.body())
        self.sizes[response.url] = int(length or 0)

    def _on_failed(self, request: Request) -> None:
        self.pending.discard(request)
        if not self.errors or request.url not in self.errors[-1]:  # not the abort that follows an HTTP error
            self.errors.append(f"request failed ({request.failure}): {request.url}")

    def _on_console(self, message: ConsoleMessage) -> None:
        # "Failed to load resource" repeats an HTTP error that _on_response reports with its URL.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(f"console error: {message.text} ({message.location.get('url')})")

    def settle(self, timeout_ms: int, quiet_ms: int = 300) -> None:
        """Wait until no request has been pending for ``quiet_ms`` (at most ``timeout_ms``)."""
        quiet = 0
        for _ in range(timeout_ms // 100):
            quiet = quiet + 100 if not self.pending else 0
            if quiet >= quiet_ms:
                return
            self.page.wait_for_timeout(100)


def _local_only(route: Route) -> None:
    """Let requests to 127.0.0.1 through, abort the rest (they are recorded as requests all the same)."""
    if is_local(route.request.url):
        route.continue_()
    else:
        route.abort("blockedbyclient")


def is_local(url: str) -> bool:
    """True for 127.0.0.1 and for URLs that need no network (data:, blob:, about:)."""
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname == LOCAL_HOST


def open_page(context: BrowserContext, url: str, settle_ms: int = SETTLE_MS, width: int | None = None) -> Visit:
    """Load ``url`` and wait until it has finished drawing: every script loaded, MathJax done, the saved
    widgets shown and the network quiet (at most ``settle_ms`` for the last two). ``width``: the window's width
    in pixels (default: ``VIEWPORT``'s).

    Routing every request also turns off the HTTP cache, so ``sizes`` holds what each page transfers.
    """
    visit = Visit(context.new_page())
    if width is not None:
        visit.page.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
    visit.listen()
    visit.page.goto(url, wait_until="load")
    visit.page.evaluate("() => window.MathJax?.startup?.promise")
    try:
        visit.page.wait_for_function(f"() => {_WIDGETS_PENDING_JS}.length === 0", timeout=settle_ms)
    except PlaywrightTimeout:
        pass  # widget_problems names the ones that never showed
    visit.settle(settle_ms)
    return visit


def outside_requests(visit: Visit) -> list[str]:
    """Every request that tried to leave 127.0.0.1."""
    return [f"request to another host: {u}" for u in visit.requests if not is_local(u)]


def console_problems(visit: Visit, allowed: Mapping[str, str]) -> list[str]:
    """Errors the page reported, except those matching a regex of ``allowed`` (regex -> why it is harmless)."""
    return [e for e in visit.errors if not any(re.search(rx, e) for rx in allowed)]


def is_shared(url: str) -> bool:
    """Theme and vendored assets every page shares (cached by a reader's browser): _static/ and any .js."""
    path = urlsplit(url).path
    return path.startswith("/_static/") or path.endswith(".js")


def page_weight(visit: Visit) -> tuple[int, int]:
    """Bytes transferred: (the page's own: HTML, JSON, images; the shared scripts, styles and fonts)."""
    own = sum(n for u, n in visit.sizes.items() if not is_shared(u))
    return own, sum(visit.sizes.values()) - own


def plotly_loads(visit: Visit) -> int:
    """How many times plotly.js reached the page: script requests plus copies inlined in the HTML."""
    requested = sum(1 for u in visit.requests if PLOTLY_JS.search(urlsplit(u).path))
    inlined = visit.page.evaluate(
        "() => [...document.scripts].filter(s => !s.src && s.text.includes('* plotly.js v')).length"
    )
    return requested + inlined


# The number of data marks a figure shows: lines, markers, bars, fills of any trace (plotly.js 3-4 draws
# each trace as a g.trace) and heatmap rasters (an <image>).
_MARKS_JS = """gd => [...gd.querySelectorAll('.main-svg g.trace path, .main-svg image')]
    .filter(e => (e.getAttribute(e.tagName === 'path' ? 'd' : 'href') || '').length > 5).length"""

# Titles come from the figure's own layout: plotly.js fills the full layout's empty ones with placeholders.
_FIGURES_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(gd => {
    const full = gd._fullLayout || {}, own = gd.layout || {};
    const text = t => (typeof t === 'string' ? t : (t && t.text)) || '';
    const axes = Object.keys(full).filter(k => /^[xy]axis\\d*$/.test(k) && full[k].visible !== false);
    const figure = gd.closest('figure');
    return {
        id: gd.id,
        drawn: Array.isArray(gd._fullData) && gd.querySelector('.main-svg') !== null,
        traces: (gd._fullData || []).filter(t => t.visible === true).length,
        marks: (MARKS)(gd),
        title: text(own.title),
        untitled_axes: axes.filter(k => !text(own[k] && own[k].title)),
        caption: figure ? (figure.querySelector('figcaption')?.textContent || '').trim() : '',
    };
})"""


def figure_problems(page: Page) -> list[str]:
    """Every plotly figure is drawn (an SVG with data marks), has a title, axis titles and a caption."""
    problems = []
    for f in page.evaluate(_FIGURES_JS.replace("MARKS", _MARKS_JS)):
        name = f"figure {f['title'] or f['caption'][:60] or f['id']!r}"
        if not f["drawn"]:
            problems.append(f"{name} was never drawn by plotly.js (no SVG)")
        elif f["traces"] == 0 or f["marks"] == 0:
            problems.append(f"{name} is drawn but shows no data ({f['traces']} visible traces, {f['marks']} marks)")
        if f["drawn"] and not f["title"]:
            problems.append(f"{name} has no title")
        if f["drawn"] and f["untitled_axes"]:
            problems.append(f"{name}: axes {f['untitled_axes']} have no title (say what and in which unit)")
        if not f["caption"]:
            problems.append(f"{name} has no caption (glue it into a {{glue:figure}} with a caption)")
    return problems


# Every text plotly.js drew in a figure (titles, axis titles, subplot titles and other annotations, tick labels,
# legend entries, slider and button labels; not the hover labels) and the box a reader sees of the figure: its
# SVG, cut down to any scrolling or clipping element around it.
_TEXTS_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].flatMap((gd, g) => {
    const svg = gd.querySelector('.main-svg');
    if (!svg) return [];
    const r = svg.getBoundingClientRect(), box = {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    for (let a = gd.parentElement; a && a !== document.body; a = a.parentElement) {
        const s = getComputedStyle(a), q = a.getBoundingClientRect();
        if (s.overflowX !== 'visible') { box.left = Math.max(box.left, q.left); box.right = Math.min(box.right, q.right); }
        if (s.overflowY !== 'visible') { box.top = Math.max(box.top, q.top); box.bottom = Math.min(box.bottom, q.bottom); }
    }
    const title = gd.layout.title && (gd.layout.title.text || gd.layout.title);
    const name = (typeof title === 'string' && title) || gd.id;
    return [...gd.querySelectorAll('.main-svg text')].filter(e => !e.closest('.hoverlayer')).map(e => {
        const q = e.getBoundingClientRect();
        return {figure: g, name: name.replace(/<br>/gi, ' '), cls: e.getAttribute('class') || e.parentElement.getAttribute('class') || '',
                text: e.textContent.trim(), left: q.left, right: q.right, top: q.top, bottom: q.bottom,
                box: box, width: r.width};
    }).filter(t => t.text && t.right > t.left && t.bottom > t.top);
})"""

FIT_TOLERANCE_PX = 2.0


def _text_kind(cls: str) -> str:
    """What a text of a plotly figure is, from its SVG class."""
    kinds = [(r"^gtitle", "title"), (r"^x\d*title", "x axis title"), (r"^y\d*title", "y axis title"),
             (r"annotation", "annotation (a subplot title)"), (r"^[xy]\d*tick", "tick label"),
             (r"legendtext", "legend entry"), (r"slider", "slider label"), (r"button|updatemenu", "button label"),
             (r"^cb|colorbar", "colour bar text")]
    return next((kind for rx, kind in kinds if re.search(rx, cls)), f"text ({cls})")


def fit_problems(page: Page) -> list[str]:
    """Every text of every plotly figure (``_TEXTS_JS``: titles, axis and subplot titles, tick, legend, slider
    and button labels) lies inside the figure as the page shows it, within ``FIT_TOLERANCE_PX``; the title
    overlaps no other text. Each problem names the figure, the text, and the side it is cut at and by how much."""
    problems = []
    texts = page.evaluate(_TEXTS_JS)
    for t in texts:
        box, tol = t["box"], FIT_TOLERANCE_PX
        over = {"left": box["left"] - t["left"], "right": t["right"] - box["right"],
                "top": box["top"] - t["top"], "bottom": t["bottom"] - box["bottom"]}
        cut = [f"{side} by {px:.0f} px" for side, px in over.items() if px > tol]
        if cut:
            problems.append(f"figure {t['name'][:90]!r} ({t['width']:.0f} px wide): {_text_kind(t['cls'])} "
                            f"{t['text'][:90]!r} is cut at the {', '.join(cut)}")
    for title in [t for t in texts if _text_kind(t["cls"]) == "title"]:
        for t in texts:
            if t is title or t["figure"] != title["figure"]:
                continue
            dx = min(title["right"], t["right"]) - max(title["left"], t["left"])
            dy = min(title["bottom"], t["bottom"]) - max(title["top"], t["top"])
            if dx > FIT_TOLERANCE_PX and dy > FIT_TOLERANCE_PX:
                problems.append(f"figure {title['name'][:90]!r}: the title overlaps the {_text_kind(t['cls'])} "
                                f"{t['text'][:60]!r} ({dx:.0f} x {dy:.0f} px)")
    return problems


_RAW_MATH_JS = """() => {
    const skip = 'pre, code, script, style, textarea, mjx-container, .plotly-graph-div';
    const root = document.querySelector('main') || document.body;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const found = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const i = n.data.search(/\\\\\\(|\\\\\\[|\\$\\$/);
        if (i >= 0 && !n.parentElement.closest(skip)) found.push(n.data.slice(Math.max(0, i - 20), i + 40));
    }
    const untypeset = [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container'));
    return {raw: found, untypeset: untypeset.map(e => e.textContent.slice(0, 60)),
            errors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 60))};
}"""


def math_problems(page: Page) -> list[str]:
    """Every formula is typeset: no raw \\( \\[ $$ left in the text, no MathJax error."""
    found = page.evaluate(_RAW_MATH_JS)
    return (
        [f"raw TeX left in the text: {s!r}" for s in found["raw"]]
        + [f"formula not typeset: {s!r}" for s in found["untypeset"]]
        + [f"MathJax error: {s!r}" for s in found["errors"]]
    )


# Saved widget views (myst-nb writes one script per view; the widget manager inserts a .widget-subarea
# before it when it renders the view) that are not showing yet.
_WIDGETS_PENDING_JS = """[...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')]
    .filter(s => { const a = s.previousElementSibling;
                   return !(a && a.classList.contains('widget-subarea') && a.getBoundingClientRect().height > 0); })"""


def widget_problems(page: Page) -> list[str]:
    """Every widget saved with the notebook shows (rendered by the widget manager, with a visible size)."""
    missing = page.evaluate(f"() => {_WIDGETS_PENDING_JS}.map(s => s.textContent.slice(0, 120))")
    return [f"saved widget does not show: {m.strip()}" for m in missing]


_SNAPSHOT_JS = """gd => JSON.stringify((gd._fullData || []).filter(t => t.visible === true).map(t =>
    ['x', 'y', 'z', 'text'].map(k => t[k] == null ? null
        : Array.from(t[k], v => (v && typeof v === 'object') ? Array.from(v) : v))))"""

_SLIDERS_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].flatMap((gd, g) =>
    ((gd._fullLayout && gd._fullLayout.sliders) || []).map((s, k) =>
        ({figure: g, slider: k, visible: s.visible !== false, labels: s.steps.map(st => st.label),
          title: (gd.layout.title && (gd.layout.title.text || gd.layout.title)) || gd.id})).filter(s => s.visible))"""


def slider_problems(page: Page, visit: Visit, after: Callable[[str], None] | None = None) -> list[str]:
    """Click every step of every plotly slider, as a reader would, from the step it opens on: every other step
    must be selected, change the plotted data (visible traces' x, y, z, text) from the step before, leave data
    marks on screen, and raise no JavaScript error. ``after(where)``: called after each click, with the click in words."""
    problems = []
    for s in page.evaluate(_SLIDERS_JS):
        gd = page.locator(".plotly-graph-div").nth(s["figure"])
        group = gd.locator(".slider-group").nth(s["slider"])
        group.scroll_into_view_if_needed()
        rail = group.locator(".slider-rail-touch-rect").bounding_box()
        active = f"gd => gd._fullLayout.sliders[{s['slider']}].active"
        opened_on = gd.evaluate(active) or 0  # a slider may open on another step than its first
        for i, label in enumerate(s["labels"]):
            if i == opened_on:
                continue
            where = f"figure {s['title']!r}, slider step {label!r}"
            errors = len(visit.errors)
            before = gd.evaluate(_SNAPSHOT_JS)
            tick = group.locator(".slider-tick-rect").nth(i).bounding_box()
            page.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)
            # plotly.js marks the step active at once and redraws on the next animation frame
            problems += _after_click(page, gd, active, i, before, visit, errors, where, "moving the slider")
            if after:
                after(where)
    return problems


def _after_click(page: Page, gd: Locator, active: str, i: int, before: str, visit: Visit, errors: int, where: str,
                 action: str) -> list[str]:
    """What a control's click ``i`` must do, as a reader sees it: select step or button ``i`` (``active``: a JS
    function of the figure), change the plotted data from ``before`` (``_SNAPSHOT_JS``), leave data marks on
    screen, and raise no JavaScript error after the first ``errors`` of ``visit``."""
    if not _wait(page, f"([gd, i]) => ({active})(gd) === i", [gd.element_handle(), i]):
        return [f"{where}: clicking it did not select it (active: {gd.evaluate(active)})"]
    problems = []
    if not _wait(page, f"([gd, before]) => ({_SNAPSHOT_JS})(gd) !== before", [gd.element_handle(), before]):
        problems.append(f"{where}: {action} did not change the plotted data")
    if gd.evaluate(_MARKS_JS) == 0:
        problems.append(f"{where}: no data left on screen")
    return problems + [f"{where}: {e}" for e in visit.errors[errors:]]


_MENUS_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].flatMap((gd, g) =>
    ((gd._fullLayout && gd._fullLayout.updatemenus) || []).filter(m => m.visible !== false).map((m, k) =>
        ({figure: g, menu: k, index: m._index, type: m.type, labels: m.buttons.map(b => b.label),
          title: (gd.layout.title && (gd.layout.title.text || gd.layout.title)) || gd.id})))"""


def menu_problems(page: Page, visit: Visit, after: Callable[[str], None] | None = None) -> list[str]:
    """Click every button of every plotly update menu (the recipe buttons of ``plots.recipe_menu`` and any other
    ``grid_controls`` menu), as a reader would: each must become the active one, change the plotted data
    (visible traces' x, y, z, text) from the button before, leave data marks on screen, and raise no
    JavaScript error. Dropdown menus are opened first. ``after(where)``: called after each click, with the click in words."""
    problems = []
    for m in page.evaluate(_MENUS_JS):
        gd = page.locator(".plotly-graph-div").nth(m["figure"])
        header = gd.locator(".updatemenu-header-group").nth(m["menu"])
        active = f"gd => gd._fullLayout.updatemenus[{m['index']}].active"
        for i, label in enumerate(m["labels"]):
            if i == gd.evaluate(active):
                continue  # the button already shown: clicking it changes nothing by design
            where = f"figure {m['title']!r}, menu button {label!r}"
            errors = len(visit.errors)
            before = gd.evaluate(_SNAPSHOT_JS)
            header.scroll_into_view_if_needed()
            if m["type"] == "dropdown":
                header.locator(".updatemenu-header").click()
                button = gd.locator(".updatemenu-dropdown-button-group .updatemenu-button").nth(i)
            else:
                button = header.locator(".updatemenu-button").nth(i)
            try:
                button.click(timeout=3000)
            except PlaywrightTimeout:
                problems.append(f"{where}: the button cannot be clicked")
                continue
            problems += _after_click(page, gd, active, i, before, visit, errors, where, "clicking it")
            if after:
                after(where)
    return problems


def _wait(page: Page, predicate: str, arg: object, timeout_ms: int = 5000) -> bool:
    """Whether the JavaScript ``predicate(arg)`` became true within ``timeout_ms``."""
    try:
        page.wait_for_function(predicate, arg=arg, timeout=timeout_ms)
        return True
    except PlaywrightTimeout:
        return False


def link_problems(page: Page, base: str) -> list[str]:
    """Every href and src of the page that points into the site (``base``) exists (HTTP 200), and so does
    the anchor of a link to a page; nothing but plain links (<a>) points elsewhere."""
    targets = page.evaluate("""() => [...document.querySelectorAll('[href], [src]')].flatMap(e =>
        ['href', 'src'].filter(a => e.hasAttribute(a)).map(a =>
            ({tag: e.tagName.toLowerCase(), url: new URL(e.getAttribute(a), document.baseURI).href})))""")
    problems = []
    for t in targets:
        url, fragment = urldefrag(t["url"])
        if urlsplit(url).scheme in ("mailto", "javascript", "data", "blob"):
            continue
        if not url.startswith(base):
            if t["tag"] != "a":
                problems.append(f"<{t['tag']}> loads from outside the site: {t['url']}")
            continue
        code = http_status(url)
        if code != 200:
            problems.append(f"broken {'link' if t['tag'] == 'a' else t['tag']}: {t['url']} (HTTP {code})")
        elif fragment and url.endswith(".html") and unquote(fragment) not in anchors(url):
            problems.append(f"link to a missing anchor: {t['url']}")
    return sorted(set(problems))


@functools.lru_cache(maxsize=None)
def http_status(url: str) -> int | None:
    """The HTTP status of a HEAD request (None when the server cannot be reached)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return None


@functools.lru_cache(maxsize=None)
def anchors(url: str) -> frozenset[str]:
    """The ids and names an HTML page defines (the targets of #fragment links)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        return frozenset(re.findall(r'\b(?:id|name)="([^"]+)"', r.read().decode("utf-8", "replace")))


def launch_problems(page: Page, expected: Mapping[str, str], menu: str = ".dropdown-launch-buttons") -> list[str]:
    """The page's launch menu (sphinx-book-theme's rocket button, ``menu``) opens on a click and shows a
    link for each ``label -> URL`` of ``expected`` (e.g. Colab, Binder). Closes the menu again."""
    if page.locator(menu).count() == 0:
        return [f"no launch menu ({menu}): expected {', '.join(expected)} buttons"]
    problems = []
    try:
        page.locator(f"{menu} button").first.click(timeout=3000)
    except PlaywrightTimeout:
        problems.append("the launch menu button cannot be clicked")
    for label, url in expected.items():
        link = page.locator(f'{menu} a[href="{url}"]')
        if link.count() == 0:
            others = page.eval_on_selector_all(f"{menu} a[href]", "els => els.map(e => e.getAttribute('href'))")
            problems.append(f"no {label} button linking to {url} (the menu links to {others})")
        elif not _wait(page, "a => a.offsetParent !== null && a.getBoundingClientRect().height > 0",
                       link.first.element_handle(), timeout_ms=3000):
            problems.append(f"the {label} button is not visible after opening the launch menu")
    page.keyboard.press("Escape")
    return problems
