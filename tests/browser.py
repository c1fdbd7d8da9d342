"""The headless browser of the HTML tests (``tests/test_html.py``, ``tests/test_html_diff_simulate.py``): Debian's
chromium driven by Playwright, one per test module, and what it did with a page (console, requests, screenshot)."""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One chromium for every page of this module (a fresh profile folder); fails, never skips, without it."""
    assert Path(CHROMIUM).exists(), f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; see .ci/run)"
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, args=ARGS, headless=True,
                                                    viewport={"width": 1200, "height": 900})
        yield ctx
        ctx.close()


class Shown:
    """What the browser did with one page: console messages, page errors, dialogs, requests, the screenshot."""

    def __init__(self, page, path: Path):
        self.page, self.path = page, path
        self.console: list[tuple[str, str]] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        page.on("dialog", lambda d: (self.console.append(("dialog", d.message)), d.dismiss()))
        page.on("request", lambda r: self.requests.append(r.url))
        t0 = time.monotonic()
        page.goto(path.as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
        self.png = page.screenshot(full_page=True, timeout=PAGE_TIMEOUT_MS)
        self.seconds = time.monotonic() - t0

    def texts(self, selector: str) -> list[str]:
        return self.page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")

    def attrs(self, selector: str, name: str) -> list[str]:
        return self.page.eval_on_selector_all(selector, f"els => els.map(e => e.getAttribute('{name}'))")


def assert_clean(shown: Shown) -> None:
    """No console message of any kind, no request but the file itself, a screenshot that is not blank."""
    assert shown.console == [], shown.console
    assert shown.requests == [shown.path.as_uri()], shown.requests
    from PIL import Image

    img = Image.open(io.BytesIO(shown.png)).convert("L")
    px = list(img.tobytes())
    dark = sum(1 for p in px if p < 128) / len(px)
    assert statistics.pstdev(px) > 20 and dark > 0.01, (statistics.pstdev(px), dark)
    assert shown.seconds < 15, shown.seconds  # a few seconds on a quiet machine (2 cores shared here)
