"""Mechanism figures: the carrier kernel, its reach and pair spectrum, singular values, the kernel margin
against accuracy, and the dilution laws against measurement.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .render import CHANCE_STYLE, COLORS, finish, slider_figure


def carrier_kernel_figure(frames: Mapping[str, tuple[np.ndarray, np.ndarray, int, Sequence[int]]], train_length: int,
                          title: str) -> go.Figure:
    """The carrier kernel c(delta) against how far back the key is, with a slider over (offset, seed).

    frames: slider label -> (kern (n,), dominant (n,), K, peaks). kern[j] is c at delta = -j (j back);
    dominant[j] is the part of it carried by the seed's strongest RoPE pair; peaks lists the offsets beyond
    the window (positions back) whose c comes within a margin of c(-K), marked on the curve. Curves are
    stored as float32 on an implicit x axis (x0, dx) to keep the page light.
    """
    hover = "%{x} back: %{y:.2f}<extra></extra>"
    panels = {}
    for label, (kern, dominant, offset, peaks) in frames.items():
        far = np.asarray(peaks, dtype=int)
        target = float(kern[offset])
        panels[label] = [
            go.Scatter(x0=1, dx=1, y=kern[1:].astype(np.float32), mode="lines", name="c(delta), all pairs",
                       line=dict(color=COLORS["rope"], width=2), hovertemplate=hover),
            go.Scatter(x0=1, dx=1, y=dominant[1:].astype(np.float32), mode="lines", name="strongest pair alone",
                       line=dict(color="#ff7f0e", width=1, dash="dot"), hovertemplate=hover),
            go.Scatter(x=[1, len(kern) - 1], y=[target, target], mode="lines",
                       name=f"c(-K), the target ({offset} back)", line=dict(color="black", dash="dash", width=1),
                       hoverinfo="skip"),
            go.Scatter(x=far.astype(np.int16), y=kern[far].astype(np.float32), mode="markers",
                       name="beyond-window peaks near c(-K)", marker=dict(color=COLORS["ape"], size=9, symbol="x"),
                       hovertemplate=hover),
        ]
    fig = slider_figure(panels, "offset, seed")
    reach = max(len(kern) for kern, *_ in frames.values()) - 1
    fig.add_vrect(x0=train_length - 0.5, x1=reach, fillcolor="#ffdd88", opacity=0.2, line_width=0)
    return finish(fig, title, "offset behind the query, -delta (positions; shaded: never seen in training)",
                   "mean logit c(delta) (logit units)")


def kernel_shapes(frames: Mapping[str, Mapping[str, np.ndarray]], offset: int, train_length: int,
                  title: str) -> go.Figure:
    """Carrier kernels on one scale, a slider over frames (e.g. seeds). Each curve is the best competitor of
    the target within reach: entry j is max over offsets j' <= j back (j' != K) of (c(-j') - c(-K)) divided by
    the in-window margin, so it is -1 at the edge of the training window and crosses 0 at the length where a
    far offset first outscores the target (``kernel.reach_envelope`` computes it from a kernel).

    frames: slider label -> curve name -> (n,) curve, entry j at j positions back (j = 0 unused).
    """
    palette = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"]
    dashes = ["solid", "solid", "dash", "dot", "dashdot"]
    panels = {}
    for label, curves in frames.items():
        traces: list[go.BaseTraceType] = []
        for i, (name, curve) in enumerate(curves.items()):
            traces.append(go.Scatter(x0=1, dx=1, y=np.asarray(curve[1:], dtype=np.float32), mode="lines", name=name,
                                     line=dict(color=palette[i % len(palette)], dash=dashes[i % len(dashes)], width=2),
                                     hovertemplate="within %{x} back: %{y:.2f}<extra>" + name + "</extra>"))
        reach = max(len(k) for k in curves.values()) - 1
        traces.append(go.Scatter(x=[1, reach], y=[0, 0], mode="lines", name=f"the target's level ({offset} back)",
                                 line=dict(color="black", dash="dot", width=1), hoverinfo="skip"))
        panels[label] = traces
    fig = slider_figure(panels, "seed")
    reach = max(len(k) for curves in frames.values() for k in curves.values()) - 1
    fig.add_vrect(x0=train_length - 0.5, x1=reach, fillcolor="#ffdd88", opacity=0.2, line_width=0)
    return finish(fig, title, "reach: positions back (log scale; shaded: never seen in training)",
                   "best competitor (target = 0, window edge = -1)", xaxis_type="log")


def pair_spectrum_figure(
    period: np.ndarray, frames: Mapping[str, np.ndarray], train_length: int, title: str
) -> go.Figure:
    """Share of the kernel's energy in each RoPE rotation pair against the pair's period (stems on a log axis),
    a slider over (offset, seed).

    period: (P,) positions per turn of each pair; frames: slider label -> (P,) amplitude^2 shares summing to 1.
    """
    x = period.astype(np.float32)
    stems_x = np.stack([x, x, np.full_like(x, np.nan)], 1).ravel()
    panels = {}
    for label, share in frames.items():
        y = np.asarray(share, dtype=np.float32)
        panels[label] = [
            go.Scatter(x=stems_x, y=np.stack([np.zeros_like(y), y, np.full_like(y, np.nan)], 1).ravel(),
                       mode="lines", line=dict(color=COLORS["rope"], width=2), hoverinfo="skip", showlegend=False),
            go.Scatter(x=x, y=y, mode="markers", name="energy share of one pair",
                       marker=dict(color=COLORS["rope"], size=8), hovertemplate="period %{x:.1f}: %{y:.3f}<extra></extra>"),
        ]
    fig = slider_figure(panels, "offset, seed")
    fig.add_vline(x=train_length, line=dict(color="#444", dash="dash", width=1),
                  annotation_text=f"training length {train_length}", annotation_position="top right")
    span = np.log10([period.min() / 1.5, period.max() * 1.5])
    return finish(fig, title, "period of the rotation pair, 2 pi / theta_p (positions per turn, log scale)",
                   "share of the kernel's energy (amplitude squared)", xaxis_type="log", xaxis_range=list(span),
                   yaxis_range=[0, 1.05])


def singular_value_figure(curves: Mapping[str, np.ndarray], title: str) -> go.Figure:
    """Singular values of a V x V logit matrix divided by the largest, one line per label.

    curves: label -> (V,) singular values, descending.
    """
    fig = go.Figure()
    for label, sv in curves.items():
        sv = np.asarray(sv, dtype=np.float64)
        fig.add_trace(go.Scatter(x=np.arange(1, len(sv) + 1), y=np.maximum(sv / sv[0], 1e-12).astype(np.float32),
                                 mode="lines+markers", name=label,
                                 hovertemplate="sigma_%{x} / sigma_1 = %{y:.2e}<extra></extra>"))
    return finish(fig, title, "index of the singular value (1 = largest)", "singular value / largest (log scale)",
                   yaxis_type="log", yaxis_exponentformat="power", margin=dict(t=70, r=170),
                   legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))


def margin_vs_accuracy(frames: Mapping[str, tuple[np.ndarray, np.ndarray, Sequence[str]]], chance: float,
                       title: str) -> go.Figure:
    """Kernel margin against measured accuracy, one dot per trained model, a slider over the evaluation length.

    frames: slider label -> (margin (n,) in logit units, accuracy (n,), hover text (n,)). Margin > 0: the
    target offset outscores every offset the sequence contains beyond the training window.
    """
    panels = {}
    for name, (margin, acc, text) in frames.items():
        panels[name] = [go.Scatter(
            x=np.asarray(margin, dtype=np.float32), y=np.asarray(acc, dtype=np.float32), mode="markers",
            text=list(text), name="one model (offset, seed)", marker=dict(color=COLORS["rope"], size=10, opacity=0.75),
            hovertemplate="%{text}<br>margin %{x:.2f}, accuracy %{y:.3f}<extra></extra>",
        )]
    fig = slider_figure(panels, "evaluation length")
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text="chance", annotation_position="bottom right")
    fig.add_vline(x=0, line=dict(color="#444", dash="dash", width=1))
    return finish(fig, title, "c(-K) minus the largest c(delta) beyond the window (logit units)",
                   "accuracy at that length (fraction correct)", yaxis_range=[0, 1.05])


LAW_STYLE = {"simple": ("simple law (rho fitted at T)", "#ff7f0e", "dash"),
             "kernel": ("kernel law", "#2ca02c", "dot"),
             "mean_field": ("mean-field law", "#9467bd", "dashdot"),
             "content": ("content law (exact average)", "#1f77b4", "solid")}


def dilution_curves(frames: Mapping[str, tuple[np.ndarray, np.ndarray, Mapping[str, np.ndarray]]], train_length: int,
                    title: str) -> go.Figure:
    """Measured and predicted target weight against the evaluation length, a slider over (offset, seed).

    frames: slider label -> (lengths (n,), measured weight (n,), law name -> predicted weight (n,)).
    """
    panels = {}
    for name, (lengths, measured, laws) in frames.items():
        x = np.asarray(lengths) / train_length
        traces: list[go.BaseTraceType] = [go.Scatter(
            x=x, y=np.asarray(measured, dtype=np.float32), mode="markers", name="measured",
            marker=dict(color="black", size=9), hovertemplate="L/T %{x:.2f}: %{y:.3f}<extra>measured</extra>")]
        for law, pred in laws.items():
            label, color, dash = LAW_STYLE[law]
            traces.append(go.Scatter(x=x, y=np.asarray(pred, dtype=np.float32), mode="lines", name=label,
                                     line=dict(color=color, dash=dash, width=2),
                                     hovertemplate=f"L/T %{{x:.2f}}: %{{y:.3f}}<extra>{law}</extra>"))
        panels[name] = traces
    fig = slider_figure(panels, "offset, seed")
    return finish(fig, title, "evaluation length / training length (log scale)",
                   "mean attention weight on the target (log scale)", xaxis_type="log", yaxis_type="log",
                   xaxis_dtick=np.log10(2))


def law_scatter(points: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str, quantity: str,
                          log: bool) -> go.Figure:
    """Predicted against measured values, one trace per group, with the diagonal y = x.

    points: group label -> (measured (n,), predicted (n,)); ``quantity`` names what is compared (axis titles).
    """
    fig = go.Figure()
    palette = list(COLORS.values())
    lo = min(float(np.min(np.concatenate([m, p]))) for m, p in points.values())
    for i, (label, (measured, predicted)) in enumerate(points.items()):
        color = LAW_STYLE[label][1] if label in LAW_STYLE else palette[i % len(palette)]
        name = LAW_STYLE[label][0] if label in LAW_STYLE else label
        fig.add_trace(go.Scatter(x=np.asarray(measured, dtype=np.float32), y=np.asarray(predicted, dtype=np.float32),
                                 mode="markers", name=name, marker=dict(color=color, size=7, opacity=0.7),
                                 hovertemplate="measured %{x:.3f}, predicted %{y:.3f}<extra></extra>"))
    edge = [max(lo, 1e-4) if log else 0, 1]
    fig.add_trace(go.Scatter(x=edge, y=edge, mode="lines", name="y = x", line=dict(color="#999", dash="dash", width=1)))
    scale = " (log scale)" if log else ""
    kw = dict(xaxis_type="log", yaxis_type="log") if log else dict(xaxis_range=[0, 1.03], yaxis_range=[0, 1.03])
    return finish(fig, title, f"measured {quantity}{scale}", f"predicted {quantity}{scale}", **kw)
