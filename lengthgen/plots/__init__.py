"""Every figure of the book, one function each (plotly), and the renderer the book uses.

``render`` holds the template, the shared styles, the renderer, glue and the slider and grid machinery;
each other module is one family of figures. Every public name is re-exported here, so a chapter writes
``from lengthgen import plots; plots.accuracy_vs_length(...)``.

Conventions (see book/CONVENTIONS.md): a figure has a title, axis titles with units and its own height,
and is returned, not shown; the chapter glues it with a caption that says what to look for. A figure that
a reader would want at another training length, offset or evaluation length gets a slider over a
precomputed grid (``slider_figure``), so it stays interactive in the static page.
"""

from .accuracy import (
    accuracy_by_length_linear, accuracy_by_variant, accuracy_vs_length, fit_vs_transfer, setting_heatmap,
    training_curves,
)
from .by_recipe import accuracy_table, recipe_menu
from .attention import ape_row_drift, argmax_positions, attention_maps, last_query_attention, shift_test
from .mechanism import (
    LAW_STYLE, carrier_kernel_figure, dilution_curves, kernel_shapes, law_scatter, margin_vs_accuracy,
    pair_spectrum_figure, singular_value_figure,
)
from .playground_figure import playground_grid, train_here_html
from .render import (
    BOOK_BUILD_ENV, CHANCE_STYLE, COLORS, GRID_JS, HEIGHT, LABELS, BookHTML, GridHTML, fit_sliders, glue_figure,
    glue_grid_figure, grid_controls, grid_visibility, legend_room, margin, md_table, prose_shows_figures, set_title,
    share_styles, slider_figure, use_book_renderer, wrap_title,
)
from .selection import adam_anatomy, selection_curves, selection_explorer
from .sweeps import predicted_vs_measured, setting_effects, sweep_lines

__all__ = [
    "BOOK_BUILD_ENV", "CHANCE_STYLE", "COLORS", "GRID_JS", "HEIGHT", "LABELS", "LAW_STYLE", "BookHTML", "GridHTML",
    "accuracy_by_length_linear", "accuracy_by_variant", "accuracy_vs_length", "ape_row_drift", "argmax_positions",
    "attention_maps", "carrier_kernel_figure", "dilution_curves", "fit_vs_transfer", "glue_figure",
    "glue_grid_figure", "grid_controls", "grid_visibility", "kernel_shapes", "last_query_attention", "law_scatter",
    "margin_vs_accuracy", "md_table", "pair_spectrum_figure", "playground_grid", "predicted_vs_measured",
    "recipe_menu", "setting_effects", "setting_heatmap", "shift_test", "singular_value_figure", "slider_figure",
    "selection_explorer", "selection_curves", "adam_anatomy", "sweep_lines", "training_curves", "use_book_renderer",
    "accuracy_table", "share_styles", "train_here_html", "prose_shows_figures", "fit_sliders", "set_title",
    "wrap_title", "legend_room", "margin",
]
