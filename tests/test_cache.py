"""The results cache: round trip, keys, code version, root selection, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lengthgen import cache as cache_mod
from lengthgen.cache import Cache, code_version, default_root


def test_round_trip_and_missing(tmp_path: Path) -> None:
    c = Cache(tmp_path, version="v1")
    key = {"config": {"dim": 8}, "seed": 3}
    assert c.get(key) is None
    c.put(key, {"accuracy": [0.5, 0.25]})
    assert c.get(key) == {"accuracy": [0.5, 0.25]}
    assert c.get({**key, "seed": 4}) is None
    assert Cache(tmp_path, version="v2").get(key) is None  # another code version sees nothing
    assert len(c) == 1


def test_code_version_follows_the_imported_sources_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "lengthgen"
    pkg.mkdir()
    (pkg / "sweep.py").write_text("import numpy\nfrom .model import x\nfrom . import task\n")
    (pkg / "model.py").write_text("from lengthgen.config import y\nx = 1\n")
    (pkg / "task.py").write_text("")
    (pkg / "config.py").write_text("y = 1\n")
    (pkg / "plots.py").write_text("from .sweep import x\n")
    monkeypatch.setattr(cache_mod, "PACKAGE", pkg)
    assert cache_mod.dependencies("sweep") == ["config", "model", "sweep", "task"]
    v1 = code_version()
    (pkg / "plots.py").write_text("z = 2\n")  # not imported by the sweep: same version
    assert code_version() == v1
    (pkg / "config.py").write_text("y = 2\n")  # imported indirectly: new version
    assert code_version() != v1
    (pkg / "config.py").write_text("y = 1\n")
    assert code_version() == v1


def test_root_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LENGTHGEN_CACHE", str(tmp_path / "elsewhere"))
    assert default_root() == tmp_path / "elsewhere"
    assert Cache().folder.parent == tmp_path / "elsewhere"
    monkeypatch.delenv("LENGTHGEN_CACHE")
    assert default_root().name == ".lengthgen-cache"


def test_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Cache(tmp_path, version="v1")
    key = {"seed": 0}
    c.put(key, {"accuracy": 1.0})

    def half_write(obj, f) -> None:
        f.write(json.dumps(obj)[:10])  # a torn write ...
        f.flush()
        raise KeyboardInterrupt  # ... then the process is interrupted

    monkeypatch.setattr(cache_mod.json, "dump", half_write)
    with pytest.raises(KeyboardInterrupt):
        c.put(key, {"accuracy": 0.0})
    with pytest.raises(KeyboardInterrupt):
        c.put({"seed": 1}, {"accuracy": 0.0})
    monkeypatch.undo()
    assert c.get(key) == {"accuracy": 1.0}  # the old entry is intact
    assert c.get({"seed": 1}) is None  # the new one never appeared
    assert sorted(p.name for p in c.folder.iterdir()) == [c.path(key).name]  # no temporary file left
