"""The science core imports nothing chapter-specific (issue 29, item 1).

The core is what a reader of the paper would call the model, the training, the measurements and the theory;
the chapter modules hold what a chapter computes from it and, until moved to ``lengthgen.chapters``, its tables,
glued numbers and verdicts. The test reads every import statement of the core's source (top level and inside
functions, relative ones resolved), so an import hidden in a function body counts as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lengthgen"

CORE = ("config", "task", "encodings", "model", "optim", "train", "evaluate", "kernel", "dilution", "maxmargin",
        "draws", "tables", "thresholds", "uncertainty", "cache", "engine")
"""The science core: modules, and ``engine`` (a subpackage: every module in it)."""

CHAPTER_MODULES = ("kernel_study",  # chapter 4
                   "playground", "widgets",  # chapter 7
                   # chapters 5, 6, 8 and 9 have none: lengthgen.chapters holds them whole
                   "regimes",  # chapter 9b
                   "selection", "limit_path",  # chapter 10
                   "forecast",  # chapter 10b
                   "findings")  # the findings page
"""The modules that serve one chapter today (each chapter's computations, and its presentation until it moves to
``lengthgen.chapters``). Helpers shared by several chapters (``compare``, ``recipes``, ``sweep``, ``trajectory``,
``plots``, ``inline``) are not chapter modules."""

FORBIDDEN = ("lengthgen.chapters",) + tuple(f"lengthgen.{name}" for name in CHAPTER_MODULES)


def core_files() -> list[Path]:
    """The core's source files; fails when a listed module is missing (a rename must update ``CORE``)."""
    files = []
    for name in CORE:
        module, package = PACKAGE / f"{name}.py", PACKAGE / name
        if module.exists():
            files.append(module)
        elif package.is_dir():
            files.extend(sorted(package.glob("*.py")))
        else:
            raise AssertionError(f"core module lengthgen.{name} not found: update CORE in {Path(__file__).name}")
    return files


def imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module the file imports, as absolute dotted names (``from .x import y`` in ``lengthgen/engine/a.py``
    gives ``lengthgen.engine.x`` and ``lengthgen.engine.x.y``, since y may be a module); ``root`` is the package's
    folder."""
    package = ["lengthgen", *path.relative_to(root).parent.parts]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def chapter_imports(path: Path, root: Path = PACKAGE) -> list[str]:
    """The imports of ``path`` that reach a chapter module or ``lengthgen.chapters``."""
    return sorted(name for name in imported_modules(path, root)
                  if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN))


def test_the_parser_resolves_relative_imports() -> None:
    # the real files: train imports the fast tables relatively, the engine's stretch reaches optim two levels up
    assert "lengthgen.tables.TableStep" in imported_modules(PACKAGE / "train.py")
    assert "lengthgen.optim.update_step" in imported_modules(PACKAGE / "engine" / "stretch.py")


def test_a_chapter_import_is_caught_wherever_it_is(tmp_path: Path) -> None:
    # a fake core module with chapter imports at the top and hidden in a function body, in every spelling
    fake = tmp_path / "lengthgen"
    (fake / "engine").mkdir(parents=True)
    (fake / "engine" / "x.py").write_text("def f():\n    from ..chapters import ch10_selection\n")
    (fake / "y.py").write_text("from . import forecast\nimport lengthgen.chapters.ch10b_prediction\n"
                               "from .forecast_tools import z\n")
    assert chapter_imports(fake / "engine" / "x.py", fake) == ["lengthgen.chapters",
                                                               "lengthgen.chapters.ch10_selection"]
    assert chapter_imports(fake / "y.py", fake) == ["lengthgen.chapters.ch10b_prediction", "lengthgen.forecast"]


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_science_core_imports_no_chapter(path: Path) -> None:
    bad = chapter_imports(path)
    assert not bad, (f"lengthgen/{path.relative_to(PACKAGE)} imports {bad}: the science core imports nothing "
                     f"chapter-specific; move what it needs into the core, or the caller into lengthgen.chapters")


def test_chapter_modules_exist() -> None:
    # a chapter module that was renamed or emptied out must leave this list, or the test above checks nothing for it
    missing = [name for name in CHAPTER_MODULES if not (PACKAGE / f"{name}.py").exists()]
    assert not missing, f"update CHAPTER_MODULES: no module lengthgen/<name>.py for {missing}"
    assert (PACKAGE / "chapters" / "__init__.py").exists()


def test_each_chapter_module_is_named_after_its_chapter() -> None:
    # chNN[b]_<words>.py for book/NN[b]_*.ipynb, and its docstring's first line names that notebook
    book = PACKAGE.parent / "book"
    modules = sorted((PACKAGE / "chapters").glob("ch*.py"))
    assert modules, "lengthgen/chapters holds no chapter module"
    for path in modules:
        number, _, words = path.stem[2:].partition("_")
        notebooks = sorted(book.glob(f"{number}_*.ipynb"))
        assert words and len(notebooks) == 1, f"{path.name}: no single book/{number}_*.ipynb for it"
        first_line = ast.get_docstring(ast.parse(path.read_text())).splitlines()[0]
        assert f"``book/{notebooks[0].stem}``" in first_line, f"{path.name}: its docstring names another chapter"


def test_only_notebooks_and_tests_import_the_chapters() -> None:
    # lengthgen.chapters sits on top: no module of the package outside it (science, plots, CLI, build) imports it
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if "chapters" not in p.relative_to(PACKAGE).parts]
    assert len(outside) > len(core_files())
    reaches = lambda name: name == "lengthgen.chapters" or name.startswith("lengthgen.chapters.")  # noqa: E731
    bad = {str(p.relative_to(PACKAGE)): names for p in outside
           if (names := [n for n in imported_modules(p) if reaches(n)])}
    assert not bad, f"these modules import lengthgen.chapters: {bad}; a chapter module imports them, not the reverse"
