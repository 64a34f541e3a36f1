"""A rerun in JupyterLab leaves the sources as committed (issue 31, item 2): the git filter that `make venv` sets
up (the Makefile's NB_CLEAN) turns a chapter as JupyterLab saves it after Run All (outputs, execution counts,
the inline expressions' values in markdown cells' ``user_expressions``, the kernel's full ``language_info`` and
its kernelspec) back into the committed file, byte for byte. tests/test_jupyterlab.py does the same through a
real JupyterLab and ``git diff``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "book").glob("*.ipynb"))


def filter_args() -> list[str]:
    """The clean filter's arguments after the python executable, as the Makefile defines them (NB_CLEAN)."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-nb-clean: ; @echo '$(NB_CLEAN)'",
                          "print-nb-clean"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return shlex.split(out)


def clean(texts: list[str]) -> list[str]:
    """Notebooks' JSON texts through the clean filter, as ``git add`` runs it on each (one process for all)."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"{i}.ipynb" for i in range(len(texts))]
        for path, text in zip(paths, texts):
            path.write_text(text)
        subprocess.run([sys.executable, *filter_args(), *map(str, paths)], check=True, cwd=ROOT)
        return [path.read_text() for path in paths]


def as_jupyterlab_saves_it(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What JupyterLab writes after Run All with jupyterlab-myst: outputs and counts under code cells, each
    inline expression's result in its markdown cell's metadata, this kernel's kernelspec and language_info."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    spec = KernelSpecManager().get_kernel_spec("python3")
    nb.metadata.kernelspec = {"display_name": spec.display_name, "language": spec.language, "name": "python3"}
    nb.metadata.language_info = {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py", "mimetype": "text/x-python",
        "name": "python", "nbconvert_exporter": "python", "pygments_lexer": "ipython3",
        "version": ".".join(map(str, sys.version_info[:3]))}
    for n, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.execution_count = n
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a value\n")]
        elif "{eval}" in cell.source:
            cell.metadata["user_expressions"] = [{"expression": 'glue.text("x")', "result": {
                "status": "ok", "data": {"text/plain": "0.812"}, "metadata": {}}}]
    return nb


def test_a_rerun_chapter_cleans_to_its_committed_form() -> None:
    committed = [path.read_text() for path in SOURCES]
    rerun = [nbformat.writes(as_jupyterlab_saves_it(nbformat.reads(text, as_version=4))) + "\n" for text in committed]
    assert all(a != b for a, b in zip(rerun, committed))
    as_committed, after_rerun = clean(committed), clean(rerun)
    for path, text, same, cleaned in zip(SOURCES, committed, as_committed, after_rerun):
        assert same == text, f"{path.name} is not in the filter's form: git add it (make venv first)"
        assert cleaned == text, (
            f"{path.name}: the clean filter leaves a difference after a JupyterLab rerun; add the key to "
            "NB_EXTRA_KEYS (Makefile) or make the committed metadata match what JupyterLab writes")


def test_the_installed_filter_is_the_makefiles() -> None:
    """`make venv` wrote the Makefile's filter into this checkout's git config (rerun it after changing NB_CLEAN)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no filter to check")
    installed = subprocess.run(["git", "config", "--get", "filter.nbstripout.clean"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
    assert shlex.split(installed)[1:] == filter_args(), f"git's filter is {installed!r}: run make venv"
