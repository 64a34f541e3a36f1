"""Drive a real JupyterLab the way a reader does: start the server that `make lab` starts (on 127.0.0.1, a free
port, a token, no browser), open a notebook in headless Chromium through Playwright, run all its cells, and
read what the notebook shows.

Used by tests/test_jupyterlab.py and by the screenshots of scripts/jupyterlab_screens.py. The server gets its
own settings, workspace and runtime folders (deleted afterwards), so nothing a reader saved changes what the
test sees, and it is always shut down.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from playwright.sync_api import BrowserContext, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from browser_util import LOCAL_HOST

import nbformat

START_S = 90  # longest wait for the server to answer
RUN_ALL_S = 240  # longest wait for a notebook's cells to finish
SETTLE_S = 15  # longest wait for the inline expressions to show once the cells have run


def lab_command() -> list[str]:
    """The command `make lab` runs (``jupyter lab`` from the virtual environment, ``--allow-root`` as root)."""
    return [sys.executable, "-m", "jupyterlab"] + (["--allow-root"] if os.geteuid() == 0 else [])


# Settings of the test's own server: no news pop-up over the notebook. How it renders cells is left to the
# settings `make venv` installs for every JupyterLab of the virtual environment (LAB_OVERRIDES), as a reader gets it.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}
# `make venv` copies binder/jupyterlab-overrides.json here: every cell rendered when a notebook opens
LAB_OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "lengthgen.json"


def stage_notebook(source: Path, root: Path, quick: bool = True) -> str:
    """Copy the notebook ``source`` into ``root``/book with its ``parameters`` cell set to ``QUICK = quick``
    (as papermill's ``-p QUICK`` does); returns its path relative to ``root``."""
    nb = nbformat.read(source, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if not params:
        raise ValueError(f"{source} has no cell tagged 'parameters' to set QUICK in")
    params[0].source = f"QUICK = {quick}"
    (root / "book").mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, root / "book" / source.name)
    return f"book/{source.name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL_HOST, 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running server: ``url(path)`` opens ``path`` (relative to ``root``) in the lab interface."""

    root: Path
    base: str
    token: str
    log: Path

    def url(self, path: str) -> str:
        return f"{self.base}lab/tree/{path}?token={self.token}&reset"


@contextmanager
def jupyterlab(root: Path, env: dict[str, str] | None = None) -> Iterator[Lab]:
    """A JupyterLab server on 127.0.0.1 serving ``root``; waits at most START_S for it, always shuts it down."""
    port, token = _free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="jupyterlab-") as tmp:
        state = Path(tmp)
        log = state / "server.log"
        for name, values in SETTINGS.items():
            (state / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
            (state / "settings" / name).write_text(json.dumps(values))
        args = lab_command() + [
            "--no-browser", f"--ServerApp.ip={LOCAL_HOST}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run commands as the menus do
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            f"--LabApp.user_settings_dir={state / 'settings'}", f"--LabApp.workspaces_dir={state / 'workspaces'}",
        ]
        run_env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(state / "runtime"), **(env or {})}
        with open(log, "wb") as out:
            server = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=run_env, cwd=root)
        lab = Lab(root, f"http://{LOCAL_HOST}:{port}/", token, log)
        try:
            _wait_ready(lab, server)
            yield lab
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_ready(lab: Lab, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode}:\n{lab.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{lab.base}api/status?token={lab.token}", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer within {START_S} s:\n{lab.log.read_text()[-3000:]}")


def open_notebook(context: BrowserContext, lab: Lab, path: str) -> Page:
    """Open ``path`` in the lab interface and wait until its kernel is idle."""
    page = context.new_page()
    page.goto(lab.url(path), wait_until="load")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=START_S * 1000)
    _wait_idle(page, START_S)
    return page


def _wait_idle(page: Page, seconds: float) -> None:
    """Wait until the current notebook's kernel is connected and idle (at most ``seconds``)."""
    page.wait_for_function(
        """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                   const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                   return k && k.connectionStatus === 'connected' && k.status === 'idle'; }""",
        timeout=seconds * 1000, polling=250)


def save(page: Page, seconds: float = START_S) -> None:
    """Save the current notebook as File > Save does and wait until the file is written (the model is clean)."""
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                           timeout=seconds * 1000, polling=250)


def run_all(page: Page, seconds: float = RUN_ALL_S) -> float:
    """Run every cell as Run > Run All Cells does and wait until none is queued or running; returns the seconds."""
    start = time.monotonic()
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        """() => { const w = window.jupyterapp.shell.currentWidget;
                   const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
                   const busy = cells.some(c => c.textContent.includes('*'));
                   const k = w.sessionContext.session.kernel;
                   return !busy && k.status === 'idle'; }""",
        timeout=seconds * 1000, polling=500)
    # jupyterlab-myst stores each markdown cell's expression results in its metadata when the kernel replies,
    # which may be after the kernel is idle; then the figures and widget views draw
    try:
        page.wait_for_function(f"() => {UNEVALUATED_JS}().length === 0", timeout=SETTLE_S * 1000, polling=250)
        page.wait_for_function(
            """() => [...document.querySelectorAll('.jp-Notebook .js-plotly-plot')]
                       .every(f => f.querySelector('.main-svg'))""",
            timeout=SETTLE_S * 1000, polling=250)
    except PlaywrightTimeout:
        pass  # unevaluated_cells and the markdown check report what is missing
    return time.monotonic() - start


# The indices (among markdown cells) of those with an inline expression whose results jupyterlab-myst has not stored
UNEVALUATED_JS = """(() => window.jupyterapp.shell.currentWidget.content.widgets
    .filter(c => c.model.type === 'markdown')
    .map((c, i) => [i, c.model.sharedModel.getSource().includes('{eval}'), c.model.getMetadata('user_expressions')])
    .filter(([i, cites, results]) => cites && !(results && results.length)).map(([i]) => i))"""


def unevaluated_cells(page: Page) -> list[int]:
    """Markdown cells (their index among the markdown cells) that cite values with ``{eval}`` but hold no results:
    Run All reached them without jupyterlab-myst evaluating their expressions (issue 31, item 1)."""
    return page.evaluate(f"{UNEVALUATED_JS}()")


def markdown_text(page: Page) -> list[str]:
    """The rendered text of every markdown cell, in notebook order."""
    return page.eval_on_selector_all(".jp-Notebook .jp-MarkdownCell",
                                     "els => els.map(e => { const r = e.querySelector('.jp-InputArea > .myst, .jp-InputArea > .jp-RenderedMarkdown');"
                                     "                      return r ? r.innerText : ''; })")


def error_outputs(page: Page) -> list[str]:
    """Every error a cell shows: tracebacks and text written to stderr under code cells, and failed inline
    expressions (red spans) or error boxes inside rendered markdown."""
    return page.eval_on_selector_all(
        ".jp-Notebook [data-mime-type='application/vnd.jupyter.stderr'], .jp-Notebook .myst-RenderedExpressionError",
        "els => els.map(e => (e.innerText || e.className).slice(0, 500))")


def kernel_repr(page: Page, expression: str) -> str | None:
    """The text/plain of ``expression`` evaluated in the notebook's kernel, as jupyterlab-myst asks for it
    (a silent execute request with one user expression); None if it raised."""
    return page.evaluate(
        """async (expr) => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const future = kernel.requestExecute({code: '', silent: true, store_history: false,
                                                  user_expressions: {v: expr}});
            let result = null;
            future.onReply = msg => { result = msg.content.user_expressions.v; };
            await future.done;
            return result && result.status === 'ok' ? result.data['text/plain'] : null;
        }""", expression)
