"""Accuracy figures: accuracy against the evaluation length (per encoding, per variant, linear or log), training
curves, a heatmap over (training length, offset) settings, and fit against transfer per seed.

Positions in figures are 1-indexed like the prose (x_1 .. x_L); tensors are 0-indexed.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..evaluate import Evaluation
from ..train import Trained
from .render import CHANCE_STYLE, COLORS, DASHES, LABELS, finish, slider_figure


def seed_spread(x: np.ndarray, acc: np.ndarray, enc: str, group: str, name: str | None = None,
                 dash: str = "solid") -> list[go.BaseTraceType]:
    """Mean line and one faint marker per seed: acc is (n_x, S). ``name`` replaces the legend label."""
    color = COLORS.get(enc, "#333")
    seeds = go.Scatter(
        x=np.repeat(x, acc.shape[1]), y=acc.ravel(), mode="markers", legendgroup=group, showlegend=False,
        marker=dict(color=color, size=6, opacity=0.35), hovertemplate="%{y:.3f}<extra>one seed</extra>",
    )
    mean = go.Scatter(
        x=x, y=acc.mean(1), mode="lines+markers", name=f"{name or LABELS.get(enc, enc)} (mean of {acc.shape[1]} seeds)",
        legendgroup=group, line=dict(color=color, width=2.5, dash=dash), hovertemplate="mean %{y:.3f}<extra></extra>",
    )
    return [seeds, mean]


def accuracy_vs_length(
    grid: Mapping[tuple[int, int], Mapping[str, Evaluation]], title: str = "Accuracy against evaluation length"
) -> go.Figure:
    """Accuracy (mean line, one dot per seed) against the evaluation length as a multiple of the training
    length, per encoding, with chance marked. grid: (training length T, offset K) -> encoding -> Evaluation.
    A slider switches between the grid's (T, K) settings when there is more than one. With five or more
    legend entries the legend moves to the right of the plot, where it cannot crowd the title."""
    frames = {}
    for (T, K), by_enc in grid.items():
        traces: list[go.BaseTraceType] = []
        for enc, ev in by_enc.items():
            x = np.array(ev.lengths) / T
            traces += seed_spread(x, ev.accuracy(), enc, enc)
        chance = next(iter(by_enc.values())).chance
        xs = [min(min(ev.lengths) for ev in by_enc.values()) / T, max(max(ev.lengths) for ev in by_enc.values()) / T]
        traces.append(go.Scatter(x=xs, y=[chance, chance], mode="lines", name=f"chance (1/V = {chance:.3f})",
                                 line=CHANCE_STYLE, hoverinfo="skip"))
        frames[f"T={T}, K={K}"] = traces
    fig = slider_figure(frames, "training length, offset")
    entries = max(len(by_enc) for by_enc in grid.values()) + 1  # one per encoding, plus chance
    side = dict(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"), margin=dict(t=70, r=10))
    return finish(fig, title, "evaluation length / training length (log scale)", "accuracy (fraction correct)",
                   xaxis_type="log", yaxis_range=[0, 1.05], xaxis_dtick=np.log10(2), **(side if entries >= 5 else {}))


def accuracy_by_length_linear(evals: Mapping[str, Evaluation], train_length: int, title: str) -> go.Figure:
    """Accuracy against the evaluation length (tokens, linear axis) per encoding, with the training length
    and chance marked: shows what happens just below and just above the training length."""
    fig = go.Figure()
    for enc, ev in evals.items():
        fig.add_traces(seed_spread(np.array(ev.lengths), ev.accuracy(), enc, enc))
    chance = next(iter(evals.values())).chance
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text="chance", annotation_position="bottom right")
    fig.add_vline(x=train_length, line=dict(color="#444", dash="dash", width=1),
                  annotation_text=f"training length {train_length}", annotation_position="top left")
    return finish(fig, title, "evaluation length L (tokens)", "accuracy (fraction correct)", yaxis_range=[0, 1.05])


def training_curves(runs: Mapping[str, Trained], title: str = "Training accuracy per seed") -> go.Figure:
    """Training-batch accuracy against the step, one line per seed, per encoding (runs: encoding -> Trained)."""
    fig = go.Figure()
    for enc, tr in runs.items():
        for s, seed in enumerate(tr.seeds):
            n = int(tr.steps[s])
            fig.add_trace(go.Scatter(
                x=np.arange(1, n + 1), y=tr.accuracy[:n, s].astype(np.float32), mode="lines",
                name=f"{LABELS.get(enc, enc)}", legendgroup=enc, showlegend=s == 0,
                line=dict(color=COLORS.get(enc, "#333"), width=1.5), opacity=0.8,
                hovertemplate=f"seed {seed}, step %{{x}}: %{{y:.3f}}<extra></extra>",
            ))
    return finish(fig, title, "training step", "training-batch accuracy (fraction correct)", yaxis_range=[0, 1.05])


def accuracy_by_variant(
    variants: Mapping[str, tuple[str, Evaluation]], train_length: int, title: str, log_x: bool = True,
    shade: tuple[int, int] | None = None,
) -> go.Figure:
    """Accuracy (mean line, one dot per seed) against the evaluation length for named model variants.

    variants: legend label -> (encoding, for the colour; Evaluation). Variants of one encoding are told
    apart by the line's dash. log_x: x is L / train_length on a log axis; else L in tokens (linear),
    with ``shade`` = (shortest, longest) training length drawn as a band when given.
    """
    fig = go.Figure()
    seen: dict[str, int] = {}
    chance = next(iter(variants.values()))[1].chance
    for label, (enc, ev) in variants.items():
        dash = DASHES[seen.get(enc, 0) % len(DASHES)]
        seen[enc] = seen.get(enc, 0) + 1
        x = np.array(ev.lengths) / (train_length if log_x else 1)
        fig.add_traces(seed_spread(x, ev.accuracy(), enc, label, name=label, dash=dash))
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text=f"chance (1/V = {chance:.3f})",
                  annotation_position="bottom right")
    if shade is not None:
        fig.add_vrect(x0=shade[0], x1=shade[1], fillcolor="#88bbee", opacity=0.15, line_width=0,
                      annotation_text="training lengths", annotation_position="top left")
    below = dict(legend=dict(orientation="h", yanchor="top", y=-0.22, x=0), margin=dict(t=70, b=170), height=560)
    if log_x:
        return finish(fig, title, "evaluation length / training length (log scale)", "accuracy (fraction correct)",
                       xaxis_type="log", yaxis_range=[0, 1.05], xaxis_dtick=np.log10(2), **below)
    return finish(fig, title, "evaluation length L (tokens)", "accuracy (fraction correct)", yaxis_range=[0, 1.05],
                   **below)


def setting_heatmap(
    frames: Mapping[str, np.ndarray], rows: Sequence[int], cols: Sequence[int], title: str
) -> go.Figure:
    """Mean accuracy over seeds for every (training length, offset) setting, with a slider over frames.

    frames: slider label -> accuracy (len(rows), len(cols), S); rows are training lengths T, columns
    offsets K. Each cell is coloured by the mean and labelled "mean (worst seed - best seed)".
    """
    panels = {}
    for name, acc in frames.items():
        mean, lo, hi = acc.mean(-1), acc.min(-1), acc.max(-1)
        text = [[f"{mean[i, j]:.2f}<br>({lo[i, j]:.2f}-{hi[i, j]:.2f})" for j in range(len(cols))]
                for i in range(len(rows))]
        panels[name] = [go.Heatmap(
            z=mean.astype(np.float32), x=[str(k) for k in cols], y=[str(t) for t in rows], zmin=0, zmax=1,
            colorscale="Viridis", text=text, texttemplate="%{text}", colorbar=dict(title="mean<br>accuracy"),
            hovertemplate="T=%{y}, K=%{x}: mean %{z:.3f}<extra></extra>",
        )]
    fig = slider_figure(panels, "width, evaluation length")
    return finish(fig, title, "offset K (positions back)", "training length T (tokens)", height=480,
                   xaxis_type="category", yaxis_type="category")


def fit_vs_transfer(points: Mapping[str, tuple[np.ndarray, np.ndarray, list[str]]], chance: float, title: str,
                    x_title: str, y_title: str) -> go.Figure:
    """One dot per trained seed: accuracy at the training length (x) against accuracy further out (y).

    points: group label (legend, one colour each) -> (x (n,), y (n,), hover text per dot).
    """
    fig = go.Figure()
    palette = list(COLORS.values())
    for i, (label, (x, y, text)) in enumerate(points.items()):
        fig.add_trace(go.Scatter(
            x=np.asarray(x, dtype=np.float32), y=np.asarray(y, dtype=np.float32), mode="markers", name=label,
            text=text, marker=dict(color=palette[i % len(palette)], size=8, opacity=0.7),
            hovertemplate="%{text}<br>x %{x:.3f}, y %{y:.3f}<extra></extra>",
        ))
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text="chance", annotation_position="bottom right")
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="y = x",
                             line=dict(color="#999", dash="dash", width=1)))
    return finish(fig, title, x_title, y_title, xaxis_range=[0, 1.03], yaxis_range=[0, 1.03])

