"""Seed 003's drafter-driven verifier API on a real lead (POST /prefill, /verify, GET /stats),
with plain httpx as seed 003's client uses it, and `duo draft` as its client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session

from .conftest import Cluster, Proc, duo, wait_until

pytestmark = pytest.mark.integration

KEY = "verifier-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPTS = [
    "best sport in the world is",
    "The three primary colors are",
    "A good breakfast has",
    "The capital of France is",
]
N = 24


@pytest.fixture(scope="module")
def lead(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lead with four slots and an API key, drafting nothing of its own; deterministic,
    so that what several clients verify together equals each alone bit for bit."""
    with Cluster(tmp_path_factory.mktemp("verifier")) as cluster:
        args = ["--parallel", "4", "--api-key", KEY, "--spec-type", "none", "--deterministic"]
        _, url = cluster.lead(*args)
        yield url


@pytest.fixture(scope="module")
def alone(pair: tuple[Path, Path]) -> dict[str, tuple[list[int], list[int], str]]:
    """Each prompt's tokens, and the main model's own greedy continuation (no drafter) as
    tokens and text."""
    out = {}
    spec = SpecConfig(mode="target", deterministic=True)
    with Session(ModelConfig(main=pair[0], draft=None), spec) as s:
        vocab = s.main.vocab
        for text in PROMPTS:
            prompt = vocab.tokenize(text)
            tokens: list[int] = []
            s.run(prompt, N, lambda r, tokens=tokens: tokens.extend(r.tokens))  # type: ignore[misc]
            out[text] = (prompt, tokens, b"".join(map(vocab.piece, tokens)).decode())
    return out


Alone = dict[str, tuple[list[int], list[int], str]]


def post(url: str, path: str, body: dict[str, Any], session: str | None = None) -> httpx.Response:
    """POST with the API key (and the session in its header)."""
    headers = {**AUTH, "X-Duo-Session": session} if session else AUTH
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=60)


def test_seed_003_flow(lead: str, alone: Alone) -> None:
    prompt, own, _ = alone[PROMPTS[0]]
    r = post(lead, "/prefill/", {"prompt": PROMPTS[0]})
    assert r.status_code == 200, r.text
    assert r.json() == {"prompt_len": len(prompt), "prompt_ids": prompt, "session": "default"}
    # The main model's own continuation: every token accepted, and the next one predicted.
    r = post(lead, "/verify/", {"draft_tokens": own[:5]})
    assert r.json() == {
        "accepted_prefix_len": 5,
        "preds": own[:6],
        "total_tokens": len(prompt) + 5,
        "session": "default",
    }
    # A wrong draft: nothing accepted, and preds[0] is the main model's next token.
    wrong = [own[5] + 1, own[6], own[7]]
    r = post(lead, "/verify", {"draft_tokens": wrong}).json()
    assert (r["accepted_prefix_len"], r["preds"][0], r["total_tokens"]) == (
        0,
        own[5],
        len(prompt) + 5,
    )
    assert len(r["preds"]) == 4
    # The correction at the head of the next draft, as seed 003's client puts it.
    r = post(lead, "/verify", {"draft_tokens": own[5:9]}).json()
    assert r["accepted_prefix_len"] == 4 and r["total_tokens"] == len(prompt) + 9
    stats = httpx.get(f"{lead}/stats", headers=AUTH, timeout=10).json()
    assert stats["sessions"]["default"]["accepted"] == 9
    assert stats["drafted"] >= 12 and 0 < stats["acceptance_rate"] < 1


