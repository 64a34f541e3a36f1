"""Sweep figures (chapters 8 and 9): summaries over seeds (mean and standard error) against a swept setting,
per setting, and predicted against measured failure lengths.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .render import CHANCE_STYLE, COLORS, HEIGHT, LABELS, finish, share_styles, slider_figure

Series = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]]  # name -> (x (n,), mean (n,), sem (n,))


def _error_bar_traces(series: Series) -> list[go.BaseTraceType]:
    palette = list(COLORS.values())
    traces = []
    for i, (name, (x, mean, sem)) in enumerate(series.items()):
        color = COLORS.get(name, palette[i % len(palette)])
        xs = np.asarray(x, dtype=np.float64)
        whole = xs.size > 0 and bool(np.all(xs == np.round(xs))) and float(np.abs(xs).max()) < 2**31
        traces.append(go.Scatter(  # whole x (steps, lengths) as a JSON list: fewer bytes than base64 float32
            x=[int(v) for v in xs] if whole else xs.astype(np.float32), y=np.asarray(mean, dtype=np.float32),
            mode="lines+markers", name=LABELS.get(name, name), line=dict(color=color, width=2),
            error_y=dict(type="data", array=np.asarray(sem, dtype=np.float32), visible=True, thickness=1),
            hovertemplate="%{x}: %{y:.3f} ± %{error_y.array:.3f}<extra>" + LABELS.get(name, name) + "</extra>",
        ))
    return traces


def sweep_lines(frames: Mapping[str, Series], label: str, title: str, x_title: str, y_title: str,
                chance: float | None = None, log_x: bool = False, y_range: Sequence[float] | None = None) -> go.Figure:
    """Mean ± standard error over seeds against a swept setting, one line per series, a slider over frames.

    frames: slider label -> series name -> (x (n,), mean (n,), sem (n,)); one frame gives no slider.
    ``chance`` draws the 1/V line. Series named after an encoding take its colour and label. Frames that repeat
    their series send each style once (``share_styles``; page weight).
    """
    panels = {}
    for name, series in frames.items():
        traces = _error_bar_traces(series)
        if chance is not None:
            xs = np.concatenate([np.asarray(x, dtype=float) for x, _, _ in series.values()])
            traces.append(go.Scatter(x=[xs.min(), xs.max()], y=[chance, chance], mode="lines", hoverinfo="skip",
                                     name=f"chance (1/V = {chance:.3f})", line=CHANCE_STYLE))
        panels[name] = traces
    fig = slider_figure(panels, label)
    return share_styles(finish(fig, title, x_title, y_title, xaxis_type="log" if log_x else "linear",
                               yaxis_range=y_range))


def predicted_vs_measured(predicted: Sequence[float | None], measured: Sequence[float | None],
                          groups: Sequence[str], cap: float, title: str) -> go.Figure:
    """One dot per model: the failure length predicted from its kernel (x) against the measured one (y).

    predicted, measured: (n,) lengths as multiples of the training length, None or NaN for "not within ``cap``"
    (drawn at 1.25 x cap);
    groups: (n,) legend label per model. Log axes; the dashed diagonal is perfect agreement, the dotted
    lines mark ``cap`` (the caption says what lies beyond them).
    """
    beyond = 1.25 * cap
    fill = lambda v: np.array([beyond if x is None or np.isnan(x) else x for x in v], dtype=np.float32)  # noqa: E731
    x, y, g = fill(predicted), fill(measured), np.asarray(groups)
    fig = go.Figure()
    palette = list(COLORS.values())
    for i, name in enumerate(dict.fromkeys(groups)):
        sel = g == name
        fig.add_trace(go.Scatter(x=x[sel], y=y[sel], mode="markers", name=name,
                                 marker=dict(color=palette[i % len(palette)], size=8, opacity=0.55),
                                 hovertemplate="predicted %{x:.0f}, measured %{y:.0f}<extra>" + name + "</extra>"))
    lo = float(min(x.min(), y.min())) * 0.8
    fig.add_trace(go.Scatter(x=[lo, beyond], y=[lo, beyond], mode="lines", name="predicted = measured",
                             line=dict(color="#999", dash="dash", width=1), hoverinfo="skip"))
    fig.add_vline(x=cap, line=dict(color="#bbb", width=1, dash="dot"))
    fig.add_hline(y=cap, line=dict(color="#bbb", width=1, dash="dot"))
    return finish(fig, title, "predicted failure length / T (log scale)", "measured failure length / T (log scale)",
                   xaxis_type="log", yaxis_type="log")


def setting_effects(labels: Sequence[str], series: Series, chance: float, title: str) -> go.Figure:
    """Mean ± standard error per setting (rows), one marker series per column (e.g. evaluation length).

    labels: (n,) row names, top to bottom; series: name -> (unused x, mean (n,), sem (n,)).
    """
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    fig = go.Figure()
    for i, (name, (_, mean, sem)) in enumerate(series.items()):
        fig.add_trace(go.Scatter(
            x=np.asarray(mean, dtype=np.float32), y=list(labels), mode="markers", name=name,
            marker=dict(color=palette[i % len(palette)], size=9),
            error_x=dict(type="data", array=np.asarray(sem, dtype=np.float32), visible=True, thickness=1),
            hovertemplate="%{y}: %{x:.3f} ± %{error_x.array:.3f}<extra>" + name + "</extra>",
        ))
    fig.add_vline(x=chance, line=CHANCE_STYLE, annotation_text="chance", annotation_position="bottom right")
    # the x title in two lines: the settings' names (automargin) leave the plot too narrow for it in one
    return finish(fig, title, "accuracy (fraction correct),<br>mean ± standard error over seeds", "setting",
                   xaxis_range=[0, 1.03], xaxis_automargin=True, yaxis_autorange="reversed", yaxis_automargin=True,
                   height=max(HEIGHT, 28 * len(labels) + 160))

