"""Parallel slots (duo lead --parallel N) as real processes: requests decoded together
give what the same requests give one at a time, and one request's end leaves the others
alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from duo import sse

from .conftest import Cluster, health, wait_until

pytestmark = pytest.mark.integration

# (prompt, sampling): greedy and seeded requests side by side.
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("Write a poem about autumn.", {"temperature": 0}),
    ("List the planets of the solar system.", {"temperature": 0.9, "seed": 7}),
    ("Count from one to twenty in words.", {"temperature": 0}),
    ("Describe a cat in three sentences.", {"temperature": 0.9, "seed": 123}),
    ("Write a haiku about the sea.", {"temperature": 0.7, "seed": 5}),
    ("Explain what a CPU does.", {"temperature": 0}),
]
N = 32


def ask(url: str, prompt: str, sampling: dict[str, Any]) -> tuple[str, str]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
    r = client.chat.completions.create(
        model="duo", messages=[{"role": "user", "content": prompt}], max_tokens=N, **sampling
    )
    return r.choices[0].message.content or "", r.choices[0].finish_reason


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return results


def watch_busy(url: str, stop: threading.Event, seen: list[dict[str, Any]]) -> None:
    while not stop.is_set():
        seen.append(health(url))
        time.sleep(0.05)


@pytest.mark.parametrize("stretch", ["inf", "2.5"])
def test_requests_together_equal_one_at_a_time(cluster: Cluster, stretch: str) -> None:
    """Six requests on four slots, with a back and the free drafters, against the main
    model alone serving them one by one: bit for bit the same under --deterministic,
    whether a new prompt is read whole beside the others' rounds or in pieces."""
    _, alone = cluster.lead("--spec-type", "none", "--deterministic", "--quiet")
    expected = [ask(alone, prompt, sampling) for prompt, sampling in REQUESTS]

    args = ["--parallel", "4", "--prompt-stretch", stretch, "--deterministic", "--quiet"]
    _, url = cluster.lead(*args)
    cluster.back(url)
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_busy, args=(url, stop, seen))
    watcher.start()
    try:
        got = together([lambda p=p, s=s: ask(url, p, s) for p, s in REQUESTS])
    finally:
        stop.set()
        watcher.join()
    assert got == expected
    assert max(h["slots_busy"] for h in seen) == 4  # decoded together...
    assert max(h["queued"] for h in seen) >= 1  # ...and the rest waited for a slot
    assert {h["slots"] for h in seen} == {4}
    wait_until(lambda: health(url)["slots_busy"] == 0, 30, "slots free again")


def test_a_cancelled_request_leaves_the_others_alone(cluster: Cluster) -> None:
    _, url = cluster.lead("--parallel", "3", "--quiet")
    prompts = [prompt for prompt, _ in REQUESTS[:2]]
    greedy = {"temperature": 0}
    expected = [ask(url, p, greedy) for p in prompts]

    def abandon() -> int:
        """Stream a long request and walk away after a few chunks."""
        body = {
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 2000,
            "stream": True,
        }
        chunks = 0
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            for _ in sse.iter_events(r.iter_lines()):
                chunks += 1
                if chunks == 5:
                    break
        return chunks

    results = together([abandon, *[lambda p=p: ask(url, p, greedy) for p in prompts]])
    assert results[0] == 5
    assert results[1:] == expected
    wait_until(lambda: health(url)["slots_busy"] == 0, 30, "the abandoned slot freed")
    assert ask(url, prompts[0], greedy) == expected[0]


