"""The static playground (chapter 7): accuracy and attention for every (recipe, training length, offset) of a
``playground.PlaygroundGrid``, with independent controls that the page's script combines.
"""

from __future__ import annotations

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
    grid_controls(fig, owners, dims, a, title)
    fig.update_xaxes(title_text="evaluation length / training length (log scale)", type="log", tickvals=mult,
                     ticktext=[f"{m}x" for m in grid.multiples], row=1, col=1)
    fig.update_yaxes(title_text="accuracy (fraction correct)", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(title_text="offset of the key behind the query (positions, log scale)", type="log",
                     dtick=np.log10(2), row=2, col=1)
    fig.update_yaxes(title_text="mean attention weight", range=[0, 1], row=2, col=1)
    # 970 px: 200 above the plots (title, recipe buttons, a legend of up to three rows), 620 of plots (two
    # panels and the gap between them), 150 below them (axis title, sliders). Above the plots, a point
    # px pixels up is at paper y = 1 + px / 620.
    fig.update_layout(height=970, margin=dict(t=200, b=150, r=20), title=dict(x=0.02, y=0.99, yanchor="top"),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1 + 28 / 620, yanchor="bottom"))
    for menu in fig.layout.updatemenus:
        menu.update(x=0, xanchor="left", y=1 + 162 / 620, yanchor="top")
    return fig

