#!/usr/bin/env python
"""Insert or update the install cell of every chapter of ``_toc.yml`` (idempotent).

Each chapter's first code cell installs the lengthgen package where ``import lengthgen`` fails (Colab,
Binder without postBuild, a notebook downloaded from the book) and does nothing where it is installed
(the book build, a checkout with ``make``). The pip requirement is the repository pinned to the book's
version, ``lengthgen[book] @ git+<repository.url>@v<version>``, read from ``_config.yml`` (``repository.url``)
and ``pyproject.toml`` (``project.version``); ``$LENGTHGEN_PIP_SPEC`` replaces it at run time (e.g. a
local checkout: ``LENGTHGEN_PIP_SPEC="lengthgen[book] @ file:///path/to/lengthgen"``).

The cell is tagged ``install`` and ``remove-input`` (it has no output in a build, so it leaves no trace on
the page) and goes right before the first other code cell (the ``parameters`` cell). Each notebook is
read from disk, only that cell is added or rewritten, and the file is written back in nbformat's own
layout, so nothing else changes. Rerun after adding a chapter or changing the version or the URL:

    .venv/bin/python scripts/add_install_cell.py           # update the notebooks
    .venv/bin/python scripts/add_install_cell.py --check   # exit 1 if any notebook needs it
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TAG = "install"
TAGS = [TAG, "remove-input"]
CELL_ID = "install-lengthgen"
PIP_ENV = "LENGTHGEN_PIP_SPEC"


def repository_url(root: Path = ROOT) -> str:
    return yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"].rstrip("/")


def version(root: Path = ROOT) -> str:
    """``project.version`` of pyproject.toml (the package's one version)."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        project = text.split("[project]", 1)[1].split("\n[", 1)[0]
        return re.search(r'^version\s*=\s*"([^"]+)"', project, flags=re.M).group(1)
    return tomllib.loads(text)["project"]["version"]


def pip_requirement(root: Path = ROOT) -> str:
    """The repository pinned to the book's version, with the chapters' extra (myst-nb for glue)."""
    return f"lengthgen[book] @ git+{repository_url(root)}@v{version(root)}"


def cell_source(root: Path = ROOT) -> str:
    return f'''# Installs the lengthgen package where it is missing (Colab, Binder, a downloaded chapter); does nothing
# where it is installed. ${PIP_ENV} replaces the pip requirement (e.g. a local checkout).
import importlib
import os
import subprocess
import sys

try:
    import lengthgen, myst_nb  # noqa: F401
except ImportError:
    spec = os.environ.get("{PIP_ENV}", "{pip_requirement(root)}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", spec], check=True)
    importlib.invalidate_caches()'''


def new_cell(source: str, with_id: bool) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {"tags": list(TAGS)}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    if with_id:
        cell["id"] = CELL_ID
    return cell


def chapters(root: Path = ROOT) -> list[Path]:
    """Every notebook of ``root/_toc.yml`` (markdown pages have no code to install for)."""
    sys.path.insert(0, str(root))
    from lengthgen.book import toc_files

    return [root / f"{name}.ipynb" for name in toc_files(root) if (root / f"{name}.ipynb").exists()]


def is_install(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def with_install_cell(nb: dict, source: str) -> dict:
    """``nb`` with exactly one install cell, right before the first other code cell."""
    with_id = (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5)
    cells = [c for c in nb["cells"] if not is_install(c)]
    at = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"), len(cells))
    return {**nb, "cells": cells[:at] + [new_cell(source, with_id)] + cells[at:]}


def dumps(nb: dict) -> str:
    """nbformat's own layout (what nbformat.write produces), so untouched cells stay byte-identical."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def update(path: Path, source: str, write: bool = True) -> bool:
    """Add or refresh the install cell of the notebook at ``path``; True when the file changed (or would)."""
    before = path.read_text(encoding="utf-8")
    after = dumps(with_install_cell(json.loads(before), source))
    if after == before:
        return False
    if write:
        path.write_text(after, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs the update")
    a = p.parse_args(argv)
    source = cell_source()
    changed = [nb for nb in chapters() if update(nb, source, write=not a.check)]
    for nb in changed:
        print(f"{'needs' if a.check else 'updated'}: {nb.relative_to(ROOT)}")
    if a.check and changed:
        print("run: .venv/bin/python scripts/add_install_cell.py", file=sys.stderr)
        return 1
    if not changed:
        print(f"every chapter has the install cell ({pip_requirement()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
