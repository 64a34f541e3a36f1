"""The in-page trainer (lengthgen/plots/trainer.js, chapter 7's "train here") against the package, in Node.

On fixed tokens and weights (the package's float64 initial weights, written out as JSON, which keeps every
double exactly), the JavaScript step's mean log-likelihood, correct count and the gradient of every parameter
match ``tables.TableStep``'s float64 step: each gradient entry within 1e-9 of the largest entry of its
parameter's gradient (a relative max-norm error; in practice it is ~1e-15), the log-likelihood within 1e-12
relative, for RoPE and APE, at and below the training length. Three AdamW steps of the JavaScript update match
``optim.Optimizer``'s (rule "adam", float64, the package's betas and eps) to 1e-12 absolute on every parameter
and moment, with weight decay on the matrices only and on everything. Skips, saying so, when ``node`` is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from lengthgen import Config
from lengthgen.model import Model
from lengthgen.optim import Optimizer
from lengthgen.playground import trainer_config
from lengthgen.tables import TableStep
from lengthgen.train import TABLES

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js >= 18) is not installed: the JavaScript trainer "
                                                      "runs in Node for this test (apt-get install nodejs)")
TRAINER = Path(str(resources.files("lengthgen.plots").joinpath("trainer.js")))
JS_NAMES = {"embed": "embed", "encoding.table": "table", "layers.0.wq": "wq", "layers.0.wk": "wk",
            "layers.0.wv": "wv", "layers.0.wo": "wo", "unembed": "unembed"}

# Reads {config, params, tokens, B, L} or {config, params, grads, decay...} on stdin, answers JSON on stdout.
RUNNER = """
const lg = require(process.argv[2]);
const job = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const f64 = o => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Float64Array.from(v)]));
const plain = o => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Array.from(v)]));
const p = f64(job.params);
let out;
if (job.kind === 'step') {
    const r = lg.step(job.config, p, Int32Array.from(job.tokens), job.B, job.L);
    out = {loglik: r.loglik, correct: r.correct, grad: plain(r.grad)};
} else {
    const state = lg.adam(job.config, p);
    for (const g of job.grads) lg.adamStep(job.config, state, p, f64(g), null);
    out = {params: plain(p), m: plain(state.m), v: plain(state.v)};
}
process.stdout.write(JSON.stringify(out));
"""


def run_js(job: dict, tmp_path: Path) -> dict:
    runner = tmp_path / "runner.js"
    runner.write_text(RUNNER)
    done = subprocess.run([NODE, str(runner), str(TRAINER)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def weights(step: TableStep, buf: torch.Tensor) -> dict[str, list[float]]:
    """The buffer's member 0 by the trainer's parameter names, flat row-major lists of float64."""
    return {JS_NAMES[name]: view[0].reshape(-1).tolist() for name, view in step.views(buf).items()}


@pytest.mark.parametrize("encoding", ["rope", "ape"])
@pytest.mark.parametrize("length", [16, 11])
def test_step_matches_the_package_float64_step(encoding: str, length: int, tmp_path: Path) -> None:
    c = Config(encoding=encoding, dtype="float64", train_length=16, offset=3, batch=40, max_length=64)
    model = Model(c, [5])
    step = TableStep(c, model.encoding)
    buf = step.pack(model)
    step.views(buf)["layers.0.wq"].mul_(3.0)  # sharper attention than at the start of training
    x = torch.from_numpy(np.random.default_rng(1).integers(0, c.vocab, (1, c.batch, length)))
    target = x[..., length - 1 - c.offset:length - c.offset]
    with torch.inference_mode():
        loglik, correct, grad = step(buf, x, target)
    js = run_js({"kind": "step", "config": trainer_config(c), "params": weights(step, buf),
                 "tokens": x.reshape(-1).tolist(), "B": c.batch, "L": length}, tmp_path)
    assert js["correct"] == int(correct[0])
    assert abs(js["loglik"] - float(loglik[0])) <= 1e-12 * abs(float(loglik[0]))
    for name, want in weights(step, grad).items():
        want, got = np.array(want), np.array(js["grad"][name])
        assert got.shape == want.shape, name
        assert np.abs(want).max() > 0, f"{name}: no gradient to compare"
        error = np.abs(got - want).max() / np.abs(want).max()
        assert error <= 1e-9, f"{encoding}, L={length}: {name}'s gradient differs by {error:.2e} of its largest entry"


@pytest.mark.parametrize("scope", ["matrices", "all"])
def test_adam_steps_match_the_package_optimizer(scope: str, tmp_path: Path) -> None:
    c = Config(encoding="ape", dtype="float64", max_length=40, weight_decay=0.1, decay_scope=scope, lr=0.01)
    model = Model(c, [2])
    step = TableStep(c, model.encoding)
    buf = step.pack(model)
    params = weights(step, buf)
    decay = torch.zeros_like(buf)
    for name, view in step.views(decay).items():
        view[0] = c.weight_decay if (name not in TABLES or scope == "all") else 0.0
    opt = Optimizer("adam", buf, [c.lr], decay)
    rng = np.random.default_rng(3)
    grads = [torch.from_numpy(rng.normal(0, scale, buf.shape)) for scale in (1.0, 1e-3, 10.0)]
    js = run_js({"kind": "adam", "config": trainer_config(c), "params": params,
                 "grads": [weights(step, g) for g in grads]}, tmp_path)
    for g in grads:
        opt.step(g.clone())
    for mine, theirs in [(weights(step, buf), js["params"]), (weights(step, opt.m), js["m"]),
                         (weights(step, opt.v), js["v"])]:
        for name, want in mine.items():
            error = np.abs(np.array(theirs[name]) - np.array(want)).max()
            assert error <= 1e-12, f"{scope}: {name} differs by {error:.2e} after three Adam steps"
    moved = np.abs(np.array(js["params"]["wq"]) - np.array(params["wq"])).max()
    assert moved > 1e-3, "the Adam steps did not move the weights: nothing was compared"
