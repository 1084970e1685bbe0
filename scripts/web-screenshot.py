"""Take the README's screenshot of the web page: a running lead with a back, one answer.

    python scripts/web-screenshot.py http://127.0.0.1:5555 docs/web.png

Drives the system's Chromium (DUO_CHROMIUM, default /usr/bin/chromium) with playwright.
"""

from __future__ import annotations

import os
import sys

from playwright.sync_api import sync_playwright

ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-gpu",
    "--no-first-run",
    "--disable-sync",
]
PROMPT = "Write a Python function that reverses a list, with a short explanation."


def main(url: str, out: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=os.environ.get("DUO_CHROMIUM", "/usr/bin/chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(url)
        page.fill("#prompt", PROMPT)
        page.click("#send")
        page.wait_for_selector("#send:not([disabled])", timeout=120_000)
        page.wait_for_selector(".msg.assistant .stats [data-stat=acceptance]")
        page.wait_for_timeout(1500)  # one more state event for the drafters panel
        page.screenshot(path=out)
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
