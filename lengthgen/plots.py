"""Every figure of the book, one function each (plotly), and the renderer the book uses.

Conventions (see book/CONVENTIONS.md): a figure has a title, axis titles with units, and is returned,
not shown; the chapter glues it with a caption that says what to look for. A figure that a reader
would want at another training length, offset or evaluation length gets a slider over a
precomputed grid (``slider_figure``), so it stays interactive in the static page.

Positions in figures are 1-indexed like the prose (x_1 .. x_L); tensors are 0-indexed.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from .evaluate import Evaluation
from .train import Trained

COLORS = {"rope": "#1f77b4", "ape": "#d62728", "sinusoidal": "#2ca02c", "nope": "#7f7f7f", "alibi": "#9467bd"}
LABELS = {"rope": "RoPE", "ape": "APE (learned)", "sinusoidal": "sinusoidal", "nope": "NoPE", "alibi": "ALiBi"}
CHANCE_STYLE = dict(color="black", dash="dot", width=1)
DASHES = ("solid", "dash", "dashdot", "longdash")  # variants of one encoding
HEIGHT = 440
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


class BookHTML(MimetypeRenderer):
    """A figure as an HTML div without plotly.js (the book page loads plotly.js once) and no autoplay."""

    def to_mimebundle(self, fig_dict: dict) -> dict:
        height = fig_dict.get("layout", {}).get("height") or HEIGHT
        html = pio.to_html(
            fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
            auto_play=False, default_height=f"{height}px", validate=False,
        )
        return {"text/html": html}


def use_book_renderer() -> None:
    """Render figures as JupyterLab's plotly mimetype plus the book's HTML; call once per chapter."""
    pio.renderers["book"] = BookHTML()
    pio.renderers.default = "plotly_mimetype+book"
    pio.templates.default = "lengthgen"


def glue_figure(name: str, fig: go.Figure) -> None:
    """Store ``fig`` under ``name`` for a ``{glue:figure}`` directive.

    The stored bundle holds the book's HTML (for the page) and plotly's JSON mimetype (for JupyterLab).
    In a book build (``BOOK_BUILD_ENV`` set) the figure appears only where the directive places it; in a
    reader's own Jupyter session it is also shown under the cell that computes it.
    """
    from IPython.display import display
    from myst_nb import glue

    fig_dict = fig.to_dict()
    bundle = _Bundle({**pio.renderers["plotly_mimetype"].to_mimebundle(fig_dict), **BookHTML().to_mimebundle(fig_dict)})
    glue(name, bundle, display=False)
    if not os.environ.get(BOOK_BUILD_ENV):
        display(bundle)


class _Bundle:
    """A ready mimebundle that IPython's display formatter passes through unchanged."""

    def __init__(self, bundle: dict):
        self.bundle = bundle

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        return self.bundle


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]):  # -> IPython.display.Markdown
    """A markdown table (for ``glue`` and ``{glue:md}``): one header row, then one row per ``body`` entry
    of already formatted cells (each as long as ``header``)."""
    from IPython.display import Markdown

    bad = [i for i, row in enumerate(body) if len(row) != len(header)]
    if bad:
        raise ValueError(f"md_table: rows {bad} do not have {len(header)} cells like the header")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return Markdown("\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]))


def _layout(fig: go.Figure, title: str, x: str, y: str, **kw: object) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.02, y=0.98, yanchor="top"), xaxis_title=x, yaxis_title=y, **kw)
    return fig


def _vertical(x: float, name: str, line: dict, y: tuple[float, float] = (0.0, 1.0)) -> go.Scatter:
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
    if len(frames) > 1:
        fig.update_layout(sliders=[dict(active=0, steps=steps, currentvalue=dict(prefix=f"{label}: "), pad=dict(t=80))],
                          margin=dict(b=150), height=HEIGHT + 80)
    fig.update_layout(**layout)
    return fig


