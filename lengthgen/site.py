"""The book's site: the browser assets it serves itself, and the Sphinx extension that wires them into pages.

The pages load nothing from the network. ``vendor`` copies plotly.js (from the installed plotly package), MathJax 3,
require.js and the ipywidgets HTML manager (``npm pack`` tarballs, downloaded once into ``_build/npm``) into the
staged book's ``_vendor`` folder, which ``_config.yml`` serves as ``_static``. ``setup`` is the Sphinx extension
(listed in ``_config.yml``) that puts plotly.js once on every page and configures the widget manager.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

NPM_CACHE = Path(__file__).resolve().parents[1] / "_build" / "npm"
VENDOR = "_vendor"  # under the staged root; not "_static" (jupyter-book injects every .js found there)

# npm package -> (tarball name, {path inside the package: path under _vendor})
NPM_ASSETS = {
    "mathjax@3.2.2": ("mathjax-3.2.2.tgz", {"es5": "mathjax"}),
    "requirejs@2.3.8": ("requirejs-2.3.8.tgz", {"require.js": "require.js"}),
    "@jupyter-widgets/html-manager@1.0.6": ("jupyter-widgets-html-manager-1.0.6.tgz", {"dist": "html-manager"}),
}


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
