"""The web page's everyday features in a real browser: regenerate, edit and retry; dark
mode; every sampling setting; import and export; undo after delete; what waits while an
answer streams; the stale drafters panel; colours that stay put; and axe-core's
accessibility rules in both themes. Against a lead whose drafts come from its free
drafters (n-gram lookup and the suffix cache), so no back is needed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from .conftest import Cluster, Proc
from .test_web import MS, Watched, chat, launch, open_page, settings

pytestmark = pytest.mark.integration

AXE = Path(__file__).parents[1] / "web" / "vendor" / "axe-core-4.10.2.min.js"
BUSY = "Stop the answer first (or let it finish)"
# Greedy, the default model copies the sentence: the n-gram lookup drafts it.
REPEAT = (
    "Print this text exactly as it is: The quick brown fox jumps over the lazy dog. "
    "The quick brown fox jumps over the lazy dog."
)


@pytest.fixture(scope="module")
def fcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("web-features")) as c:
        yield c


@pytest.fixture(scope="module")
def lead(fcluster: Cluster) -> tuple[Proc, str]:
    return fcluster.lead("--spec-type", "ngram,suffix", "--policy", "fixed", "--quiet")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        yield launch(pw)


def page_at(browser: Browser, url: str, **context: Any) -> Watched:
    return open_page(browser, url, key=None, **context)


def answers(page: Page) -> list[str]:
    return [a.inner_text() for a in page.locator(".msg.assistant .body").all()]


def test_regenerate_edit_and_retry(lead: tuple[Proc, str], browser: Browser) -> None:
    _, url = lead
    w = page_at(browser, url)
    page = w.page
    settings(page, "0", "12")
    chat(page, "Say hello.")
    first = answers(page)
    page.locator(".msg.assistant .regenerate").click()
    page.wait_for_selector("#send:not([disabled])")
    page.wait_for_function("() => !document.querySelector('.msg.streaming')")
    assert answers(page) == first, "greedy: the regenerated answer is the same, and replaces it"

    page.locator(".msg.user .edit").click()
    assert page.input_value("#prompt") == "Say hello."
    assert page.locator(".msg").count() == 0, "the edited message and its answer leave the chat"

    page.fill("#set-top-p", "7")  # a top-p the lead refuses: the answer fails
    page.click("#send")
    page.locator(".msg.assistant .error").wait_for()
    assert "400" in page.locator(".msg.assistant .error").inner_text()
    assert page.locator(".msg.assistant .regenerate").inner_text() == "Retry"
    page.fill("#set-top-p", "")
    page.locator(".msg.assistant .regenerate").click()  # named Retry on a failed answer
    page.wait_for_function("() => document.querySelector('.msg.assistant .body')?.textContent")
    page.wait_for_selector("#send:not([disabled])")
    assert answers(page) == first and page.locator(".msg.assistant .error").count() == 0
    assert w.errors == [] or all("400" in e for e in w.errors)


def test_every_sampling_setting_reaches_the_request(
    lead: tuple[Proc, str], browser: Browser
) -> None:
    _, url = lead
    page = page_at(browser, url).page
    settings(page, "0.7", "6")
    fields = {
        "#set-seed": "7", "#set-top-p": "0.9", "#set-top-k": "30", "#set-min-p": "0.1",
        "#set-repeat-penalty": "1.1", "#set-presence-penalty": "0.5",
        "#set-frequency-penalty": "0.25", "#set-stop": "END\nSTOP",
    }  # fmt: skip
    for selector, value in fields.items():
        page.fill(selector, value)
    sent: list[dict[str, Any]] = []
    chat(page, "Say hello.", sent)
    body = sent[0]
    assert {k: body[k] for k in ("temperature", "max_tokens", "seed", "top_p", "top_k")} == {
        "temperature": 0.7, "max_tokens": 6, "seed": 7, "top_p": 0.9, "top_k": 30,
    }  # fmt: skip
    assert (body["min_p"], body["repeat_penalty"]) == (0.1, 1.1)
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.25)
    assert body["stop"] == ["END", "STOP"]
    page.reload()  # kept
    page.click("#show-settings")
    assert page.input_value("#set-top-k") == "30" and page.input_value("#set-stop") == "END\nSTOP"


def test_dark_mode_follows_the_system_and_the_toggle(
    lead: tuple[Proc, str], browser: Browser
) -> None:
    _, url = lead

    def background(page: Page) -> str:
        script = "getComputedStyle(document.documentElement).backgroundColor"
        return page.evaluate(script)  # type: ignore[no-any-return]

    dark = page_at(browser, url, color_scheme="dark").page
    light = page_at(browser, url, color_scheme="light").page
    assert background(dark) == "rgb(22, 23, 26)"
    assert background(light) == "rgb(247, 247, 248)"
    assert dark.inner_text("#theme") == "Theme: auto"
    dark.click("#theme")  # auto -> light, whatever the system says
    assert background(dark) == "rgb(247, 247, 248)"
    dark.click("#theme")  # light -> dark
    assert background(dark) == "rgb(22, 23, 26)"
    dark.reload()
    assert dark.inner_text("#theme") == "Theme: dark" and background(dark) == "rgb(22, 23, 26)"


def test_export_then_import_round_trip_and_undo_delete(
    lead: tuple[Proc, str], browser: Browser, tmp_path: Path
) -> None:
    _, url = lead
    page = page_at(browser, url).page
    settings(page, "0", "8")
    chat(page, "Say hello.")
    with page.expect_download() as info:
        page.click("#export-chats")
    exported = tmp_path / "chats.json"
    info.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert data["duo_chats"] == 1 and data["chats"][0]["title"] == "Say hello."

    page.click("#chat-list .remove")
    assert "Say hello." not in page.locator("#chat-list .chat-title").all_inner_texts()
    page.locator("#toast button", has_text="Undo").click()
    assert page.locator("#chat-list .chat-title").all_inner_texts()[0] == "Say hello."
    assert answers(page), "undo brings the chat back, answer and all"

    fresh = page_at(browser, url).page  # a browser that has never seen it
    fresh.set_input_files("#import-file", str(exported))
    fresh.locator("#toast", has_text="Imported 1 chat").wait_for()
    assert fresh.locator("#chat-list .chat-title").all_inner_texts()[0] == "Say hello."
    assert answers(fresh) == answers(page)
    bad = tmp_path / "bad.json"
    bad.write_text('{"chats": []}')
    fresh.set_input_files("#import-file", str(bad))
    fresh.locator("#toast", has_text="Could not import bad.json: not an export").wait_for()


def test_what_would_change_the_chat_waits_while_an_answer_streams(
    lead: tuple[Proc, str], browser: Browser
) -> None:
    _, url = lead
    page = page_at(browser, url).page
    settings(page, "0", "600")
    page.fill("#prompt", "Count from 1 to 500, one number per line.")
    page.click("#send")
    page.wait_for_selector(".msg.streaming")
    assert page.is_visible("#busy-note")
    for selector in ("#new-chat", "#import-chats", "#chat-list .remove", "#chat-list .chat-title"):
        button = page.locator(selector).first
        assert button.is_disabled(), selector
        assert button.get_attribute("title") == BUSY
    page.click("#stop")
    page.wait_for_selector("#new-chat:not([disabled])")
    assert not page.is_visible("#busy-note")
    assert page.locator("#new-chat").get_attribute("title") is None


def test_colours_are_the_sources_own_and_the_last_response_survives_a_reload(
    lead: tuple[Proc, str], browser: Browser
) -> None:
    _, url = lead
    page = page_at(browser, url).page
    settings(page, "0", "60")
    chat(page, REPEAT)
    spans = page.locator(".msg.assistant .body .tok")
    assert spans.count() > 0, "no drafted token: the check would be vacuous"
    seen = {(s.get_attribute("data-source"), s.get_attribute("class")) for s in spans.all()}
    for source, classes in seen:
        expected = page.evaluate("s => window.duoSources.classes(s)", source)
        assert classes == expected
        assert f"kind-{source}" in (classes or ""), "the underline says the kind"
    page.wait_for_function(
        "() => document.querySelector('#last-response').textContent.includes('tokens at')"
    )
    last = page.inner_text("#last-response")
    page.reload()
    page.wait_for_selector(".msg.assistant .body .tok")
    after = {(s.get_attribute("data-source"), s.get_attribute("class")) for s in spans.all()}
    assert after == seen
    assert page.inner_text("#last-response").startswith(last)


def test_the_drafters_panel_says_so_when_the_lead_goes(fcluster: Cluster, browser: Browser) -> None:
    proc, url = fcluster.lead("--spec-type", "ngram", "--quiet")
    page = page_at(browser, url).page
    page.wait_for_function(
        "() => document.querySelector('#lead-state').textContent.includes('idle')"
    )
    proc.stop()
    page.wait_for_function(
        "() => document.querySelector('#drafters').classList.contains('stale')", timeout=30 * MS
    )
    assert "unreachable" in page.inner_text("#lead-state")
    assert page.inner_text("#status") == "lead unreachable"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_violations(lead: tuple[Proc, str], browser: Browser, scheme: str) -> None:
    _, url = lead
    # the page's CSP allows its own scripts only: the test's axe comes in past it
    page = page_at(browser, url, color_scheme=scheme, bypass_csp=True).page
    settings(page, "0", "40")
    chat(page, REPEAT)
    page.click("#chat-list .remove")  # the toast, too
    page.locator("#toast button").wait_for()
    page.click("#toast button")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    violations = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in result["violations"]
    ]
    assert violations == []
    assert page.locator(".msg.assistant .body .tok").count() > 0, "highlights were checked"
    # and axe does see a fault where there is one
    page.evaluate("() => document.body.appendChild(document.createElement('img'))")
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    assert "image-alt" in [v["id"] for v in result["violations"]]


def test_code_blocks_get_syntax_colours_under_the_pages_policy(
    lead: tuple[Proc, str], browser: Browser
) -> None:
    """prism.js loads under the page's Content-Security-Policy, highlights nothing by
    itself, and colours a code block's tokens with the text still text."""
    _, url = lead
    w = page_at(browser, url)
    page = w.page
    page.wait_for_function("() => window.duoMarkdown && window.Prism")
    found = page.evaluate(
        """() => {
            const text = "```python\\ndef f(x):\\n    return 'hi'  # <b>x</b>\\n```";
            const leaf = (p, s, e) => p.appendChild(document.createTextNode(text.slice(s, e)));
            const node = window.duoMarkdown.render(text, leaf, () => document.createElement("b"));
            document.body.appendChild(node);
            const code = document.body.lastChild.querySelector("code");
            return {
                manual: window.Prism.manual,
                keyword: code.querySelector(".token.keyword").textContent,
                colour: getComputedStyle(code.querySelector(".token.keyword")).color,
                text: code.textContent,
                tags: code.querySelectorAll("b").length,
            };
        }"""
    )
    assert found["manual"] is True
    assert found["keyword"] == "def" and found["colour"] == "rgb(139, 26, 137)"
    assert found["text"] == "def f(x):\n    return 'hi'  # <b>x</b>" and found["tags"] == 0
    assert w.errors == []


def test_token_probabilities_on_hover(lead: tuple[Proc, str], browser: Browser) -> None:
    _, url = lead
    page = page_at(browser, url).page
    settings(page, "0", "12")
    page.check("#set-probs")
    sent: list[dict[str, Any]] = []
    chat(page, "Say hello.", sent)
    assert (sent[0]["logprobs"], sent[0]["top_logprobs"]) == (True, 3)
    pieces = page.locator(".msg.assistant .body .probs")
    assert pieces.count() > 0
    title = pieces.first.get_attribute("title") or ""
    first = title.splitlines()[-1]  # [source name,] then one line per token
    assert first.startswith('"') and "%" in first, title
    # every piece of the answer has its tokens' figures, and the text is the answer's
    text = page.locator(".msg.assistant .body").inner_text()
    assert "".join(p.inner_text() for p in pieces.all()).strip() == text.strip()
    page.reload()  # kept with the chat
    assert page.locator(".msg.assistant .body .probs").count() == pieces.count()