def _seed_spread(x: np.ndarray, acc: np.ndarray, enc: str, group: str, name: str | None = None,
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
            traces += _seed_spread(x, ev.accuracy(), enc, enc)
        chance = next(iter(by_enc.values())).chance
        xs = [min(min(ev.lengths) for ev in by_enc.values()) / T, max(max(ev.lengths) for ev in by_enc.values()) / T]
        traces.append(go.Scatter(x=xs, y=[chance, chance], mode="lines", name=f"chance (1/V = {chance:.3f})",
                                 line=CHANCE_STYLE, hoverinfo="skip"))
        frames[f"T={T}, K={K}"] = traces
    fig = slider_figure(frames, "training length, offset")
    entries = max(len(by_enc) for by_enc in grid.values()) + 1  # one per encoding, plus chance
    side = dict(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"), margin=dict(t=70, r=10))
    return _layout(fig, title, "evaluation length / training length (log scale)", "accuracy (fraction correct)",
                   xaxis_type="log", yaxis_range=[0, 1.05], xaxis_dtick=np.log10(2), **(side if entries >= 5 else {}))


def accuracy_by_length_linear(evals: Mapping[str, Evaluation], train_length: int, title: str) -> go.Figure:
    """Accuracy against the evaluation length (tokens, linear axis) per encoding, with the training length
    and chance marked: shows what happens just below and just above the training length."""
    fig = go.Figure()
    for enc, ev in evals.items():
        fig.add_traces(_seed_spread(np.array(ev.lengths), ev.accuracy(), enc, enc))
    chance = next(iter(evals.values())).chance
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text="chance", annotation_position="bottom right")
    fig.add_vline(x=train_length, line=dict(color="#444", dash="dash", width=1),
                  annotation_text=f"training length {train_length}", annotation_position="top left")
    return _layout(fig, title, "evaluation length L (tokens)", "accuracy (fraction correct)", yaxis_range=[0, 1.05])


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
    return _layout(fig, title, "training step", "training-batch accuracy (fraction correct)", yaxis_range=[0, 1.05])


def shift_test(shifts: Sequence[int], errors: Mapping[str, np.ndarray], title: str) -> go.Figure:
    """Largest change of an attention logit when the whole sequence is moved right by s positions,
    per encoding (errors: encoding -> (len(shifts),) array), log scale."""
    fig = go.Figure()
    for enc, err in errors.items():
        fig.add_trace(go.Scatter(x=list(shifts), y=np.maximum(err, 1e-18), mode="lines+markers",
                                 name=LABELS.get(enc, enc), line=dict(color=COLORS.get(enc, "#333"))))
    return _layout(fig, title, "shift s (positions)", "max |logit change| (logit units, log scale)", yaxis_type="log",
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
    return _layout(fig, title, "key position j (1-indexed)", f"query position i (training length {train_length})")


def last_query_attention(profiles: Mapping[int, np.ndarray], offset: int, train_length: int, title: str) -> go.Figure:
    """The last query's mean attention over keys, against how far back the key is, one line per seed,
    with a slider over the evaluation length. profiles: L -> (S, L) mean weights over key positions.
    Offsets at or past the training length (never seen in training) are shaded."""
    frames = {}
    for L, prof in profiles.items():
        back = np.arange(L - 1, 0, -1)  # key j (0-indexed) is L-1-j back; the query itself (0 back) is left out
        traces = [go.Scatter(x=back, y=p[:-1].astype(np.float32), mode="lines", name=f"seed {s}",
                             hovertemplate="%{x} back: %{y:.3f}<extra></extra>") for s, p in enumerate(prof)]
        traces.append(_vertical(offset, f"target ({offset} back)", dict(color="#444", dash="dash", width=1)))
        if L > train_length:
            traces.append(go.Scatter(x=[train_length, L - 1, L - 1, train_length], y=[0, 0, 1, 1], fill="toself",
                                     mode="none", fillcolor="rgba(255, 200, 80, 0.2)", hoverinfo="skip",
                                     name=f"offsets >= {train_length}: never seen in training"))
        frames[f"L={L}"] = traces
    fig = slider_figure(frames, "evaluation length")
    return _layout(fig, title, "offset of the key behind the query (positions, log scale)",
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
    return _layout(fig, title, "absolute key position j (1-indexed)",
                   "share of samples with argmax at j", yaxis_range=[0, 1.05], bargap=0)


def ape_row_drift(drift: np.ndarray, train_length: int, title: str) -> go.Figure:
    """How far each APE table row moved in training (L2 distance from its initial value), per seed.
    drift: (S, max_length); positions past the training length never receive a gradient."""
    fig = go.Figure()
    pos = np.arange(1, drift.shape[1] + 1)
    for s, d in enumerate(drift):
        fig.add_trace(go.Scatter(x=pos, y=np.maximum(d, 1e-12).astype(np.float32), mode="lines",
                                 name=f"seed {s}", hovertemplate="row %{x}: %{y:.3g}<extra></extra>"))
    fig.add_trace(_vertical(train_length, f"training length {train_length}", dict(color="#444", dash="dash", width=1),
                            y=(1e-12, float(drift.max()))))
    return _layout(fig, title, "APE table row = absolute position (1-indexed, log scale)",
                   "distance from initial value (L2, log scale)",
                   xaxis_type="log", yaxis_type="log", yaxis_exponentformat="power")


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
        fig.add_traces(_seed_spread(x, ev.accuracy(), enc, label, name=label, dash=dash))
    fig.add_hline(y=chance, line=CHANCE_STYLE, annotation_text=f"chance (1/V = {chance:.3f})",
                  annotation_position="bottom right")
    if shade is not None:
        fig.add_vrect(x0=shade[0], x1=shade[1], fillcolor="#88bbee", opacity=0.15, line_width=0,
                      annotation_text="training lengths", annotation_position="top left")
    below = dict(legend=dict(orientation="h", yanchor="top", y=-0.22, x=0), margin=dict(t=70, b=170), height=560)
    if log_x:
        return _layout(fig, title, "evaluation length / training length (log scale)", "accuracy (fraction correct)",
                       xaxis_type="log", yaxis_range=[0, 1.05], xaxis_dtick=np.log10(2), **below)
    return _layout(fig, title, "evaluation length L (tokens)", "accuracy (fraction correct)", yaxis_range=[0, 1.05],
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
    return _layout(fig, title, "offset K (positions back)", "training length T (tokens)", height=480,
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
    return _layout(fig, title, x_title, y_title, xaxis_range=[0, 1.03], yaxis_range=[0, 1.03])


# --- sweeps (chapter 8): figures from summaries over seeds (mean and standard error), not from Evaluations ---

Series = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]]  # name -> (x (n,), mean (n,), sem (n,))


def _error_bar_traces(series: Series) -> list[go.BaseTraceType]:
    palette = list(COLORS.values())
    traces = []
    for i, (name, (x, mean, sem)) in enumerate(series.items()):
        color = COLORS.get(name, palette[i % len(palette)])
        traces.append(go.Scatter(
            x=np.asarray(x, dtype=np.float32), y=np.asarray(mean, dtype=np.float32), mode="lines+markers",
            name=LABELS.get(name, name), line=dict(color=color, width=2),
            error_y=dict(type="data", array=np.asarray(sem, dtype=np.float32), visible=True, thickness=1),
            hovertemplate="%{x}: %{y:.3f} ± %{error_y.array:.3f}<extra>" + LABELS.get(name, name) + "</extra>",
        ))
    return traces


def sweep_lines(frames: Mapping[str, Series], label: str, title: str, x_title: str, y_title: str,
                chance: float | None = None, log_x: bool = False, y_range: Sequence[float] | None = None) -> go.Figure:
    """Mean ± standard error over seeds against a swept setting, one line per series, a slider over frames.

    frames: slider label -> series name -> (x (n,), mean (n,), sem (n,)); one frame gives no slider.
    ``chance`` draws the 1/V line. Series named after an encoding take its colour and label.
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
    return _layout(fig, title, x_title, y_title, xaxis_type="log" if log_x else "linear", yaxis_range=y_range)


def predicted_vs_measured(predicted: Sequence[float | None], measured: Sequence[float | None],
                          groups: Sequence[str], cap: float, title: str) -> go.Figure:
    """One dot per model: the failure length predicted from its kernel (x) against the measured one (y).

    predicted, measured: (n,) lengths as multiples of the training length, None for "not within ``cap``"
    (drawn at 1.25 x cap);
    groups: (n,) legend label per model. Log axes; the dashed diagonal is perfect agreement, the dotted
    lines mark ``cap`` (the caption says what lies beyond them).
    """
    beyond = 1.25 * cap
    fill = lambda v: np.array([beyond if x is None else x for x in v], dtype=np.float32)  # noqa: E731
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
    return _layout(fig, title, "predicted failure length / T (log scale)", "measured failure length / T (log scale)",
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
    return _layout(fig, title, "accuracy (fraction correct), mean ± standard error over seeds", "setting",
                   xaxis_range=[0, 1.03], yaxis_autorange="reversed", yaxis_automargin=True,
                   height=max(HEIGHT, 28 * len(labels) + 160))


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
    return _layout(fig, title, "offset behind the query, -delta (positions; shaded: never seen in training)",
                   "mean logit c(delta) (logit units)")


def kernel_shapes(frames: Mapping[str, Mapping[str, np.ndarray]], offset: int, train_length: int,
                  title: str) -> go.Figure:
    """Carrier kernels on one scale, a slider over frames (e.g. seeds). Each curve is the best competitor of
    the target within reach: entry j is max over offsets j' <= j back (j' != K) of (c(-j') - c(-K)) divided by
    the in-window margin, so it is -1 at the edge of the training window and crosses 0 at the length where a
    far offset first outscores the target (``reach_envelope`` computes it from a kernel).

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
    return _layout(fig, title, "reach: positions back (log scale; shaded: never seen in training)",
                   "best competitor (target = 0, window edge = -1)", xaxis_type="log")


def reach_envelope(kern: np.ndarray, offset: int, train_length: int) -> np.ndarray:
    """(n,) the curve ``kernel_shapes`` draws from a kernel (n,) with entry j at delta = -j: the running maximum
    over j' <= j, j' != K, of (c(-j') - c(-K)) / (c(-K) - the best other in-window offset)."""
    rel = np.asarray(kern, dtype=np.float64) - kern[offset]
    margin = -np.delete(rel[:train_length], offset).max()
    rel[offset] = -np.inf
    return np.maximum.accumulate(rel) / margin


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
    return _layout(fig, title, "period of the rotation pair, 2 pi / theta_p (positions per turn, log scale)",
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
    return _layout(fig, title, "index of the singular value (1 = largest)", "singular value / largest (log scale)",
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
    return _layout(fig, title, "c(-K) minus the largest c(delta) beyond the window (logit units)",
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
    return _layout(fig, title, "evaluation length / training length (log scale)",
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
    return _layout(fig, title, f"measured {quantity}{scale}", f"predicted {quantity}{scale}", **kw)


__all__ = [
    "BookHTML",
    "accuracy_by_length_linear",
    "accuracy_by_variant",
    "accuracy_vs_length",
    "ape_row_drift",
    "argmax_positions",
    "attention_maps",
    "carrier_kernel_figure",
    "dilution_curves",
    "fit_vs_transfer",
    "glue_figure",
    "kernel_shapes",
    "reach_envelope",
    "last_query_attention",
    "law_scatter",
    "margin_vs_accuracy",
    "pair_spectrum_figure",
    "predicted_vs_measured",
    "setting_effects",
    "setting_heatmap",
    "shift_test",
    "singular_value_figure",
    "slider_figure",
    "sweep_lines",
    "training_curves",
    "use_book_renderer",
]


# --- A grid of precomputed traces with independent controls (chapter 7's static playground) -----------

# Plotly sliders and buttons cannot combine their states by themselves: each step or button can only set
# what it was given. So the controls of a grid figure carry method "skip" (plotly does nothing itself),
# and this script, run once after the figure is drawn, listens to every control and shows the traces of
# the grid point the controls select together. It reads layout.meta.grid:
#   owners[i]: the grid point of trace i, one index per dimension (-1: shown for every value of it);
#   controls[d]: ["slider", j] or ["menu", j], the control of dimension d;
#   labels[d]: the values of dimension d as text; title: the title, "{d}" standing for labels[d][active].
GRID_JS = """(function () {
    var gd = document.getElementById('{plot_id}');
    var grid = gd.layout.meta.grid;
    function active() {
        return grid.controls.map(function (c) {
            var list = c[0] === 'slider' ? gd.layout.sliders : gd.layout.updatemenus;
            return list[c[1]].active || 0;
        });
    }
    function redraw() {
        var a = active();
        var visible = grid.owners.map(function (o) {
            return o.every(function (v, d) { return v < 0 || v === a[d]; });
        });
        var title = grid.title.replace(/\\{(\\d+)\\}/g, function (_, d) { return grid.labels[+d][a[+d]]; });
        Plotly.update(gd, {visible: visible}, {'title.text': title});
    }
    gd.on('plotly_sliderchange', redraw);
    gd.on('plotly_buttonclicked', redraw);
})();"""


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
    fig.update_layout(
        sliders=slider_layout, updatemenus=menu_layout,
        meta=dict(grid=dict(owners=owners, controls=controls, labels=[list(v) for _, _, v in dims], title=title)),
    )
    fig.update_layout(title_text=title.format(*[fmt[d] for d in range(len(dims))]))
    return fig


class GridHTML(BookHTML):
    """BookHTML plus GRID_JS, which lets a ``grid_controls`` figure's controls act together in the page."""

    def to_mimebundle(self, fig_dict: dict) -> dict:
        height = fig_dict.get("layout", {}).get("height") or HEIGHT
        html = pio.to_html(
            fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False, auto_play=False,
            default_height=f"{height}px", validate=False, post_script=GRID_JS,
        )
        return {"text/html": html}


def glue_grid_figure(name: str, fig: go.Figure) -> None:
    """``glue_figure`` for a ``grid_controls`` figure: the page's HTML carries GRID_JS. (JupyterLab shows
    the plotly JSON, where the controls stay at the first grid point: there, use the live playground.)"""
    from IPython.display import display
    from myst_nb import glue

    fig_dict = fig.to_dict()
    bundle = _Bundle({**pio.renderers["plotly_mimetype"].to_mimebundle(fig_dict), **GridHTML().to_mimebundle(fig_dict)})
    glue(name, bundle, display=False)
    if not os.environ.get(BOOK_BUILD_ENV):
        display(bundle)


def playground_grid(grid: "Grid", active: tuple[str, int, int] | None = None,
                    title: str = "RoPE and APE, trained at T={1} with offset K={2}, recipe: {0}") -> go.Figure:
    """The static playground: for every (recipe, T, K) of a ``playground.Grid``, accuracy against the
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
                pin = _vertical((pm - 1) * T + K, "x_(T-K), where APE pins",
                                dict(color=COLORS["ape"], dash="dot", width=1))
                add(pin.update(legendgroup="pinned", **shared), (-1, t, k), 2)
    for k, K in enumerate(grid.offsets):
        target = _vertical(K, "target, K back", dict(color="#444", dash="dash", width=1))
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


from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from .playground import Grid

__all__ += ["GRID_JS", "GridHTML", "glue_grid_figure", "grid_controls", "grid_visibility", "playground_grid"]
