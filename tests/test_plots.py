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
        "selection_explorer": lambda: plots.selection_explorer(full_size_explorer(rules=("gd",), steps=(10,),
                                                                                  offsets=(2,), multiples=(1, 2))),
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
    any_traces = {"slider_figure", "grid_controls", "share_styles", "fit_sliders"}  # these take the traces they are given
    unchecked = public_figure_functions() - set(figures()) - any_traces
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
    """In a reader's kernel the prose shows the live viewer (its widget view), once: no plotly figure whose
    controls need the page's script, and nothing under the cell (issue 31, item 3)."""
    import sys

    from lengthgen.inline import PLOTLY, WIDGET, glue
    from lengthgen.plots.grid_viewer import GridViewer
    from lengthgen.plots.render import BOOK_BUILD_ENV

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    monkeypatch.delenv(BOOK_BUILD_ENV, raising=False)
    plots.glue_grid_figure("grid_test", figures()["recipe_menu"]())
    assert WIDGET in glue.bundles["grid_test"] and PLOTLY not in glue.bundles["grid_test"]
    viewers = lambda: [o for o in shown if isinstance(o, GridViewer)]  # noqa: E731 (it draws into its own output)
    assert viewers() == [], "the viewer is shown once, in the prose"
    monkeypatch.setitem(sys.modules, "google.colab", object())  # Colab's markdown shows no glued figure
    plots.glue_grid_figure("grid_test", figures()["recipe_menu"]())
    assert len(viewers()) == 1, "where the prose cannot show it, the viewer stands under its cell"
    monkeypatch.setenv(BOOK_BUILD_ENV, "1")
    plots.glue_grid_figure("grid_test", figures()["recipe_menu"]())
    assert WIDGET not in glue.bundles["grid_test"] and "text/html" in glue.bundles["grid_test"]


# Page weight (chapter 10's full-mode page was 243 KB against the browser test's 200 KB) -------------------------

def styled_frames(n: int) -> dict[str, list[go.BaseTraceType]]:
    """``n`` slider frames of the same two styled series (names, colours, hover texts), their data differing."""
    return {f"f{i}": [go.Scatter(x=np.arange(4), y=np.full(4, i + j, np.float32), name=name, mode="lines+markers",
                                 line=dict(color=color, width=2), hovertemplate="%{y}<extra>" + name + "</extra>",
                                 error_y=dict(type="data", array=np.full(4, 0.5, np.float32), visible=True))
                      for j, (name, color) in enumerate((("a", "red"), ("b", "blue")))] for i in range(n)}


def test_share_styles_sends_each_repeated_style_once() -> None:
    fig = plots.slider_figure(styled_frames(3), "s")
    shared = plots.share_styles(fig)
    template = shared.layout.template.data.scatter
    assert [t.name for t in template] == ["a", "b"] and template[1].line.color == "blue"
    assert template[0].error_y.visible and template[0].error_y.array is None  # the style, not the data
    for before, after in zip(fig.data, shared.data):  # each trace keeps exactly its data and visibility
        assert after.name is None and after.line.color is None and after.visible == before.visible
        assert np.array_equal(after.y, before.y) and np.array_equal(after.error_y.array, before.error_y.array)
    assert len(shared.to_json()) < len(fig.to_json()) and fig.data[0].name == "a"  # fig itself unchanged
    # a figure whose styles do not repeat keeps them on its traces
    plain = go.Figure([go.Scatter(y=[1, 2], name="a", error_y=dict(array=[0.1, 0.2], thickness=1)),
                       go.Scatter(y=[2, 1], name="b")])
    lone = plots.share_styles(plain)
    assert [t.name for t in lone.data] == ["a", "b"] and lone.layout.template == plain.layout.template
    assert lone.data[0].error_y.array == (0.1, 0.2) and lone.data[0].error_y.thickness == 1  # both halves kept


