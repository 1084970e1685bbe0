"""Sampling and stop strings through the lead's API, with a drafter verifying in chunks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from duo.sse import json_events
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration

PROMPT = "Here is a list of ten fruits and their colors:\n1."


@pytest.fixture(scope="module")
def lead(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Cluster(tmp_path_factory.mktemp("sampling")) as cluster:
        # A local drafter and the fixed policy: accepted draft chunks in (almost) every round.
        _, url = cluster.lead(
            "-m",
            str(pair[0]),
            "-md",
            str(pair[1]),
            "--policy",
            "fixed",
            "--deterministic",
            "--quiet",
        )
        yield url


def complete(url: str, **body: object) -> dict:  # type: ignore[type-arg]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def stream(url: str, **body: object) -> tuple[str, str | None]:
    text, finish = [], None
    with httpx.stream(
        "POST",
        f"{url}/v1/completions",
        json={"prompt": PROMPT, "stream": True, **body},
        timeout=120,
    ) as r:
        for chunk in json_events(r.iter_lines()):
            choice = chunk["choices"][0]
            text.append(choice["text"])
            finish = choice["finish_reason"] or finish
    return "".join(text), finish


def test_stop_strings_cut_exactly_streaming_or_not(lead: str) -> None:
    full = complete(lead, max_tokens=96, temperature=0)
    text = full["choices"][0]["text"]
    assert full["timings"]["draft_n_accepted"] > 0
    # Stop strings from the middle of the text, several tokens long (they span a chunk).
    for stop in (text[len(text) // 3 : len(text) // 3 + 7], "\n5.", "4. "):
        if stop not in text:
            continue
        want = text[: text.index(stop)]
        got = complete(lead, max_tokens=96, temperature=0, stop=stop)["choices"][0]
        assert (got["text"], got["finish_reason"]) == (want, "stop")
        assert stream(lead, max_tokens=96, temperature=0, stop=[stop, "never-there"]) == (
            want,
            "stop",
        )


def test_seeded_sampling_through_the_api_equals_the_main_model_alone(
    lead: str, pair: tuple[Path, Path]
) -> None:
    body = {"max_tokens": 48, "temperature": 0.9, "top_k": 30, "seed": 1234}
    api = complete(lead, **body)
    assert api["timings"]["draft_n"] > 0
    again, _ = stream(lead, **body)
    alone = subprocess.run(
        [
            sys.executable,
            "-m",
            "duo",
            "generate",
            "-m",
            str(pair[0]),
            "--mode",
            "target",
            "--deterministic",
            "-p",
            PROMPT,
            "-n",
            "48",
            "--temp",
            "0.9",
            "--top-k",
            "30",
            "--seed",
            "1234",
            "--color",
            "never",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert api["choices"][0]["text"] == again == alone.removesuffix("\n")


def test_bad_sampling_settings_are_400(lead: str) -> None:
    for bad in (
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": "many"},
        {"seed": 1.5},
        {"stop": 3},
        {"stop": ["a", "b", "c", "d", "e"]},
    ):
        r = httpx.post(f"{lead}/v1/completions", json={"prompt": "hi", **bad}, timeout=30)
        assert r.status_code == 400, (bad, r.text)
        assert "error" in r.json()
