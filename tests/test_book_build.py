"""The book builder (lengthgen.book, issue 20) on a tiny synthetic book in a temporary folder: the sweep step
fills the cache before any chapter runs, a chapter over its budget is reported with its time and what to run,
a second build executes nothing that was done, and an interrupted or failed build resumes where it stopped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

from lengthgen import book
from lengthgen.cache import Cache
from lengthgen.plots import BOOK_BUILD_ENV
from lengthgen.sweep import load_grid
from lengthgen.train import THREADS_ENV

TINY = {"vocab": 4, "dim": 8, "train_length": 8, "offset": 2, "steps": 4, "batch": 8, "target_accuracy": None}
TOC = "format: jb-book\nroot: book/a\nchapters:\n  - file: book/b\n"
# Chapter b reads the grid "tiny" like chapters 8 and 9 read theirs, and prints how many runs it had to train.
READ_GRID = """import os
from lengthgen.sweep import load_grid, run_sweep
assert not os.environ.get("TINY_BOOK_FAIL"), "asked to fail (TINY_BOOK_FAIL)"
result = run_sweep(load_grid(os.path.join(os.environ["TINY_SWEEPS"], "tiny" + ".json"), quick=QUICK))
print("trained here:", result.computed)"""


def notebook(*code: str) -> nbformat.NotebookNode:
    params = nbformat.v4.new_code_cell("QUICK = False")
    params.metadata["tags"] = ["parameters"]
    return nbformat.v4.new_notebook(cells=[params, *(nbformat.v4.new_code_cell(c) for c in code)],
                                    metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                             "language": "python"}})


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> book.BookFolders:
    """A two-chapter book with two grid files, its own build folder and an empty results cache."""
    root = tmp_path / "root"
    (root / "book").mkdir(parents=True)
    (root / "_toc.yml").write_text(TOC)
    nbformat.write(notebook("print('chapter a')"), root / "book" / "a.ipynb")
    nbformat.write(notebook(READ_GRID), root / "book" / "b.ipynb")
    sweeps = root / "sweeps"
    sweeps.mkdir()
    (sweeps / "tiny.json").write_text(json.dumps({"base": TINY, "seeds": 2, "eval": {"lengths": [8], "samples": 16},
                                                  "quick": {"base": {**TINY, "steps": 3}, "seeds": 1}}))
    (sweeps / "tiny2.json").write_text(json.dumps({"base": {**TINY, "offset": 1}, "seeds": 1,
                                                   "eval": {"lengths": [8], "samples": 16}}))
    monkeypatch.setenv("LENGTHGEN_CACHE", str(tmp_path / "cache"))  # read by this process and the kernels
    monkeypatch.setenv("TINY_SWEEPS", str(sweeps))
    monkeypatch.delenv("TINY_BOOK_FAIL", raising=False)
    # the package's own sources may change under a test (an editor saving): its digest is tested apart
    monkeypatch.setattr(book, "package_digest", lambda: "package")
    return book.BookFolders(root=root, build=tmp_path / "_build", sweeps=sweeps)


def build(layout: book.BookFolders, **kw) -> dict:
    return book.build(layout, html=False, workers=0, **kw)


def outputs(layout: book.BookFolders, name: str) -> str:
    nb = nbformat.read(layout.stage / "book" / f"{name}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_sweeps_first_then_chapters_over_budget_reported_and_a_rebuild_does_nothing_twice(
        tiny: book.BookFolders, capsys: pytest.CaptureFixture) -> None:
    budgets = {"a": (1e-3, 1e-3), "b": (600, 600)}  # a is over any budget; b is not
    first = build(tiny, budgets=budgets)
    assert first["sweeps"]["grids"] == {"tiny": {"runs": 2, "computed": 2, "seconds": pytest.approx(
        first["sweeps"]["grids"]["tiny"]["seconds"])}, "tiny2": {"runs": 1, "computed": 1, "seconds": pytest.approx(
            first["sweeps"]["grids"]["tiny2"]["seconds"])}}, "every grid file, each run once"
    assert "trained here: 0" in outputs(tiny, "b"), "the chapter read the grid that the sweep step had filled"
    assert first["executed"] == ["a", "b"] and first["over_budget"] == ["a"] and first["complete"]
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "over budget" in x]
    seconds = first["chapters"]["a"]
    assert f"chapter a took {seconds:.1f} s" in line and "full budget is 0.001 s" in line, line
    assert "step: chapter execution" in line and "slowest cell" in line, line
    assert "own computation" in line and "python -m lengthgen.book --only a --no-build" in line, line
    timings = json.loads(tiny.timings(quick=False).read_text())
    assert timings["chapters"] == first["chapters"] and set(timings["chapters"]) == {"a", "b"}
    assert timings["sweeps"]["grids"]["tiny"]["computed"] == 2 and timings["over_budget"] == ["a"]

    again = build(tiny, budgets=budgets)
    assert again["executed"] == [] and again["chapters"] == first["chapters"], "nothing is executed twice"
    assert all(g["computed"] == 0 for g in again["sweeps"]["grids"].values())

    nb = nbformat.read(tiny.root / "book" / "a.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print('a new cell')"))
    nbformat.write(nb, tiny.root / "book" / "a.ipynb")
    assert build(tiny, budgets=budgets)["executed"] == ["a"], "an edited chapter, and only it, runs again"
    quick = build(tiny, budgets=budgets, quick=True)
    assert quick["executed"] == ["a", "b"] and quick["sweeps"]["grids"]["tiny"] == pytest.approx(
        {"runs": 1, "computed": 1, "seconds": quick["sweeps"]["grids"]["tiny"]["seconds"]}), "quick: the quick grids"


def test_a_chapter_whose_grid_is_missing_says_how_to_fill_it(tiny: book.BookFolders,
                                                             capsys: pytest.CaptureFixture) -> None:
    report = build(tiny, sweeps=False, only=["b"], budgets={"b": (1e-3, 1e-3)})
    assert report["sweeps"] is None and report["executed"] == ["b"] and not report["complete"]
    assert "trained here: 2" in outputs(tiny, "b"), "without the sweep step the chapter computes what is missing"
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "over budget" in x]
    assert "chapter b took" in line and "tiny (2 runs)" in line, line
    assert "`make sweeps`" in line and "python -m lengthgen sweep sweeps/tiny.json --workers 0" in line, line
    with pytest.raises(book.BuildError, match=r"not executed with the quick parameters: \['b'\]"):
        book.build(tiny, quick=True, only=["a"], sweeps=False)  # the HTML step refuses a book of mixed modes


def test_a_failed_or_interrupted_build_resumes(tiny: book.BookFolders, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_BOOK_FAIL", "1")
    with pytest.raises(book.BuildError, match=r"chapter b failed .*AssertionError.*asked to fail") as failed:
        build(tiny)
    assert str(tiny.executing / "book" / "b.ipynb") in str(failed.value), "the message points at the failed copy"
    assert not (tiny.stage / "book" / "b.ipynb").exists(), "a failed chapter leaves no executed copy to build"
    assert (tiny.stage / "book" / "a.ipynb").exists()
    timings = json.loads(tiny.timings(quick=False).read_text())
    assert timings["executed"] == ["a"] and not timings["complete"], "an interrupted build still writes its timings"
    monkeypatch.delenv("TINY_BOOK_FAIL")
    resumed = build(tiny)
    assert resumed["executed"] == ["b"] and resumed["complete"], "the build resumes at the chapter that failed"
    assert "trained here: 0" in outputs(tiny, "b")

    # Killed while papermill writes (Ctrl-C): the staged copy stays the last whole one, and no cell time limit.
    import papermill

    calls = []

    def killed(source: str, output: str, **kw) -> None:
        calls.append(kw)
        Path(output).write_text('{"cells": [')  # half a notebook ...
        raise KeyboardInterrupt  # ... then the build is stopped

    monkeypatch.setattr(papermill, "execute_notebook", killed)
    staged = (tiny.stage / "book" / "a.ipynb").read_bytes()
    with pytest.raises(KeyboardInterrupt):
        build(tiny, force=True)
    assert calls[0]["execution_timeout"] is None, "no per-cell time limit unless --cell-timeout"
    assert (tiny.stage / "book" / "a.ipynb").read_bytes() == staged
    assert not list(tiny.stage.rglob(".*.tmp")), "no temporary file in the staged book"
    monkeypatch.undo()


def test_cli_fills_the_sweeps_only_and_checks_its_arguments(tiny: book.BookFolders,
                                                            capsys: pytest.CaptureFixture) -> None:
    book.main(["--sweeps-only", "--workers", "0"], layout=tiny)
    assert "3 of 3 runs missing" in capsys.readouterr().out
    for name in ("tiny", "tiny2"):
        assert book.missing_runs(load_grid(tiny.sweeps / f"{name}.json"), Cache()) == 0
    with pytest.raises(SystemExit, match="not chapters of"):
        book.main(["--only", "nope", "--no-build"], layout=tiny)


def test_every_chapter_of_the_book_has_a_budget() -> None:
    names = [nb.stem for nb in book.chapters()]
    assert names and not set(names) - set(book.BUDGETS), f"add {set(names) - set(book.BUDGETS)} to book.BUDGETS"
    assert all(0 < quick <= full for quick, full in book.BUDGETS.values())
    assert book.grids_read_by(book.ROOT / "book" / "08_when_rope_extrapolates.ipynb") == \
        ["budget", "depth", "encodings", "frontier"], "the grids chapter 8 loads"


def test_chapter_key_follows_source_parameters_package_and_grids(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "plots").mkdir(parents=True)
    (pkg / "model.py").write_text("x = 1\n")
    (pkg / "plots" / "grid.js").write_text("var x;\n")
    monkeypatch.setattr(book, "PACKAGE", pkg)
    root = tmp_path / "root"
    (root / "sweeps").mkdir(parents=True)
    nbformat.write(notebook("print(1)"), root / "a.ipynb")
    (root / "sweeps" / "g.json").write_text("{}")
    layout = book.BookFolders(root=root, build=tmp_path / "_build", sweeps=root / "sweeps")
    key = lambda quick=False: book.chapter_key(root / "a.ipynb", quick, layout)  # noqa: E731
    first = key()
    assert key() == first and key(quick=True) != first
    for path, text in [(pkg / "model.py", "x = 2\n"), (pkg / "plots" / "grid.js", "var y;\n"),
                       (root / "sweeps" / "g.json", '{"seeds": 2}'), (root / "a.ipynb", None)]:
        old = path.read_text()
        if text is None:
            nbformat.write(notebook("print(2)"), path)
        else:
            path.write_text(text)
        assert key() != first, f"a change to {path.name} must execute the chapter again"
        path.write_text(old)
        assert key() == first


def test_chapters_execute_side_by_side_with_the_same_outputs(tiny: book.BookFolders) -> None:
    serial = build(tiny)
    first = {name: outputs(tiny, name) for name in ("a", "b")}
    parallel = book.build(tiny, html=False, workers=2, force=True)
    assert parallel["executed"] == serial["executed"] == ["a", "b"], "reported in reading order"
    assert {name: outputs(tiny, name) for name in ("a", "b")} == first
    assert set(json.loads(tiny.timings(quick=False).read_text())["chapters"]) == {"a", "b"}


def test_a_chapter_failing_beside_another_stops_the_build_and_keeps_the_other(tiny: book.BookFolders,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_BOOK_FAIL", "1")
    with pytest.raises(book.BuildError, match=r"chapter b failed in cell"):
        book.build(tiny, html=False, workers=2, sweeps=False)
    assert (tiny.stage / "book" / "a.ipynb").exists() and not (tiny.stage / "book" / "b.ipynb").exists()


def test_kernels_see_the_build_environment_and_the_building_process_gets_its_own_back(
        tiny: book.BookFolders, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chapters executed side by side run with LENGTHGEN_BOOK_BUILD=1 (figures only where glued), and with
    LENGTHGEN_THREADS=1 and every thread pool at one thread (the other core runs the other chapter); afterwards
    the building process's environment is as it was (a test process that builds chapters must not draw its later
    figures as a book build would)."""
    names = (BOOK_BUILD_ENV, THREADS_ENV, *book.POOL_THREADS)
    for name in names:
        monkeypatch.delenv(name, raising=False)
    code = f"import os\nprint('env', *(os.environ.get(name) for name in {names!r}))"
    nbformat.write(notebook(code), tiny.root / "book" / "a.ipynb")
    before = dict(os.environ)
    book.build(tiny, html=False, workers=2)
    assert "env 1 1 1 1 1" in outputs(tiny, "a")  # every pool on one thread: the other core has the other chapter
    assert dict(os.environ) == before
    book.execute(tiny.root / "book" / "a.ipynb", quick=True, layout=tiny)  # alone, as tests/test_notebooks.py runs it
    assert "env 1 None None None None" in outputs(tiny, "a") and dict(os.environ) == before
