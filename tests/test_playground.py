"""The static playground (issue 12, item 3): the grid computation (lengthgen.playground), its figure with
independent controls (plots.playground_grid, plots.grid_controls), the visibility logic the page's script
follows, and the live playground's recipe menu. The browser half is tests/test_browser_playground.py."""

from __future__ import annotations

import base64
import itertools
import json

import numpy as np
import plotly.graph_objects as go
import pytest

import lengthgen as lg
from lengthgen import ConfigError, playground, plots, recipes
from lengthgen.evaluate import last_query_profile
from lengthgen.playground import PlaygroundGrid
from lengthgen.widgets import Playground

TINY = lg.Config(vocab=8, dim=8, batch=32)
RECIPES = {"fast": {"lr": 1e-2, "steps": 12, "target_accuracy": 0.5},
           "slow": {"lr": 1e-3, "steps": 9, "target_accuracy": None}}


@pytest.fixture(scope="module")
def tiny_grid() -> PlaygroundGrid:
    return playground.compute_grid(TINY, [4, 6], [1, 2], seeds=[0, 1], multiples=[1, 2], samples=16, recipes=RECIPES,
                                    profile_samples=12)


def test_grid_shapes_and_recipes(tiny_grid: PlaygroundGrid) -> None:
    g = tiny_grid
    assert g.accuracy.shape == (2, 2, 2, 2, 2, 2) and g.accuracy.dtype == np.float32
    assert g.steps.shape == (2, 2, 2, 2, 2)
    assert {T: p.shape for T, p in g.profiles.items()} == {4: (2, 2, 2, 2, 8), 6: (2, 2, 2, 2, 12)}
    for p in g.profiles.values():
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)  # attention over keys sums to one
    assert ((g.accuracy >= 0) & (g.accuracy <= 1)).all()
    assert (g.steps[1] == 9).all(), "no early stop: every 'slow' member trains its whole budget"
    assert (g.steps[0] <= 12).all()
    assert g.recipes == {name: lg.Config(vocab=8, dim=8, batch=32, train_length=4, offset=1, **f).recipe()
                         for name, f in RECIPES.items()}
    assert "9 steps, no early stop" in g.recipes["slow"]
    assert g.chance == TINY.chance and g.seeds == [0, 1] and g.samples == 16


def test_every_grid_point_equals_training_it_alone(tiny_grid: PlaygroundGrid) -> None:
    """The batched columns put every (recipe, T, K, encoding) at its own place: retrain a few alone."""
    for name, T, K, enc in [("fast", 4, 2, "rope"), ("slow", 6, 1, "ape"), ("slow", 4, 2, "rope")]:
        c = TINY.replace(encoding=enc, train_length=T, offset=K, **RECIPES[name])
        alone = lg.train(c, seeds=[0, 1], progress=False)
        acc = lg.evaluate(alone, [T, 2 * T], samples=16).accuracy()
        r, t, k = tiny_grid.index(name, T, K)
        e = tiny_grid.encodings.index(enc)
        np.testing.assert_array_equal(tiny_grid.accuracy[r, t, k, e], acc)
        np.testing.assert_array_equal(tiny_grid.steps[r, t, k, e], alone.steps)
        np.testing.assert_allclose(tiny_grid.profiles[T][r, k, e], last_query_profile(alone, 2 * T, 12, seed=playground.PROFILE_SEED),
                                   atol=1e-6)
        accuracy, profile = tiny_grid.pair(name, T, K)[enc]
        assert accuracy.shape == (2, 2) and profile.shape == (2, 2 * T)


def test_peak_back_finds_the_largest_mean_weight() -> None:
    g = fake_grid(Ts=(4, 6), Ks=(1, 2), S=2)
    for T in g.train_lengths:
        g.profiles[T][:] = 0.0
    g.profiles[4][0, 1, 0, :, 4] = 1.0  # (first recipe, K=2, rope): key 4 of L=8 is 3 back
    g.profiles[6][1, 0, 1, 0, 11] = 1.0  # one seed only: key 11 of L=12, the query itself (0 back)
    peaks = g.peak_back()
    assert peaks.shape == (2, 2, 2, 2)
    assert peaks[0, 0, 1, 0] == 3 and peaks[1, 1, 0, 1] == 0
    assert peaks[0, 0, 0, 0] == 7, "all zeros: argmax is key 0, L - 1 back"


