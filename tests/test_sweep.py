"""The sweep runner: grid parsing, batched groups, resume after an interruption, pool and Dask paths, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthgen import sweep as sweep_mod
from lengthgen.__main__ import main
from lengthgen.cache import Cache
from lengthgen.config import Config, ConfigError
from lengthgen.sweep import GridError, describe, grid_from_dict, iter_table, load_grid, run_sweep, summary

TINY = {"vocab": 4, "dim": 8, "train_length": 8, "offset": 2, "steps": 6, "batch": 16, "target_accuracy": None}


def tiny_grid(**changes) -> dict:
    spec = {"name": "tiny", "base": TINY, "product": {"encoding": ["rope", "ape"]},
            "variants": [{}, {"dim": 4}], "seeds": 2, "eval": {"multiples": [1, 2], "samples": 40}}
    spec.update(changes)
    return spec


class CountingTrain:
    """Wraps sweep.train_runs: records (config, seeds) of each call (a tuple of configs when a call batches
    several); raises on call number ``fail_at``."""

    def __init__(self, fail_at: int | None = None):
        self.calls: list[tuple[Config | tuple[Config, ...], list[int]]] = []
        self.fail_at = fail_at
        self.real = sweep_mod.train_runs

    def __call__(self, runs, **kw):
        configs = tuple(dict.fromkeys(c for c, _ in runs))
        self.calls.append((configs[0] if len(configs) == 1 else configs, [s for _, s in runs]))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt("interrupted mid-sweep")
        return self.real(runs, **kw)


def science(records: list[dict]) -> list[dict]:
    """Records without how they were computed (wall time, size of the batch they trained in): the only fields
    that differ between identical runs."""
    return [{k: v for k, v in r.items() if k not in ("batch_seconds", "batch_members")} for r in records]


def test_grid_expands_product_times_variants() -> None:
    g = grid_from_dict(tiny_grid(variants=[{}, {"dim": 4}, {"dim": 8}]))  # {"dim": 8} repeats the base
    assert [(c.encoding, c.dim) for c in g.configs] == [("rope", 8), ("rope", 4), ("ape", 8), ("ape", 4)]
    assert g.seeds == (0, 1) and g.varied() == ["encoding", "dim"]
    assert g.eval_lengths(g.configs[0]) == [8, 16]
    ints = grid_from_dict(tiny_grid(product={}, variants=[{"rope_base": 100}, {"rope_base": 100.0}]))
    assert len(ints.configs) == 1 and '"rope_base": 100.0' in ints.configs[0].key()  # one cache key for both
    q = grid_from_dict(tiny_grid(quick={"seeds": [5], "eval": {"lengths": [9]}}), quick=True)
    assert q.seeds == (5,) and q.eval_lengths(q.configs[0]) == [9]


@pytest.mark.parametrize("spec, message", [
    ({"bogus": 1}, "unknown grid key"),
    ({"base": {"widht": 8}}, "unknown setting"),
    ({"product": {"encoding": "rope"}}, "non-empty lists"),
    ({"variants": {}}, "non-empty list of override dicts"),
    ({"seeds": []}, "seeds"),
    ({"record": ["kernel", "everything"]}, "extras"),
    ({"eval": {"multiples": [1], "lengths": [8]}}, "not both"),
    ({"base": {**TINY, "max_length": 10}}, "past the APE table"),  # APE at 2x = 16 > 10 rows: fails before training
])
def test_bad_grids_say_what_to_fix(spec: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        grid_from_dict(tiny_grid(**spec))


def test_bad_grid_file(tmp_path: Path) -> None:
    with pytest.raises(GridError, match="not found"):
        load_grid(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(GridError, match="not valid JSON"):
        load_grid(tmp_path / "broken.json")


def test_interrupted_sweep_resumes_and_finished_one_reruns_from_cache(tmp_path: Path, monkeypatch) -> None:
    g = grid_from_dict(tiny_grid(record=["kernel"]))
    cache = Cache(tmp_path / "a")
    failing = CountingTrain(fail_at=3)
    monkeypatch.setattr(sweep_mod, "train_runs", failing)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(g, cache)
    assert len(cache) == 4  # two groups of 2 seeds finished and were stored
    done = [c for c, _ in failing.calls[:2]]

    resumed = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", resumed)
    result = run_sweep(g, cache)
    assert [c for c, _ in resumed.calls] == [c for c in g.configs if c not in done]  # only the missing groups
    assert all(seeds == [0, 1] for _, seeds in resumed.calls)  # each trained as one batched ensemble
    assert result.computed == 4 and len(result.records) == 8

    again = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", again)
    rerun = run_sweep(g, cache)
    assert again.calls == [] and rerun.computed == 0 and science(rerun.records) == science(result.records)

    monkeypatch.undo()
    fresh = run_sweep(g, Cache(tmp_path / "b"))  # uninterrupted, from scratch: the same numbers
    assert science(fresh.records) == science(result.records)


def test_records_hold_per_length_results_and_kernel_for_rope(tmp_path: Path) -> None:
    g = grid_from_dict(tiny_grid(variants=[{}], record=["kernel", "argmax", "pinning"]))
    result = run_sweep(g, Cache(tmp_path))
    rope, ape = result.records[0], result.records[-1]
    assert rope["config"]["encoding"] == "rope" and ape["config"]["encoding"] == "ape"
    for r in result.records:
        assert r["lengths"] == [8, 16] and len(r["accuracy"]) == len(r["target_weight"]) == 2
        assert r["steps"] == TINY["steps"] and all(0 <= a <= 1 for a in r["accuracy"] + r["argmax_at_target"])
    assert set(rope["kernel"]) == {"margin_target", "margin_in_window", "margin_beyond",
                                   "predicted_failure_length", "qk_norm"}
    assert "kernel" not in ape
    assert len(ape["argmax_at_pinned"]) == 2 and len(ape["argmax_at_pinned"][0]) == TINY.get("layers", 1)
    assert all(0 <= x <= 1 for x in ape["predicts_pinned"])
    df = result.frame()
    assert len(df) == 4 * 2 and set(df.multiple) == {1.0, 2.0} and (df.chance == 1 / TINY["vocab"]).all()
    assert df.accuracy.tolist() == [a for r in result.records for a in r["accuracy"]]
    assert "argmax_at_pinned_layer1" in df and df.margin_in_window.notna().tolist() == [
        r["config"]["encoding"] == "rope" for r in result.records for _ in r["lengths"]]
    lines = list(iter_table(result))
    assert len(lines) == 1 + len(g.configs) and "2x" in lines[0] and "±" in lines[1]
    table = describe(result)["accuracy"]
    assert len(table) == 2 * len(g.configs) and table[0]["n"] == len(g.seeds)
    assert table[0]["mean"] == pytest.approx(np.mean([r["accuracy"][0] for r in result.records[: len(g.seeds)]]))


def test_more_seeds_train_only_the_new_ones_with_the_same_numbers(tmp_path: Path, monkeypatch) -> None:
    cache = Cache(tmp_path / "a")
    run_sweep(grid_from_dict(tiny_grid(variants=[{}], product={}, seeds=2)), cache)
    counting = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", counting)
    grown = run_sweep(grid_from_dict(tiny_grid(variants=[{}], product={}, seeds=3)), cache)
    assert [s for _, s in counting.calls] == [[2]]
    monkeypatch.undo()
    fresh = run_sweep(grid_from_dict(tiny_grid(variants=[{}], product={}, seeds=3)), Cache(tmp_path / "b"))
    assert science(grown.records) == science(fresh.records)  # an ensemble member trains exactly as it would alone


def test_summary_gives_mean_and_standard_error_per_group() -> None:
    df = pd.DataFrame({"e": ["a", "a", "b", "b", None], "v": [1.0, 3.0, 2.0, np.nan, 5.0]})
    table = summary(df, "e", "v")
    assert list(table.index[:2]) == ["a", "b"] and len(table) == 3  # first-seen order; a missing key is a group
    assert tuple(table.loc["a", ["mean", "sem", "n", "min", "max"]]) == (2.0, 1.0, 2, 1.0, 3.0)
    assert tuple(table.loc["b", ["mean", "sem", "n"]]) == (2.0, 0.0, 1)  # a missing value is left out


def test_process_pool_gives_the_same_numbers(tmp_path: Path) -> None:
    g = grid_from_dict(tiny_grid(variants=[{}]))
    local = run_sweep(g, Cache(tmp_path / "a"))
    pooled = run_sweep(g, Cache(tmp_path / "b"), workers=2)
    assert pooled.computed == 4 and science(pooled.records) == science(local.records)


def test_dask_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    g = grid_from_dict(tiny_grid(variants=[{}]))
    local = run_sweep(g, Cache(tmp_path / "a"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        remote = run_sweep(g, Cache(tmp_path / "b"), scheduler=cluster.scheduler_address)
    assert remote.computed == 4 and science(remote.records) == science(local.records)


def test_cli_sweep(tmp_path: Path, capsys) -> None:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(tiny_grid(variants=[{}], quick={"seeds": 1})))
    args = ["sweep", str(path), "--cache", str(tmp_path / "cache"), "--quick"]
    assert main(args + ["--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["runs"], first["computed"], first["varied"]) == (2, 2, ["encoding"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 from the cache" in out and "ape" in out and "2x" in out
    assert main(["sweep", str(tmp_path / "nope.json")]) == 2
    assert "not found" in capsys.readouterr().err


def test_failure_length_and_grid_names() -> None:
    from lengthgen.sweep import failure_length

    lengths = [32, 64, 128, 256]
    assert failure_length(lengths, [1.0, 0.9, 0.5, 0.1], chance=0.1) == 128  # threshold (1.0 + 0.1) / 2 = 0.55
    assert failure_length(lengths, [1.0, 0.6, 0.56, 0.55], chance=0.1) is None
    assert failure_length(lengths, [0.1, 0.0, 0.0, 0.0], chance=0.1) is None  # nothing learned: nothing to lose
    assert load_grid("budget").name == "budget"  # a name resolves to sweeps/budget.json


def test_measured_record_matches_evaluate() -> None:
    from lengthgen import evaluate, train
    from lengthgen.sweep import measured_record

    c = Config(**{**TINY, "steps": 10})
    trained = train(c, [0, 1], progress=False)
    ev = evaluate(trained, [8, 16], samples=40)
    rec = measured_record(trained, [8, 16], 40, 0, ["argmax"])
    for s, r in enumerate(rec):
        assert r["accuracy"] == pytest.approx(ev.accuracy()[:, s].tolist(), abs=1e-6)
        assert r["target_weight"] == pytest.approx(ev.target_weight()[:, s].tolist(), abs=1e-6)
        assert r["argmax_at_target"] == pytest.approx([x.argmax_at_target[s] for x in ev.by_length.values()], abs=1e-6)


def test_killed_sweep_resumes(tmp_path: Path, monkeypatch) -> None:
    """SIGKILL a CLI sweep once its first group is cached; the rerun trains exactly the groups not stored."""
    import os
    import signal
    import subprocess
    import sys
    import time

    spec = tiny_grid(product={}, variants=[{"dim": d} for d in (2, 4, 6, 8, 10, 12)], base={**TINY, "steps": 400})
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(spec))
    cache = Cache(tmp_path / "cache")
    proc = subprocess.Popen([sys.executable, "-m", "lengthgen", "sweep", str(path), "--cache", str(cache.root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while len(cache) == 0 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    stored = len(cache)
    assert 0 < stored < 12, "the sweep should be killed after its first group and before its last"
    assert all(json.loads(p.read_text())["value"] for p in cache.folder.glob("[!.]*.json"))  # no torn entry
    g = grid_from_dict(spec)
    counting = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", counting)
    result = run_sweep(g, cache)
    # a group's two entries are written one after the other, so the kill may land between them: a group with
    # one seed stored is trained again for its other seed only (one call, one computed run)
    assert len(counting.calls) == 6 - stored // 2 and result.computed == 12 - stored
    assert len(cache) == 12


def test_runs_sharing_shape_and_budget_pack_into_ensembles_of_bounded_size() -> None:
    base = Config(**TINY)
    other = base.replace(lr=1e-3, offset=1)
    groups = [(base, (0,)), (other, (0, 1)), (base.replace(steps=8), (0,)), (base.replace(dim=4), (0,)),
              (base.replace(weight_decay=0.1), (0, 1, 2, 3))]
    jobs = sweep_mod.batches(groups, limit=3)
    assert jobs == [[(base, (0,)), (other, (0, 1))], [(base.replace(weight_decay=0.1), (0, 1, 2))],
                    [(base.replace(weight_decay=0.1), (3,))], [(base.replace(steps=8), (0,))],
                    [(base.replace(dim=4), (0,))]]


def test_a_packed_sweep_gives_the_numbers_of_runs_trained_alone(tmp_path: Path, monkeypatch) -> None:
    spec = tiny_grid(product={"offset": [1, 2]}, recipes=[{"lr": 0.01}, {"lr": 0.003, "weight_decay": 0.5}],
                     variants=[{}], record=["kernel"])
    g = grid_from_dict(spec)
    counting = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", counting)
    packed = run_sweep(g, Cache(tmp_path / "a"))
    assert len(counting.calls) == 1 and len(counting.calls[0][1]) == 8  # 2 offsets x 2 recipes x 2 seeds, one ensemble
    monkeypatch.setattr(sweep_mod, "MAX_MEMBERS", 1)
    alone = run_sweep(g, Cache(tmp_path / "b"))
    assert len(counting.calls) == 1 + 8
    for a, b in zip(science(packed.records), science(alone.records)):
        assert a["config"] == b["config"] and a["seed"] == b["seed"]
        assert np.allclose(a["accuracy"], b["accuracy"], atol=1e-6) and a["steps"] == b["steps"]
        assert np.isclose(a["final_train_loss"], b["final_train_loss"], rtol=1e-4)


@pytest.mark.fresh_venv
def test_an_installed_package_carries_the_grid_files(tmp_path: Path) -> None:
    """A pip-installed package (no checkout, e.g. Colab) finds every grid of sweeps/ by name."""
    import subprocess
    import sys

    root = Path(sweep_mod.__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(root),
                    "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "wheel").glob("lengthgen-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True)
    names = sorted(p.stem for p in (root / "sweeps").glob("*.json"))
    code = ("import lengthgen.sweep as s, sys; assert 'site' in str(s.SWEEPS), s.SWEEPS; "
            f"print(sorted(s.load_grid(n).name for n in {names!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(names)


def test_plan_cuts_ensembles_without_weight_decay_and_keeps_those_with_it(monkeypatch) -> None:
    monkeypatch.setattr(sweep_mod, "SPLIT_MEMBERS", 2)
    base = Config(**TINY)
    plain = [(base, (0, 1)), (base.replace(lr=1e-3), (0, 1, 2))]
    decayed = [(base.replace(steps=8), (0, 1)), (base.replace(steps=8, weight_decay=0.1), (0, 1))]
    assert sweep_mod.plan(plain + decayed) == [[(base, (0, 1))], [(base.replace(lr=1e-3), (0, 1))],
                                               [(base.replace(lr=1e-3), (2,))], decayed]


@pytest.mark.parametrize("recipes", [
    [{"optimizer": "adam", "lr": 0.01}, {"optimizer": "adam", "lr": 0.003, "steps": 9}],
    [{"optimizer": "gd", "lr": 0.5, "batch": 64}], [{"optimizer": "sign", "lr": 0.01}],
    [{"optimizer": "adam", "lr": 0.01, "steps": 40, "target_accuracy": 0.5}]])
def test_cut_ensembles_give_bitwise_the_numbers_of_whole_ones(tmp_path: Path, monkeypatch, recipes) -> None:
    """Without weight decay a member trains to the same bits in an ensemble of any size (what ``plan`` relies on)."""
    spec = tiny_grid(product={"offset": [1, 2]}, recipes=recipes, variants=[{}], seeds=3, record=["kernel", "argmax"])
    g = grid_from_dict(spec)
    monkeypatch.setattr(sweep_mod, "SPLIT_MEMBERS", 100)
    whole = run_sweep(g, Cache(tmp_path / "a"))
    monkeypatch.setattr(sweep_mod, "SPLIT_MEMBERS", 2)
    cut = run_sweep(g, Cache(tmp_path / "b"))
    assert min(r["batch_members"] for r in whole.records) > 2 and max(r["batch_members"] for r in cut.records) <= 2
    assert science(whole.records) == science(cut.records)


def test_run_grids_runs_the_longest_job_first_and_a_shared_run_once(tmp_path: Path, monkeypatch) -> None:
    short = tiny_grid(name="short", product={}, variants=[{}], seeds=2)
    long = tiny_grid(name="long", product={}, variants=[{}, {"steps": 60}], seeds=2)
    counting = CountingTrain()
    monkeypatch.setattr(sweep_mod, "train_runs", counting)
    a, b = sweep_mod.run_grids([grid_from_dict(short), grid_from_dict(long)], Cache(tmp_path))
    assert [c.steps for c, _ in counting.calls] == [60, 6], "the 60-step job first; the 6-step runs of both once"
    assert (a.computed, b.computed) == (2, 2) and science(a.records) == science(b.records[:2])
    assert 0 < a.seconds <= b.seconds, "each grid says when it was complete"
    again = sweep_mod.run_grids([grid_from_dict(long)], Cache(tmp_path))[0]
    assert again.computed == 0 and again.seconds == 0.0 and len(counting.calls) == 2