def test_book_html_keeps_only_the_escape_that_guards_the_script() -> None:
    """The figure JSON in the page writes "/" and ">" as themselves (6 bytes -> 1 each); "<" stays escaped, so
    no "</script>" can close the element early, and the JSON values are the same; plotly's indentation around the
    JSON is gone."""
    import json
    import re

    title = "a</script>b \\/ \\u002f >  \n   end"  # a closing tag, an escaped-looking slash, a backslash before "/",
    # and whitespace that must stay as it is (it is in the JSON, unlike plotly's indentation around it)
    fig = go.Figure(go.Scatter(y=np.linspace(-3, 3, 64, dtype=np.float32)), layout=dict(title_text=title))
    html = plots.BookHTML().to_mimebundle(fig.to_dict())["text/html"]
    assert "</script>b" not in html and "\\u003c" in html and "\\u003e" not in html
    payload = html[html.index("Plotly.newPlot(") + len("Plotly.newPlot("):]
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(payload, payload.index("["))
    layout, _ = decoder.raw_decode(payload, payload.index("{", end))
    assert layout["title"]["text"] == title and data == json.loads(fig.to_json())["data"]
    assert "\\u002f" in fig.to_json()  # plotly's own JSON escapes "/" (the data's base64 holds some)
    around = html[:html.index("[{")] + html[html.index('{"responsive"'):]  # plotly's HTML and script
    assert "  " not in around and "  \\n   end" in html  # no indentation left; the JSON's whitespace kept
    assert not re.findall(r"(?<!\\)\\u002f", html)  # only the escapes after a backslash are left


def full_size_explorer(seed: int = 0, rules=("gd", "sign", "adam"), steps=(100, 300, 1000, 3000), offsets=(1, 2, 4, 8),
                       multiples=(1, 2, 4, 8, 16)) -> dict:
    """Chapter 10's explorer grid (``forecast.explore``) at its full-mode size (3 rules x 3 step sizes x 4 step counts x
    4 offsets x 2 bases, kernels out to 8T with T = 32, five peaks, five lengths), random values in place of the
    solved kernels and predictions."""
    rng = np.random.default_rng(seed)
    bases = (100.0, 10000.0)
    kernels = {(r, K, b): {"kernel": 3 * rng.normal(size=256), "reach": None, "limit": rng.random(len(multiples)),
                           "peaks": [{"delta": -int(d), "value": float(v)} for d, v in
                                     zip(rng.integers(32, 256, 5), rng.normal(size=5))]}
               for r in rules for K in offsets for b in bases}
    curves = {(r, i, n, K, b): {"lr": 0.1 * 10**i, "scale": float(rng.random() * 10), "accuracy": rng.random(len(multiples))}
              for r in rules for i in range(3) for n in steps for K in offsets for b in bases}
    return {"kernels": kernels, "curves": curves, "rates": {r: 1.0 for r in rules}, "factors": [0.1, 1.0, 10.0],
            "steps": list(steps),
            "offsets": list(offsets), "bases": list(bases), "multiples": list(multiples), "train_length": 32, "vocab": 16}


def page_bytes(fig: go.Figure, renderer: type = plots.BookHTML) -> int:
    """What a figure adds to a book page: its HTML as the book renderer writes it."""
    return len(renderer().to_mimebundle(fig.to_dict())["text/html"])


def test_chapter_10_figures_stay_light_at_full_size() -> None:
    """Chapter 10's three large figures at full-mode size from synthetic inputs, against bounds their HTML met
    only once each style was sent once, the kernels went to int16 percent, the ladder's random levels to shapes,
    whole x values and short arrays to JSON lists, and "/" unescaped (before: explorer 67.7 KB, ladder 30.2 KB,
    path 18.7 KB; after: 28.8, 17.6, 11.7)."""
    plots.use_book_renderer()
    rng = np.random.default_rng(0)
    explorer = plots.selection_explorer(full_size_explorer())
    steps = np.unique(np.round(np.geomspace(1, 100_000, 30)).astype(int))  # the ladder's log-spaced checkpoints
    geos = ("l2", "linf", "pairs")
    ladder = plots.selection_curves({f"rule {i}": SimpleNamespace(
        rung="kernel", steps=steps, cosine={g: rng.random((2, len(steps))) for g in geos},
        seed_to_seed=rng.random(len(steps)), random_level={g: 0.1 for g in geos}) for i in range(8)})
    x = np.unique(np.round(np.geomspace(10, 4000, 12)))
    path = plots.sweep_lines({f"rule {i}": {**{n: (x, rng.random(12), rng.random(12) / 10) for n in "abcd"},
                                            "e": (x[[0, -1]], [0.2, 0.2], [0, 0])} for i in range(6)},
                             "rule", "t", "x (u)", "y (u)", log_x=True)
    sizes = {"explorer": page_bytes(explorer, plots.GridHTML), "ladder": page_bytes(ladder), "path": page_bytes(path)}
    bounds = {"explorer": 70_000, "ladder": 20_000, "path": 13_000}  # explorer: + 288 finite-step curves (issue 27)
    assert all(sizes[k] < bounds[k] for k in bounds), f"figure HTML bytes {sizes} over {bounds}"