def test_grid_summary_has_one_line_per_point(tiny_grid: PlaygroundGrid) -> None:
    lines = tiny_grid.summary().splitlines()
    assert len(lines) == 1 + 2 * 2 * 2
    assert lines[1].startswith("fast") and "T=  4 K= 1" in lines[1] and "rope:" in lines[1] and "ape:" in lines[1]


@pytest.mark.parametrize("kw, match", [
    (dict(train_lengths=[4, 8], offsets=[1, 4]), "offset"),  # K = T at T=4: checked before any training
    (dict(train_lengths=[4, 4], offsets=[1]), "train_lengths"),
    (dict(train_lengths=[8], offsets=[]), "offsets"),
    (dict(train_lengths=[8], offsets=[1], samples=0), "samples"),
    (dict(train_lengths=[8], offsets=[1], profile_multiple=0), "profile_multiple"),
    (dict(train_lengths=[8], offsets=[1], profile_samples=-1), "samples"),
])
def test_bad_grids_say_what_to_change(kw: dict, match: str) -> None:
    args = dict(seeds=[0], multiples=[1], samples=4, recipes=RECIPES) | kw
    with pytest.raises(ConfigError, match=match):
        playground.compute_grid(TINY, **args)


def test_unknown_grid_point_names_the_known_values(tiny_grid: PlaygroundGrid) -> None:
    with pytest.raises(KeyError, match=r"\[4, 6\]"):
        tiny_grid.index("fast", 5, 1)


# --- the figure --------------------------------------------------------------------------------------

def fake_grid(Ts=(12, 16, 24, 32, 48), Ks=(1, 2, 4, 8), S=3, multiples=(1, 2, 4, 8), seed=0) -> PlaygroundGrid:
    """A grid of random numbers with the full book's shape (no training)."""
    rng = np.random.default_rng(seed)
    nR, nT, nK = 2, len(Ts), len(Ks)
    return PlaygroundGrid({"first fit": "recipe one", "small steps": "recipe two"}, list(Ts), list(Ks), ["rope", "ape"],
                list(range(S)), list(multiples), 500, 2, 200, 1 / 16,
                rng.random((nR, nT, nK, 2, len(multiples), S)).astype(np.float32),
                np.zeros((nR, nT, nK, 2, S), np.int32),
                {T: rng.dirichlet(np.ones(2 * T), (nR, nK, 2, S)).astype(np.float32) for T in Ts}, {})


@pytest.fixture(scope="module")
def figure() -> tuple[PlaygroundGrid, go.Figure]:
    plots.use_book_renderer()
    g = fake_grid()
    return g, plots.playground_grid(g, active=("first fit", 32, 1))


def decode(v: object) -> np.ndarray:
    """A trace array as plotly.py stores it in JSON (plain list or base64 typed array)."""
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return np.asarray(v)


def test_figure_has_both_sliders_and_the_recipe_buttons(figure: tuple[PlaygroundGrid, go.Figure]) -> None:
    g, fig = figure
    sliders, menus = fig.layout.sliders, fig.layout.updatemenus
    assert [[s.label for s in sl.steps] for sl in sliders] == [[str(T) for T in g.train_lengths],
                                                             [str(K) for K in g.offsets]]
    assert [sl.currentvalue.prefix for sl in sliders] == ["training length T: ", "offset K: "]
    assert [b.label for b in menus[0].buttons] == ["recipe: first fit", "recipe: small steps"]
    steps = [s for sl in sliders for s in sl.steps] + list(menus[0].buttons)
    assert all(s.method == "skip" for s in steps), "the controls act through GRID_JS only"
    assert (sliders[0].active, sliders[1].active, menus[0].active) == (3, 0, 0)  # T=32, K=1, first fit
    meta = fig.layout.meta["grid"]
    assert meta["controls"] == [["menu", 0], ["slider", 0], ["slider", 1]]
    assert meta["labels"] == [list(g.recipes), [str(T) for T in g.train_lengths], [str(K) for K in g.offsets]]
    # wrapped (plots.wrap_title) to fit the narrowest figure: a line break where a space was
    assert fig.layout.title.text.replace("<br>", " ") == "RoPE and APE, trained at T=32 with offset K=1, recipe: first fit"
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert fig.layout.xaxis2.title.text and fig.layout.yaxis2.title.text


