"""Attention figures: RoPE's shift test, attention maps, the last query's attention profile, where APE's
attention argmax lands, and how far APE's table rows moved in training.

Positions in figures are 1-indexed like the prose (x_1 .. x_L); tensors are 0-indexed.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .render import COLORS, LABELS, finish, slider_figure, vertical


def shift_test(shifts: Sequence[int], errors: Mapping[str, np.ndarray], title: str) -> go.Figure:
    """Largest change of an attention logit when the whole sequence is moved right by s positions,
    per encoding (errors: encoding -> (len(shifts),) array), log scale."""
    fig = go.Figure()
    for enc, err in errors.items():
        fig.add_trace(go.Scatter(x=list(shifts), y=np.maximum(err, 1e-18), mode="lines+markers",
                                 name=LABELS.get(enc, enc), line=dict(color=COLORS.get(enc, "#333"))))
    return finish(fig, title, "shift s (positions)", "max |logit change| (logit units, log scale)", yaxis_type="log",
                   yaxis_exponentformat="power")


def attention_maps(maps: Mapping[int, np.ndarray], train_length: int, title: str) -> go.Figure:
    """Mean attention weight, query position against key position, with a slider over the evaluation length.

    maps: evaluation length L -> (L, L) mean attention (rows: queries, columns: keys). The colour is
    log10 of the weight in steps of 0.1, stored as int8 (tenths), to keep the page light.
    """
    frames = {}
    ticks = np.arange(-40, 1, 10)
    for L, a in maps.items():
        z = np.round(10 * np.log10(np.clip(a, 1e-4, 1.0))).astype(np.int8)
        pos = np.arange(1, L + 1, dtype=np.int16)
        frames[f"L={L}"] = [go.Heatmap(
            z=z, x=pos, y=pos, zmin=-40, zmax=0, colorscale="Viridis",
            colorbar=dict(title="weight", tickvals=ticks, ticktext=[f"1e{t // 10}" for t in ticks]),
            hovertemplate="query %{y}, key %{x}: weight 10^(%{z}/10)<extra></extra>",
        )]
    fig = slider_figure(frames, "evaluation length")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=560)
    return finish(fig, title, "key position j (1-indexed)", f"query position i (training length {train_length})")


def last_query_attention(profiles: Mapping[int, np.ndarray], offset: int, train_length: int, title: str) -> go.Figure:
    """The last query's mean attention over keys, against how far back the key is, one line per seed,
    with a slider over the evaluation length. profiles: L -> (S, L) mean weights over key positions.
    Offsets at or past the training length (never seen in training) are shaded."""
    frames = {}
    for L, prof in profiles.items():
        back = np.arange(L - 1, 0, -1)  # key j (0-indexed) is L-1-j back; the query itself (0 back) is left out
        traces = [go.Scatter(x=back, y=p[:-1].astype(np.float32), mode="lines", name=f"seed {s}",
                             hovertemplate="%{x} back: %{y:.3f}<extra></extra>") for s, p in enumerate(prof)]
        traces.append(vertical(offset, f"target ({offset} back)", dict(color="#444", dash="dash", width=1)))
        if L > train_length:
            traces.append(go.Scatter(x=[train_length, L - 1, L - 1, train_length], y=[0, 0, 1, 1], fill="toself",
                                     mode="none", fillcolor="rgba(255, 200, 80, 0.2)", hoverinfo="skip",
                                     name=f"offsets >= {train_length}: never seen in training"))
        frames[f"L={L}"] = traces
    fig = slider_figure(frames, "evaluation length")
    return finish(fig, title, "offset of the key behind the query (positions, log scale)",
                   "mean attention weight (probability)", xaxis_type="log", yaxis_range=[0, 1], xaxis_dtick=np.log10(2))


def argmax_positions(counts: Mapping[int, np.ndarray], offset: int, train_length: int, title: str) -> go.Figure:
    """Where the last query's attention argmax lands, by absolute key position, with a slider over the
    evaluation length; the target x_(L-K) and the training target x_(T-K) are marked.
    counts: evaluation length L -> (L,) argmax counts over key positions (one model)."""
    frames = {}
    for L, n in counts.items():
        share = (n / n.sum()).astype(np.float32)
        frames[f"L={L}"] = [
            go.Bar(x=np.arange(1, L + 1, dtype=np.int16), y=share, name="argmax share", marker_color=COLORS["ape"],
                   hovertemplate="key %{x}: %{y:.3f}<extra></extra>"),
            go.Scatter(x=[L - offset, L - offset], y=[0, 1], mode="lines", name=f"target x_(L-K) = x_{L - offset}",
                       line=dict(color="black", dash="dash")),
        ]
    fig = slider_figure(frames, "evaluation length")
    fig.add_vline(x=train_length - offset, line=dict(color=COLORS["rope"], dash="dot", width=2),
                  annotation_text=f"training target x_{train_length - offset}", annotation_position="top left")
    return finish(fig, title, "absolute key position j (1-indexed)",
                   "share of samples with argmax at j", yaxis_range=[0, 1.05], bargap=0)


def ape_row_drift(drift: np.ndarray, train_length: int, title: str) -> go.Figure:
    """How far each APE table row moved in training (L2 distance from its initial value), per seed.
    drift: (S, max_length); positions past the training length never receive a gradient."""
    fig = go.Figure()
    pos = np.arange(1, drift.shape[1] + 1)
    for s, d in enumerate(drift):
        fig.add_trace(go.Scatter(x=pos, y=np.maximum(d, 1e-12).astype(np.float32), mode="lines",
                                 name=f"seed {s}", hovertemplate="row %{x}: %{y:.3g}<extra></extra>"))
    fig.add_trace(vertical(train_length, f"training length {train_length}", dict(color="#444", dash="dash", width=1),
                            y=(1e-12, float(drift.max()))))
    return finish(fig, title, "APE table row = absolute position (1-indexed, log scale)",
                   "distance from initial value (L2, log scale)",
                   xaxis_type="log", yaxis_type="log", yaxis_exponentformat="power")

