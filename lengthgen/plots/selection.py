"""Figures of chapter 10 (what training selects): the max-margin explorer over geometry, offset and RoPE base; the
exact rungs' cosine curves per rule with their baselines; Adam's update taken apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np
import plotly.graph_objects as go

from .render import grid_controls, share_styles

if TYPE_CHECKING:
    from ..selection import Trajectory

GEOMETRY_COLORS = {"l2": "#1f77b4", "linf": "#d62728", "pairs": "#2ca02c"}


def selection_explorer(explore: Mapping[tuple[str, int, float], dict], train_length: int,
                       title: str = "Max-margin kernel of geometry {0}, offset K = {1}, RoPE base {2}") -> go.Figure:
    """For every (geometry, offset, base) of ``explore`` (``prediction.explore``): the max-margin kernel c(delta)
    in percent of its in-window margin against the offset back |delta| (left; the training window shaded, the
    highest beyond-window peaks marked) and the accuracy it predicts by evaluation length (right). Buttons pick
    the geometry and the base, a slider the offset (``grid_controls``; render with ``glue_grid_figure``).

    explore[(g, K, base)]: "kernel" (m,) c at delta = 0, -1, ..., -(m-1); "peaks" list of {"delta", "value"};
    "lengths" (n,) and "accuracy" (n,). Page weight: the kernels and peaks in whole percent of the margin (the
    hover's precision, 0.01 margin), the kernels int16 on plotly's implicit x axis; the few peaks and accuracies
    as JSON lists (shorter than base64 below about eight values), accuracy to the hover's 3 decimals; the
    training window a shape; each style sent once (``share_styles``: the traces go point by point, geometry
    innermost, so their styles repeat).
    """
    from plotly.subplots import make_subplots

    geos = list(dict.fromkeys(g for g, _, _ in explore))
    offsets = sorted({K for _, K, _ in explore})
    bases = sorted({b for _, _, b in explore})
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1, subplot_titles=(
        "max-margin kernel c(delta)", "predicted accuracy (before training)"))
    owners: list[tuple[int, int, int]] = []
    kernels = {p: _percent(e["kernel"]) for p, e in explore.items()}
    top = max(int(k.max()) for k in kernels.values())
    low = min(int(k.min()) for k in kernels.values())
    m = len(next(iter(kernels.values())))
    pad = 0.05 * (top - low)  # the y axis: every kernel's range, one scale over the grid as the page switches points
    fig.add_shape(type="rect", x0=0, x1=train_length - 1, y0=0, y1=1, xref="x", yref="y domain", layer="below",
                  fillcolor="rgba(120, 120, 120, 0.12)", line_width=0, name="training window", showlegend=True,
                  legendrank=1)  # first in the legend, as the trace it replaces was
    points = sorted(explore, key=lambda p: (offsets.index(p[1]), bases.index(p[2]), geos.index(p[0])))
    for g, K, b in points:
        e = explore[(g, K, b)]
        owner = (geos.index(g), offsets.index(K), bases.index(b))
        color = GEOMETRY_COLORS.get(g, "#444")
        fig.add_trace(go.Scatter(y=kernels[(g, K, b)], mode="lines",  # x: plotly's implicit 0, 1, 2, ...
                                 line=dict(color=color, width=1.5), name=f"c(delta), {g}",
                                 hovertemplate="%{x} back: %{y}%<extra></extra>"), row=1, col=1)
        peaks = e["peaks"]
        fig.add_trace(go.Scatter(x=[-int(p["delta"]) for p in peaks],
                                 y=_percent([p["value"] for p in peaks]).tolist(), mode="markers",
                                 marker=dict(color="black", size=8, symbol="x"), name="highest beyond the window",
                                 hovertemplate="%{x} back: %{y}%<extra>peak</extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=[round(L / train_length, 3) for L in e["lengths"]],
                                 y=[round(float(a), 3) for a in e["accuracy"]],
                                 mode="lines+markers", line=dict(color=color, width=2), name=f"predicted accuracy, {g}",
                                 hovertemplate="%{x}x: %{y:.3f}<extra></extra>"), row=1, col=2)
        owners += [owner] * 3
    dims = [("menu", "geometry", geos), ("slider", "offset K", [str(K) for K in offsets]),
            ("menu", "RoPE base", [f"{b:g}" for b in bases])]
    grid_controls(fig, owners, dims, (0, 0, 0), title)
    fig.update_xaxes(title_text="offset back |delta| (positions)", range=[0, m], row=1, col=1)
    fig.update_yaxes(title_text="c(delta), % of the in-window margin", range=[low - pad, top + pad], row=1, col=1)
    fig.update_xaxes(title_text="evaluation length / training length (log scale)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="accuracy (fraction correct)", range=[0, 1.05], row=1, col=2)
    fig.update_layout(height=620, margin=dict(t=190, b=140, r=20), title=dict(x=0.02, y=0.99, yanchor="top"),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.08, yanchor="bottom"))
    for i, menu in enumerate(fig.layout.updatemenus):
        menu.update(x=0, xanchor="left", y=1.42 - 0.12 * i, yanchor="top")
    return share_styles(fig)


def _percent(values: "np.typing.ArrayLike") -> np.ndarray:
    """(n,) values in units of a margin as whole percent of it, int16 (up to +-327 margins)."""
    v = np.round(100 * np.asarray(values, dtype=np.float64))
    if v.size and np.abs(v).max() > np.iinfo(np.int16).max:
        raise ValueError(f"a value of {np.abs(v).max() / 100:g} margins does not fit int16 percent (+-327 margins)")
    return v.astype(np.int16)


ATTENTION_COLORS = {"fro": "#1f77b4", "linf": "#d62728", "nuclear": "#2ca02c"}


def selection_curves(runs: Mapping[str, "Trajectory"],
                     title: str = "What each rule selects on the {0} rung") -> go.Figure:
    """For each run (``selection.run``, all on one rung; the slider picks the rule): the cosine of the end-to-end
    iterate to every geometry's max-margin solution against the step (log scale), mean over seeds, with the two
    baselines: the seed-to-seed cosine (grey) and the mean |cosine| of a random direction with each solution
    (dotted, flat across the plot: the rung's, the same for every rule). Page weight: curves float32, the random
    levels drawn once as shapes, each style sent once (``share_styles``)."""
    from .render import finish, slider_figure

    first = next(iter(runs.values()))
    levels = first.random_level
    if any(tr.rung != first.rung or tr.random_level != levels for tr in runs.values()):
        raise ValueError("selection_curves: the runs must share one rung (and so its random-direction levels)")
    colors = GEOMETRY_COLORS if first.rung == "kernel" else ATTENTION_COLORS
    frames = {}
    for label, tr in runs.items():
        traces = [go.Scatter(x=tr.steps, y=c.mean(0).astype(np.float32), mode="lines+markers",
                             name=f"cosine to {g} solution", line=dict(color=colors.get(g, "#444"), width=2),
                             marker=dict(size=4), hovertemplate="step %{x}: %{y:.4f}<extra>" + g + "</extra>")
                  for g, c in tr.cosine.items()]
        traces.append(go.Scatter(x=tr.steps, y=tr.seed_to_seed.astype(np.float32), mode="lines",
                                 name="seed-to-seed cosine", line=dict(color="#7f7f7f", width=1.5, dash="dash")))
        frames[label] = traces
    fig = slider_figure(frames, "rule")
    for g, level in levels.items():
        fig.add_shape(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=level, y1=level, showlegend=True,
                      name=f"random direction vs {g} (mean |cos|)", line=dict(color=colors.get(g, "#444"), width=1,
                                                                            dash="dot"))
    fig.update_xaxes(type="log")
    return share_styles(finish(fig, title.format(first.rung), "step (log scale)", "cosine to the max-margin solution",
                               yaxis_range=[-0.05, 1.05]))


def adam_anatomy(tr: "Trajectory", member: int = 0,
                 title: str = "Adam along training: gradient, sqrt(v_hat) and eps") -> go.Figure:
    """Adam's update taken apart along one run (``selection.run`` with rule "adam"): the gradient norm, the median
    and the largest sqrt(v_hat) against eps (flat), and the largest update per step in units of lr (1: every
    coordinate moves by lr, as sign descent does; far below 1: the step has shrunk). Log scales; curves float32."""
    from .render import finish

    if tr.adam_median is None:
        raise ValueError(f"rule {tr.rule!r}: the anatomy needs an Adam run (rule='adam')")
    s = tr.steps
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731  (page weight; float32 spans eps's scale)
    fig = go.Figure([
        go.Scatter(x=s, y=f32(tr.grad_norm[member]), mode="lines", name="|gradient|_2", line=dict(color="#1f77b4")),
        go.Scatter(x=s, y=f32(tr.adam_median[member]), mode="lines", name="median sqrt(v_hat)",
                   line=dict(color="#2ca02c")),
        go.Scatter(x=s, y=f32(tr.adam_max[member]), mode="lines", name="largest sqrt(v_hat)",
                   line=dict(color="#2ca02c", dash="dash")),
        go.Scatter(x=[s[0], s[-1]], y=[tr.eps, tr.eps], mode="lines", name=f"eps = {tr.eps:g}",
                   line=dict(color="black", dash="dot", width=1)),
        go.Scatter(x=s, y=f32(tr.update_max[member]), mode="lines", name="largest update / lr",
                   line=dict(color="#d62728")),
    ])
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", exponentformat="power")
    return finish(fig, title, "step (log scale)", "size (log scale, loss units)")
