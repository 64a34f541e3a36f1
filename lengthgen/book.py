"""Build tooling for the book: execute the chapters, vendor the browser assets, build the HTML.

The source chapters (``book/*.ipynb``) are committed without outputs. A build:

1. stages a copy of the book root in ``_build/book`` (config, toc, bibliography, markdown pages);
2. executes every chapter of the toc with papermill into that copy (``QUICK=True`` in quick mode);
3. vendors plotly.js, MathJax 3, require.js and the ipywidgets HTML manager into ``_build/book/_vendor``
   (plotly.js from the installed plotly package, the others by ``npm pack`` into ``_build/npm``, cached);
4. runs ``jupyter-book build _build/book -W --keep-going`` (``execute_notebooks: off``) into ``_build/html``.

The staged root mirrors the repository layout, so page paths and relative links are the same as in
the sources. Command line: ``python -m lengthgen.book [--quick] [--only NAME ...] [--no-build]``.

This module is also the Sphinx extension (``setup``) that serves plotly.js once per page.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from .plots import BOOK_BUILD_ENV

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
STAGE = BUILD / "book"
HTML = BUILD / "html"
NPM_CACHE = BUILD / "npm"
VENDOR = "_vendor"  # under the staged root; not "_static" (jupyter-book injects every .js found there)
ROOT_FILES = ("_config.yml", "_toc.yml", "references.bib")
CHAPTER_TIMEOUT_S = 1800

# npm package -> (tarball name, {path inside the package: path under _vendor})
NPM_ASSETS = {
    "mathjax@3.2.2": ("mathjax-3.2.2.tgz", {"es5": "mathjax"}),
    "requirejs@2.3.8": ("requirejs-2.3.8.tgz", {"require.js": "require.js"}),
    "@jupyter-widgets/html-manager@1.0.6": (
        "jupyter-widgets-html-manager-1.0.6.tgz",
        {"dist": "html-manager"},
    ),
}


def toc_files(root: Path = ROOT) -> list[str]:
    """Every document of ``root/_toc.yml`` in reading order, as paths without suffix (e.g. 'book/01_the_gap')."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []) + entry.get("chapters", []))  # a part holds chapters

    walk(toc.get("parts", []) + toc.get("chapters", []))
    return files


def chapters() -> list[Path]:
    """The notebooks of the toc, in reading order (source paths)."""
    notebooks = [ROOT / f"{name}.ipynb" for name in toc_files()]
    return [p for p in notebooks if p.exists()]


def npm_package(spec: str) -> Path:
    """The ``npm pack`` tarball of ``spec``, downloaded once into ``_build/npm``."""
    name, _ = NPM_ASSETS[spec]
    tarball = NPM_CACHE / name
    if not tarball.exists():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        if shutil.which("npm") is None:
            raise RuntimeError(f"npm is needed once to fetch {spec} (install Node.js), or place {tarball} by hand")
        subprocess.run(["npm", "pack", spec, "--silent"], cwd=NPM_CACHE, check=True, stdout=subprocess.DEVNULL)
    return tarball


def vendor(dest: Path) -> None:
    """Copy plotly.js, MathJax, require.js and the widget manager into ``dest`` (the book's own files)."""
    import plotly

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", dest / "plotly.min.js")
    for spec, (_, wanted) in NPM_ASSETS.items():
        if all((dest / target).exists() for target in wanted.values()):
            continue
        with tarfile.open(npm_package(spec)) as tar:
            for inside, target in wanted.items():
                prefix = f"package/{inside}"
                members = [m for m in tar.getmembers() if m.name == prefix or m.name.startswith(prefix + "/")]
                for m in members:
                    m.name = target + m.name[len(prefix):]
                tar.extractall(dest, members=members, filter="data")


def stage() -> None:
    """Copy the book root's files (not the notebooks) into ``_build/book`` and vendor the assets there."""
    STAGE.mkdir(parents=True, exist_ok=True)
    for name in ROOT_FILES:
        shutil.copy2(ROOT / name, STAGE / name)
    for page in (ROOT / "book").glob("*.md"):
        (STAGE / "book").mkdir(exist_ok=True)
        shutil.copy2(page, STAGE / "book" / page.name)
    vendor(STAGE / VENDOR)


def execute(notebook: Path, quick: bool) -> float:
    """Run one source chapter with papermill into the staged root; returns the seconds it took."""
    import papermill

    out = STAGE / notebook.relative_to(ROOT)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ[BOOK_BUILD_ENV] = "1"  # inherited by the kernel: figures appear only where glued
    start = time.perf_counter()
    papermill.execute_notebook(
        str(notebook),
        str(out),
        parameters={"QUICK": True} if quick else {},
        kernel_name="python3",
        cwd=str(out.parent),
        execution_timeout=CHAPTER_TIMEOUT_S,
        progress_bar=False,
    )
    seconds = time.perf_counter() - start
    hide_injected_parameters(out)
    return seconds