def test_wrap_title_breaks_before_the_word_that_would_pass_the_line() -> None:
    text = "RoPE beyond the training length: one setting changed at a time, first-fit recipe"  # 80 characters
    lines = plots.wrap_title(text).split("<br>")
    assert " ".join(lines) == text and len(lines) == 2
    assert all(len(line) <= plots.render.TITLE_CHARS for line in lines)
    assert plots.wrap_title("short<br>kept") == "short<br>kept"
    # a placeholder counts as its longest value, and is never split
    template = "a" * 50 + " {0} end"
    assert plots.wrap_title(template, ["x"]) == template
    assert plots.wrap_title(template, ["a value of twenty ch"]) == "a" * 50 + "<br>{0} end"


def test_a_longer_title_grows_the_top_margin_and_the_height() -> None:
    """Each further title line adds TITLE_LINE_PX above the plot, so the plot keeps its size, and the title's
    first line is padded down by the cap height plotly.js leaves out of a title of several lines."""
    one = plots.render.finish(go.Figure(), "short", "x", "y")
    two = plots.render.finish(go.Figure(), "word " * 20, "x", "y")
    line = plots.render.TITLE_LINE_PX
    assert two.layout.margin.t - one.layout.margin.t == line * 1 and two.layout.height - one.layout.height == line
    assert two.layout.title.pad.t > one.layout.title.pad.t == plots.render.TITLE_PAD_PX
    again = plots.render.finish(two, "short", "x", "y")  # retitled: back to one line, back to the first size
    assert (again.layout.margin.t, again.layout.height) == (one.layout.margin.t, one.layout.height)


def test_a_grid_title_is_wrapped_for_its_longest_values() -> None:
    """The page's script fills the template (meta.grid.title) with the chosen values: its lines are broken for the
    longest value of each control, so no choice makes a line too long, and the line count never changes."""
    fig = go.Figure([go.Scatter(y=[1]), go.Scatter(y=[2])])
    values = ["short", "a much longer recipe name than the first"]
    plots.grid_controls(fig, [[0], [1]], [("menu", "recipe", values)], [0], "Accuracy at every length, " * 2 + "{0}")
    template = fig.layout.meta["grid"]["title"]
    assert fig.layout.title.text == template.format(values[0])
    for v in values:
        assert all(len(line) <= plots.render.TITLE_CHARS for line in template.format(v).split("<br>"))


def test_sliders_are_padded_for_their_end_labels() -> None:
    frames = {"a long first label of the slider": [go.Scatter(y=[1])], "b": [go.Scatter(y=[2])]}
    fig = plots.render.finish(plots.slider_figure(frames, "s"), "t", "x", "y")
    template = plots.render.pio.templates["lengthgen"].layout.margin
    half = plots.render.SLIDER_CHAR_PX * len("a long first label of the slider") / 2
    assert fig.layout.sliders[0].pad.l >= half - template.l
    assert not fig.layout.sliders[0].pad.r  # "b" fits the right margin


def test_legend_room_counts_plotly_columns_as_wide_as_the_widest_entry() -> None:
    """Nine entries, one of 45 characters: plotly.js draws them one a row (its columns are as wide as the widest
    entry), so the margin holds nine rows; two short entries share one row and leave the template's margin."""
    render = plots.render
    names = ["cosine to l2 solution"] * 8 + ["random direction vs factors_linf (mean |cos|)"]
    assert plots.legend_room(names) == render.TITLE_PAD_PX + render.TITLE_LINE_PX + 20 + 9 * render.LEGEND_ROW_PX
    assert plots.legend_room(["a", "b"]) == render.pio.templates["lengthgen"].layout.margin.t
