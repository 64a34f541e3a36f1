"""The numbers, tables and figures a chapter's prose cites, shown in the built page and in JupyterLab alike.

A chapter stores each value with ``glue(name, value)`` (myst-nb's glue, which the book build reads from the
executed notebook, plus a record in the live kernel), and its markdown cites it with an inline expression that
jupyterlab-myst evaluates in the reader's kernel when the cell is run:

=========================================  ==========================================
markdown source (JupyterLab evaluates it)  what the book build parses instead (myst-nb)
=========================================  ==========================================
``{eval}`glue.text("rope_1x:.3f")```       ``{glue:text}`rope_1x:.3f```
``{eval}`glue.any("n_seeds")```            ``{glue:}`n_seeds```
``{eval}`glue.md("verdict")```             ``{glue:md}`verdict```
a line of only ``glue.md("table")``        a ``{glue:md} table`` directive (``:format: myst``)
a ``{figure}`` directive whose body is     a ``{glue:figure} fig_key`` directive with the same options
``glue.figure("fig_key")`` and a caption   and caption
``{ref}`2. Title <chapter-x>```            ``{ref}`chapter-x``` (the same text: the heading's title)
=========================================  ==========================================

A reference to another chapter cannot be resolved inside one notebook, so JupyterLab would show its bare label
with a warning; with the heading's title as its text it shows the title, as the page does.

The book build does the rewriting on Sphinx's ``source-read`` event (this module is a Sphinx extension,
listed in ``_config.yml``), so the executed notebooks and their downloads keep the JupyterLab form, and the
pages are the ones the glue roles give. ``scripts/inline_roles.py`` rewrites a chapter written with glue roles
into this form (idempotent).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from IPython.core.formatters import format_display_data

PLOTLY = "application/vnd.plotly.v1+json"  # how JupyterLab draws a figure
WIDGET = "application/vnd.jupyter.widget-view+json"  # an ipywidget
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_ARG = r'"([^"`]+)"'
# {eval}`glue.KIND("ARG")` inline; KIND -> the glue role the book uses
INLINE = re.compile(rf'\{{eval\}}`glue\.(text|any|md|cite)\({_ARG}\)`')
ROLE_OF = {"text": "glue:text", "any": "glue:", "md": "glue:md", "cite": "cite"}
# a line that is only {eval}`glue.md("key")`
MD_BLOCK = re.compile(rf'(^|\n)\{{eval\}}`glue\.md\("({_NAME})"\)`(?=\n|$)')
# ```{figure}\n:opt: ...\n\n{eval}`glue.figure("key")`\n\ncaption\n```
# {ref}`title <label>`, and a heading with a label: (label)=\n# title
REF = re.compile(r"\{ref\}`([^`<]+?) <([\w-]+)>`")
HEADING = re.compile(r"^\(([\w-]+)\)=[ \t]*\n#+[ \t]+(.+?)[ \t]*$", re.M)
FIGURE = re.compile(rf'```\{{figure\}}[ \t]*\n((?::[^\n]*\n)*)\n?\{{eval\}}`glue\.figure\("({_NAME})"\)`[ \t]*\n')


class Glued:
    """The values a chapter glued in this kernel, as the inline expressions of its markdown ask for them.

    ``glue(name, value)`` stores ``value`` for the book (myst-nb) and for this kernel; ``glue.text``,
    ``glue.any``, ``glue.md`` and ``glue.figure`` return what the matching glue role shows in the page. Like
    myst-nb, it keeps the value's representations (its mimebundle) as they were when it was glued.
    """

    def __init__(self) -> None:
        self.bundles: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str, variable: Any, display: bool = True) -> None:
        """Keep the value for this kernel's expressions, and in the book build (``plots.BOOK_BUILD_ENV`` set, as
        ``lengthgen.book`` sets it) also myst-nb's ``glue(name, variable, display)``, whose data-only output is
        how the build reads the value from the executed notebook. A reader's kernel gets no such output: its
        prose shows the value, and JupyterLab cannot draw data-only outputs (a chapter's many would sit behind a
        "Show more outputs" button that reveals nothing); ``display=True`` shows the value there as usual."""
        from .plots.render import BOOK_BUILD_ENV

        if os.environ.get(BOOK_BUILD_ENV):
            from myst_nb import glue as myst_glue

            myst_glue(name, variable, display=display)
        elif display:
            from IPython.display import display as show

            show(variable)
        self.bundles[name] = format_display_data(variable)[0]

    def each(self, values: Mapping[str, Any], prefix: str = "") -> None:
        """Glue every value of a mapping (a dict, a pandas Series or a result's ``asdict``) under
        ``prefix + name``, without displaying it: a chapter derives its numbers in a visible cell and glues
        them with one line."""
        for name, value in values.items():
            self(f"{prefix}{name}", value, display=False)

    def _bundle(self, name: str) -> dict[str, Any]:
        if name not in self.bundles:
            raise KeyError(f"nothing is glued under {name!r} yet: run the code cells above this one "
                           "(Run > Run All Cells)")
        return self.bundles[name]

    def text(self, key_format: str) -> Text:
        """``{glue:text}`key:format```: the value's plain text, formatted as myst-nb formats it."""
        from myst_nb.core.variables import format_plain_text

        key, _, fmt = key_format.rpartition(":") if ":" in key_format else (key_format, "", "s")
        return Text(format_plain_text(self._bundle(key)["text/plain"], fmt))

    def any(self, name: str) -> Bundle:
        """``{glue:}`name```: the value, shown by its richest representation."""
        return Bundle(self._bundle(name))

    def md(self, name: str) -> Markdown:
        """``{glue:md}`name```: the value's markdown (an ``IPython.display.Markdown``, e.g. a ``plots.md_table``)."""
        bundle = self._bundle(name)
        if "text/markdown" not in bundle:
            raise ValueError(f"{name!r} holds no markdown: glue an IPython.display.Markdown (e.g. plots.md_table)")
        return Markdown(bundle["text/markdown"])

    def cite(self, keys: str) -> Text:
        """``{cite}`keys```: "Author et al. year" for each key (comma-separated) of the book's references.bib,
        which JupyterLab cannot resolve itself; a key it cannot find is shown as [key]."""
        return Text("; ".join(_author_year(key.strip()) for key in keys.split(",")))

    def figure(self, name: str) -> Bundle:
        """``{glue:figure}``: the glued figure's JupyterLab representation (plotly's JSON mimetype), or a
        glued widget's view (live controls that a kernel shows where the page shows a static figure)."""
        bundle = self._bundle(name)
        for mime in (WIDGET, PLOTLY):
            if mime in bundle:
                return Bundle({mime: bundle[mime]})
        raise ValueError(f"{name!r} holds no plotly figure or widget: glue figures with plots.glue_figure")


class Text:
    """Plain text whose representation is the text itself (no quotes)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class Markdown(Text):
    """Markdown that JupyterLab renders in place."""

    def _repr_markdown_(self) -> str:
        return self.text


class Bundle:
    """A ready mimebundle, passed through IPython's display formatter unchanged."""

    def __init__(self, bundle: dict[str, Any]) -> None:
        self.bundle = bundle

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        return self.bundle


glue = Glued()  # chapters: from lengthgen.inline import glue


def in_reader_kernel() -> bool:
    """Whether this runs in a reader's own kernel (JupyterLab, Colab) rather than the book build: where a long cell
    shows progress bars (``lg.train(..., progress=in_reader_kernel())``), which the built page would only
    show as noise under its cell."""
    from .plots.render import BOOK_BUILD_ENV

    return not os.environ.get(BOOK_BUILD_ENV)


# Words that stay true in every mode (quick or full, built or rerun): a count with its noun in the right number,
# and a mean with its spread only where there is one.

def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 seed", "3 seeds" (``plural`` for nouns that do not take an s: counted(2, "seed pair") -> "2 seed pairs")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def spread(mean: float, half_width: float, n: int, fmt: str = ".3f", unit: str = "seed") -> str:
    """"0.812 ± 0.010" for n >= 2 values; "0.812 (1 seed: no spread)" for one, where a ± would read as a
    measured spread of zero. ``half_width``: the ± (a standard error, or two); ``unit``: what n counts."""
    if n == 1:
        return f"{mean:{fmt}} ({counted(1, unit)}: no spread)"
    return f"{mean:{fmt}} ± {half_width:{fmt}}"

BIB = Path(__file__).resolve().parents[1] / "references.bib"  # in a checkout; absent where pip installed the package
_ENTRY = re.compile(r"@\w+\{([^,\s]+),(.*?)\n\}", re.S)
_FIELD = re.compile(r"^\s*(author|year)\s*=\s*\{?(.+?)\}?,?\s*$", re.M)


@lru_cache(maxsize=1)
def _bibliography() -> dict[str, dict[str, str]]:
    """key -> {"author": ..., "year": ...} of every entry of references.bib (empty when there is none)."""
    if not BIB.exists():
        return {}
    return {key: dict(_FIELD.findall(body)) for key, body in _ENTRY.findall(BIB.read_text())}


def _author_year(key: str) -> str:
    """"Soudry et al. 2018" (one author: "Su 2021"; two: "Xie and Li 2024") for a key of references.bib."""
    entry = _bibliography().get(key)
    if not entry or "author" not in entry:
        return f"[{key}]"
    names = [a.split(",")[0].strip() if "," in a else a.split()[-1] for a in entry["author"].split(" and ")]
    who = names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
    return f"{re.sub(r'[{}]', '', who)} {entry.get('year', '').strip('{}')}".strip()


def heading_titles(notebooks: list[Path]) -> dict[str, str]:
    """label -> title of every labelled heading (``(label)=`` then ``# title``) in the markdown of ``notebooks``."""
    titles = {}
    for path in notebooks:
        for cell in json.loads(Path(path).read_text()).get("cells", []):
            if cell.get("cell_type") == "markdown":
                source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                titles.update(HEADING.findall(source))
    return titles


def book_markdown(source: str, titles: dict[str, str] | None = None) -> str:
    """A markdown cell's source with every inline expression of this module replaced by the glue role or
    directive the book build renders, and every reference whose text is its target's title (``titles``:
    label -> title) written as the bare label (the table above); the rest of the text is unchanged."""
    if titles:
        source = REF.sub(lambda m: f"{{ref}}`{m.group(2)}`" if titles.get(m.group(2)) == m.group(1) else m.group(0),
                         source)
    source = FIGURE.sub(lambda m: f"```{{glue:figure}} {m.group(2)}\n{m.group(1)}", source)
    source = MD_BLOCK.sub(lambda m: f"{m.group(1)}```{{glue:md}} {m.group(2)}\n:format: myst\n```", source)
    return INLINE.sub(lambda m: f"{{{ROLE_OF[m.group(1)]}}}`{m.group(2)}`", source)


def book_notebook(text: str, titles: dict[str, str] | None = None) -> str:
    """A notebook's JSON text with ``book_markdown`` applied to every markdown cell (others untouched)."""
    nb = json.loads(text)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cell["source"] = book_markdown(source, titles)
    return json.dumps(nb)


@lru_cache(maxsize=4)
def _book_titles(srcdir: str) -> dict[str, str]:
    return heading_titles(sorted((Path(srcdir) / "book").glob("*.ipynb")))


def ref(label: str) -> str:
    """A cross-reference to the heading ``label`` for markdown that a chapter glues (a table cell): with the
    heading's title as its text (``{ref}`title <label>```), which JupyterLab shows as the title where a bare
    ``{ref}`label``` would show the label; the page shows the title either way. Where the book's notebooks are
    not beside the package (an installed package), the bare label."""
    title = _book_titles(str(BIB.parent)).get(label)
    return f"{{ref}}`{title} <{label}>`" if title else f"{{ref}}`{label}`"


def _source_read(app: Any, docname: str, content: list[str]) -> None:
    if str(app.env.doc2path(docname)).endswith(".ipynb"):
        content[0] = book_notebook(content[0], _book_titles(str(app.srcdir)))


def setup(app: Any) -> dict[str, Any]:
    """Sphinx extension: chapters' inline expressions become glue roles before myst-nb parses them."""
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