def test_every_grid_point_has_its_traces(figure: tuple[PlaygroundGrid, go.Figure]) -> None:
    g, fig = figure
    owners = [tuple(o) for o in fig.layout.meta["grid"]["owners"]]
    assert len(owners) == len(fig.data)
    points = list(itertools.product(range(2), range(len(g.train_lengths)), range(len(g.offsets))))
    for p in points:
        assert owners.count(p) == 3 * len(g.encodings), f"grid point {p}: one seed, mean and profile trace per encoding"
    shared = [o for o in owners if o not in points]
    assert len(shared) == 1 + len(g.train_lengths) + len(g.train_lengths) * len(g.offsets) + len(g.offsets)
    assert all(-1 in o for o in shared)


@pytest.mark.parametrize("r, t, k", [(0, 0, 0), (1, 4, 3), (0, 2, 1), (1, 0, 3)])
def test_visibility_shows_exactly_the_chosen_point(figure: tuple[PlaygroundGrid, go.Figure], r: int, t: int, k: int) -> None:
    """What the page's script does for a choice of the controls: the chosen point's traces, with the
    grid's numbers, and the shared traces that belong to its T and K."""
    g, fig = figure
    owners = fig.layout.meta["grid"]["owners"]
    visible = plots.grid_visibility(owners, (r, t, k))
    shown = [i for i, v in enumerate(visible) if v]
    assert [tuple(owners[i]) for i in shown[:6]] == [(r, t, k)] * 6
    assert all(owners[i][1] in (-1, t) and owners[i][2] in (-1, k) for i in shown)
    assert len(shown) == 6 + 4  # its 6 traces, chance, the unseen band of T, the pinned line of (T, K), the target
    T, K = g.train_lengths[t], g.offsets[k]
    data = json.loads(fig.to_json())["data"]
    seeds_rope, mean_rope, prof_rope, _, mean_ape, prof_ape = (data[i] for i in shown[:6])
    acc = g.accuracy[r, t, k]
    np.testing.assert_allclose(decode(seeds_rope["y"]), acc[0].ravel())
    np.testing.assert_allclose(decode(mean_rope["y"]), acc[0].mean(1), rtol=1e-6)
    np.testing.assert_allclose(decode(mean_ape["y"]), acc[1].mean(1), rtol=1e-6)
    np.testing.assert_allclose(decode(prof_rope["y"]), g.profiles[T][r, k, 0].mean(0)[::-1][1:], rtol=1e-6)
    np.testing.assert_allclose(decode(prof_ape["y"]), g.profiles[T][r, k, 1].mean(0)[::-1][1:], rtol=1e-6)
    target = data[shown[-1]]
    assert target["x"] == [K, K], "the target line sits K back"
    pinned = data[shown[-2]]
    assert pinned["x"] == [T + K] * 2, "at L = 2T, APE's pinned position x_(T-K) is T + K back"


def test_initial_visibility_is_the_active_point(figure: tuple[PlaygroundGrid, go.Figure]) -> None:
    _, fig = figure
    owners = fig.layout.meta["grid"]["owners"]
    assert [t.visible for t in fig.data] == plots.grid_visibility(owners, (0, 3, 0))


def test_grid_visibility_logic() -> None:
    owners = [(0, 0), (0, 1), (1, 0), (-1, 1), (0, -1), (-1, -1)]
    assert plots.grid_visibility(owners, (0, 1)) == [False, True, False, True, True, True]
    assert plots.grid_visibility(owners, (1, 0)) == [False, False, True, False, False, True]