def hide_injected_parameters(notebook: Path) -> None:
    """Tag papermill's injected "# Parameters" cell ``remove-cell``: bookkeeping, not for the page."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    for cell in injected:
        cell.metadata["tags"] = [*cell.metadata["tags"], "remove-cell"]
    if injected:
        nbformat.write(nb, notebook)


def build_html() -> None:
    """``jupyter-book build`` of the staged root, warnings as errors; HTML lands in ``_build/html``."""
    jb = Path(sys.executable).with_name("jupyter-book")
    subprocess.run(
        [str(jb), "build", str(STAGE), "--path-output", str(BUILD / "jb"), "-W", "--keep-going", "--all"],
        check=True,
    )
    if HTML.exists():
        shutil.rmtree(HTML)
    shutil.move(BUILD / "jb" / "_build" / "html", HTML)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lengthgen.book", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="run the chapters with QUICK=True (CI)")
    p.add_argument("--only", nargs="*", default=None, help="chapter names to execute (default: all)")
    p.add_argument("--no-build", action="store_true", help="execute only, do not build the HTML")
    a = p.parse_args(argv)
    stage()
    timings = {}
    for nb in chapters():
        if a.only and nb.stem not in a.only:
            continue
        timings[nb.stem] = round(execute(nb, a.quick), 1)
        print(f"{nb.stem}: {timings[nb.stem]} s", flush=True)
    print(f"total: {round(sum(timings.values()), 1)} s ({'quick' if a.quick else 'full'})")
    (BUILD / f"timings-{'quick' if a.quick else 'full'}.json").write_text(json.dumps(timings, indent=1))
    missing = [rel for rel in (nb.relative_to(ROOT) for nb in chapters()) if not (STAGE / rel).exists()]
    if missing and not a.no_build:
        raise SystemExit(f"not executed yet: {[str(m) for m in missing]}; run once without --only before building")
    if not a.no_build:
        build_html()
        print(f"HTML: {HTML / 'index.html'}")


# Run just before the widget manager on pages with widgets. The manager asks require.js for its icon
# fonts under "@jupyter-widgets/html-manager/dist" beside the page: point that at the vendored copy.
# Its controls typeset their labels with MathJax 2's MathJax.Hub.Queue(["Typeset", Hub, element]); the
# book serves MathJax 3 (deferred, so still a config object here): once it is ready, give it that call.
WIDGET_PRELUDE = """require.config({{paths: {{"@jupyter-widgets/html-manager/dist": "{root}"}}}});
(function (config) {{
  if (config === undefined || config.version !== undefined) return;
  function hub() {{
    if (MathJax.Hub === undefined && MathJax.typesetPromise !== undefined) {{
      MathJax.Hub = {{Queue: function (job) {{ return MathJax.typesetPromise(job && job[2] ? [job[2]] : undefined); }}}};
    }}
  }}
  config.startup = config.startup || {{}};
  var ready = config.startup.ready;
  config.startup.ready = function () {{ ready ? ready() : MathJax.startup.defaultReady(); hub(); }};
}})(window.MathJax);"""
WIDGET_MANAGER = "_static/html-manager/embed-amd.js"


def add_widget_prelude(app, pagename: str, templatename: str, context: dict, doctree: object) -> None:
    """Insert ``WIDGET_PRELUDE`` right before the widget manager's script, on the pages that load it."""
    from sphinx.builders.html._assets import _JavaScript

    scripts = context.get("script_files", [])
    at = next((i for i, js in enumerate(scripts) if js.filename == WIDGET_MANAGER), None)
    if at is not None:
        root = context["pathto"]("_static/html-manager", 1)
        scripts.insert(at, _JavaScript(None, body=WIDGET_PRELUDE.format(root=root), priority=scripts[at].priority))


def setup(app) -> dict:
    """Sphinx extension: serve the vendored plotly.js on every page, before any other script, and
    configure the widget manager (``add_widget_prelude``) on pages with widgets.

    plotly.js must load before require.js (on widget pages), or plotly registers as an anonymous AMD
    module instead of defining ``window.Plotly``.
    """
    app.add_js_file("plotly.min.js", priority=100)
    app.connect("html-page-context", add_widget_prelude, priority=900)  # after myst-nb adds the page's scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    main()
