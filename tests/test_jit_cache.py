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
    """Another version of any compiled module gives another folder, and making it removes the older one."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    first = jit_cache.use_versioned_cache()
    first.mkdir(parents=True)
    package = tmp_path / "package"
    for name in jit_cache.COMPILED:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_bytes((jit_cache.PACKAGE / name).read_bytes())
    monkeypatch.setattr(jit_cache, "PACKAGE", package)
    assert jit_cache.cache_folder() == first  # the same sources elsewhere: the same folder
    (package / "engine/step.py").write_text((package / "engine/step.py").read_text() + "\n# an edit\n")
    second = jit_cache.use_versioned_cache()
    assert second != first and second.parent == tmp_path and numba.config.CACHE_DIR == str(second)
    assert not first.exists()


def test_the_package_compiles_into_its_folder() -> None:
    """The compiled functions of this process cache into the versioned folder (set when lengthgen was imported)."""
    assert numba.config.CACHE_DIR == str(jit_cache.cache_folder())
    assert str(stretch.train_steps._cache._cache_path).startswith(str(jit_cache.cache_folder()))