@pytest.mark.parametrize("drafter", ["back", "-md"])
def test_a_model_drafter_drafts_for_every_running_request(
    cluster: Cluster, pair: tuple[Path, Path], drafter: str
) -> None:
    """A lead with three slots and a model drafter as its only draft source (a back, or
    the draft model in process): the drafter drafts for each of three requests decoded
    together (the draft tokens it sent for each, `draft_n_received`), and the lead
    accepts most of those it verifies (--policy fixed: verified whenever there are any,
    whatever their worth in a batch of three). How many it verifies is a race the lead
    never waits on: a drafter no faster than the main model, or sharing its core, may never
    be ahead of a request's commits when its rounds are planned. The main model and the
    drafter each have a core of their own; greedy counting runs every request to its 96
    tokens."""
    args = ["--parallel", "3", "--spec-type", "model", "--policy", "fixed", "--quiet"]
    args += ["-t", "1", "--pin", "0:1"]
    if drafter == "-md":
        args += ["-m", str(pair[0]), "-md", str(pair[1])]
    _, url = cluster.lead(*args)
    if drafter == "back":
        cluster.back(url, "--parallel", "3", "--pin", "1")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
    prompts = ["1, 2, 3, 4, 5, 6,", "10, 20, 30, 40,", "2, 4, 6, 8, 10,"]

    def timings(prompt: str) -> dict[str, Any]:
        r = client.completions.create(model="duo", prompt=prompt, max_tokens=96, temperature=0)
        assert r.choices[0].finish_reason == "length", r.choices[0].text
        extra = r.model_extra or {}
        return dict(extra["timings"])

    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_busy, args=(url, stop, seen))
    watcher.start()
    try:
        results = together([lambda p=p: timings(p) for p in prompts])
    finally:
        stop.set()
        watcher.join()
    assert max(h["slots_busy"] for h in seen) == 3  # decoded together
    verified = accepted = 0
    for t in results:
        [(name, by_source)] = t["draft_sources"].items()
        assert name.startswith("back:") if drafter == "back" else name == "model"
        assert by_source["draft_n_received"] > 0, t
        verified += by_source["draft_n"]
        accepted += by_source["draft_n_accepted"]
    # Drafts for the right request continue a count: most of those verified are accepted
    # (drafts for another request's sequence would be rejected).
    assert accepted >= verified / 2, results


@pytest.mark.parametrize("layout", ["-kvu", "-no-kvu"])
def test_a_slot_takes_a_prefix_another_slot_holds(cluster: Cluster, layout: str) -> None:
    """A request arriving while the slot that read its prefix is busy goes to another slot,
    and takes that prefix's KV from the busy one (cache_n) instead of reading it again, as
    the system prompt every session of an agent sends is read once, not once per slot:
    shared cells in one KV buffer, a copy with a buffer per slot. Its answer is the one a
    lead that reads the whole prompt gives."""
    system = "You are a careful assistant. " * 20
    _, fresh = cluster.lead("--spec-type", "none", "--quiet")
    colour = {"prompt": system + "Name a colour.", "max_tokens": 4, "temperature": 0}
    expected = httpx.post(f"{fresh}/v1/completions", json=colour, timeout=300).json()
    proc, url = cluster.lead("--parallel", "2", "--spec-type", "none", "--quiet", layout)
    shared = "one KV buffer" if layout == "-kvu" else "a KV buffer each"
    assert f"2 slots (-np) of 4,096 tokens (-c), {shared} ({layout})" in proc.output()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
    first = client.completions.create(
        model="duo", prompt=system + "Name a fruit.", max_tokens=4, temperature=0
    )
    known = (first.model_extra or {})["timings"]["prompt_n"]  # all of it: a fresh lead
    # Counting goes on to max_tokens (greedy): the slot stays busy for seconds.
    count = system + "1, 2, 3, 4, 5, 6,"
    body = {"prompt": count, "max_tokens": 400, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as busy:
        events = sse.iter_events(busy.iter_lines())  # held: dropped, it would end the stream
        next(events)
        wait_until(lambda: health(url)["slots_busy"] == 1, 30, "the prefix's slot busy")
        r = client.completions.create(
            model="duo", prompt=system + "Name a colour.", max_tokens=4, temperature=0
        )
    t = (r.model_extra or {})["timings"]
    assert t["cache_n"] >= known - 8, t  # the shared prefix, less the differing ending
    assert r.usage is not None
    assert t["prompt_n"] + t["cache_n"] == r.usage.prompt_tokens
    assert expected["timings"]["cache_n"] == 0
    assert r.choices[0].text == expected["choices"][0]["text"]


def test_a_prompt_unlike_the_others_leaves_the_slot_that_holds_their_prefix(
    cluster: Cluster,
) -> None:
    """A prompt that shares nothing with the cached ones takes the slot used longest ago
    (an empty one first), not the one holding the system prompt the chats share: the next
    chat reads only what follows it, as llama-server's LRU slot choice gives."""
    _, url = cluster.lead("--parallel", "2", "--spec-type", "none", "--quiet")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
    system = "You are a careful assistant. " * 20

    def timings(prompt: str) -> dict[str, Any]:
        r = client.completions.create(model="duo", prompt=prompt, max_tokens=4, temperature=0)
        return dict((r.model_extra or {})["timings"])

    known = timings(system + "Name a fruit.")["prompt_n"]  # all of it: a fresh lead
    unlike = timings("Zebras graze on the open plains of Africa.")
    assert unlike["cache_n"] == 0, unlike
    t = timings(system + "Name a colour.")
    assert t["cache_n"] >= known - 8, t  # the shared prefix, less the differing ending


def test_a_short_request_is_answered_while_a_long_prompt_is_read(cluster: Cluster) -> None:
    """A short request that comes while another slot reads a prompt of thousands of tokens
    (a completion's, then a /prefill's) is read and answered in the meantime, not after
    it, and its answer is the one it gets alone."""
    _, url = cluster.lead("--parallel", "2", "--spec-type", "none", "--quiet")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)

    def short() -> str:
        r = client.completions.create(model="duo", prompt="1, 2, 3,", max_tokens=8, temperature=0)
        return r.choices[0].text

    alone = short()
    ended: dict[str, float] = {}
    for n, route in enumerate(["/v1/completions", "/prefill"]):
        ended.clear()
        text = " ".join(f"item {i + 1000 * n}," for i in range(1000))  # none of it cached
        tokens = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=60).json()
        body: dict[str, Any] = {"prompt": tokens["tokens"][:2500]}
        body |= {"max_tokens": 1} if route == "/v1/completions" else {"session": "long"}

        def long(route: str = route, body: dict[str, Any] = body) -> None:
            httpx.post(f"{url}{route}", json=body, timeout=300).raise_for_status()
            ended["long"] = time.monotonic()

        reader = threading.Thread(target=long)
        reader.start()
        wait_until(lambda: health(url)["slots_busy"] == 1, 30, "the long prompt being read")
        answer = short()
        ended["short"] = time.monotonic()
        reader.join(300)
        assert answer == alone, route
        assert ended["short"] < ended["long"], route


