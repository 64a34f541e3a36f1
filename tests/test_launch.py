"""Launch buttons that work (issue 12, item 2): every chapter starts with a cell that installs the package
where it is missing, pinned to the book's version; _config.yml has the repository and the launch
buttons; binder/ holds the Binder environment; and a chapter downloaded alone runs in a fresh virtual
environment that has only Jupyter and papermill.

The install cell is written by scripts/add_install_cell.py; rerun it after adding a chapter.
"""

from __future__ import annotations

import builtins
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lengthgen import book

ROOT = book.ROOT
SCRIPT = ROOT / "scripts" / "add_install_cell.py"
spec = importlib.util.spec_from_file_location("add_install_cell", SCRIPT)
aic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(aic)

CHAPTERS = aic.chapters()
FIX = "run: .venv/bin/python scripts/add_install_cell.py"


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_every_notebook_of_the_toc_is_covered() -> None:
    listed = [f"{name}.ipynb" for name in book.toc_files() if (ROOT / f"{name}.ipynb").exists()]
    assert [str(p.relative_to(ROOT)) for p in CHAPTERS] == listed
    assert len(CHAPTERS) >= 9


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_starts_with_the_install_cell(path: Path) -> None:
    nb = json.loads(path.read_text())
    first, second = code_cells(nb)[:2]
    assert aic.TAG in first["metadata"].get("tags", []), f"{path.name}: the first code cell is not the install cell; {FIX}"
    assert "remove-input" in first["metadata"]["tags"], "the install cell is bookkeeping: hidden on the page"
    assert source(first) == aic.cell_source(), f"{path.name}: the install cell is stale (version or URL changed); {FIX}"
    assert not first["outputs"] and first["execution_count"] is None, "sources stay output-free"
    assert "parameters" in second["metadata"].get("tags", []), "the parameters cell comes right after it"
    assert sum(aic.is_install(c) for c in nb["cells"]) == 1


def test_requirement_is_the_repository_at_the_books_version() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url), url
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
    assert aic.pip_requirement() == f"lengthgen[book] @ git+{url}@v{version}"
    assert aic.pip_requirement() in aic.cell_source()
    extras = re.search(r"^book = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert extras and "myst-nb" in extras.group(1), "lengthgen[book] brings myst-nb (every chapter calls glue)"


def test_repository_url_is_set_in_one_place() -> None:
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    host_path = url.split("://", 1)[1]
    files = [p for d in ("lengthgen", "scripts", "tests", "binder", ".github", "benchmarks") if (ROOT / d).exists()
             for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in {".py", ".sh", ".yml", ".txt", ".cjs", ""}]
    files += [ROOT / "Makefile", ROOT / "pyproject.toml", ROOT / "requirements.txt"]
    typed = [str(p.relative_to(ROOT)) for p in files if host_path in p.read_text(errors="ignore")]
    assert not typed, f"{typed} type the repository's URL; read repository.url from _config.yml instead"


def test_config_has_repository_links_and_launch_buttons() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["html"]["use_repository_button"] is True
    buttons = config["launch_buttons"]
    assert buttons["colab_url"] == "https://colab.research.google.com"
    assert buttons["binderhub_url"] == "https://mybinder.org"
    assert config["repository"]["branch"] == "main"
    assert config["repository"].get("path_to_book", "") == "", "the book root is the repository root"


def requirement_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, _extras, spec = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?(.*)", line).groups()
            pins[name.lower()] = spec.strip()
    return pins


def test_binder_environment_matches_the_requirements() -> None:
    binder, main = requirement_pins(ROOT / "binder" / "requirements.txt"), requirement_pins(ROOT / "requirements.txt")
    for name in ("torch", "numpy", "plotly", "ipywidgets", "myst-nb", "ipykernel"):
        assert name in binder, f"binder/requirements.txt lacks {name}"
        assert binder[name] == main[name], f"{name}: binder pins {binder[name]!r}, requirements.txt {main[name]!r}"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert re.search(r"pip install .*-e \.$", post, flags=re.M), "postBuild installs the repository checkout"
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK), "Binder runs postBuild only when it is executable"
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"


# ---- the script ---------------------------------------------------------------------------------

