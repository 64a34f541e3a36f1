"""How the book's figures look and reach the page: the template and sizes, the shared styles, the renderer
(HTML without plotly.js, plus plotly's JSON for JupyterLab), glue, slider figures, and grid figures whose
independent controls the page's script (``grid.js``) combines.

Every figure family (``accuracy``, ``attention``, ``mechanism``, ``sweeps``, ``playground_figure``) ends its
figures with ``finish``, which sets the title, the axis titles and the figure's own height, so that the
page, JupyterLab and Colab draw it at the same size (a height left to the template is ignored by
JupyterLab's plotly renderer, which then draws 360 px).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from importlib import resources
from typing import Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer
from plotly.utils import PlotlyJSONEncoder

from ..encodings import TRAITS

COLORS = {name: t.color for name, t in TRAITS.items()}  # each encoding's colour, as encodings.TRAITS sets it
LABELS = {name: t.label for name, t in TRAITS.items()}  # each encoding's display name, as encodings.TRAITS sets it
CHANCE_STYLE = dict(color="black", dash="dot", width=1)
DASHES = ("solid", "dash", "dashdot", "longdash")  # variants of one encoding
HEIGHT = 440  # pixels: every figure's height unless it sets its own
SLIDER_ROOM = 80  # pixels added below a figure for its slider
BOOK_BUILD_ENV = "LENGTHGEN_BOOK_BUILD"  # set by lengthgen.book while it executes the chapters

# A small template (plotly's built-in ones add ~8 KB of JSON to every figure).
pio.templates["lengthgen"] = go.layout.Template(
    layout=dict(
        font=dict(family="sans-serif", size=13),
        plot_bgcolor="white",
        xaxis=dict(showline=True, linecolor="#444", gridcolor="#e5e5e5", zeroline=False),
        yaxis=dict(showline=True, linecolor="#444", gridcolor="#e5e5e5", zeroline=False),
        margin=dict(l=70, r=30, t=110, b=60),
        height=HEIGHT,
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, bgcolor="rgba(255,255,255,0.8)"),
    )
)


def _grid_script() -> str:
    """grid.js without its comment lines (they would be repeated in every grid figure's HTML)."""
    text = resources.files(__package__).joinpath("grid.js").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("//"))


GRID_JS = _grid_script()


def finish(fig: go.Figure, title: str, x: str, y: str, **kw: object) -> go.Figure:
    """Set ``fig``'s title (``set_title``: wrapped to fit the book's narrowest figure, the top margin and height grown
    by its extra lines), axis titles and any other layout ``kw``; its height is set on the figure itself
    (``kw["height"]``, else the height it has, else ``HEIGHT``), its width follows the container. Its sliders get
    room for their end labels (``fit_sliders``)."""
    height = kw.pop("height", None) or fig.layout.height or HEIGHT
    fig.update_layout(xaxis_title=x, yaxis_title=y, height=height, autosize=True, **kw)
    set_title(fig, title)
    return fit_sliders(fig)


# A title line of at most TITLE_CHARS characters fits the narrowest figure the book draws: the content column of a
# 1280 px window is 672 px, and the template's 13 px sans-serif (DejaVu Sans in Chromium) takes about 8.6 px a
# character, so 60 characters take about 520 px (room for a 14 px title font and for the left offset too).
TITLE_CHARS = 60
TITLE_LINE_PX = 22  # the height of each further title line (13-14 px font, plotly's line spacing 1.3)
TITLE_PAD_PX = 8  # from the figure's top edge to the title's first line
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def wrap_title(text: str, longest: Sequence[str] = ()) -> str:
    """``text`` with a line break (``<br>``) before each word that would take a line past ``TITLE_CHARS``; breaks
    it already holds are kept. ``longest``: for a title template (``grid_controls``), the longest value of each
    "{d}" placeholder, counted at that length (a value is never split)."""
    def length(s: str) -> int:
        s = re.sub(r"\{(\d+)\}", lambda m: longest[int(m.group(1))] if int(m.group(1)) < len(longest) else m.group(),
                   s)
        return len(re.sub(r"<[^>]*>", "", s))

    lines = []
    for part in _BR.split(text):
        line = ""
        for word in part.split(" "):
            if line and length(f"{line} {word}") > TITLE_CHARS:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def margin(fig: go.Figure, side: str) -> int:
    """``fig``'s margin on ``side`` ("t", "b", "l" or "r") in pixels: its own, else the template's."""
    own = getattr(fig.layout.margin, side)
    return own if own is not None else getattr(pio.templates["lengthgen"].layout.margin, side)


