"""The lead's web page in a real browser (Chromium, driven by playwright), against a real
lead with a real back: streaming, highlighted draft tokens, figures that add up with the
response's timings, stop, the drafters panel, model text that stays text, and keys.

`make browser` installs Chromium (Debian's package); DUO_CHROMIUM names another binary.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright

from duo import sse

from .conftest import Cluster, Proc, wait_until

pytestmark = pytest.mark.integration

KEY = "web-test-key"
BACK = "web-back"
CHROMIUM = os.environ.get("DUO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-gpu",
    "--no-first-run",
    "--disable-sync",
]
PROMPT = "Count from 1 to 20, one number per line."
# The default model copies this HTML back (greedy): <script>alert(1);</script><img ...>
HTML_PROMPT = (
    "Print this HTML code exactly as it is: "
    '<p><script>alert(1)</script><img src=x onerror="alert(2)"></p>'
)
MS = 1000


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("web")) as c:
        yield c


@pytest.fixture(scope="module")
def site(wcluster: Cluster) -> tuple[Proc, str]:
    """A lead with a key whose only draft source is its backs (--spec-type model), verifying
    every ready draft (--policy fixed), so the back's tokens show; and one back."""
    proc, url = wcluster.lead(
        "--policy", "fixed", "--spec-type", "model", "--quiet", "--api-key", KEY
    )
    wcluster.back(url, "--name", BACK, "--api-key", KEY)
    return proc, url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        yield launch(pw)


def launch(pw: Playwright) -> Browser:
    return pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60 * MS)


class Watched:
    """A page, with its console errors and uncaught exceptions kept."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("dialog", lambda d: (self.errors.append(f"dialog: {d.message}"), d.dismiss()))

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)


def open_page(browser: Browser, url: str, key: str | None = KEY, **context: Any) -> Watched:
    ctx = browser.new_context(**context)
    ctx.set_default_timeout(60 * MS)
    page = ctx.new_page()
    if key is not None:  # as if the user had entered it before
        page.add_init_script(f"localStorage.setItem('duo.key', {json.dumps(json.dumps(key))})")
    watched = Watched(page)
    page.goto(url)
    return watched


def health(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/health", timeout=5).json()  # type: ignore[no-any-return]


def chat(page: Page, text: str, sent: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Send text from the page and wait for the answer; the timings of its last chunk.
    The request's body is appended to `sent`."""
    with page.expect_response("**/v1/chat/completions", timeout=120 * MS) as info:
        page.fill("#prompt", text)
        page.click("#send")
    page.wait_for_selector("#send:not([disabled])", timeout=120 * MS)
    if sent is not None:
        sent.append(info.value.request.post_data_json)
    body = info.value.text()
    chunks = [e.json() for e in sse.iter_events(body.splitlines()) if '"timings"' in e.data]
    assert chunks, body[-2000:]
    return chunks[-1]["timings"]  # type: ignore[no-any-return]


def settings(page: Page, temperature: str, max_tokens: str) -> None:
    if not page.locator("#settings").is_visible():
        page.click("#show-settings")
    page.fill("#set-temperature", temperature)
    page.fill("#set-max-tokens", max_tokens)


def stat(page: Page, name: str) -> float:
    value = page.locator(f".msg.assistant >> nth=-1 >> [data-stat={name}]").get_attribute(
        "data-value"
    )
    assert value is not None
    return float(value)


# -- tests ----------------------------------------------------------------------------------


def test_page_headers(site: tuple[Proc, str]) -> None:
    _, url = site
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp
    asset = httpx.get(f"{url}/ui/app.js", timeout=10)
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    for bad in ("/ui/nothing.js", "/ui/..%2Fweb.py", "/ui/.hidden.js"):
        r = httpx.get(url + bad, timeout=10)
        assert r.status_code == 404, bad
        assert r.json()["error"]["type"] == "not_found_error"
    events = httpx.get(f"{url}/v1/duo/events", timeout=10)
    assert events.status_code == 401  # the feed takes the API key
    assert events.json()["error"]["code"] == "invalid_api_key"