def test_grid_controls_check_their_input() -> None:
    fig = go.Figure([go.Scatter(y=[1]), go.Scatter(y=[2])])
    with pytest.raises(ValueError, match="one entry"):
        plots.grid_controls(fig, [(0,)], [("slider", "a", ["x", "y"])], [0], "t")
    with pytest.raises(ValueError, match="kind"):
        plots.grid_controls(fig, [(0,), (1,)], [("knob", "a", ["x", "y"])], [0], "t")


def test_traces_take_their_style_from_the_template_in_turn(figure: tuple[PlaygroundGrid, go.Figure]) -> None:
    """plotly.js hands template.data.scatter[i % n] to the i-th scatter trace: the grid traces carry no
    style of their own, and the shared traces after them set every key the template styles."""
    g, fig = figure
    roles = fig.layout.template.data.scatter
    assert len(roles) == 3 * len(g.encodings)
    assert [r.legendgroup for r in roles] == ["rope"] * 3 + ["ape"] * 3
    assert roles[1].name.startswith("RoPE (mean") and roles[4].name.startswith("APE")
    owners = fig.layout.meta["grid"]["owners"]
    styled = {k for r in roles for k in r.to_plotly_json() if k != "type"}
    for trace, owner in zip(fig.data, owners):
        own = set(trace.to_plotly_json()) - {"type", "x", "y", "x0", "dx", "xaxis", "yaxis", "visible"}
        if -1 in owner:
            missing = {"mode", "name", "legendgroup", "showlegend", "line", "marker"} - own
            assert not missing, f"shared trace {trace.name!r} would inherit {missing} from the template"
        else:
            assert not own & styled, f"grid trace {owner} sets {own & styled} itself"


def test_page_html_is_compact_and_carries_the_script(figure: tuple[PlaygroundGrid, go.Figure]) -> None:
    _, fig = figure
    html = plots.GridHTML().to_mimebundle(fig.to_dict())["text/html"]
    div = html.split('id="')[1].split('"')[0]
    assert f"document.getElementById('{div}')" in html and "plotly_sliderchange" in html
    assert "plotly_buttonclicked" in html and "{plot_id}" not in html
    assert '"bdata"' in html and "plotly.js v" not in html
    assert len(html) < 100_000, f"the full-size grid figure is {len(html)} bytes; the page budget is 200 KB"
    assert "plotly_sliderchange" not in plots.BookHTML().to_mimebundle(fig.to_dict())["text/html"]


# --- the live playground's recipe menu ----------------------------------------------------------------

def test_live_playground_trains_the_chosen_recipe() -> None:
    pg = Playground(TINY, seeds=1, multiples=(1,), samples=8, recipes=RECIPES)
    assert pg.recipe in pg.widget.children and list(pg.recipe.options) == list(RECIPES)
    assert pg.config().lr == RECIPES["fast"]["lr"]
    pg.recipe.unobserve_all()
    pg.recipe.value = "slow"
    assert pg.config() == TINY.replace(**RECIPES["slow"])
    pg.run()
    assert pg.progress.max == 9 and pg.progress.value == 9
    assert "9 steps, no early stop" in pg.status.value
    plain = Playground(TINY.replace(steps=3), seeds=1, multiples=(1,), samples=8)
    assert plain.recipe not in plain.widget.children and plain.config().steps == 3


def test_the_grid_defaults_to_the_book_recipes() -> None:
    import inspect

    assert inspect.signature(playground.compute_grid).parameters["recipes"].default is recipes.RECIPES


def test_live_playground_starts_at_the_recipe_asked_for() -> None:
    """``recipe`` picks the menu's first choice (chapter 7 opens at small steps); an unknown one says what to use."""
    pg = Playground(TINY, seeds=1, multiples=(1,), samples=8, recipes=RECIPES, recipe="slow")
    assert pg.recipe.value == "slow" and pg.config() == TINY.replace(**RECIPES["slow"])
    assert Playground(TINY, recipes=RECIPES).recipe.value == next(iter(RECIPES))
    with pytest.raises(ConfigError, match="fast, slow"):
        Playground(TINY, recipes=RECIPES, recipe="medium")


