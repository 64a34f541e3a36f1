"""The in-page trainer's speed in Chromium (issue 30): ``python -m benchmarks.browser_trainer``.

Chapter 7's "train here" panel trains with ``lengthgen/plots/trainer.js`` in Web Workers. This opens a small page
holding that panel (served on 127.0.0.1, in headless Debian Chromium through Playwright, as the browser tests do),
and times, in the page, one RoPE model at the book's default task (T=32, K=2) in each of the panel's recipes:
first fit (target <= 1 s) and the small-step recipe sized for the browser (target <= 10 s), each alone in one
worker, over ``--seeds`` seeds (median, and every value); then the panel itself, RoPE and APE side by side, as a
reader presses its button (wall clock, training and evaluation). The worker reports its own training seconds
(Date.now around the steps); the load average before and after is printed, since other jobs on the machine
inflate wall time. A timing, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import plotly

from lengthgen import Config, playground, recipes

TESTS = Path(__file__).resolve().parents[1] / "tests"

# One model alone in one worker made from the panel's trainer source: {config, seed} -> the worker's "done" message.
_ONE_MODEL_JS = """async ([config, seed]) => {
    const source = document.querySelector('script.lg-trainer').textContent;
    const worker = new Worker(URL.createObjectURL(new Blob([source], {type: 'text/javascript'})));
    const started = performance.now();
    const done = await new Promise((resolve, reject) => {
        worker.onmessage = e => { if (e.data.kind === 'done') resolve(e.data); else if (e.data.kind === 'error') reject(e.data.message); };
        worker.onerror = e => reject(e.message);
        worker.postMessage({cmd: 'train', config: config, seed: seed, multiples: [1], samples: 100, every: 1000});
    });
    worker.terminate();
    return Object.assign(done, {wall: (performance.now() - started) / 1000});
}"""


def page(root: Path) -> dict:
    """Write a page holding the panel (a one-point stand-in grid: the panel needs one) into ``root``; its spec."""
    sys.path.insert(0, str(TESTS))
    from test_playground import fake_grid  # noqa: E402  (the tests' stand-in grid)

    from lengthgen.plots.playground_figure import train_here_html

    spec = playground.train_here(fake_grid(Ts=(8,), Ks=(1,), S=2, multiples=(1,)), Config(), recipes.RECIPES, 500)
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", root)
    (root / "index.html").write_text('<!doctype html><html><head><meta charset="utf-8"><script src="plotly.min.js">'
                                     f"</script></head><body>{train_here_html(spec)}</body></html>")
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="models per recipe (seeds 0..N-1), default 3")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds: give at least 1")
    sys.path.insert(0, str(TESTS))
    from browser_util import CHROMIUM, chromium, open_page, serve  # noqa: E402

    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: run scripts/install_chromium.sh")
    timed = {"first fit": recipes.FIRST_FIT.name, "small steps (browser)": playground.BROWSER_SMALL_STEPS.name}
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp, chromium() as context:
        spec = page(Path(tmp))
        with serve(Path(tmp)) as base:
            visit = open_page(context, f"{base}index.html", settle_ms=500)
            out = {}
            for label, name in timed.items():
                recipe = spec["recipes"][name]
                config = {**spec["config"], **recipe["fields"], "encoding": "rope"}
                runs = [visit.page.evaluate(_ONE_MODEL_JS, [config, seed]) for seed in range(args.seeds)]
                seconds = [r["seconds"] for r in runs]
                out[label] = runs
                print(f"RoPE, T=32, K=2, {name} ({recipe['text']}): median {statistics.median(seconds):.2f} s "
                      f"training, seconds {[round(s, 2) for s in seconds]}, steps {[r['steps'] for r in runs]}, "
                      f"1x accuracy {[r['accuracy'][0] for r in runs]}")
            for label, name in timed.items():  # the panel, as a reader uses it
                panel = visit.page.locator("#lengthgen-train-here")
                panel.locator('[data-lg="recipe"]').select_option(name)
                panel.locator('[data-lg="train"]').click()
                visit.page.wait_for_function("() => ['done', 'error'].includes("
                                             "document.querySelector('#lengthgen-train-here').dataset.state)",
                                             timeout=600_000)
                result = json.loads(panel.get_attribute("data-result") or "{}")
                print(f"the panel, {name}: RoPE and APE side by side, trained and evaluated at "
                      f"{spec['multiples']}x on {spec['samples']} sequences each in {result.get('seconds', float('nan')):.2f} s "
                      f"wall (RoPE {result['rope']['seconds']:.2f} s training, APE {result['ape']['seconds']:.2f} s)")
            visit.page.close()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