def _title_lines(text: str | None) -> int:
    """How many lines a title takes (an empty one is counted as the one line the margins leave room for)."""
    return len(_BR.split(text)) if text else 1


def _title_layout(text: str, font_size: float) -> dict:
    """The layout.title of a title ``text`` at the top left of the figure, ``TITLE_PAD_PX`` below its top edge.
    plotly.js drops the cap-height shift (0.7 em) of a ``yanchor="top"`` title that has more than one line, which
    put its first line above the figure's edge: the padding gives it back."""
    shift = round(0.7 * font_size) if _title_lines(text) > 1 else 0
    return dict(text=text, x=0.02, xanchor="left", y=1, yref="container", yanchor="top",
                pad=dict(t=TITLE_PAD_PX + shift))


def set_title(fig: go.Figure, text: str) -> str:
    """Give ``fig`` the title ``text`` wrapped by ``wrap_title``, at ``_title_layout``'s place; the top margin and the
    height grow (or shrink) by ``TITLE_LINE_PX`` per line more (or fewer) than the title it had, so the plot keeps
    its size. Returns the wrapped text."""
    wrapped = wrap_title(text)
    extra = TITLE_LINE_PX * (_title_lines(wrapped) - _title_lines(fig.layout.title.text))
    size = fig.layout.title.font.size or fig.layout.font.size or pio.templates["lengthgen"].layout.font.size
    fig.update_layout(title=_title_layout(wrapped, size), margin_t=margin(fig, "t") + extra,
                      height=(fig.layout.height or HEIGHT) + extra)
    return wrapped


LEGEND_WIDTH_PX = 520  # the legend's width in the narrowest figure (672 px less the side margins and some slack)
LEGEND_ROW_PX = 20
LEGEND_CHAR_PX = 7.5  # a legend entry's character (13 px DejaVu Sans, mostly lower case)


