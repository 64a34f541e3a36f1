"""Grid figures in a reader's own kernel (JupyterLab, Colab): the same controls, acting through Python.

A ``grid_controls`` figure's sliders and buttons carry method "skip": in the book page, ``grid.js`` combines
them. JupyterLab and Colab do not run that script, so there the controls would change their own labels and
not the plotted data. ``GridViewer`` puts ipywidgets controls (one per grid dimension) above the figure and
redraws it with the traces of the selected grid point (``grid_visibility``, what ``grid.js`` computes), so
a control and the data it names never disagree. ``render.glue_grid_figure`` uses it outside a book build.
"""

from __future__ import annotations

import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio

from .render import grid_visibility


class GridViewer(widgets.VBox):
    """ipywidgets controls over a ``grid_controls`` figure, redrawing it from Python.

    ``fig``: a figure made by ``render.grid_controls`` (its ``layout.meta.grid`` holds, per trace, the grid
    point it belongs to, the controls, their values as text and the title template).
    """

    # A fixed width: drawn into a widget's output area (in a rendered markdown cell too), plotly measures its
    # container when it draws, and a container not yet laid out gave it a width of zero.
    WIDTH = 800  # pixels: about a notebook cell's width in JupyterLab and Colab

    def __init__(self, fig: go.Figure):
        meta = fig.layout.meta
        if not isinstance(meta, dict) or "grid" not in meta:
            raise ValueError("GridViewer needs a figure made by plots.grid_controls (layout.meta.grid)")
        grid = meta["grid"]
        self.owners, self.title = grid["owners"], grid["title"]
        self.labels: list[list[str]] = [list(v) for v in grid["labels"]]
        self.base = go.Figure(fig)
        self.base.layout.sliders, self.base.layout.updatemenus, self.base.layout.meta = (), (), None
        self.controls: list[widgets.ValueWidget] = []
        for (kind, index), values, label in zip(grid["controls"], self.labels, grid["names"]):
            shown = (fig.layout.sliders if kind == "slider" else fig.layout.updatemenus)[index].active or 0
            if kind == "slider":
                control = widgets.SelectionSlider(options=values, value=values[shown], description=label,
                                                  continuous_update=False, style={"description_width": "initial"})
            else:
                control = widgets.ToggleButtons(options=values, value=values[shown], description=label,
                                                style={"description_width": "initial"})
            control.observe(lambda _: self.redraw(), names="value")
            self.controls.append(control)
        self.out = widgets.Output(layout=widgets.Layout(min_height=f"{self.base.layout.height or 440}px"))
        super().__init__(self.controls + [self.out])
        self.redraw()

    def active(self) -> list[int]:
        """(n_dims,) the grid point the controls select."""
        return [values.index(c.value) for c, values in zip(self.controls, self.labels)]

    def figure(self) -> go.Figure:
        """The figure at the selected grid point: only its traces visible, its title filled in."""
        a = self.active()
        fig = go.Figure(self.base)
        for trace, shown in zip(fig.data, grid_visibility(self.owners, a)):
            trace.visible = shown
        fig.update_layout(title_text=self.title.format(*[values[i] for values, i in zip(self.labels, a)]))
        return fig

    def redraw(self) -> None:
        """Show ``figure()`` in the output area (plotly's JSON mimetype, as JupyterLab and Colab draw it)."""
        fig = self.figure()
        fig.update_layout(width=self.WIDTH, autosize=False)
        bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
        # Set as the widget's synced state, not printed inside ``with self.out``: the latter reaches the page as
        # messages the front end routes to the widget only once its view listens, and on a busy machine the
        # first figure could arrive before that and be lost (CI: a viewer with buttons and no figure).
        self.out.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)
