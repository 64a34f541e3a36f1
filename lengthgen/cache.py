"""An on-disk cache of JSON results, keyed by a JSON-able description of the run and the code version.

Layout: ``ROOT/<code version>/<sha256 of the key>.json``, one file per entry holding ``{"key": ..., "value": ...}``.
Every write goes to a temporary file in the same folder and is moved into place with ``os.replace``, so a
reader (or a sweep that was killed mid-write) never sees a half-written entry. An entry that is damaged all the
same (it does not parse, or its stored key is not the one asked for: a disk error, a hand edit, a copy cut short)
counts as absent: the sweep recomputes it and rewrites it, and the cache reports the file once (a warning on the
``lengthgen.cache`` logger naming its path), never a traceback.

The root is, in order: the ``root`` argument, the ``LENGTHGEN_CACHE`` environment variable, or
``.lengthgen-cache/`` at the project root (the folder holding ``pyproject.toml`` next to the package;
the current folder when the package is installed elsewhere).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

ENV_VAR = "LENGTHGEN_CACHE"
PACKAGE = Path(__file__).resolve().parent
log = logging.getLogger(__name__)


def dependencies(module: str) -> list[str]:
    """``module`` and every package module it imports, directly or not (``from .x import``,
    ``from . import x``, ``import lengthgen.x``), as sorted module names."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = PACKAGE / f"{name}.py"
        if name in seen or not path.exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith(PACKAGE.name)):
                inner = (node.module or "").removeprefix(PACKAGE.name).lstrip(".")
                todo += [inner.split(".")[0]] if inner else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[1] for a in node.names if a.name.startswith(PACKAGE.name + ".")]
    return sorted(seen)


def code_version(module: str = "sweep") -> str:
    """A short hash of the sources a result of ``module`` depends on: the module and its package imports.
    Editing any other module (figures, widgets, the book build) keeps the cache."""
    h = hashlib.sha256()
    for name in dependencies(module):
        h.update(name.encode() + b"\0" + (PACKAGE / f"{name}.py").read_bytes() + b"\0")
    return h.hexdigest()[:16]


def default_root() -> Path:
    """``$LENGTHGEN_CACHE``, else ``.lengthgen-cache`` at the project root (or the current folder)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    project = PACKAGE.parent
    return (project if (project / "pyproject.toml").exists() else Path.cwd()) / ".lengthgen-cache"


def digest(key: dict) -> str:
    """sha256 of the key as sorted JSON."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class Cache:
    """JSON values stored under JSON keys, for one code version (default: the current sources)."""

    def __init__(self, root: str | os.PathLike | None = None, version: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.version = version or code_version()
        self.folder = self.root / self.version
        self.damaged: set[Path] = set()  # entries found damaged (reported once each)

    def path(self, key: dict) -> Path:
        return self.folder / f"{digest(key)}.json"

    def get(self, key: dict) -> dict | None:
        """The stored value, or None when absent. A damaged entry (not JSON, not ``{"key", "value"}``, or a
        stored key other than ``key``) counts as absent and is reported once per path (``self.damaged``)."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_bytes())
            stored, value = entry["key"], entry["value"]
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return self._damaged(path, f"it does not parse as a cache entry ({type(e).__name__}: {e})")
        if stored != json.loads(json.dumps(key)):
            return self._damaged(path, "its stored key differs from the key it is filed under")
        return value

    def _damaged(self, path: Path, why: str) -> None:
        """Report a damaged entry once (by path) and treat it as absent: the caller recomputes and rewrites it."""
        if path not in self.damaged:
            self.damaged.add(path)
            log.warning("cache entry %s is damaged: %s; treating it as missing (it is recomputed and rewritten)",
                        path, why)
        return None

    def put(self, key: dict, value: dict) -> Path:
        """Store ``value`` atomically (temporary file + os.replace). Returns the entry's path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.path(key)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"key": key, "value": value}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def prune(self) -> list[Path]:
        """Delete the folders of other code versions under the root (no current code reads them); returns them.
        Only folders named like a version (16 hex digits) are touched."""
        others = [p for p in self.root.iterdir() if p.is_dir() and p != self.folder
                  and re.fullmatch("[0-9a-f]{16}", p.name)] if self.root.exists() else []
        for folder in others:
            shutil.rmtree(folder)
        return others

    def __len__(self) -> int:
        return len(list(self.folder.glob("[!.]*.json"))) if self.folder.exists() else 0
