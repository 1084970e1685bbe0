"""The lead rests a back whose drafts do not pay (REST frames), gives it looks, and lets it
draft again once its drafts pay; a back of protocol version 3 is served as before. Driven
by a scripted back: a real `duo lead` on the default pair, a WebSocket client that sends
fixed drafts (junk, or the main model's own continuation)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from duo.channel import protocol as p
from duo.llama.backend import Model

from .conftest import Cluster, Proc, health, wait_until

pytestmark = pytest.mark.integration

PROMPT = "10, 20, 30,"
N = 3200  # room for a rest, a look (2 windows on), a rest, a look (4 windows on) that pays
ELSEWHERE = "ab" * 8  # the machine the scripted back says it runs on: not the lead's


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    """A lead with the default policy, its backs its only draft sources."""
    with Cluster(tmp_path_factory.mktemp("placement")) as c:
        yield c.lead("--spec-type", "model", "--quiet")


@pytest.fixture(scope="module")
def identity(pair: tuple[Path, Path]) -> tuple[int, str]:
    with Model(pair[0], n_ctx=64) as model:
        return model.n_vocab, model.vocab.fingerprint


def completion(url: str) -> dict:
    # SmolLM2's end-of-text and end-of-turn tokens never chosen: the count runs on to N
    body = {"prompt": PROMPT, "n_predict": N, "temperature": 0, "logit_bias": {0: -100, 2: -100}}
    r = httpx.post(f"{url}/completion", json={**body, "return_tokens": True}, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def reference(adaptive: tuple[Proc, str]) -> dict:
    """The main model's own answer, with no back connected."""
    _, url = adaptive
    assert health(url)["drafters"] == 0
    ref = completion(url)
    assert ref["stop_type"] == "limit" and len(ref["tokens"]) == N
    return ref


@dataclass
class ScriptedBack:
    """A back that drafts 8 tokens after every commit, from the position it was told of
    (so a guess is a round late: the lead has committed a token more by then): junk, too
    late to be of use, until `right` is set, then the reference's own tokens, whose tail
    is of use; it obeys REST and records each one with its position."""

    ws: ClientConnection
    width: int
    version: int
    answer: list[int]  # the reference's tokens
    right: bool = False
    rests: list[tuple[bool, int]] = field(default_factory=list)  # (resting, tokens emitted)
    commits: int = 0  # COMMIT frames heard
    welcome_version: int = 0
    _rng: random.Random = field(default_factory=lambda: random.Random(0))

    def run(self, n_vocab: int) -> None:
        resting, prompt, session, end = False, 0, -1, 0
        try:
            while True:
                msg = p.decode(self.ws.recv(timeout=120), self.width)
                match msg:
                    case p.Begin(s, tokens):
                        session, prompt, end = s, len(tokens), len(tokens)
                    case p.Commit(s, start, tokens) if s == session:
                        end = start + len(tokens)
                        self.commits += 1
                    case p.Rest(flag):
                        resting = flag
                        self.rests.append((flag, end - prompt))
                        if [r for r, _ in self.rests] == [True, False, True]:
                            self.right = True  # from the next look on, its drafts pay
                        continue
                    case _:
                        continue
                if resting or session < 0:
                    continue
                done = end - prompt
                if self.right:
                    guess = tuple(self.answer[done : done + 8])
                else:
                    guess = tuple(self._rng.randrange(n_vocab) for _ in range(8))
                if guess:
                    self.ws.send(p.encode(p.DraftMsg(session, end, guess), self.width))
        except (ConnectionClosed, TimeoutError):
            return


def scripted(url: str, identity: tuple[int, str], answer: list[int], version: int) -> ScriptedBack:
    n_vocab, fingerprint = identity
    ws = connect(f"{url.replace('http://', 'ws://')}{p.PATH}", open_timeout=10, max_size=None)
    hello = p.Hello(version, n_vocab, fingerprint, f"scripted-v{version}", ELSEWHERE, 1)
    ws.send(p.encode(hello))
    welcome = p.decode(ws.recv(timeout=10))
    assert isinstance(welcome, p.Welcome), welcome
    back = ScriptedBack(ws, welcome.token_width, version, answer)
    back.welcome_version = welcome.version
    threading.Thread(target=back.run, args=(n_vocab,), daemon=True).start()
    wait_until(lambda: health(url)["drafters"] == 1, 10, "the scripted back connected")
    return back


def test_a_back_whose_drafts_do_not_pay_rests_looks_and_drafts_again_once_they_pay(
    adaptive: tuple[Proc, str], reference: dict, identity: tuple[int, str]
) -> None:
    proc, url = adaptive
    back = scripted(url, identity, reference["tokens"], p.VERSION)
    try:
        out = completion(url)
        slots = httpx.get(f"{url}/slots", timeout=10).json()
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        back.ws.close()
    assert out["content"] == reference["content"]  # never a change of output
    flags = [flag for flag, _ in back.rests]
    # rested, looked at, rested again (a longer rest), looked at: then its drafts pay
    assert flags[:4] == [True, False, True, False], back.rests
    assert flags == [True, False, True, False], f"rested again though its drafts pay: {back.rests}"
    first, look, again, last = (at for _, at in back.rests)
    assert last - again > look - first  # the second rest is the longer
    assert out["timings"]["draft_n"] > 0
    assert out["timings"]["draft_n_accepted"] > 300  # the right drafts were taken
    (drafter,) = slots[0]["drafters"]
    assert drafter["name"] == "scripted-v4" and drafter["state"] == "drafting", drafter
    assert "pay" in drafter["why"]
    assert 'duo_drafter_state{drafter="scripted-v4",state="drafting"} 1' in metrics
    assert "drafter scripted-v4 resting: its drafts do not pay" in proc.output()


def test_a_version_3_back_is_served_and_never_rested(
    adaptive: tuple[Proc, str], reference: dict, identity: tuple[int, str]
) -> None:
    _, url = adaptive
    wait_until(lambda: health(url)["drafters"] == 0, 10, "no back connected")
    back = scripted(url, identity, reference["tokens"], 3)
    assert back.welcome_version == 3  # answered in its own version
    try:
        out = completion(url)
    finally:
        back.ws.close()
    assert out["content"] == reference["content"]
    assert back.rests == []  # never told to rest: it would not understand
    assert back.commits > N // 2  # served as before: every round's commit
