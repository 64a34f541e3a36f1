"""An on-disk cache of JSON results, keyed by a JSON-able description of the run and the results version.

Files: ``ROOT/results-v<RESULTS_VERSION>/<sha256 of the key>.json``, one file per entry holding ``{"key": ..., "value": ...}``.
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


RESULTS_VERSION = 2
"""The version of the numbers the cache holds. Bump it in any change that may alter a cached number (the model,
the training, the task's draws, the evaluation, what a run records); leave it in a change that keeps every number
(a refactor, a comment, a figure). ``tests/test_results_version.py`` guards it: it reruns a few tiny runs that
touch every code path behind a cached result and fails when one of their numbers moved while this stayed the same.
"""
VERSION_FOLDER = re.compile(r"results-v\d+|[0-9a-f]{16}")  # this scheme's folders and the earlier source-hash ones


def results_version() -> str:
    """The cache folder of the current numbers: ``results-v<RESULTS_VERSION>``."""
    return f"results-v{RESULTS_VERSION}"


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
    """JSON values stored under JSON keys, for one results version (default: ``results_version()``)."""

    def __init__(self, root: str | os.PathLike | None = None, version: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.version = version or results_version()
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
        """Delete the folders of other results versions under the root (no current code reads them); returns them.
        Only folders named like a version (``results-vN``, or the 16 hex digits of the earlier source-hash keys)
        are touched."""
        others = [p for p in self.root.iterdir() if p.is_dir() and p != self.folder
                  and VERSION_FOLDER.fullmatch(p.name)] if self.root.exists() else []
        for folder in others:
            shutil.rmtree(folder)
        return others

    def __len__(self) -> int:
        return len(list(self.folder.glob("[!.]*.json"))) if self.folder.exists() else 0
