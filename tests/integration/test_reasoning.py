"""A reasoning model's thoughts in `reasoning_content`, through the official client: a lead
whose chat template opens the thoughts (as Qwen3's and DeepSeek-R1's do), drafted by a
back, its reply split exactly as the text the main model generated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from duo.lead.openai.reasoning import split

from .conftest import Cluster

pytestmark = pytest.mark.integration

THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
ASK = {
    "model": "duo",
    "messages": [{"role": "user", "content": "Is 17 a prime number?"}],
    "max_tokens": 40,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def lead(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("reasoning")
    template = tmp / "thinking.jinja"
    template.write_text(THINKING)
    with Cluster(tmp) as cluster:
        _, url = cluster.lead(
            "-m", str(pair[0]), "--chat-template-file", str(template), "--spec-type", "model",
            "--deterministic", "--quiet",
        )  # fmt: skip
        cluster.back(url, "-m", str(pair[1]))
        yield url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", timeout=120, max_retries=0)


def generated(url: str) -> str:
    """The text as the main model generated it: no parsing."""
    reply = client(url).chat.completions.create(**ASK, extra_body={"reasoning_format": "none"})
    message = reply.choices[0].message
    assert getattr(message, "reasoning_content", None) is None
    assert message.content
    return message.content


def test_thoughts_are_split_from_the_answer(lead: str) -> None:
    text = generated(lead)
    thoughts, answer = split(text, opened=True)
    assert thoughts, "the template opened the thoughts: there must be some"
    message: Any = client(lead).chat.completions.create(**ASK).choices[0].message
    assert message.reasoning_content == thoughts
    assert message.content == answer


def test_streamed_thoughts_join_to_the_same(lead: str) -> None:
    thoughts, answer = split(generated(lead), opened=True)
    parts: dict[str, str] = {"reasoning_content": "", "content": ""}
    for chunk in client(lead).chat.completions.create(**ASK, stream=True):
        if chunk.choices:
            delta: Any = chunk.choices[0].delta
            parts["content"] += delta.content or ""
            parts["reasoning_content"] += getattr(delta, "reasoning_content", None) or ""
    assert parts == {"reasoning_content": thoughts, "content": answer}


def test_legacy_keeps_the_whole_text_as_content(lead: str) -> None:
    text = generated(lead)
    body = {**ASK, "reasoning_format": "deepseek-legacy"}
    message = httpx.post(f"{lead}/v1/chat/completions", json=body, timeout=120).json()
    assert message["choices"][0]["message"]["content"] == text
    assert message["choices"][0]["message"]["reasoning_content"] == split(text, opened=True)[0]


def test_earlier_thoughts_are_taken_and_a_bad_format_refused(lead: str) -> None:
    earlier = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
        {"role": "user", "content": "Is 17 a prime number?"},
    ]
    r = httpx.post(
        f"{lead}/v1/chat/completions", json={**ASK, "messages": earlier, "max_tokens": 4}
    )
    assert r.status_code == 200, r.text
    r = httpx.post(f"{lead}/v1/chat/completions", json={**ASK, "reasoning_format": "r1"})
    assert r.status_code == 400
    assert "reasoning_format" in r.text
