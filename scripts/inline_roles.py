#!/usr/bin/env python
"""Rewrite chapters written with myst-nb glue roles into the form JupyterLab also renders (idempotent).

In every markdown cell: ``{glue:text}`k:f``` becomes ``{eval}`glue.text("k:f")```, ``{glue:}`k``` becomes
``{eval}`glue.any("k")```, ``{glue:md}`k``` becomes ``{eval}`glue.md("k")```, ``{cite}`key``` becomes
``{eval}`glue.cite("key")``` (author and year in JupyterLab), a ``{glue:md} k`` directive
(``:format: myst``) becomes a paragraph of ``{eval}`glue.md("k")```, and a ``{glue:figure} k`` directive
becomes a ``{figure}`` directive (same options and caption) whose body starts with
``{eval}`glue.figure("k")```; ``{ref}`label``` to a labelled heading of a chapter becomes
``{ref}`its title <label>``` (a title that has changed since is refreshed). In code cells, ``from myst_nb import glue`` becomes
``from lengthgen.inline import glue`` (the same function, which also keeps each value for the kernel's
inline expressions). ``lengthgen/inline.py`` explains the mechanism; the book build turns every rewritten
cell back into exactly the glue roles it had (checked here cell by cell: a cell that would not come back
unchanged is left alone and reported).

    .venv/bin/python scripts/inline_roles.py                 # every book/*.ipynb
    .venv/bin/python scripts/inline_roles.py book/10_x.ipynb # chosen chapters
    .venv/bin/python scripts/inline_roles.py --check         # exit 1 if any notebook still needs it
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
# lengthgen/inline.py alone (it needs IPython only), without importing the package and torch
_spec = importlib.util.spec_from_file_location("lengthgen_inline", ROOT / "lengthgen" / "inline.py")
_inline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inline)
book_markdown, heading_titles = _inline.book_markdown, _inline.heading_titles

KINDS = {"glue:text": "text", "glue:": "any", "glue:md": "md", "cite": "cite"}
ROLE = re.compile(r"\{(glue:text|glue:|glue:md|cite)\}`([^`\"]+)`")
MD_DIRECTIVE = re.compile(r"```\{glue:md\} ([^\s`]+)\n:format: myst\n```")
FIGURE = re.compile(r"```\{glue:figure\} ([^\s`]+)[ \t]*\n((?::[^\n]*\n)*)")
IMPORT = re.compile(r"^from myst_nb import glue$", re.M)
LEFT = re.compile(r"\{glue[:a-z]*\}")  # any glue role or directive left after the rewrite
BARE_REF = re.compile(r"\{ref\}`([\w-]+)`")


def lab_markdown(source: str, titles: dict[str, str] | None = None) -> str:
    """A markdown cell's source in the JupyterLab form (inverse of ``lengthgen.inline.book_markdown``);
    ``titles``: label -> title of the headings a bare ``{ref}`` may point to."""
    titles = titles or {}
    source = _inline.REF.sub(lambda m: f"{{ref}}`{m.group(2)}`" if m.group(2) in titles else m.group(0), source)
    source = BARE_REF.sub(lambda m: f"{{ref}}`{titles[m.group(1)]} <{m.group(1)}>`" if m.group(1) in titles
                          else m.group(0), source)
    source = FIGURE.sub(lambda m: f"```{{figure}}\n{m.group(2)}\n{{eval}}`glue.figure(\"{m.group(1)}\")`\n", source)
    source = MD_DIRECTIVE.sub(lambda m: f"{{eval}}`glue.md(\"{m.group(1)}\")`", source)
    return ROLE.sub(lambda m: f"{{eval}}`glue.{KINDS[m.group(1)]}(\"{m.group(2)}\")`", source)


def rewrite(path: Path, titles: dict[str, str]) -> tuple[bool, list[str]]:
    """Rewrite one notebook in place; returns (changed, problems)."""
    nb = nbformat.read(path, as_version=4)
    changed, problems = False, []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            new = lab_markdown(cell.source, titles)
            if book_markdown(new, titles) != book_markdown(cell.source, titles):
                problems.append(f"{path.name} cell {i}: the rewrite would change the page; left as it is")
                continue
            if LEFT.search(new):
                problems.append(f"{path.name} cell {i}: a glue role or directive this script does not rewrite: "
                                f"{LEFT.search(new).group(0)}")
        elif cell.cell_type == "code":
            new = IMPORT.sub("from lengthgen.inline import glue", cell.source)
        else:
            continue
        if new != cell.source:
            cell.source, changed = new, True
    if changed:
        nbformat.write(nb, path)
    return changed, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every book/*.ipynb")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs it")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    titles = heading_titles(sorted((ROOT / "book").glob("*.ipynb")) + list(paths))
    status = 0
    for path in paths:
        if args.check:
            nb = nbformat.read(path, as_version=4)
            if any(lab_markdown(c.source, titles) != c.source for c in nb.cells if c.cell_type == "markdown"):
                print(f"{path}: has glue roles or bare references; run scripts/inline_roles.py")
                status = 1
            continue
        changed, problems = rewrite(path, titles)
        for p in problems:
            print(p, file=sys.stderr)
            status = 1
        print(f"{path}: {'rewritten' if changed else 'unchanged'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