def test_script_inserts_before_the_parameters_cell_and_touches_nothing_else(tmp_path: Path) -> None:
    original = json.loads(CHAPTERS[1].read_text())
    bare = {**original, "cells": [c for c in original["cells"] if not aic.is_install(c)]}
    path = tmp_path / "chapter.ipynb"
    path.write_text(aic.dumps(bare))
    assert aic.update(path, aic.cell_source()) is True
    after = json.loads(path.read_text())
    assert [c for c in after["cells"] if not aic.is_install(c)] == bare["cells"], "every other cell unchanged"
    assert {k: v for k, v in after.items() if k != "cells"} == {k: v for k, v in bare.items() if k != "cells"}
    first_code = next(i for i, c in enumerate(after["cells"]) if c["cell_type"] == "code")
    assert aic.is_install(after["cells"][first_code])
    assert "parameters" in after["cells"][first_code + 1]["metadata"]["tags"]
    text = path.read_text()
    assert aic.update(path, aic.cell_source()) is False and path.read_text() == text, "a second run changes nothing"


def test_script_refreshes_a_stale_cell(tmp_path: Path) -> None:
    nb = json.loads(CHAPTERS[0].read_text())
    stale = copy.deepcopy(nb)
    cell = next(c for c in stale["cells"] if aic.is_install(c))
    cell["source"] = [line.replace("@v", "@v0.0.") for line in cell["source"]]
    stale["cells"].append(copy.deepcopy(cell))  # and a stray second copy
    path = tmp_path / "chapter.ipynb"
    path.write_text(aic.dumps(stale))
    assert aic.update(path, aic.cell_source()) is True
    assert json.loads(path.read_text()) == nb


def test_script_check_mode_passes_on_the_committed_notebooks() -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


# ---- what the cell does -------------------------------------------------------------------------

def run_cell(monkeypatch: pytest.MonkeyPatch, missing: bool) -> list[list[str]]:
    """Execute the install cell here with pip stubbed; ``missing`` makes `import lengthgen` fail."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(list(args)))
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if missing and name == "lengthgen":
            raise ImportError("No module named 'lengthgen'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    exec(compile(aic.cell_source(), "install-cell", "exec"), {})
    monkeypatch.setattr(builtins, "__import__", real_import)
    return calls


def test_install_cell_does_nothing_when_the_package_is_present(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cell(monkeypatch, missing=False) == []


def test_install_cell_installs_the_pinned_repository_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(aic.PIP_ENV, raising=False)
    (call,) = run_cell(monkeypatch, missing=True)
    assert call[1:4] == ["-m", "pip", "install"] and call[-1] == aic.pip_requirement()
    monkeypatch.setenv(aic.PIP_ENV, "/some/checkout")
    (call,) = run_cell(monkeypatch, missing=True)
    assert call[-1] == "/some/checkout", f"${aic.PIP_ENV} replaces the requirement"


# ---- a chapter downloaded alone, in a fresh virtual environment -----------------------------------

CHEAPEST = "00_intro"  # about 3 s in quick mode (README: measured chapter budgets)
@pytest.mark.fresh_venv
def test_downloaded_chapter_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    """A new venv with papermill and ipykernel only; the chapter alone in an empty folder; its first cell
    installs the package (here from this checkout through $LENGTHGEN_PIP_SPEC: no git server offline)."""
    start = time.perf_counter()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pins = requirement_pins(ROOT / "requirements.txt")
    pip = subprocess.run([str(py), "-m", "pip", "install", "--quiet", f"papermill{pins['papermill']}",
                          f"ipykernel{pins['ipykernel']}"], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-3000:]
    absent = subprocess.run([str(py), "-c", "import lengthgen"], capture_output=True, cwd=tmp_path)
    assert absent.returncode != 0, "the fresh venv must not see the package before the cell runs"

    folder = tmp_path / "download"
    folder.mkdir()
    shutil.copy2(ROOT / "book" / f"{CHEAPEST}.ipynb", folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", JUPYTER_PATH=str(venv / "share" / "jupyter"),
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"), **{aic.PIP_ENV: f"lengthgen[book] @ {ROOT.as_uri()}"})
    run = subprocess.run([str(venv / "bin" / "papermill"), f"{CHEAPEST}.ipynb", "out.ipynb", "-p", "QUICK", "True",
                          "-k", "python3", "--no-progress-bar"],
                         cwd=folder, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    where = subprocess.run([str(py), "-c", "import lengthgen, sys; print(lengthgen.__file__, sys.prefix)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split()
    assert where[0].startswith(str(venv)), f"the cell installed into the kernel's venv, not elsewhere: {where}"
    out = json.loads((folder / "out.ipynb").read_text())
    errors = [o for c in code_cells(out) for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert all(c.get("execution_count") for c in code_cells(out)), "every cell ran"
    seconds = time.perf_counter() - start
    print(f"fresh venv + install + {CHEAPEST}: {seconds:.0f} s")