def test_live_sliders_have_a_track_for_every_value() -> None:
    """Issue 31, item 5: the T slider (8-64 by 4) had 74 px of track; now at least 8 px per value and 300 px."""
    from lengthgen.widgets import LABEL_PX, READOUT_PX

    pg = Playground(TINY, seeds=1, multiples=(1,), samples=8)
    for s in (pg.train_length, pg.offset, pg.vocab, pg.seeds):
        track = int(s.layout.width.removesuffix("px")) - LABEL_PX - READOUT_PX
        values = (s.max - s.min) // s.step + 1
        assert track >= max(300, 8 * values), f"{s.description}: {track} px of track for {values} values"


# --- the page's "train here" panel ---------------------------------------------------------------------

@pytest.mark.parametrize("T, K", [(4000001.5, 2), (32, 2.5), (-3, 2), (32, 0), (32, -4), (8, 8), (8, 20)])
def test_refusals_are_the_package_messages(T: float, K: float) -> None:
    """Each template, filled as the page fills it, is exactly the package's ConfigError for those values."""
    with pytest.raises(ConfigError) as caught:
        lg.Config(train_length=T, offset=K)
    templates = playground.refusals()
    filled = [t.replace("{T}", repr(T)).replace("{K}", repr(K)) for t in templates.values()]
    assert str(caught.value) in filled, (str(caught.value), templates)


def test_train_here_spec_carries_the_recipes_the_grid_and_the_package_settings(tiny_grid: PlaygroundGrid) -> None:
    import json
    import inspect

    from lengthgen.optim import Optimizer
    from lengthgen.train import STOP_WINDOW

    spec = playground.train_here(tiny_grid, TINY, RECIPES, samples=50)
    json.dumps(spec)  # JSON-ready
    names = list(spec["recipes"])
    assert names == list(RECIPES) + [playground.BROWSER_SMALL_STEPS.name]
    browser = spec["recipes"][playground.BROWSER_SMALL_STEPS.name]
    assert browser["fields"]["lr"] * browser["fields"]["steps"] == pytest.approx(recipes.SMALL_STEPS.lr * recipes.SMALL_STEPS.steps, rel=1e-2)
    assert not browser["on_grid"] and all(spec["recipes"][n]["on_grid"] for n in RECIPES)
    assert "lr 0.001" in browser["text"] and "2000 steps" in browser["text"]
    assert spec["config"]["betas"] == list(inspect.signature(Optimizer).parameters["betas"].default)
    assert spec["config"]["stop_window"] == STOP_WINDOW and spec["config"]["vocab"] == TINY.vocab
    r, t, k = 0, 1, 0
    name, T, K = list(tiny_grid.recipes)[r], tiny_grid.train_lengths[t], tiny_grid.offsets[k]
    assert np.allclose(spec["grid"]["points"][name][f"{T},{K}"]["ape"], tiny_grid.accuracy[r, t, k, 1], atol=1e-4)
    assert spec["start"] == {"recipe": names[0], "T": TINY.train_length, "K": TINY.offset, "seed": 0}
    with pytest.raises(ConfigError, match="in-page trainer"):
        playground.trainer_config(TINY.replace(encoding="alibi"))


def test_train_here_html_is_self_contained(tiny_grid: PlaygroundGrid) -> None:
    from lengthgen.plots.playground_figure import train_here_html

    page = train_here_html(playground.train_here(tiny_grid, TINY, RECIPES, samples=50))
    assert "http://" not in page and "https://" not in page and "src=" not in page, "the panel loads nothing"
    assert page.count("<script") == 3 and "lengthgenTrainer" in page and "new Worker" in page
    assert len(page) < 60_000, f"the panel is {len(page)} bytes"
