"""One figure per training recipe, joined into one figure with a recipe control (buttons above the plot), and
the table that sets the recipes' accuracies side by side.

Any figure of the other families (with or without a slider) is built once per recipe; ``recipe_menu`` puts
their traces into one figure whose recipe buttons and (when the figures have one) slider act independently,
through ``grid_controls``. Glue the result with ``glue_grid_figure`` so that the page combines the controls.
"""

from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go

from ..evaluate import Evaluation
from .render import HEIGHT, LABELS, grid_controls, margin, md_table

MENU_ROOM = 50  # pixels added above a figure for its row of recipe buttons


def _slider_owner(fig: go.Figure) -> tuple[list[int], list[str], str]:
    """Per trace of ``fig``, the index of the slider step that shows it (-1: no slider, always shown); the step
    labels; the slider's label."""
    if not fig.layout.sliders:
        return [-1] * len(fig.data), [], ""
    slider = fig.layout.sliders[0]
    owner = [-1] * len(fig.data)
    for i, step in enumerate(slider.steps):
        for j, shown in enumerate(step.args[0]["visible"]):
            if shown:
                owner[j] = i
    label = (slider.currentvalue.prefix or "").rstrip(": ")
    return owner, [step.label for step in slider.steps], label


def recipe_menu(figs: Mapping[str, go.Figure], title: str) -> go.Figure:
    """``figs`` (recipe name -> the same figure built from that recipe's models, with the same slider steps if
    any) as one figure with a button per recipe; the first recipe is shown first. ``title`` may hold ``{0}``
    for the recipe's name (and ``{1}`` for the slider's value when the figures have a slider)."""
    if not figs:
        raise ValueError("recipe_menu: give at least one figure (recipe name -> figure)")
    names = list(figs)
    first = figs[names[0]]
    owners, labels, label = [], None, ""
    fig = go.Figure(layout=first.layout)
    fig.update_layout(sliders=[], updatemenus=[])
    for r, name in enumerate(names):
        owner, steps, label = _slider_owner(figs[name])
        if labels is None:
            labels = steps
        elif steps != labels:
            raise ValueError(f"recipe_menu: recipe {name!r} has slider steps {steps}, the first has {labels}; "
                             "build every recipe's figure over the same grid")
        for trace, o in zip(figs[name].data, owner):
            fig.add_trace(trace)
            owners.append([r, o] if labels else [r])
    dims = [("menu", "recipe", names)] + ([("slider", label, labels)] if labels else [])
    fig = grid_controls(fig, owners, dims, [0] * len(dims), title)
    fig.update_layout(height=(first.layout.height or HEIGHT) + MENU_ROOM, margin=dict(t=margin(fig, "t") + MENU_ROOM))
    return fig


def accuracy_table(evals: Mapping[tuple[str, str], Evaluation], train_length: int):  # -> IPython.display.Markdown
    """A markdown table of accuracy by multiple of ``train_length``, one row per (encoding, recipe name) key of
    ``evals`` in its order: each cell the mean over seeds and, in brackets, the worst seed."""
    if not evals:
        raise ValueError("accuracy_table: give at least one (encoding, recipe) -> Evaluation")
    multiples = list(next(iter(evals.values())).multiples(train_length))
    rows = []
    for (enc, name), ev in evals.items():
        s = ev.summary(train_length)
        if any(f"{m}x" not in s for m in multiples):
            raise ValueError(f"accuracy_table: {enc}, {name} is not evaluated at every multiple {multiples}")
        rows.append([LABELS[enc], name] + [f"{s[f'{m}x']:.3f} (worst {s[f'{m}x_min']:.3f})" for m in multiples])
    return md_table(["encoding", "recipe"] + [f"{m}x" for m in multiples], rows)