def test_an_idle_slot_parked_in_host_memory_comes_back_for_the_next_turn(
    cluster: Cluster,
) -> None:
    """When a request takes a slot, the idle slots' KV cells leave the shared buffer for
    host memory (-cram, as llama-server's --cache-idle-slots): a conversation's next turn
    then takes its slot back with those cells, not reading its history again, and gets the
    answer a lead that parks nothing (-cram 0) gives."""
    history = "You are a careful assistant. " * 10 + "Name a fruit."
    turns = [
        {"prompt": history, "max_tokens": 8, "temperature": 0},
        {"prompt": "1, 2, 3, 4,", "max_tokens": 8, "temperature": 0},  # parks the first
    ]
    answers = []
    for cram in ("8192", "0"):
        proc, url = cluster.lead("--parallel", "2", "--spec-type", "none", "--quiet", "-cram", cram)
        parked = "idle slots parked in 8,192 MiB of host memory (-cram)"
        assert (parked in proc.output()) == (cram != "0"), proc.output()
        seen = [httpx.post(f"{url}/v1/completions", json=t, timeout=300).json() for t in turns]
        first = seen[0]
        again = {**turns[0], "prompt": history + first["choices"][0]["text"] + " And a colour?"}
        r = httpx.post(f"{url}/v1/completions", json=again, timeout=300).json()
        assert r["timings"]["cache_n"] >= first["usage"]["prompt_tokens"] - 1, r["timings"]
        answers.append([s["choices"][0]["text"] for s in [*seen, r]])
        slots = httpx.get(f"{url}/slots", timeout=10).json()
        assert sorted(s["n_cached"] > 0 for s in slots) == [True, True]  # parked still counts
    assert answers[0] == answers[1]
