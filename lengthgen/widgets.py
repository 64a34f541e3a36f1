"""The live playground: ipywidgets controls that retrain a model and redraw its accuracy-by-length figure.

Headless-safe: building the controls needs no browser, and ``run()`` trains and returns the figure
whether or not a front end is attached (papermill runs it once with the default values; the saved
page then shows the controls as a static snapshot next to that figure). In a live Jupyter kernel,
releasing any control retrains with a progress bar (updated every ``PROGRESS_EVERY`` steps) and
redraws the figure below the controls; at the book's defaults that takes well under a second in the
first-fit recipe and about a second in the small-step recipe, chapter 7's default, whose seeds train side by side
on two cores (``make bench`` measures both: README, Speed; it grows with the seeds and with the machine's load, and
the progress bar shows how far it is).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import ipywidgets as w
import plotly.graph_objects as go
from IPython.display import display

from .config import ENCODINGS, Config, ConfigError
from .evaluate import evaluate
from .plots import LABELS, accuracy_vs_length
from .train import Trained, train

PROGRESS_EVERY = 100  # training steps between progress-bar updates (each update is a message to the front end)
LABEL_PX, READOUT_PX = 130, 60  # a control's description and a slider's value readout
PX_PER_VALUE, MIN_TRACK_PX = 8, 300  # a slider's track: long enough that a small drag moves one value


def slider_layout(low: int, high: int, step: int = 1) -> w.Layout:
    """A slider's layout with a track of at least PX_PER_VALUE pixels per value (and MIN_TRACK_PX): ipywidgets'
    default 300 px for the whole control left 74 px of track for 15 values after the description and readout."""
    values = (high - low) // step + 1
    return w.Layout(width=f"{LABEL_PX + max(MIN_TRACK_PX, PX_PER_VALUE * values) + READOUT_PX}px")


class Playground:
    """Controls for training length, offset, vocabulary, encoding and number of seeds, and a recipe
    menu when ``recipes`` is given.

    ``base`` gives every other setting (steps, width, ...). ``recipes``: name -> the training settings
    each recipe puts on ``base`` (a ``recipes.Recipe``, e.g. the values of ``recipes.RECIPES``, or a plain
    mapping of Config fields); the menu picks one: ``recipe`` at the start (default: the first).
    Evaluation lengths are ``multiples`` of the training length. ``widget`` is the box to display;
    ``run()`` trains the current settings.
    """

    def __init__(self, base: Config, seeds: int = 2, multiples: Sequence[int] = (1, 2, 4, 8), samples: int = 500,
                 recipes: Mapping[str, Mapping[str, object]] | None = None, recipe: str | None = None):
        self.base, self.multiples, self.samples = base, list(multiples), samples
        self.recipes = {name: dict(fields) for name, fields in (recipes or {}).items()}
        style = dict(description_width=f"{LABEL_PX}px")

        def slider(low: int, high: int, step: int = 1, **kw: object) -> w.IntSlider:
            return w.IntSlider(min=low, max=high, step=step, continuous_update=False, style=style,
                               layout=slider_layout(low, high, step), **kw)

        self.train_length = slider(8, 64, 4, value=base.train_length, description="training length T")
        self.offset = slider(1, 8, value=base.offset, description="offset K")
        self.vocab = slider(2, 64, value=base.vocab, description="vocabulary V")
        self.seeds = slider(1, 8, value=seeds, description="seeds")
        self.encoding = w.Dropdown(options=[(LABELS[e], e) for e in ENCODINGS], value=base.encoding,
                                   description="encoding", style=style)
        if recipe is not None and recipe not in self.recipes:
            raise ConfigError(f"recipe={recipe!r}: use one of the menu's recipes ({', '.join(self.recipes) or 'none given'})")
        self.recipe = w.Dropdown(options=list(self.recipes) or ["as given"], description="recipe", style=style,
                                 disabled=not self.recipes, value=recipe or (list(self.recipes) or ["as given"])[0])
        self.progress = w.IntProgress(value=0, min=0, max=max(base.steps, 1), description="training", style=style)
        self.status = w.HTML()
        self.output = w.Output()
        self.trained: Trained | None = None  # the last retrain's models (its config, seeds, seconds)
        controls = [self.train_length, self.offset, self.vocab, self.seeds, self.encoding]
        if self.recipes:
            controls.append(self.recipe)
        for c in controls:
            c.observe(self._changed, names="value")
        self.widget = w.VBox(controls + [self.progress, self.status, self.output])

    def config(self) -> Config:
        """The settings the controls show (raises ConfigError with what to change)."""
        fields = self.recipes.get(self.recipe.value, {})
        return self.base.replace(train_length=self.train_length.value, offset=self.offset.value,
                                 vocab=self.vocab.value, encoding=self.encoding.value, **fields)

    def run(self) -> go.Figure:
        """Train the current settings (progress bar follows), evaluate at every multiple, return the figure."""
        c = self.config()
        self.progress.value = 0
        self.progress.max = max(c.steps, 1)
        self.status.value = f"training {LABELS[c.encoding]} on length {c.train_length}, offset {c.offset} ..."

        def step(i: int, _acc: object) -> None:
            if (i + 1) % PROGRESS_EVERY == 0:
                self.progress.value = i + 1

        trained = self.trained = train(c, seeds=range(self.seeds.value), progress=False, on_step=step)
        self.progress.value = int(trained.steps.max())
        lengths = [m * c.train_length for m in self.multiples]
        ev = evaluate(trained, lengths, samples=self.samples)
        self.status.value = (
            f"trained {len(trained.seeds)} seed(s) in {trained.seconds:.1f} s ({c.recipe()}); "
            f"steps used: {', '.join(str(int(s)) for s in trained.steps)}"
        )
        title = f"{LABELS[c.encoding]}: accuracy by length (T={c.train_length}, K={c.offset}, V={c.vocab})"
        return accuracy_vs_length({(c.train_length, c.offset): {c.encoding: ev}}, title=title)

    def _changed(self, _change: dict) -> None:
        try:
            fig = self.run()
        except ConfigError as e:
            self.status.value = f"<b>cannot train these settings:</b> {e}"
            return
        with self.output:
            self.output.clear_output(wait=True)
            display(fig)