def test_chat_streams_with_the_backs_tokens_and_figures(
    site: tuple[Proc, str], browser: Browser
) -> None:
    _, url = site
    w = open_page(browser, url)
    page = w.page
    page.wait_for_selector(f'#backs tr[data-back="{BACK}"]')
    settings(page, "0", "80")
    page.fill("#set-seed", "42")
    page.fill("#set-system", "You are terse.")

    sent: list[dict[str, Any]] = []
    t = chat(page, PROMPT, sent)
    assert sent[0]["stream"] is True
    assert (sent[0]["temperature"], sent[0]["max_tokens"], sent[0]["seed"]) == (0, 80, 42)
    assert sent[0]["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": PROMPT},
    ]

    answer = page.locator(".msg.assistant").last
    assert answer.locator(".body").inner_text().strip()
    highlighted = answer.locator(f'.body .tok[data-source="back:{BACK}"]')
    assert highlighted.count() > 0, "no token of the back's is highlighted"
    assert highlighted.first.get_attribute("title") == f"back {BACK}"
    assert page.locator(f'#legend [data-source="back:{BACK}"]').count() == 1
    # The figures are the response's timings...
    assert stat(page, "tps") == pytest.approx(t["predicted_per_second"])
    assert stat(page, "acceptance") == pytest.approx(t["acceptance_rate"])
    assert stat(page, "mal") == pytest.approx(t["mean_acceptance_length"])
    assert stat(page, "tokens") == t["predicted_n"]
    assert 0 < stat(page, "ttft") < 60_000
    # ...and the shares, counted from the stream's `duo` fields, add up with them.
    shares = {
        s.get_attribute("data-source"): int(s.get_attribute("data-tokens") or -1)
        for s in answer.locator(".shares .share").all()
    }
    assert sum(shares.values()) == t["predicted_n"]
    accepted = t["draft_sources"][f"back:{BACK}"]["draft_n_accepted"]
    assert accepted > 0
    # an accepted end-of-generation token is counted as accepted but never emitted
    assert accepted - 1 <= shares[f"back:{BACK}"] <= accepted
    assert shares["main"] == t["predicted_n"] - shares[f"back:{BACK}"]
    assert answer.locator("canvas.chart").count() == 1
    # The drafters panel shows the back and the response.
    row = page.locator(f'#backs tr[data-back="{BACK}"]')
    assert row.locator(".host").inner_text() == "127.0.0.1"
    assert "q3_k_m" in row.locator(".model").inner_text()
    assert row.locator(".state").inner_text() in ("drafting", "resting", "looking")
    page.wait_for_function(
        "() => document.querySelector('#last-response').textContent.includes('tokens at')"
    )
    # The conversation is kept: a reload shows it again.
    page.reload()
    page.wait_for_selector(f'.msg.assistant .tok[data-source="back:{BACK}"]')
    assert w.errors == []


def test_stop_cancels_and_the_next_request_starts_promptly(
    site: tuple[Proc, str], browser: Browser
) -> None:
    _, url = site
    w = open_page(browser, url)
    page = w.page
    settings(page, "0", "1500")
    page.fill("#prompt", "Count from 1 to 1000, one number per line.")
    page.click("#send")
    page.wait_for_function(
        "() => (document.querySelector('.msg.assistant:last-child .body')?.textContent || '')"
        ".length > 20"
    )
    assert health(url)["busy"]
    page.click("#stop")
    wait_until(lambda: not health(url)["busy"], 10, "the lead idle after stop")
    assert page.locator("#stop").is_disabled()
    stopped = page.locator(".msg.assistant").last
    assert "stopped" in stopped.locator(".stats").inner_text()
    text = stopped.locator(".body").inner_text()
    assert len(text) < 1500  # far from the whole answer

    settings(page, "0", "8")
    started = time.monotonic()
    t = chat(page, "Say hello.")
    assert time.monotonic() - started < 20
    assert t["predicted_n"] <= 8
    assert w.errors == []


def test_drafters_panel_shows_a_back_join_and_leave(
    site: tuple[Proc, str], wcluster: Cluster, browser: Browser
) -> None:
    _, url = site
    w = open_page(browser, url)
    page = w.page
    page.wait_for_selector(f'#backs tr[data-back="{BACK}"]')
    late = wcluster.back(url, "--name", "late-back", "--api-key", KEY)
    row = page.locator('#backs tr[data-back="late-back"]')
    row.wait_for(timeout=20 * MS)
    assert row.locator(".host").inner_text() == "127.0.0.1"
    page.locator('#feed-log li.join[data-back="late-back"]').wait_for(timeout=10 * MS)
    late.kill(signal.SIGKILL)
    page.locator('#feed-log li.leave[data-back="late-back"]').wait_for(timeout=20 * MS)
    row.wait_for(state="detached", timeout=10 * MS)
    assert page.locator(f'#backs tr[data-back="{BACK}"]').count() == 1
    assert w.errors == []


