#!/usr/bin/env python
"""The README's picture of the book: docs/book.png, a screenshot of the introduction's headline figure
in the built book (the sidebar, the header with its launch buttons, the figure and its caption).

    make book                       # or make book-quick (then the figure shows the quick run)
    scripts/install_chromium.sh
    .venv/bin/python scripts/readme_screenshot.py [--html _build/html] [--out docs/book.png]

Headless Chromium (tests/browser_util.py) at a 1280 x 820 CSS viewport drawn at 0.625 device pixels per
CSS pixel (an 800 x 512 PNG). With Pillow installed the PNG is also reduced to a 128-colour palette.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser_util import CHROMIUM, CHROMIUM_FLAGS, serve  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

PAGE = "book/00_intro.html"
VIEWPORT = {"width": 1280, "height": 820}
SCALE = 0.625
MAX_BYTES = 150_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "book.png")
    a = p.parse_args(argv)
    with serve(a.html) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        page = browser.new_context(viewport=VIEWPORT, device_scale_factor=SCALE).new_page()
        page.goto(f"{base}{PAGE}", wait_until="networkidle")
        page.evaluate("() => window.MathJax?.startup?.promise")
        figure = page.locator(".plotly-graph-div").first
        figure.wait_for(state="visible")
        # the figure and its caption in the middle of the view, under the header bar
        page.evaluate("""gd => {
            const box = (gd.closest('figure') || gd).getBoundingClientRect();
            const free = window.innerHeight - box.height;
            window.scrollTo(0, box.top + window.scrollY - Math.max(60, free / 2));
        }""", figure.element_handle())
        page.wait_for_timeout(500)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(a.out))
        browser.close()
    try:
        from PIL import Image

        Image.open(a.out).convert("RGB").quantize(colors=128).save(a.out, optimize=True)
    except ImportError:
        pass
    size = a.out.stat().st_size
    print(f"{a.out}: {size / 1000:.0f} KB")
    return 0 if size <= MAX_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
