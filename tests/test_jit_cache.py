"""numba's on-disk cache of the compiled functions is versioned by their sources (``lengthgen/jit_cache.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import numba

from lengthgen import jit_cache
from lengthgen.engine import stretch


def test_every_module_with_cached_compiled_functions_is_hashed() -> None:
    """A module with ``cache=True`` left out of ``COMPILED`` could load a function compiled against an older callee."""
    cached = {str(p.relative_to(jit_cache.PACKAGE)) for p in jit_cache.PACKAGE.rglob("*.py")
              if re.search(r"njit\([^)]*cache=True", p.read_text())}
    assert cached == set(jit_cache.COMPILED)


def test_the_cache_folder_follows_the_sources(tmp_path: Path, monkeypatch) -> None:
    """Another version of any compiled module gives another folder; in the package's own cache folder making it
    removes the older one, in a shared $NUMBA_CACHE_DIR it removes nothing."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    package = tmp_path / "package"
    for name in jit_cache.COMPILED:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_bytes((jit_cache.PACKAGE / name).read_bytes())
    same = jit_cache.cache_folder().name
    monkeypatch.setattr(jit_cache, "PACKAGE", package)
    first = jit_cache.use_versioned_cache()
    assert first == package / "__pycache__" / same  # the same sources elsewhere: the same version
    first.mkdir(parents=True)
    step = package / "engine/step.py"
    step.write_text(step.read_text() + "\n# an edit\n")
    second = jit_cache.use_versioned_cache()
    assert second != first and second.parent == first.parent and numba.config.CACHE_DIR == str(second)
    assert not first.exists()

    shared = tmp_path / "shared"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    third = jit_cache.use_versioned_cache()
    third.mkdir(parents=True)
    step.write_text(step.read_text() + "\n# another edit\n")
    fourth = jit_cache.use_versioned_cache()
    assert fourth.parent == third.parent == shared and fourth != third and third.exists()


def test_the_package_compiles_into_its_folder() -> None:
    """The compiled functions of this process cache into the versioned folder (set when lengthgen was imported)."""
    assert numba.config.CACHE_DIR == str(jit_cache.cache_folder())
    assert str(stretch.train_steps._cache._cache_path).startswith(str(jit_cache.cache_folder()))
