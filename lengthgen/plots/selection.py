"""Figures of chapter 10 (what training selects): the max-margin explorer over geometry, offset and RoPE base; the
exact rungs' cosine curves per rule with their baselines; Adam's update taken apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ..forecast import LIMIT_HORIZON
from ..optim import GEOMETRY
from .render import fit_sliders, grid_controls, share_styles

if TYPE_CHECKING:
    from ..selection import Trajectory

GEOMETRY_COLORS = {"l2": "#1f77b4", "linf": "#d62728", "pairs": "#2ca02c", "factors_linf": "#9467bd"}


def selection_explorer(explore: dict,
                       title: str = "Rule {0}, lr {1} its usual, {2} steps, offset K = {3}, RoPE base {4}") -> go.Figure:
    """The prediction before training for a chosen rule, step size, number of steps, offset and RoPE base
    (``forecast.explore``; buttons pick the rule, step size and base, sliders the steps and the offset:
    ``grid_controls``, render with ``glue_grid_figure``). Left: the max-margin kernel of the rule's geometry,
    c(delta) in percent of its in-window margin against the offset back |delta|, the training window shaded, the
    highest beyond-window peaks and the first offset that reaches the target (``forecast.first_reach``) marked
    (at the plot's lower right edge when it lies beyond the plot or there is none; its hover says which).
    Right: accuracy by length, the limit prediction (dashed: no scale) beside the finite-step prediction at the
    in-window margin the rule reaches in those steps (solid).

    The step sizes are each rule's usual one (``explore["rates"]``) times ``explore["factors"]``: one menu for all
    rules. Page weight: the kernels int16 percent on plotly's implicit x axis, shared along the step size and steps
    (owner -1); the accuracy curves on an implicit x (the index of the multiple), each a short JSON list to the
    hover's 2 decimals, the reached margin a one-string text; the training window a shape; each style sent once
    (``share_styles``).
    """
    from plotly.subplots import make_subplots

    T = explore["train_length"]
    rules, steps = list(explore["rates"]), explore["steps"]
    offsets, bases = explore["offsets"], explore["bases"]
    factors = explore["factors"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.12,
                        subplot_titles=("kernel of the rule's geometry", "accuracy by length"))
    kernels = {p: _percent(e["kernel"]) for p, e in explore["kernels"].items()}
    top = max(int(k.max()) for k in kernels.values())
    low = min(int(k.min()) for k in kernels.values())
    m = len(next(iter(kernels.values())))
    pad = 0.05 * (top - low)  # one y scale over the grid as the page switches points
    fig.add_shape(type="rect", x0=0, x1=T - 1, y0=0, y1=1, xref="x", yref="y domain", layer="below",
                  fillcolor="rgba(120, 120, 120, 0.12)", line_width=0, name="training window", showlegend=True,
                  legendrank=1)
    owners: list[tuple[int, ...]] = []
    for K in offsets:  # point by point, rule innermost: the styles repeat with one period (share_styles)
        for b in bases:
            for rule in rules:
                e = explore["kernels"][rule, K, b]
                color = GEOMETRY_COLORS.get(GEOMETRY[rule], "#444")
                reach = e["reach"]
                fig.add_trace(go.Scatter(y=kernels[(rule, K, b)], mode="lines", line=dict(color=color, width=1.5),
                                         name=f"c(delta), {GEOMETRY[rule]}",
                                         hovertemplate="%{x} back: %{y}%<extra></extra>"), row=1, col=1)
                fig.add_trace(go.Scatter(x=[-int(p["delta"]) for p in e["peaks"]],
                                         y=_percent([p["value"] for p in e["peaks"]]).tolist(), mode="markers",
                                         marker=dict(color="black", size=8, symbol="x"), name="highest beyond the window",
                                         hovertemplate="%{x} back: %{y}%<extra>peak</extra>"), row=1, col=1)
                shown = reach is not None and reach - 1 < m
                fig.add_trace(go.Scatter(x=[reach - 1 if shown else m - 1],  # beyond the plot or none: at its edge
                                         y=[int(kernels[(rule, K, b)][reach - 1]) if shown else low],
                                         text="first reach: " + (
                                             f"{reach / T:g}x" if reach else f"none up to {LIMIT_HORIZON}x"),
                                         mode="markers", marker=dict(color="#ff7f0e", size=11, symbol="diamond"),
                                         name="first offset to reach the target (hover)",
                                         hovertemplate="%{x} back<extra>%{text}</extra>"), row=1, col=1)
                fig.add_trace(go.Scatter(y=[round(float(a), 2) for a in e["limit"]], mode="lines+markers",
                                         line=dict(color="#7f7f7f", width=2, dash="dash"), name="limit (no scale)",
                                         hovertemplate="%{y:.2f}<extra>limit</extra>"), row=1, col=2)
                owners += [(rules.index(rule), -1, -1, offsets.index(K), bases.index(b))] * 4
                for i in range(len(factors)):
                    for n in steps:
                        c = explore["curves"][rule, i, n, K, b]
                        fig.add_trace(go.Scatter(y=[round(float(a), 2) for a in c["accuracy"]], mode="lines+markers",
                                                 line=dict(color=color, width=2), name="after the chosen steps",
                                                 text=f"{c['scale']:.2g}",
                                                 hovertemplate="%{y:.2f}<extra>margin %{text}</extra>"), row=1, col=2)
                        owners.append((rules.index(rule), i, steps.index(n), offsets.index(K), bases.index(b)))
    dims = [("menu", "rule", rules), ("menu", "lr", [f"x{f:g}" for f in factors]),
            ("slider", "steps", [str(n) for n in steps]), ("slider", "offset K", [str(K) for K in offsets]),
            ("menu", "RoPE base", [f"{b:g}" for b in bases])]
    # the size first: grid_controls grows the top margin and the height by the wrapped title's extra lines
    fig.update_layout(height=700, margin=dict(l=60, t=250, b=150, r=20), title_font_size=14,
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.05, yanchor="bottom"))
    grid_controls(fig, owners, dims, (0, factors.index(1.0) if 1.0 in factors else 0, len(steps) - 1, 0, 0), title)
    multiples = explore["multiples"]
    fig.update_xaxes(title_text="offset back |delta|", range=[0, m], row=1, col=1)
    fig.update_yaxes(title_text="c(delta), % of in-window margin", range=[low - pad, top + pad], row=1, col=1)
    fig.update_xaxes(title_text="length / training length", tickmode="array", tickvals=list(range(len(multiples))),
                     ticktext=[f"{x:g}x" for x in multiples], range=[-0.3, len(multiples) - 0.7], row=1, col=2)
    fig.update_yaxes(title_text="accuracy", range=[0, 1.05], row=1, col=2)
    # the menus in two rows above the legend: rule and lr side by side, then the base (plot area: 300 px)
    for menu, (x, y) in zip(fig.layout.updatemenus, [(0, 1.68), (0.52, 1.68), (0, 1.55)]):
        menu.update(x=x, xanchor="left", y=y, yanchor="top")
    return share_styles(fit_sliders(fig))


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
    from .render import finish, legend_room, slider_figure

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
    # the legend (a curve per geometry, the baselines) wraps into rows above the plot: room for them, the plot kept
    top = legend_room([t.name for t in frames[next(iter(frames))]] + [s.name for s in fig.layout.shapes])
    return share_styles(finish(fig, title.format(first.rung), "step (log scale)", "cosine to the max-margin solution",
                               yaxis_range=[-0.05, 1.05], margin_t=top,
                               height=fig.layout.height + top - pio.templates["lengthgen"].layout.margin.t))


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