def legend_room(names: Sequence[str]) -> int:
    """The top margin (pixels) for a one-line title above a horizontal legend of entries ``names`` that sits on top
    of the plot (the template's). plotly.js lays such a legend out in columns as wide as its widest entry (its text
    at ``LEGEND_CHAR_PX`` a character, 40 px of symbol and gap), as many as fit ``LEGEND_WIDTH_PX``, one row of
    ``LEGEND_ROW_PX`` per that many entries; at least the template's margin."""
    widest = max((LEGEND_CHAR_PX * len(n) + 40 for n in names), default=0)
    rows = math.ceil(len(names) / max(1, int(LEGEND_WIDTH_PX // max(widest, 1))))
    return max(pio.templates["lengthgen"].layout.margin.t, TITLE_PAD_PX + TITLE_LINE_PX + 20 + LEGEND_ROW_PX * rows)


SLIDER_CHAR_PX = 8.6  # the width of a slider label's character, as TITLE_CHARS counts it


def fit_sliders(fig: go.Figure) -> go.Figure:
    """Pad each slider that starts at the plot's left edge (or ends at its right edge) so that its first (last) step
    label, centred on the rail's end, stays inside the figure: half the label's width past the side margin."""
    left, right = margin(fig, "l"), margin(fig, "r")
    for slider in fig.layout.sliders:
        if not slider.steps:
            continue
        x = slider.x if slider.x is not None else 0
        length = slider.len if slider.len is not None else 1
        need = lambda label: max(0, math.ceil(SLIDER_CHAR_PX * len(label) / 2))  # noqa: E731
        if x <= 0.01:
            slider.pad.l = max(slider.pad.l or 0, need(slider.steps[0].label) - left + 6)
        if x + length >= 0.99:
            slider.pad.r = max(slider.pad.r or 0, need(slider.steps[-1].label) - right + 6)
    return fig


def vertical(x: float, name: str, line: dict, y: tuple[float, float] = (0.0, 1.0)) -> go.Scatter:
    """A vertical marker line as a legend entry (plotly misplaces add_vline annotations on log axes)."""
    return go.Scatter(x=[x, x], y=list(y), mode="lines", name=name, line=line, hoverinfo="skip")


def slider_figure(frames: Mapping[str, list[go.BaseTraceType]], label: str, **layout: object) -> go.Figure:
    """One figure holding every frame's traces; a slider shows one frame at a time.

    frames: slider label -> the traces of that frame (same layout for all). The first frame is shown.
    """
    fig = go.Figure()
    owner: list[int] = []
    for i, traces in enumerate(frames.values()):
        for t in traces:
            t.visible = i == 0
            fig.add_trace(t)
            owner.append(i)
    steps = [
        dict(method="update", label=name, args=[{"visible": [o == i for o in owner]}])
        for i, name in enumerate(frames)
    ]
    fig.update_layout(height=HEIGHT)
    if len(frames) > 1:
        fig.update_layout(sliders=[dict(active=0, steps=steps, currentvalue=dict(prefix=f"{label}: "), pad=dict(t=80))],
                          margin=dict(b=150), height=HEIGHT + SLIDER_ROOM)
    fig.update_layout(**layout)
    return fig


def grid_visibility(owners: Sequence[Sequence[int]], active: Sequence[int]) -> list[bool]:
    """What GRID_JS computes: trace i is visible when every dimension of owners[i] is -1 or active[d]."""
    return [all(v < 0 or v == a for v, a in zip(o, active)) for o in owners]


def grid_controls(fig: go.Figure, owners: Sequence[Sequence[int]], dims: Sequence[tuple[str, str, Sequence[str]]],
                  active: Sequence[int], title: str) -> go.Figure:
    """Add independent controls to ``fig`` (its traces precomputed for every grid point) and show ``active``.

    owners: (n_traces, n_dims) grid point of each trace, -1 where a trace is shared along a dimension;
    dims: per dimension (kind, label, values as text), kind "slider" (drawn below the plot, side by side)
    or "menu" (a row of buttons above it); active: (n_dims,) the first grid point shown; title: the
    figure title with "{d}" for dimension d's value. Render with ``GridHTML`` / ``glue_grid_figure``,
    whose script (GRID_JS) combines the controls in the page.
    """
    owners = [[int(v) for v in o] for o in owners]
    if len(owners) != len(fig.data) or any(len(o) != len(dims) for o in owners):
        raise ValueError(f"owners: one entry of {len(dims)} indices per trace ({len(fig.data)} traces)")
    for trace, shown in zip(fig.data, grid_visibility(owners, active)):
        trace.visible = shown
    sliders = [d for d in dims if d[0] == "slider"]
    controls, fmt = [], {}
    n_sliders = n_menus = 0
    gap = 0.06
    width = (1 - gap * (len(sliders) - 1)) / max(len(sliders), 1)
    slider_layout, menu_layout = [], []
    for d, ((kind, label, values), a) in enumerate(zip(dims, active)):
        fmt[d] = values[a]
        if kind == "slider":
            slider_layout.append(dict(
                active=a, steps=[dict(method="skip", label=v, args=[None]) for v in values],
                currentvalue=dict(prefix=f"{label}: "), x=n_sliders * (width + gap), len=width, pad=dict(t=70)))
            controls.append(["slider", n_sliders])
            n_sliders += 1
        elif kind == "menu":
            menu_layout.append(dict(
                type="buttons", direction="right", active=a, showactive=True, x=1, xanchor="right",
                y=1.02 + 0.12 * n_menus, yanchor="bottom", pad=dict(r=0, t=0),
                buttons=[dict(method="skip", label=f"{label}: {v}", args=[None]) for v in values]))
            controls.append(["menu", n_menus])
            n_menus += 1
        else:
            raise ValueError(f"control kind {kind!r}: use 'slider' or 'menu'")
    title = wrap_title(title, [max(values, key=len) for _, _, values in dims])  # wrapped as for its longest values
    fig.update_layout(
        sliders=slider_layout, updatemenus=menu_layout,
        meta=dict(grid=dict(owners=owners, controls=controls, labels=[list(v) for _, _, v in dims],
                            names=[label for _, label, _ in dims], title=title)),
    )
    set_title(fig, title.format(*[fmt[d] for d in range(len(dims))]))
    return fit_sliders(fig)


# What may change from one trace to the next of a figure that shares its styles (``share_styles``): the data and
# its visibility. Everything else of a trace (type aside) is its style. "a.b" is key b inside a trace's key a.
TRACE_DATA = ("x", "y", "x0", "dx", "y0", "dy", "z", "customdata", "text", "visible", "error_x.array",
              "error_y.array")


def _split_trace(trace: dict) -> tuple[dict, dict]:
    """A trace's JSON (``to_plotly_json``) as (its type, data and visibility; its style)."""
    data, style = {"type": trace["type"]}, {k: v for k, v in trace.items() if k not in ("type", "uid")}
    for path in TRACE_DATA:
        key, _, inner = path.partition(".")
        if key not in style:
            continue
        if not inner:
            data[key] = style.pop(key)
        elif inner in style[key]:
            part = dict(style[key])
            data[key] = {inner: part.pop(inner)}
            style[key] = part
    return data, style


def _join_trace(data: dict, style: dict) -> dict:
    """What ``_split_trace`` split, joined again (a key in both, e.g. error_y, merges its two halves)."""
    return {**style, **{k: {**style[k], **v} if isinstance(v, dict) and isinstance(style.get(k), dict) else v
                        for k, v in data.items()}}


def _own_marker_color(style: dict) -> dict:
    """A trace ``style`` with its marker colour set to its line colour where it has none: plotly.js takes that
    default from the trace's own line colour, not from its template's, so a template trace must state it."""
    color = (style.get("line") or {}).get("color")
    if color is not None and (style.get("marker") or {}).get("color") is None:
        style = {**style, "marker": {**(style.get("marker") or {}), "color": color}}
    return style


def share_styles(fig: go.Figure) -> go.Figure:
    """The same figure with each repeated trace style sent once (page weight).

    Where the traces of one type repeat their styles with a period p (a slider's frames, a grid's points, each
    drawn with the same names, colours, modes and hover texts), the first p styles become the template's
    traces of that type, which plotly.js applies to the traces of that type cyclically (the i-th gets the
    (i mod p)-th), and each trace keeps only its data and visibility (``TRACE_DATA``). A type whose styles
    do not repeat keeps them on its traces. Returns a new figure; ``fig`` is unchanged.
    """
    layout = go.Layout(fig.layout)
    split = [_split_trace(t.to_plotly_json()) for t in fig.data]
    keep = [False] * len(split)  # traces that keep their own style
    for kind in dict.fromkeys(t.type for t in fig.data):
        mine = [i for i, (d, _) in enumerate(split) if d["type"] == kind]
        keys = [json.dumps(split[i][1], cls=PlotlyJSONEncoder, sort_keys=True) for i in mine]
        period = next(p for p in range(1, len(keys) + 1) if all(k == keys[j % p] for j, k in enumerate(keys)))
        if period == len(keys):
            for i in mine:
                keep[i] = True
            continue
        layout.template.data[kind] = [{"type": kind, **_own_marker_color(split[i][1])} for i in mine[:period]]
    traces = [_join_trace(data, style) if own else data for (data, style), own in zip(split, keep)]
    return go.Figure(data=traces, layout=layout)


# plotly's HTML escapes "/" and ">" in a figure's JSON as \u002f and \u003e (6 bytes each), though only "<" can
# close the script ("</script>", and "<" stays escaped); float32 arrays in base64 are about 4% "/". An escape
# right after a backslash is left alone: that backslash may be the second half of an escaped backslash.
_HARMLESS_ESCAPES = re.compile(r"(?<!\\)\\u00(2f|3e)")


def _unescape_harmless(html: str) -> str:
    """``html`` with the escaped "/" and ">" of its figure JSON written as themselves (the same JSON values)."""
    return _HARMLESS_ESCAPES.sub(lambda m: "/" if m.group(1) == "2f" else ">", html)


def _squeeze_indentation(html: str) -> str:
    """``html`` (``pio.to_html``'s div) without the indentation of plotly's HTML and script around the figure's
    JSON: a run of whitespace becomes one space, or one newline where it held one (so no statement of the script
    runs into the next). The JSON arguments of ``Plotly.newPlot`` (div id, data, layout, config), whose strings
    may hold any whitespace, are kept as they are."""
    start = html.find("Plotly.newPlot(")
    if start < 0:
        return html
    decoder, spans, pos = json.JSONDecoder(), [], start + len("Plotly.newPlot(")
    for _ in range(4):
        while html[pos] in " \t\r\n,":
            pos += 1
        _, end = decoder.raw_decode(html, pos)
        spans.append((pos, end))
        pos = end
    squeeze = lambda text: re.sub(r"\s+", lambda m: "\n" if "\n" in m.group() else " ", text)  # noqa: E731
    out, last = [], 0
    for a, b in spans:
        out += [squeeze(html[last:a]), html[a:b]]
        last = b
    return "".join(out) + squeeze(html[last:])


class BookHTML(MimetypeRenderer):
    """A figure as an HTML div without plotly.js (the book page loads plotly.js once) and no autoplay; the JSON
    without the escapes it does not need (``_unescape_harmless``), the rest without its indentation
    (``_squeeze_indentation``)."""

    post_script: str | None = None

    def to_mimebundle(self, fig_dict: dict) -> dict:
        height = fig_dict.get("layout", {}).get("height") or HEIGHT
        html = pio.to_html(
            fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False, auto_play=False,
            default_height=f"{height}px", validate=False, post_script=self.post_script,
        )
        return {"text/html": _unescape_harmless(_squeeze_indentation(html))}


class GridHTML(BookHTML):
    """BookHTML plus GRID_JS, which lets a ``grid_controls`` figure's controls act together in the page."""

    post_script = GRID_JS


def use_book_renderer() -> None:
    """Render figures as JupyterLab's plotly mimetype plus the book's HTML; call once per chapter."""
    pio.renderers["book"] = BookHTML()
    pio.renderers.default = "plotly_mimetype+book"
    pio.templates.default = "lengthgen"


class _Bundle:
    """A ready mimebundle that IPython's display formatter passes through unchanged."""

    def __init__(self, bundle: dict):
        self.bundle = bundle

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        return self.bundle


def prose_shows_figures() -> bool:
    """Whether the prose of a reader's kernel shows the glued figures: JupyterLab (and Jupyter Notebook) with
    jupyterlab-myst evaluates the chapters' ``{eval}`glue.figure(...)``` expressions; Colab's markdown does not."""
    return "google.colab" not in sys.modules


def _glue(name: str, fig: go.Figure, html: BookHTML) -> None:
    from IPython.display import display
    from ..inline import glue  # myst-nb glue that also keeps the figure for JupyterLab (lengthgen.inline)

    fig_dict = fig.to_dict()
    bundle = _Bundle({**pio.renderers["plotly_mimetype"].to_mimebundle(fig_dict), **html.to_mimebundle(fig_dict)})
    glue(name, bundle, display=False)
    if not os.environ.get(BOOK_BUILD_ENV) and not prose_shows_figures():
        display(bundle)


def glue_figure(name: str, fig: go.Figure) -> None:
    """Store ``fig`` under ``name`` for a ``{glue:figure}`` directive, shown once wherever it is read.

    The stored bundle holds the book's HTML (for the page) and plotly's JSON mimetype (for JupyterLab). The figure
    appears where the prose places it: in the page, and in a reader's JupyterLab, whose markdown evaluates the
    prose's expression; only where the prose cannot show it (Colab: ``prose_shows_figures``) does it appear
    under the cell that computes it instead.
    """
    _glue(name, fig, BookHTML())


def glue_grid_figure(name: str, fig: go.Figure) -> None:
    """``glue_figure`` for a ``grid_controls`` figure. In a book build the page's HTML carries GRID_JS, which
    combines the controls. In a reader's kernel (JupyterLab, Colab), where that script does not run, the figure is
    a ``grid_viewer.GridViewer``: ipywidgets controls that redraw it from Python, shown once: in the prose where
    it can show it (its widget view is what is glued), else under the cell."""
    if os.environ.get(BOOK_BUILD_ENV):
        _glue(name, fig, GridHTML())
        return
    from IPython.display import display
    from ..inline import glue
    from .grid_viewer import GridViewer

    viewer = GridViewer(fig)
    glue(name, viewer, display=False)
    if not prose_shows_figures():
        display(viewer)


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]):  # -> IPython.display.Markdown
    """A markdown table (for ``glue`` and ``{glue:md}``): one header row, then one row per ``body`` entry
    of already formatted cells (each as long as ``header``)."""
    from IPython.display import Markdown

    bad = [i for i, row in enumerate(body) if len(row) != len(header)]
    if bad:
        raise ValueError(f"md_table: rows {bad} do not have {len(header)} cells like the header")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return Markdown("\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]))
