"""lengthgen.inline: the markdown's inline expressions show what the glue roles show, in the kernel and in the book.

The browser half (a real JupyterLab renders them) is tests/test_jupyterlab.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
from IPython.display import Markdown

import plotly.graph_objects as go

from lengthgen import plots
from lengthgen.inline import WIDGET, Glued, book_markdown, heading_titles, in_reader_kernel

ROOT = Path(__file__).resolve().parents[1]
GLUE_SOURCE = """(chap-x)=
# Title

A {glue:text}`acc:.3f` and {glue:}`n` ({glue:md}`verdict`), see {ref}`chap-x`.
```{glue:md} table
:format: myst
```

```{glue:figure} fig_x
:name: fig-x

The caption, with $T$.
```
"""


def _script():
    spec = importlib.util.spec_from_file_location("inline_roles", ROOT / "scripts" / "inline_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rewrite_goes_back_to_the_same_glue_roles() -> None:
    lab = _script().lab_markdown(GLUE_SOURCE)
    assert "{glue" not in lab
    assert '{eval}`glue.text("acc:.3f")`' in lab and '{eval}`glue.figure("fig_x")`' in lab
    assert "```{figure}\n:name: fig-x\n" in lab
    assert book_markdown(lab) == GLUE_SOURCE
    assert _script().lab_markdown(lab) == lab  # idempotent


def test_every_chapter_is_in_the_jupyterlab_form_and_builds_back_to_glue_roles() -> None:
    script = _script()
    paths = sorted((ROOT / "book").glob("*.ipynb"))
    titles = heading_titles(paths)
    assert titles["chapter-gap"].startswith("1. ") and titles["run-locally"] == "Run locally"
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                assert script.lab_markdown(cell.source, titles) == cell.source, (
                    f"{path.name} cell {i} has a glue role, a bare reference or a stale title that JupyterLab cannot "
                    "show as the page does: run scripts/inline_roles.py")
                assert script.lab_markdown(book_markdown(cell.source, titles), titles) == cell.source


def test_a_citation_shows_author_and_year_in_jupyterlab_and_stays_a_cite_role_in_the_book() -> None:
    lab = _script().lab_markdown("As {cite}`soudry2018implicit` and {cite}`xie2024adamw,su2021roformer` show.")
    assert lab == ('As {eval}`glue.cite("soudry2018implicit")` and {eval}`glue.cite("xie2024adamw,su2021roformer")` '
                   "show.")
    assert book_markdown(lab) == "As {cite}`soudry2018implicit` and {cite}`xie2024adamw,su2021roformer` show."
    glue = Glued()
    assert repr(glue.cite("soudry2018implicit")) == "Soudry et al. 2018"
    assert repr(glue.cite("xie2024adamw,su2021roformer")) == "Xie and Li 2024; Su et al. 2021"
    assert repr(glue.cite("no_such_key")) == "[no_such_key]"


def test_a_reference_shows_its_title_in_jupyterlab_and_stays_bare_in_the_book() -> None:
    script, titles = _script(), {"chapter-x": "2. A title", "run-locally": "Run locally"}
    lab = script.lab_markdown("See {ref}`chapter-x`, {ref}`Old title <chapter-x>` and {ref}`other`.", titles)
    assert lab == "See {ref}`2. A title <chapter-x>`, {ref}`2. A title <chapter-x>` and {ref}`other`."
    assert book_markdown(lab, titles) == "See {ref}`chapter-x`, {ref}`chapter-x` and {ref}`other`."
    assert book_markdown("{ref}`Chosen text <chapter-x>`", titles) == "{ref}`Chosen text <chapter-x>`"


def test_glued_values_read_back_as_the_roles_show_them() -> None:
    glue = Glued()
    fig = go.Figure(go.Scatter(y=[1, 2]))
    for name, value in [("acc", 0.98765), ("n", 3), ("word", "RoPE's"), ("table", Markdown("| a |\n| --- |\n| 1 |"))]:
        glue(name, value, display=False)
    plots.glue_figure("fig_x", fig)  # plots keeps it in the module's own Glued
    assert repr(glue.text("acc:.3f")) == "0.988"
    assert repr(glue.text("n")) == "3"
    assert repr(glue.text("word")) == "RoPE's"
    assert glue.any("n")._repr_mimebundle_()["text/plain"] == "3"
    assert glue.md("table")._repr_markdown_() == "| a |\n| --- |\n| 1 |"
    with pytest.raises(KeyError, match="run the code cells above"):
        glue.text("missing:.3f")
    with pytest.raises(ValueError, match="no markdown"):
        glue.md("acc")
    with pytest.raises(ValueError, match="no plotly figure or widget"):
        glue.figure("acc")


def test_a_readers_kernel_gets_each_value_and_figure_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the book build, glue makes no data-only output (JupyterLab hid chapter 1's 53 behind 'Show more
    outputs') and a glued figure is not shown under its cell where the prose shows it (issue 31, item 3)."""
    import sys

    from lengthgen.plots.render import BOOK_BUILD_ENV

    shown, recorded = [], []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    monkeypatch.setattr("myst_nb.glue", lambda *args, **kw: recorded.append(args[0]))
    monkeypatch.delenv(BOOK_BUILD_ENV, raising=False)
    glue = Glued()
    glue("acc", 0.5, display=False)
    plots.glue_figure("fig_once", go.Figure(go.Scatter(y=[1, 2])))
    assert recorded == [] and shown == [] and repr(glue.text("acc:.1f")) == "0.5"
    glue("shown", 0.25)  # display=True: the value under its cell, as usual
    assert shown == [0.25]
    monkeypatch.setitem(sys.modules, "google.colab", object())  # Colab: the prose cannot show the figure
    plots.glue_figure("fig_once", go.Figure(go.Scatter(y=[1, 2])))
    assert len(shown) == 2
    assert in_reader_kernel(), "a reader's kernel: progress bars on long cells"
    monkeypatch.setenv(BOOK_BUILD_ENV, "1")  # the book build: myst-nb records every value
    glue("acc", 0.5, display=False)
    assert recorded == ["acc"] and not in_reader_kernel()


