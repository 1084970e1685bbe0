"""Take the README's screenshot of the web page: a running lead with a back, one answer.

    python scripts/web-screenshot.py http://127.0.0.1:5555 docs/web.png

Drives the system's Chromium (DUO_CHROMIUM, default `chromium` on PATH) with playwright,
and keeps the PNG small with 64 colours (Pillow, which matplotlib brings along).
"""

from __future__ import annotations

import io
import os
import shutil
import sys

from PIL import Image
from playwright.sync_api import sync_playwright

ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-gpu",
    "--no-first-run",
    "--disable-sync",
]
PROMPT = "Turn these settings into JSON: name = Ada, age = 36, city = London, language = Python."


def main(url: str, out: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=os.environ.get("DUO_CHROMIUM") or shutil.which("chromium"), args=ARGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(url)
        page.click("#show-settings")
        page.fill("#set-temperature", "0")  # greedy: the same answer every time
        page.click("#show-settings")
        page.fill("#prompt", PROMPT)
        page.click("#send")
        page.wait_for_selector("#send:not([disabled])", timeout=120_000)
        page.wait_for_selector(".msg.assistant .stats [data-stat=acceptance]")
        page.wait_for_timeout(1500)  # one more state event for the drafters panel
        shot = page.screenshot()
        browser.close()
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
