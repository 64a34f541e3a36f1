"""lengthgen.plots: every public figure, made from small synthetic inputs, carries its own size and fits its
axis titles (issue 19: JupyterLab ignores a height left to the template and drew every figure 360 px tall,
and cut chapter 1's training-accuracy axis title at both ends); the package re-exports every figure family.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Callable

import numpy as np
import plotly.graph_objects as go
import pytest

from lengthgen import plots
from lengthgen.evaluate import Evaluation, LengthResult
from lengthgen.kernel import reach_envelope
from lengthgen.playground import PlaygroundGrid

CHAR_PX = 7.5  # mean width of a character of the template's 13 px sans-serif (DejaVu Sans in Chromium), in pixels


def evaluation(lengths: list[int], seeds: int = 2) -> Evaluation:
    """A synthetic Evaluation: accuracy falling with length, seeds a little apart."""
    rows = {L: LengthResult(L, 1, np.linspace(1.0, 0.9, seeds) / (1 + i), np.full(seeds, 0.5), np.ones((seeds, L)))
            for i, L in enumerate(lengths)}
    return Evaluation(list(range(seeds)), 1 / 16, 8, rows)


def trained() -> SimpleNamespace:
    """What ``training_curves`` reads from a Trained: seeds, steps per member, (steps, S) batch accuracy."""
    return SimpleNamespace(seeds=[0, 1], steps=np.array([5, 4]), accuracy=np.linspace(0, 1, 10).reshape(5, 2))


def playground() -> PlaygroundGrid:
    """A one-point playground grid (T=8, K=1, two encodings, two seeds, evaluated at 1x and 2x)."""
    return PlaygroundGrid({"first fit": "recipe"}, [8], [1], ["rope", "ape"], [0, 1], [1, 2], 8, 2, 8, 1 / 16,
                          np.full((1, 1, 1, 2, 2, 2), 0.5, np.float32), np.ones((1, 1, 1, 2, 2), np.int32),
                          {8: np.full((1, 1, 2, 2, 16), 1 / 16, np.float32)}, {})


def figures() -> dict[str, Callable[[], go.Figure]]:
    """Every public figure function of lengthgen.plots, called on small inputs."""
    ev, chance = evaluation([8, 16, 32]), 1 / 16
    kern = np.cos(np.arange(40) / 3.0)
    series = {"rope": ([1, 2, 3], [0.9, 0.8, 0.5], [0.01, 0.02, 0.05])}
    return {
        "accuracy_vs_length": lambda: plots.accuracy_vs_length({(8, 1): {"rope": ev, "ape": ev}}),
        "accuracy_by_length_linear": lambda: plots.accuracy_by_length_linear({"rope": ev}, 8, "t"),
        "training_curves": lambda: plots.training_curves({"rope": trained()}),
        "accuracy_by_variant": lambda: plots.accuracy_by_variant({"a": ("rope", ev), "b": ("rope", ev)}, 8, "t"),
        "setting_heatmap": lambda: plots.setting_heatmap({"w": np.full((2, 2, 3), 0.5)}, [8, 16], [1, 2], "t"),
        "fit_vs_transfer": lambda: plots.fit_vs_transfer({"g": ([0.9], [0.5], ["s0"])}, chance, "t", "x (u)", "y (u)"),
        "shift_test": lambda: plots.shift_test([1, 2], {"rope": np.array([1e-15, 2e-15])}, "t"),
        "attention_maps": lambda: plots.attention_maps({8: np.full((8, 8), 1 / 8)}, 8, "t"),
        "last_query_attention": lambda: plots.last_query_attention({16: np.full((2, 16), 1 / 16)}, 1, 8, "t"),
        "argmax_positions": lambda: plots.argmax_positions({16: np.ones(16)}, 1, 8, "t"),
        "ape_row_drift": lambda: plots.ape_row_drift(np.ones((2, 16)), 8, "t"),
        "sweep_lines": lambda: plots.sweep_lines({"a": series, "b": series}, "s", "t", "x (u)", "y (u)", chance=chance),
        "predicted_vs_measured": lambda: plots.predicted_vs_measured([2.0, None], [3.0, 4.0], ["a", "b"], 16, "t"),
        "setting_effects": lambda: plots.setting_effects(["a", "b", "c"], series, chance, "t"),
        "carrier_kernel_figure": lambda: plots.carrier_kernel_figure({"s": (kern, kern / 2, 2, [20])}, 8, "t"),
        "kernel_shapes": lambda: plots.kernel_shapes({"s": {"k": reach_envelope(kern, 2, 8)}}, 2, 8, "t"),
        "pair_spectrum_figure": lambda: plots.pair_spectrum_figure(np.array([6.0, 60.0]), {"s": np.array([0.7, 0.3])},
                                                                   8, "t"),
        "singular_value_figure": lambda: plots.singular_value_figure({"a": np.array([3.0, 1.0, 0.1])}, "t"),
        "margin_vs_accuracy": lambda: plots.margin_vs_accuracy({"L": ([0.5, -0.2], [0.9, 0.1], ["a", "b"])}, chance,
                                                               "t"),
        "dilution_curves": lambda: plots.dilution_curves({"s": ([8, 16], [0.5, 0.3], {"simple": [0.5, 0.25]})}, 8, "t"),
        "law_scatter": lambda: plots.law_scatter({"kernel": (np.array([0.5, 0.3]), np.array([0.4, 0.3]))}, "t", "w",
                                                 log=True),
        "playground_grid": lambda: plots.playground_grid(playground()),
        "selection_explorer": lambda: plots.selection_explorer({("l2", 2, 100.0): {
            "kernel": np.linspace(1, -1, 40), "peaks": [{"delta": -20, "value": 0.5}], "lengths": [8, 16],
            "accuracy": [1.0, 0.8]}}, 8),
        "selection_curves": lambda: plots.selection_curves({"ngd": rung_run("ngd"), "sign": rung_run("sign")}),
        "adam_anatomy": lambda: plots.adam_anatomy(rung_run("adam")),
        "recipe_menu": lambda: plots.recipe_menu({
            r: plots.attention_maps({8: np.full((8, 8), 1 / 8), 16: np.full((16, 16), 1 / 16)}, 8, "t {0}")
            for r in ("first fit", "small steps")}, "attention, {0}"),
    }


def rung_run(rule: str):  # -> selection.Trajectory
    """A few steps of one rule on a small kernel rung (milliseconds)."""
    from lengthgen import selection

    return selection.run(selection.kernel_rung(1, 4, 4), rule, 0.1, 8, checkpoints=3)


def public_figure_functions() -> set[str]:
    """The names in plots.__all__ that make a figure (their return annotation is go.Figure)."""
    return {name for name in plots.__all__ if inspect.isfunction(getattr(plots, name))
            and inspect.signature(getattr(plots, name)).return_annotation in (go.Figure, "go.Figure")}


def test_every_figure_function_is_checked_here() -> None:
    unchecked = public_figure_functions() - set(figures()) - {"slider_figure", "grid_controls"}  # any traces
    assert not unchecked, f"add {sorted(unchecked)} to figures() in tests/test_plots.py"


@pytest.mark.parametrize("name", sorted(figures()))
def test_figure_sets_its_own_height_and_fits_its_axis_titles(name: str) -> None:
    fig = figures()[name]()
    height = fig.layout.height
    assert height is not None and height >= plots.HEIGHT, f"{name}: height {height} must be set on the figure"
    assert fig.layout.width is None, f"{name}: the width should follow the page (autosize)"
    template = plots.render.pio.templates["lengthgen"].layout.margin
    top = fig.layout.margin.t if fig.layout.margin.t is not None else template.t
    bottom = fig.layout.margin.b if fig.layout.margin.b is not None else template.b
    plot_px = height - top - bottom
    title = fig.layout.yaxis.title.text or ""
    assert title, f"{name}: no y axis title"
    # The y axis title is centred on the plot area and drawn across the margins: it is cut where half of it
    # reaches past the figure's top or bottom edge.
    room = 2 * (min(top, bottom) + plot_px / 2)
    assert len(title) * CHAR_PX <= room, (
        f"{name}: the y axis title {title!r} (about {len(title) * CHAR_PX:.0f} px) does not fit the {room:.0f} px "
        "the figure leaves it: shorten it or make the figure taller")


def test_every_family_is_reexported() -> None:
    from lengthgen.plots import accuracy, attention, mechanism, playground_figure, render, sweeps

    for module in (accuracy, attention, mechanism, playground_figure, render, sweeps):
        public = [n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", None)
                  == module.__name__ and (inspect.isfunction(v) or inspect.isclass(v))]
        missing = [n for n in public if n not in plots.__all__ and n not in {"finish", "vertical", "seed_spread"}]
        assert not missing, f"{module.__name__}: {missing} not re-exported by lengthgen.plots"


def test_grid_script_is_the_package_file() -> None:
    assert plots.GRID_JS.startswith("(function () {") and "plotly_sliderchange" in plots.GRID_JS
    assert "//" not in plots.GRID_JS.split("\n", 1)[0], "grid.js's comment lines are left out of every figure"


def test_grid_viewer_redraws_the_grid_point_its_controls_select() -> None:
    """In a reader's kernel a grid figure's controls act through Python: moving one shows that grid point's
    traces and title (what grid.js does in the page), and the figure it draws has no dead controls."""
    from lengthgen.plots.grid_viewer import GridViewer

    fig = figures()["recipe_menu"]()
    owners = fig.layout.meta["grid"]["owners"]
    viewer = GridViewer(fig)
    assert [c.value for c in viewer.controls] == ["first fit", "L=8"]
    start = viewer.figure()
    assert [t.visible for t in start.data] == plots.grid_visibility(owners, [0, 0])
    assert not start.layout.sliders and not start.layout.updatemenus
    viewer.controls[0].value = "small steps"
    viewer.controls[1].value = "L=16"
    moved = viewer.figure()
    assert [t.visible for t in moved.data] == plots.grid_visibility(owners, [1, 1])
    assert [t.visible for t in moved.data] != [t.visible for t in start.data]
    assert "small steps" in moved.layout.title.text and moved.layout.title.text != start.layout.title.text
    with pytest.raises(ValueError, match="grid_controls"):
        GridViewer(plots.shift_test([1, 2], {"rope": np.array([1e-15, 2e-15])}, "t"))


def test_grid_figure_outside_a_book_build_is_glued_without_dead_controls(monkeypatch) -> None:
    from lengthgen.inline import WIDGET, glue
    from lengthgen.plots.render import BOOK_BUILD_ENV

    monkeypatch.delenv(BOOK_BUILD_ENV, raising=False)
    plots.glue_grid_figure("grid_test", figures()["recipe_menu"]())
    glued = glue.bundles["grid_test"]["application/vnd.plotly.v1+json"]
    assert WIDGET not in glue.bundles["grid_test"]
    assert not glued["layout"].get("updatemenus") and not glued["layout"].get("sliders")  # no control that cannot act
    monkeypatch.setenv(BOOK_BUILD_ENV, "1")
    plots.glue_grid_figure("grid_test", figures()["recipe_menu"]())
    assert WIDGET not in glue.bundles["grid_test"] and "text/html" in glue.bundles["grid_test"]
