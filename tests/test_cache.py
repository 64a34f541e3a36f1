"""The results cache: round trip, keys, results version, root selection, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lengthgen import cache as cache_mod
from lengthgen.cache import Cache, default_root, results_version


def test_round_trip_and_missing(tmp_path: Path) -> None:
    c = Cache(tmp_path, version="v1")
    key = {"config": {"dim": 8}, "seed": 3}
    assert c.get(key) is None
    c.put(key, {"accuracy": [0.5, 0.25]})
    assert c.get(key) == {"accuracy": [0.5, 0.25]}
    assert c.get({**key, "seed": 4}) is None
    assert Cache(tmp_path, version="v2").get(key) is None  # another results version sees nothing
    assert len(c) == 1


def test_the_folder_is_the_results_version_not_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 4: the cache is keyed by an explicit results version, so a refactor or a comment keeps it
    (no source bytes enter the key); bumping the version hides every earlier result."""
    c = Cache(tmp_path)
    assert c.folder == tmp_path / f"results-v{cache_mod.RESULTS_VERSION}" == tmp_path / results_version()
    c.put({"seed": 0}, {"accuracy": 1.0})
    monkeypatch.setattr(cache_mod, "PACKAGE", tmp_path / "no sources here")  # the version reads no file
    assert Cache(tmp_path).get({"seed": 0}) == {"accuracy": 1.0}
    monkeypatch.setattr(cache_mod, "RESULTS_VERSION", cache_mod.RESULTS_VERSION + 1)
    assert Cache(tmp_path).get({"seed": 0}) is None


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


TINY_GRID = {"name": "tiny", "base": {"vocab": 4, "dim": 8, "train_length": 8, "offset": 2, "steps": 6, "batch": 16,
                                      "target_accuracy": None},
             "seeds": 2, "eval": {"multiples": [1, 2], "samples": 40}}


def test_truncated_entry_is_recomputed_and_reported_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 item 6: a cut-short entry (its first 40 bytes) is a miss, recomputed, rewritten, named once."""
    from lengthgen.sweep import grid_from_dict, run_key, run_sweep

    grid = grid_from_dict(TINY_GRID)
    c = Cache(tmp_path)
    first = run_sweep(grid, c)
    config = grid.configs[0]
    entry = c.path(run_key(grid, config, 1))
    intact = entry.read_bytes()
    entry.write_bytes(intact[:40])
    with caplog.at_level("WARNING", logger="lengthgen.cache"):
        again = run_sweep(grid, Cache(tmp_path))  # a later run, a fresh Cache, as after a crash
    assert again.computed == 1, "the damaged run, and only it, is trained again"
    named = [r for r in caplog.records if str(entry) in r.getMessage()]
    assert len(named) == 1 and named[0].levelname == "WARNING", [r.getMessage() for r in caplog.records]
    assert "recomputed" in named[0].getMessage() and not named[0].exc_info, "a message, not a traceback"
    rewritten = json.loads(entry.read_text())
    assert rewritten["key"] == run_key(grid, config, 1)
    how = ("batch_seconds", "batch_members")  # how it was computed, not what
    assert [{k: v for k, v in r.items() if k not in how} for r in again.records] == \
        [{k: v for k, v in r.items() if k not in how} for r in first.records], "the recomputed run has the same numbers"
    caplog.clear()
    with caplog.at_level("WARNING", logger="lengthgen.cache"):
        third = run_sweep(grid, Cache(tmp_path))
    assert third.computed == 0 and not caplog.records, "rewritten atomically: read back without a word"
    assert sorted(p.name for p in c.folder.iterdir() if p.name.startswith(".")) == [], "no temporary file left"


@pytest.mark.parametrize("damage", [
    b"",  # empty
    b"\xff\xfe not text",  # not UTF-8
    b"[1, 2]",  # JSON, but not an entry
    b'{"key": {"seed": 0}}',  # no value
])
def test_damaged_entries_count_as_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes) -> None:
    c = Cache(tmp_path, version="v1")
    key = {"seed": 0}
    c.put(key, {"accuracy": 1.0}).write_bytes(damage)
    with caplog.at_level("WARNING", logger="lengthgen.cache"):
        assert c.get(key) is None
        assert c.get(key) is None  # asked twice, reported once
    assert [str(c.path(key)) in r.getMessage() for r in caplog.records] == [True]
    c.put(key, {"accuracy": 0.5})
    assert c.get(key) == {"accuracy": 0.5}


def test_entry_filed_under_another_key_counts_as_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = Cache(tmp_path, version="v1")
    c.put({"seed": 1}, {"accuracy": 1.0}).replace(c.path({"seed": 0}))  # the right bytes under the wrong name
    with caplog.at_level("WARNING", logger="lengthgen.cache"):
        assert c.get({"seed": 0}) is None
    assert "stored key differs" in caplog.text and str(c.path({"seed": 0})) in caplog.text


def test_prune_removes_only_other_results_versions(tmp_path: Path) -> None:
    current, old = Cache(tmp_path, version="results-v3"), Cache(tmp_path, version="results-v2")
    hashed = Cache(tmp_path, version="fedcba9876543210")  # a folder of the earlier source-hash keys
    current.put({"seed": 0}, {"accuracy": 1.0})
    old.put({"seed": 0}, {"accuracy": 0.5})
    hashed.put({"seed": 0}, {"accuracy": 0.5})
    (tmp_path / "notes").mkdir()  # not a version folder: left alone
    assert sorted(current.prune()) == sorted([old.folder, hashed.folder])
    assert current.get({"seed": 0}) == {"accuracy": 1.0} and not old.folder.exists() and not hashed.folder.exists() and (tmp_path / "notes").exists()
    assert Cache(tmp_path / "absent", version="v").prune() == []