def test_sessions_interleaved_each_get_the_main_models_text(lead: str, alone: Alone) -> None:
    """Two clients' sessions, their verifications interleaved, with the session named in the
    body and in the header; drafts half right (each token the main model's, then a wrong one)."""
    names = {"a": PROMPTS[1], "b": PROMPTS[2]}
    got: dict[str, list[int]] = {"a": [], "b": []}
    for name, text in names.items():
        post(lead, "/prefill", {"prompt": text, "session": name})
    while any(len(got[n]) < N for n in names):
        for name, text in names.items():
            own = alone[text][1]
            done = got[name]
            if len(done) >= N:
                continue
            draft = [*own[len(done) : len(done) + 2], 0]
            r = post(lead, "/verify", {"draft_tokens": draft}, session=name)
            accepted = r.json()["accepted_prefix_len"]
            done += draft[:accepted]
    for name, text in names.items():
        assert got[name][:N] == alone[text][1]


def test_auth_and_bad_input(lead: str) -> None:
    r = httpx.post(f"{lead}/verify", json={"draft_tokens": [1]}, timeout=10)
    assert r.status_code == 401
    assert httpx.get(f"{lead}/stats", timeout=10).status_code == 401
    post(lead, "/prefill", {"prompt": "hello", "session": "bad-input"})
    cases = [
        ("/verify", {"draft_tokens": [-1], "session": "bad-input"}, "draft_tokens"),
        ("/verify", {"draft_tokens": [10**9], "session": "bad-input"}, "draft_tokens"),
        ("/verify", {"draft_tokens": "1,2", "session": "bad-input"}, "draft_tokens"),
        ("/verify", {"draft_tokens": [1] * 257, "session": "bad-input"}, "draft_tokens"),
        ("/verify", {"draft_tokens": [1], "session": "never-started"}, "session"),
        ("/verify", {"draft_tokens": [1], "session": "a b"}, "session"),
        ("/prefill", {}, "prompt"),
        ("/prefill", {"prompt": []}, "prompt"),
        ("/prefill", {"prompt": "x", "temperature": -1}, "temperature"),
        ("/prefill", {"prompt": "x " * 5000}, "prompt"),
    ]
    for path, body, param in cases:
        r = post(lead, path, body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)
    r = httpx.post(f"{lead}/verify", content=b"{", headers=AUTH, timeout=10)
    assert r.status_code == 400
    assert httpx.get(f"{lead}/health", timeout=10).json()["status"] == "ok"


def draft_client(lead: str, text: str, session: str, log: Path) -> Proc:
    return Proc(
        ["draft", "--server", lead, "--api-key", KEY, "-p", text, "-n", str(N), "--draft", "3",
         "--session", session],
        log,
    )  # fmt: skip


def test_four_duo_draft_clients_at_once(lead: str, alone: Alone, tmp_path: Path) -> None:
    """Four `duo draft` clients on four slots: each prints the main model's text alone."""
    procs = [draft_client(lead, t, f"c{i}", tmp_path / f"c{i}.log") for i, t in enumerate(PROMPTS)]
    try:
        for proc in procs:
            wait_until(lambda p=proc: not p.alive(), 180, "a duo draft client")  # type: ignore[misc]
            assert proc.popen.returncode == 0, proc.output()
        for proc, text in zip(procs, PROMPTS, strict=True):
            out = proc.output()
            assert out.startswith(alone[text][2]), (out, alone[text][2])
            assert "tokens per verification" in out
    finally:
        for proc in procs:
            proc.stop()


def test_duo_draft_against_a_plain_http_server_says_why(pair: tuple[Path, Path]) -> None:
    r = duo("draft", "--server", "127.0.0.1:9", "-p", "hi", "-n", "4")
    assert r.returncode != 0
    assert "cannot reach the lead at" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_bench_measures_the_drafter_driven_mode(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"kind": "raw", "category": "count", "text": "1, 2, 3,"}) + "\n")
    out = tmp_path / "bench.json"
    r = duo(
        "bench", "--prompts", str(prompts), "--modes", "lead+client", "-n", "24", "--repeat",
        "1", "--json", str(out), "--no-costs",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (mode,) = json.loads(out.read_text())["modes"]
    assert mode["mode"] == "lead+client"
    assert mode["tokens_per_second"] > 0
    assert 0 < mode["acceptance_rate"] <= 1