def test_model_output_stays_text(site: tuple[Proc, str], browser: Browser) -> None:
    _, url = site
    w = open_page(browser, url, permissions=["clipboard-read", "clipboard-write"])
    page = w.page
    settings(page, "0", "40")
    chat(page, HTML_PROMPT)
    body = page.locator(".msg.assistant").last.locator(".body")
    text = body.inner_text()
    assert "<script>" in text and "<img" in text and "onerror" in text, text
    assert body.locator("script, img, p p").count() == 0
    # The same through the stored conversation and every Markdown construct.
    payload = (
        "# <img src=x onerror=alert(3)>\n\n**<script>alert(4)</script>** `<svg onload=alert(5)>`"
        "\n\n- <iframe src=javascript:alert(6)>\n\n```html\n<script>alert(7)</script>\n```\n"
    )
    stored = [
        {
            "id": "x",
            "title": "<b>title</b>",
            "messages": [
                {"role": "user", "content": "<img src=x onerror=alert(8)>"},
                {
                    "role": "assistant",
                    "content": payload,
                    "segments": [{"text": payload, "source": None}],
                },
            ],
        }
    ]
    page.evaluate(
        "(s) => { localStorage.setItem('duo.chats', s);"
        " localStorage.setItem('duo.current', JSON.stringify('x')); }",
        json.dumps(stored),
    )
    page.reload()
    page.wait_for_selector(".msg.assistant pre code")
    messages = page.locator("#messages")
    assert messages.locator("script, img, svg, iframe").count() == 0
    # The Markdown became structure, its text stayed text.
    for tag, count in (("h3", 1), ("strong", 1), ("code", 2), ("ul li", 1), ("pre", 1)):
        assert messages.locator(f".msg.assistant {tag}").count() == count, tag
    page.locator(".msg.assistant .code .copy").click()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == "<script>alert(7)</script>"
    assert page.locator("#chat-list b").count() == 0
    for literal in ("<img src=x onerror=alert(3)>", "<script>alert(4)</script>", "<svg onload"):
        assert literal in messages.inner_text()
    assert w.errors == []
    assert page.title() == "duo"


def test_a_wrong_key_gets_a_clear_message(site: tuple[Proc, str], browser: Browser) -> None:
    _, url = site
    w = open_page(browser, url, key=None)
    page = w.page
    box = page.locator("#key-box")
    box.wait_for()
    assert "needs an API key" in page.locator("#key-message").inner_text()

    page.fill("#key-input", "not-the-key")
    page.click("#key-form button")
    page.wait_for_function(
        "() => document.querySelector('#key-message').textContent.includes('refused')"
    )
    assert "invalid or missing API key" in page.locator("#key-message").inner_text()
    # Sending anyway says why nothing came back.
    page.fill("#prompt", "Hello")
    page.click("#send")
    error = page.locator(".msg.assistant .error").last
    error.wait_for()
    assert "refused the API key" in error.inner_text()

    page.fill("#key-input", KEY)
    page.click("#key-form button")
    box.wait_for(state="hidden")
    assert page.locator("#model").inner_text()  # the lead answered with the right key
    # The browser reports each 401 as a failed resource load; nothing else went wrong.
    assert all("401" in e for e in w.errors), w.errors


def test_phone_width(site: tuple[Proc, str], browser: Browser) -> None:
    _, url = site
    w = open_page(browser, url, viewport={"width": 390, "height": 844}, is_mobile=True)
    page = w.page
    assert page.locator("#composer").is_visible()
    assert not page.locator("#drafters").is_visible()
    page.click("#show-drafters")
    page.wait_for_selector(f'#backs tr[data-back="{BACK}"]')
    assert page.locator("#drafters").is_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    assert w.errors == []


def test_an_open_events_feed_does_not_hold_up_ctrl_c(cluster: Cluster) -> None:
    """The feed's streams never end by themselves; the lead ends them when told to stop."""
    proc, url = cluster.lead("--quiet")
    with httpx.stream("GET", f"{url}/v1/duo/events", timeout=30) as events:
        lines = events.iter_lines()
        assert next(lines) == "event: state"
        proc.popen.send_signal(signal.SIGINT)
        assert proc.popen.wait(timeout=20) == 130  # 128 + SIGINT, as after any Ctrl-C
        assert "Traceback" not in proc.output()
        assert all(not line.startswith("data: {") or "model" in line for line in lines)
