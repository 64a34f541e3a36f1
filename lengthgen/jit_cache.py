"""Where numba keeps the compiled functions on disk: one folder per version of their sources.

numba's cache (``cache=True``) checks only the file that defines a function, not the files of the functions it
calls: ``engine.stretch.train_steps``, compiled with one ``engine/step.py`` and loaded from the cache after
``step.py`` was edited, still ran the old step (seen while changing the step: a new process trained with the old
gradient until the cache was deleted). So the modules that hold compiled functions (``COMPILED``) are hashed
together, and numba's cache goes into a folder named by the hash: an edit to any of them compiles everything
afresh, once, and no stale function can be loaded. ``tests/test_jit_cache.py`` checks that ``COMPILED`` lists every
module of the package with a cached compiled function.

The folder is ``lengthgen/__pycache__/lengthgen-<hash>``, where the folders of earlier versions are removed when a
new one is made, or ``$NUMBA_CACHE_DIR/lengthgen-<hash>`` where that variable is set (a folder that checkouts of
several versions may share: nothing is removed there).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numba

PACKAGE = Path(__file__).resolve().parent
COMPILED = ("draws.py", "optim.py", "selection.py", "engine/numerics.py", "engine/matmul.py", "engine/step.py",
            "engine/stretch.py", "engine/denormals.py")
PREFIX = "lengthgen-"


def sources_hash() -> str:
    """The first 16 hex digits of the sha256 of the ``COMPILED`` modules' sources, in that order."""
    h = hashlib.sha256()
    for name in COMPILED:
        h.update(name.encode() + b"\0" + (PACKAGE / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_folder() -> Path:
    """The folder numba caches this version of the compiled functions in (see the module's docstring)."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    root = Path(base) if base else PACKAGE / "__pycache__"
    return root / f"{PREFIX}{sources_hash()}"


def use_versioned_cache() -> Path:
    """Point numba's cache at ``cache_folder()`` (before any compiled function of the package is defined: numba
    fixes a function's cache folder when it decorates it); in the package's own folder, remove other versions'."""
    folder = cache_folder()
    if not folder.exists() and not os.environ.get("NUMBA_CACHE_DIR"):
        for old in folder.parent.glob(f"{PREFIX}*"):
            shutil.rmtree(old, ignore_errors=True)
    numba.config.CACHE_DIR = str(folder)
    return folder