def test_figures_glued_by_plots_are_shown_by_their_jupyterlab_mimetype() -> None:
    from lengthgen.inline import glue

    plots.glue_figure("fig_inline_test", go.Figure(go.Scatter(y=[1, 2])))
    bundle = glue.figure("fig_inline_test")._repr_mimebundle_()
    assert list(bundle) == ["application/vnd.plotly.v1+json"]
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] is not None


def test_a_glued_widget_stands_where_the_figure_would() -> None:
    import ipywidgets

    glue = Glued()
    slider = ipywidgets.IntSlider()
    glue("live", slider, display=False)
    view = glue.figure("live")._repr_mimebundle_()
    assert view == {WIDGET: {"version_major": 2, "version_minor": 0, "model_id": slider.model_id}}


def test_a_value_is_shown_as_it_was_when_glued() -> None:
    glue = Glued()
    values = [1, 2]
    glue("values", values, display=False)
    values.append(3)
    assert repr(glue.text("values")) == "[1, 2]"


def test_each_glues_every_value_of_a_mapping_under_its_prefixed_name() -> None:
    glue = Glued()
    glue.each({"acc": 0.5, "n": 4}, prefix="rope_")
    assert repr(glue.text("rope_acc:.2f")) == "0.50"
    assert repr(glue.text("rope_n")) == "4"
    with pytest.raises(KeyError):
        glue.text("acc")


def test_counts_and_spreads_read_right_with_one_seed() -> None:
    from lengthgen.inline import counted, spread

    assert [counted(n, "seed") for n in (1, 2)] == ["1 seed", "2 seeds"]
    assert counted(2, "seed pair") == "2 seed pairs" and counted(3, "child", "children") == "3 children"
    assert spread(0.8123, 0.0104, 3) == "0.812 ± 0.010"
    assert spread(0.8123, 0.0, 1) == "0.812 (1 seed: no spread)", "one seed: no ± 0.000"


def test_a_reference_in_glued_markdown_carries_its_title() -> None:
    """A glued table's {ref} (the findings table) shows the chapter's title in JupyterLab, as the page does."""
    from lengthgen.inline import ref

    titles = heading_titles(sorted((ROOT / "book").glob("*.ipynb")))
    assert ref("chapter-rope") == f"{{ref}}`{titles['chapter-rope']} <chapter-rope>`"
    assert ref("no-such-label") == "{ref}`no-such-label`"
