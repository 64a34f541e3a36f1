"""The static playground (chapter 7): accuracy and attention for every (recipe, training length, offset) of a
``playground.PlaygroundGrid``, with independent controls that the page's script combines.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from .render import CHANCE_STYLE, COLORS, LABELS, grid_controls, vertical

if TYPE_CHECKING:
    from ..playground import PlaygroundGrid


def playground_grid(grid: "PlaygroundGrid", active: tuple[str, int, int] | None = None,
                    title: str = "RoPE and APE, trained at T={1} with offset K={2}, recipe: {0}") -> go.Figure:
    """The static playground: for every (recipe, T, K) of a ``playground.PlaygroundGrid``, accuracy against the
    evaluation length (top; one faint dot per seed, a line for the mean, both encodings) and the last
    query's mean attention over keys at L = profile_multiple x T (below, mean over seeds), with the target
    (K back), where APE's pinned position x_(T-K) lies, and the offsets never seen in training (>= T).

    Sliders pick T and K, buttons the recipe, independently (``grid_controls``); ``active`` is the
    (recipe, T, K) shown first (default: the first of each). Arrays: grid.accuracy (nR, nT, nK, nE, nM, S),
    grid.profiles[T] (nR, nK, nE, S, profile_multiple x T); stored as float32 / int16 on implicit x axes.
    """
    from plotly.subplots import make_subplots

    names = list(grid.recipes)
    a = grid.index(*active) if active is not None else (0, 0, 0)
    pm, S = grid.profile_multiple, len(grid.seeds)
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.2, subplot_titles=(
        "accuracy by evaluation length", f"the last query's attention at L = {pm} T (mean of {S} seeds)"))
    owners: list[tuple[int, int, int]] = []
    mult = np.asarray(grid.multiples, dtype=np.int16)

    def add(trace: go.BaseTraceType, owner: tuple[int, int, int], row: int) -> None:
        fig.add_trace(trace, row=row, col=1)
        owners.append(owner)

    # The grid's traces carry only their data; their style comes from the template, whose scatter styles
    # plotly.js hands out to scatter traces in turn (trace i gets roles[i % len(roles)]). Every grid point
    # adds len(roles) traces in the roles' order; the shared traces after them set every styled key.
    roles: list[dict] = []
    for enc in grid.encodings:
        color, label = COLORS.get(enc, "#333"), LABELS.get(enc, enc)
        roles += [
            dict(mode="markers", legendgroup=enc, showlegend=False, marker=dict(color=color, size=6, opacity=0.35),
                 hovertemplate="%{y:.3f}<extra>one seed</extra>"),
            dict(mode="lines+markers", name=f"{label} (mean of {S} seeds)", legendgroup=enc, showlegend=True,
                 line=dict(color=color, width=2.5), marker=dict(color=color, size=6, opacity=1),
                 hovertemplate="mean %{y:.3f}<extra></extra>"),
            dict(mode="lines", name=label, legendgroup=enc, showlegend=False, line=dict(color=color, width=2),
                 hovertemplate="%{x} back: %{y:.3f}<extra>" + label + "</extra>"),
        ]
    fig.layout.template.data.scatter = [go.Scatter(**role) for role in roles]
    for r in range(len(names)):
        for t, T in enumerate(grid.train_lengths):
            for k in range(len(grid.offsets)):
                for e in range(len(grid.encodings)):
                    acc = grid.accuracy[r, t, k, e]  # (nM, S)
                    back = grid.profiles[T][r, k, e].mean(0)[::-1][1:]  # entry b-1: the key b positions back
                    add(go.Scatter(x=np.repeat(mult, S), y=acc.ravel()), (r, t, k), 1)
                    add(go.Scatter(x=mult, y=acc.mean(1)), (r, t, k), 1)
                    add(go.Scatter(x0=1, dx=1, y=back.astype(np.float32)), (r, t, k), 2)
    shared = dict(showlegend=True, marker=dict(color="#444", size=1, opacity=1), hoverinfo="skip")
    add(go.Scatter(x=[mult[0], mult[-1]], y=[grid.chance, grid.chance], mode="lines", line=CHANCE_STYLE,
                   name=f"chance (1/V = {grid.chance:.3f})", legendgroup="chance", **shared), (-1, -1, -1), 1)
    for t, T in enumerate(grid.train_lengths):
        if pm > 1:
            add(go.Scatter(x=[T, pm * T - 1, pm * T - 1, T], y=[0, 0, 1, 1], fill="toself", mode="none",
                           fillcolor="rgba(255, 200, 80, 0.2)", line=dict(color="rgba(0, 0, 0, 0)", width=0),
                           name="offsets >= T: never seen in training", legendgroup="unseen", **shared), (-1, t, -1), 2)
        for k, K in enumerate(grid.offsets):
            if pm > 1:
                pin = vertical((pm - 1) * T + K, "x_(T-K), where APE pins",
                                dict(color=COLORS["ape"], dash="dot", width=1))
                add(pin.update(legendgroup="pinned", **shared), (-1, t, k), 2)
    for k, K in enumerate(grid.offsets):
        target = vertical(K, "target, K back", dict(color="#444", dash="dash", width=1))
        add(target.update(legendgroup="target", **shared), (-1, -1, k), 2)
    dims = [("menu", "recipe", names), ("slider", "training length T", [str(T) for T in grid.train_lengths]),
            ("slider", "offset K", [str(K) for K in grid.offsets])]
    # 970 px: 200 above the plots (title, recipe buttons, a legend of up to three rows), 620 of plots (two
    # panels and the gap between them), 150 below them (axis title, sliders); set before grid_controls, which adds
    # the room of the wrapped title's further lines to the top and the height. Above the plots, a point px pixels
    # up is at paper y = 1 + px / 620.
    fig.update_layout(height=970, margin=dict(t=200, b=150, r=20),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1 + 28 / 620, yanchor="bottom"))
    grid_controls(fig, owners, dims, a, title)
    fig.update_xaxes(title_text="evaluation length / training length (log scale)", type="log", tickvals=mult,
                     ticktext=[f"{m}x" for m in grid.multiples], row=1, col=1)
    fig.update_yaxes(title_text="accuracy (fraction correct)", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(title_text="offset of the key behind the query (positions, log scale)", type="log",
                     dtick=np.log10(2), row=2, col=1)
    fig.update_yaxes(title_text="mean attention weight", range=[0, 1], row=2, col=1)
    for menu in fig.layout.updatemenus:
        menu.update(x=0, xanchor="left", y=1 + 162 / 620, yanchor="top")
    return fig



TRAIN_HERE_ID = "lengthgen-train-here"  # the panel's element id (one per page)
PX_PER_STEP = 8  # a slider's track: at least this many pixels per value, so that a small drag moves one value


def _script_text(name: str) -> str:
    """A script shipped beside this module, made safe to sit inside a <script> element."""
    text = resources.files(__package__).joinpath(name).read_text()
    if "</script" in text.lower():
        raise ValueError(f"{name} holds '</script', which would end its <script> element early")
    return text


def train_here_html(spec: dict) -> str:
    """Chapter 7's "train here" panel as one HTML block: the controls (T and K sliders with number boxes, a
    seed, the recipe menu labelled with each recipe's settings), the train button, a progress bar per encoding,
    the training and result figures and the comparison table; ``spec`` (``playground.train_here``) as JSON, the
    trainer (``trainer.js``) as the text its Web Workers are made from, and ``train_here.js``, which runs the
    panel. Nothing is loaded from elsewhere: plotly.js is the page's own."""
    start, (lo, hi) = spec["start"], spec["lengths"]

    def slider(name: str, label: str, low: int, high: int, value: int) -> str:
        width = max(300, PX_PER_STEP * (high - low))
        return (f'<label style="display:block;margin:4px 0">{label}<br>'
                f'<input type="range" data-lg="{name}-range" min="{low}" max="{high}" step="1" value="{value}" '
                f'style="width:{width}px;max-width:calc(100% - 7em);vertical-align:middle" aria-label="{label}"> '
                f'<input type="number" data-lg="{name}-value" value="{value}" step="1" style="width:5em" '
                f'aria-label="{label}, typed"></label>')

    options = "".join(f'<option value="{html.escape(name)}"{" selected" if name == start["recipe"] else ""}>'
                      f'{html.escape(name)}: {html.escape(r["text"])}</option>' for name, r in spec["recipes"].items())
    bars = "".join(f'<div><progress data-lg="progress-{enc}" max="1" value="0" style="width:300px"></progress> '
                   f'<span data-lg="progress-{enc}-text"></span></div>' for enc in ("rope", "ape"))
    data = json.dumps(spec, separators=(",", ":")).replace("<", "\\u003c")
    script = _script_text("train_here.js").replace("{panel_id}", TRAIN_HERE_ID)
    return (
        f'<div id="{TRAIN_HERE_ID}" class="lengthgen-train-here" data-state="loading">'
        + slider("T", "training length T", lo, hi, start["T"])
        + slider("K", "offset K", 1, hi - 1, start["K"])
        + f'<label style="display:block;margin:4px 0">seed <input type="number" data-lg="seed" value="{start["seed"]}" '
          f'min="{spec["seeds"][0]}" max="{spec["seeds"][1]}" step="1" style="width:6em"></label>'
        + f'<label style="display:block;margin:4px 0">recipe <select data-lg="recipe" style="max-width:100%">{options}</select>'
          '</label><p data-lg="recipe-text" style="margin:0 0 4px 0;font-size:0.9em"></p>'
        + '<p data-lg="message" role="alert" style="color:#b00020;font-weight:bold;min-height:1.2em;margin:4px 0"></p>'
        + '<p data-lg="on-grid" style="margin:4px 0"></p>'
        + '<button type="button" data-lg="train" style="font-size:1.05em;padding:4px 16px">train RoPE and APE here</button>'
        + f'<p data-lg="status" style="margin:6px 0"></p>{bars}'
        + '<div data-lg="training" style="width:100%"></div><div data-lg="result" style="width:100%"></div>'
        + '<table data-lg="table" style="font-size:0.9em"></table>'
        + f'<script type="application/json" class="lg-spec">{data}</script>'
        + f'<script type="text/plain" class="lg-trainer">{_script_text("trainer.js")}</script>'
        + f"<script>{script}</script></div>"
    )
