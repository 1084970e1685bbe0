"""The lead and its backs as real processes on loopback: the service-level invariants.

Greedy output never depends on the drafters (connected, dying, joining late, malicious),
refused backs are refused cleanly, the API speaks the OpenAI dialect (the official client
works, errors are 4xx JSON) and concurrent clients are served correctly.
"""

from __future__ import annotations

import http.server
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from duo import sse
from duo.bench.net import netns
from duo.bench.net.netns import FarHost
from duo.channel import protocol as p
from duo.llama.backend import Model
from tests.unit.bench.net.test_link import delayed

from .conftest import Cluster, Proc, health, wait_until

pytestmark = pytest.mark.integration

# Prompts whose greedy continuations have no near-tie (a top-2 logit gap > 0.05 at every
# token) within the lengths used: batched verification rounds may round differently from
# single-token decoding, and a near-tie would then flip a token through no fault of duo's.
RAW_PROMPT = "a, b, c, d,"
CHAT_PROMPT = "Write a poem about autumn."
N = 96
LONG_PROMPT = "10, 20, 30,"
N_LONG = 300  # long enough to still be running while a back dies or joins
TIMEOUT = httpx.Timeout(60.0)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("services")) as c:
        yield c


@pytest.fixture(scope="module")
def shared(mcluster: Cluster) -> tuple[Proc, str]:
    """One lead shared by the tests that leave it as they found it (no back connected).

    --policy fixed verifies every ready draft, so drafts from backs are really exercised;
    --spec-type model leaves the backs as its only draft sources (no n-gram lookup).
    """
    return mcluster.lead("--policy", "fixed", "--spec-type", "model", "--quiet")


@pytest.fixture
def lead(shared: tuple[Proc, str]) -> Iterator[str]:
    """The shared lead's URL, checked idle before and healthy after each test."""
    proc, url = shared
    assert proc.alive(), proc.output()[-3000:]
    wait_until(lambda: health(url)["drafters"] == 0, 30, "no back connected", proc)
    yield url
    assert proc.alive(), f"the shared lead died:\n{proc.output()[-3000:]}"
    assert health(url)["status"] == "ok"


@dataclass(frozen=True)
class Refs:
    cli_raw: str  # duo generate --mode target on RAW_PROMPT
    cli_chat: str  # duo generate --mode target --chat on CHAT_PROMPT
    raw: str  # /v1/completions, no back, N tokens
    chat: str  # /v1/chat/completions, no back, N tokens
    long: str  # /v1/completions, no back, N_LONG tokens


def cli_target(prompt: str, n: int, *extra: str) -> subprocess.Popen[bytes]:
    args = ["-m", "duo", "generate", "--mode", "target", "--temp", "0", "-p", prompt, "-n", str(n)]
    return subprocess.Popen(
        [sys.executable, *args, "--color", "never", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def cli_output(proc: subprocess.Popen[bytes]) -> str:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode(errors="replace")
    text = out.decode()
    assert text.endswith("\n")
    return text[:-1]  # generate ends its output with one newline of its own


@pytest.fixture(scope="module")
def refs(shared: tuple[Proc, str]) -> Refs:
    """Reference outputs with no drafter anywhere."""
    _, url = shared
    assert health(url)["drafters"] == 0
    cli = [cli_target(RAW_PROMPT, N), cli_target(CHAT_PROMPT, N, "--chat")]
    raw = complete(url, RAW_PROMPT, N)
    chat_body = chat(url, CHAT_PROMPT, N)
    long = complete(url, LONG_PROMPT, N_LONG)
    assert long["choices"][0]["finish_reason"] == "length", "the long prompt ends too early"
    for body in (raw, chat_body, long):
        assert body["timings"]["draft_n"] == 0
    return Refs(
        cli_raw=cli_output(cli[0]),
        cli_chat=cli_output(cli[1]),
        raw=raw["choices"][0]["text"],
        chat=chat_body["choices"][0]["message"]["content"],
        long=long["choices"][0]["text"],
    )


@pytest.fixture(scope="module")
def identity(pair: tuple[Path, Path]) -> tuple[int, str]:
    """(n_vocab, fingerprint) of the main model, as a back announces them in HELLO."""
    with Model(pair[0], n_ctx=64) as model:
        return model.n_vocab, model.vocab.fingerprint


# -- helpers --------------------------------------------------------------------------------


def post(url: str, path: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT, **kw)


def complete(url: str, prompt: str, n: int) -> dict[str, Any]:
    r = post(url, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def chat(url: str, content: str, n: int) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": n, "temperature": 0}
    r = post(url, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@dataclass
class Stream:
    chunks: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    done: bool = False  # [DONE] seen

    @property
    def text(self) -> str:
        return "".join(c["choices"][0]["text"] for c in self.chunks)

    @property
    def final(self) -> dict[str, Any]:
        return self.chunks[-1]

    def max_gap(self) -> float:
        return max((b - a for a, b in zip(self.times, self.times[1:], strict=False)), default=0)


def stream_completion(
    url: str, prompt: str, n: int, on_chunk: Callable[[Stream], None] | None = None
) -> Stream:
    """POST a streamed /v1/completions; call on_chunk(stream so far) after each chunk."""
    out = Stream()
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200, r.read()
        for event in sse.iter_events(r.iter_lines()):
            if event.data == sse.DONE:
                out.done = True
                break
            chunk = event.json()
            assert "error" not in chunk, chunk
            out.chunks.append(chunk)
            out.times.append(time.monotonic())
            if on_chunk is not None:
                on_chunk(out)
    return out


class Background:
    """A streamed generation on its own thread; `started` is set at its first chunk."""

    def __init__(self, url: str, prompt: str, n: int) -> None:
        self.started = threading.Event()
        self.result: Stream | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = stream_completion(url, prompt, n, lambda _: self.started.set())
            except BaseException as e:
                self.error = e
            finally:
                self.started.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait_started(self) -> None:
        assert self.started.wait(60), "the generation did not start"
        assert self.error is None, self.error

    def join(self) -> Stream:
        self.thread.join(120)
        assert not self.thread.is_alive(), "the generation did not finish"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@contextmanager
def back_on(
    cluster: Cluster, url: str, *args: str, wait: bool = True, far: FarHost | None = None
) -> Iterator[Proc]:
    """A back for the duration of the block (in namespace `far`, if given); gone (and seen
    gone by the lead) after."""
    proc = cluster.back(url, *args, wait=wait, host=far.run if far else None)
    try:
        yield proc
    finally:
        proc.kill()
        wait_until(lambda: health(url)["drafters"] == 0, 30, "the lead dropped the back")


def metric(url: str, name: str, headers: dict[str, str] | None = None) -> float:
    r = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    for line in r.text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def assert_exits(proc: Proc, code: int, timeout: float = 60) -> str:
    try:
        proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout} s:\n{proc.output()[-2000:]}") from None
    out = proc.output()
    assert proc.popen.returncode == code, out
    return out


# -- 1. a back never changes the output ----------------------------------------------------


@pytest.mark.parametrize("fanout", ["0", "2"])
def test_back_does_not_change_output(mcluster: Cluster, lead: str, refs: Refs, fanout: str) -> None:
    assert refs.raw.strip() and refs.chat.strip()
    assert refs.raw == refs.cli_raw, "the API without backs differs from duo generate"
    assert refs.chat == refs.cli_chat, "chat without backs differs from duo generate --chat"
    with back_on(mcluster, lead, "--fanout", fanout, "--max-ahead", "3"):
        raw = complete(lead, RAW_PROMPT, N)
        chat_body = chat(lead, CHAT_PROMPT, N)
    assert raw["timings"]["draft_n"] > 0, "no draft verified: the check would be vacuous"
    assert chat_body["timings"]["draft_n"] > 0, "no draft verified: the check would be vacuous"
    assert raw["choices"][0]["text"] == refs.raw
    assert chat_body["choices"][0]["message"]["content"] == refs.chat
    assert raw["usage"]["completion_tokens"] == N


@pytest.fixture(scope="module")
def far() -> Iterator[FarHost]:
    """A second host: a network namespace across a veth pair (needs root)."""
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    with netns.far_host() as host:
        yield host


def test_a_back_across_a_delayed_link_does_not_change_output(
    mcluster: Cluster, lead: str, refs: Refs, far: FarHost
) -> None:
    """The back runs in another network namespace and reaches the lead through a proxy
    that holds every byte 10 ms (± 5) each way: its drafts come late, and the lead
    verifies whatever is ready when it is, never waiting for one."""
    port = int(lead.rsplit(":", 1)[1])
    with (
        delayed(("127.0.0.1", port), rtt_ms=20, jitter_ms=5, host=far.near) as link,
        back_on(
            mcluster, f"http://{far.near}:{link.port}", "--fanout", "2", "--max-ahead", "3", far=far
        ) as back,
    ):
        s = stream_completion(lead, LONG_PROMPT, N_LONG)
        # Drafts across the link come late: a request may end before one is ready, or
        # while the policy rests their source. Ask again until one was verified (else the
        # check would be vacuous); every answer must be the main model's.
        answers: list[dict[str, Any]] = []

        def drafted() -> bool:
            answers.append(chat(lead, CHAT_PROMPT, N))
            return bool(answers[-1]["timings"]["draft_n"] > 0)

        wait_until(drafted, 60, "a draft from across the link verified", back)
    assert "duo back: connected" in back.output()
    assert all(a["choices"][0]["message"]["content"] == refs.chat for a in answers)
    assert s.done and s.text == refs.long
    assert s.max_gap() < 1.0, f"the lead stalled {s.max_gap():.2f} s between two chunks"


def test_a_back_whose_link_goes_down_reconnects_and_loses_nothing(
    mcluster: Cluster, lead: str, refs: Refs, far: FarHost
) -> None:
    port = int(lead.rsplit(":", 1)[1])
    with (
        delayed(("127.0.0.1", port), rtt_ms=10, host=far.near) as link,
        back_on(mcluster, f"http://{far.near}:{link.port}", far=far) as back,
    ):
        cut_at: list[int] = []  # characters received when the link went down

        def cut_early(so_far: Stream) -> None:
            if not cut_at and (len(so_far.chunks) >= 20 or len(so_far.text) * 8 >= len(refs.long)):
                link.cut()
                cut_at.append(len(so_far.text))

        s = stream_completion(lead, LONG_PROMPT, N_LONG, cut_early)
        # the back comes back, through the link, and drafts again
        wait_until(
            lambda: (
                back.output().count("duo back: connected") >= 2 and health(lead)["drafters"] == 1
            ),
            60,
            "the back reconnected",
            back,
        )
        # The back's drafts are verified again within a few requests: the first may end
        # before they are ready, or while the policy rests their source.
        answers: list[dict[str, Any]] = []

        def drafted_again() -> bool:
            answers.append(chat(lead, CHAT_PROMPT, N))
            return bool(answers[-1]["timings"]["draft_n"] > 0)

        wait_until(drafted_again, 60, "the reconnected back's drafts verified", back)
    assert cut_at
    assert s.done and s.text == refs.long
    assert all(a["choices"][0]["message"]["content"] == refs.chat for a in answers)


# -- 2. a back killed mid-generation -------------------------------------------------------


def test_back_killed_mid_generation(mcluster: Cluster, lead: str, refs: Refs) -> None:
    ref = refs.long
    with back_on(mcluster, lead) as back:
        killed_at: list[int] = []  # characters received when the back was killed

        def kill_early(so_far: Stream) -> None:
            # After ~40 chunks, or a quarter of the text if drafts make the chunks big.
            if not killed_at and (len(so_far.chunks) >= 40 or len(so_far.text) * 4 >= len(ref)):
                back.kill()
                killed_at.append(len(so_far.text))

        s = stream_completion(lead, LONG_PROMPT, N_LONG, kill_early)
    assert killed_at, "the stream ended before the back was killed"
    assert not back.alive()
    assert len(s.text) - killed_at[0] > len(ref) / 2, "the kill was not mid-generation"
    assert s.done, "no [DONE]"
    assert s.final["choices"][0]["finish_reason"] == "length"
    assert s.final["timings"]["draft_n"] > 0, "the back never drafted before it died"
    assert s.text == ref
    assert s.max_gap() < 3.0, f"the stream stalled for {s.max_gap():.1f} s"


# -- 3. a back joining mid-generation ------------------------------------------------------


def test_back_joins_mid_generation(mcluster: Cluster, lead: str, refs: Refs) -> None:
    gen = Background(lead, LONG_PROMPT, N_LONG)
    gen.wait_started()
    with back_on(mcluster, lead):  # returns once the lead counts the back
        assert gen.thread.is_alive(), "the generation ended before the back connected"
        s = gen.join()
    assert s.done
    assert s.final["timings"]["draft_n"] > 0, "the late back's drafts were never verified"
    assert s.final["timings"]["draft_n_accepted"] > 0
    assert s.text == refs.long


# -- 4. a back with another vocabulary -----------------------------------------------------


def test_other_vocabulary_back_is_refused(
    mcluster: Cluster, lead: str, other_vocab_draft: Path
) -> None:
    with back_on(mcluster, lead, "-m", str(other_vocab_draft), wait=False) as proc:
        out = assert_exits(proc, 2)
        assert "refused" in out and "vocabulary" in out, out
        assert health(lead)["status"] == "ok"
        assert health(lead)["drafters"] == 0
        assert metric(lead, "duo_drafters_refused_total") == 1


class NotALead(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_back_pointed_at_no_lead_says_why_and_stops(mcluster: Cluster, lead: str) -> None:
    """What retrying cannot fix ends the back in one line: https:// to a plain lead, and a
    server with no drafter channel."""
    plain = assert_exits(mcluster.back(lead.replace("http://", "https://"), wait=False), 2)
    assert "does not speak TLS: is the lead's URL http://?" in plain, plain
    server = http.server.HTTPServer(("127.0.0.1", 0), NotALead)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        other = assert_exits(mcluster.back(url, wait=False), 2)
    finally:
        server.shutdown()
    assert "answered HTTP 404: no duo lead's drafter channel there" in other, other
    for out in (plain, other):
        assert "Traceback" not in out


# -- 5. a malicious drafter ----------------------------------------------------------------


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + p.PATH


def raw_client(url: str, key: str | None = None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return connect(
        ws_url(url),
        open_timeout=10,
        close_timeout=5,
        max_size=None,
        compression=None,
        additional_headers=headers,
    )


def handshake(ws: ClientConnection, identity: tuple[int, str], name: str = "garbage") -> int:
    """HELLO as a compatible back; returns the token width of the WELCOME."""
    n_vocab, fingerprint = identity
    ws.send(p.encode(p.Hello(p.VERSION, n_vocab, fingerprint, name)))
    reply = p.decode(ws.recv(timeout=10))
    assert isinstance(reply, p.Welcome), reply
    return reply.token_width


def assert_closed(ws: ClientConnection, timeout: float = 10, code: int = 1002) -> str:
    """The lead closes the connection with a close frame of this code (frames before are
    fine); returns the reason it gave."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the lead did not close the connection"
            ws.recv(timeout=remaining)
    except ConnectionClosed as e:
        assert e.rcvd is not None, "the lead dropped the connection without a close frame"
        assert e.rcvd.code == code, (e.rcvd.code, e.rcvd.reason)
        return e.rcvd.reason
    except TimeoutError:
        raise AssertionError("the lead did not close the connection") from None


def test_garbage_drafter(lead: str, refs: Refs, identity: tuple[int, str]) -> None:
    n_vocab, _ = identity
    rng = random.Random(0)

    def junk(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(n_vocab) for _ in range(n))

    dropped = metric(lead, "duo_drafters_dropped_total")
    gen = Background(lead, LONG_PROMPT, N_LONG)
    gen.wait_started()

    with raw_client(lead) as ws:
        width = handshake(ws, identity)
        begin = p.decode(ws.recv(timeout=10), width)  # joining mid-generation: catch up
        assert isinstance(begin, p.Begin), begin
        session, end = begin.session, len(begin.tokens)
        assert health(lead)["drafters"] == 1

        def draft(session: int, start: int, tokens: tuple[int, ...]) -> None:
            ws.send(p.encode(p.DraftMsg(session, start, tokens), width))

        # Well-formed but wrong: ignored, or verified and rejected; never a change of output.
        draft(session + 7, end, junk(8))  # another session
        draft(session, 0, junk(8))  # overlaps the prompt, does not match it
        draft(session, end + 50, junk(8))  # leaves a gap
        draft(session, end, junk(p.MAX_DRAFT_TOKENS))  # as long as a frame may be
        for _ in range(40):  # junk where the next round starts, so the lead verifies it
            msg = p.decode(ws.recv(timeout=10), width)
            if isinstance(msg, p.Commit):
                end = msg.start + len(msg.tokens)
                draft(session, end + 1, junk(8))
        assert gen.thread.is_alive(), "the generation ended before the garbage was sent"
        assert health(lead)["drafters"] == 1, "a well-formed draft got the drafter dropped"

        draft(session, end, (n_vocab + 5,))  # outside the vocabulary
        assert_closed(ws)

    with raw_client(lead) as ws:
        handshake(ws, identity)
        ws.send(b"\xff\x00")  # malformed
        assert_closed(ws)

    with raw_client(lead) as ws:
        width = handshake(ws, identity)
        ws.send(p.encode(p.DraftMsg(session, end, (1, 2)), width)[:7])  # truncated
        assert_closed(ws)

    with raw_client(lead) as ws:
        ws.send(p.encode(p.DraftMsg(session, end, (1, 2, 3)), width))  # not HELLO first
        assert_closed(ws)

    with raw_client(lead) as ws:
        width = handshake(ws, identity)
        ws.send(p.encode(p.Append(junk(p.MAX_DRAFT_TOKENS + 1)), width))  # more than usable
        assert "tokens in one frame" in assert_closed(ws)

    with raw_client(lead) as ws:
        ws.send("hello")  # a text frame first
        assert "text frames" in assert_closed(ws, code=1003)

    with raw_client(lead) as ws:
        handshake(ws, identity)
        ws.send("hello")  # a text frame later
        assert "text frames" in assert_closed(ws, code=1003)

    s = gen.join()
    assert s.done
    assert s.text == refs.long
    assert s.final["timings"]["draft_n"] > 0, "no junk draft was ever verified"
    assert health(lead)["status"] == "ok"
    wait_until(lambda: health(lead)["drafters"] == 0, 10, "garbage drafters gone")
    assert metric(lead, "duo_drafters_dropped_total") - dropped >= 7
    # The lead still serves, and a fresh generation is still right.
    assert complete(lead, RAW_PROMPT, N)["choices"][0]["text"] == refs.raw


# -- 6. the official openai client, and --api-key ------------------------------------------


def test_openai_client(lead: str, pair: tuple[Path, Path]) -> None:
    client = openai.OpenAI(base_url=f"{lead}/v1", api_key="x", timeout=60, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "List the months of the year."}]
    whole = client.chat.completions.create(
        model="duo", messages=messages, max_tokens=48, temperature=0
    )
    content = whole.choices[0].message.content
    assert content and content.strip()
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage is not None and whole.usage.completion_tokens > 0

    deltas = []
    finish = None
    for chunk in client.chat.completions.create(
        model="duo", messages=messages, max_tokens=48, temperature=0, stream=True
    ):
        if chunk.choices:
            deltas.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(deltas) == content
    assert finish == whole.choices[0].finish_reason

    models = client.models.list()
    assert [m.id for m in models.data] == [pair[0].stem]  # smollm2-135m-instruct-bf16 or -f16

    text = client.completions.create(model="duo", prompt=RAW_PROMPT, max_tokens=16, temperature=0)
    assert text.choices[0].text.strip()


def test_api_key(cluster: Cluster) -> None:
    proc, url = cluster.lead("--api-key", "secret", "--quiet")
    messages: list[Any] = [{"role": "user", "content": "Say hi."}]
    wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", timeout=60, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="duo", messages=messages, max_tokens=8)
    assert httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=10).status_code == 401
    assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401

    right = openai.OpenAI(base_url=f"{url}/v1", api_key="secret", timeout=60, max_retries=0)
    reply = right.chat.completions.create(model="duo", messages=messages, max_tokens=8)
    assert reply.choices[0].message.content

    back = cluster.back(url, wait=False)
    out = assert_exits(back, 2)
    assert "refused" in out and "API key" in out, out
    assert proc.alive()
    headers = {"Authorization": "Bearer secret"}
    assert metric(url, "duo_drafters_refused_total", headers) == 1

    keyed = cluster.back(url, "--api-key", "secret")  # waits until the lead counts it
    assert keyed.alive()


def test_drafters_cannot_write_the_log(cluster: Cluster, identity: tuple[int, str]) -> None:
    """Nothing an unauthenticated drafter sends reaches the log; an authenticated one's
    name is short and printable (no forged lines, no terminal escapes)."""
    proc, url = cluster.lead("--api-key", "secret", "--quiet")
    forged = "\x1b[31mFORGED\n2026-01-01 INFO duo: all is well"
    n_vocab, fingerprint = identity
    with raw_client(url, key="wrong") as ws:
        ws.send(p.encode(p.Hello(p.VERSION, n_vocab, fingerprint, forged)))
        assert p.decode(ws.recv(timeout=10)) == p.Refuse("invalid or missing API key")
    with raw_client(url, key="wrong") as ws:  # far larger than any frame a drafter sends
        ws.send(b"\x01" + b"x" * (100 << 10))
        assert_closed(ws, code=1009)
    with raw_client(url, key="secret") as ws:
        handshake(ws, identity, name=forged)
        wait_until(lambda: "FORGED" in proc.output(), 10, "the drafter's join logged")
    wait_until(lambda: "left" in proc.output(), 10, "the drafter's leaving logged")
    out = proc.output()
    assert "\x1b[31m" not in out and "\n2026-01-01" not in out, out
    assert "[31mFORGED2026-01-01 INFO duo: all is well" in out
    assert out.count("FORGED") == 2  # joined, left; the refused one was never logged
    assert proc.alive() and health(url)["status"] == "ok"


# -- 7. concurrent clients -----------------------------------------------------------------


def test_two_clients_at_once(lead: str) -> None:
    questions = ["List five fruits.", "Name the seven continents."]
    alone = [chat(lead, q, 48)["choices"][0]["message"]["content"] for q in questions]
    assert alone[0] != alone[1]

    barrier = threading.Barrier(len(questions), timeout=30)
    answers: dict[int, str] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            barrier.wait()
            answers[i] = chat(lead, questions[i], 48)["choices"][0]["message"]["content"]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a client never got its answer"
    assert not errors, errors
    assert [answers[0], answers[1]] == alone


# -- bad requests: 4xx JSON errors, never 500 ----------------------------------------------


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error  # type: ignore[no-any-return]


def test_bad_requests(lead: str) -> None:
    user = [{"role": "user", "content": "hi"}]
    cases: list[tuple[str, Any]] = [
        ("/v1/chat/completions", {"max_tokens": 8}),  # no messages
        ("/v1/chat/completions", {"messages": []}),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}),  # no role
        ("/v1/chat/completions", {"messages": user, "max_tokens": 0}),
        ("/v1/chat/completions", {"messages": user, "max_tokens": "ten"}),
        ("/v1/chat/completions", {"messages": user, "temperature": -1}),
        ("/v1/chat/completions", {"messages": user, "n": 0}),
        ("/v1/chat/completions", [1, 2]),  # not an object
        ("/v1/completions", {"max_tokens": 8}),  # no prompt
        ("/v1/completions", {"prompt": "hi", "max_tokens": 0}),
        ("/v1/completions", {"prompt": "hi", "temperature": "hot"}),
        ("/v1/completions", {"prompt": [10**9]}),  # token outside the vocabulary
        ("/v1/completions", {"prompt": "hi", "stop": 5}),
    ]
    for path, body in cases:
        assert_error(post(lead, path, body), 400)
    for path in ("/v1/chat/completions", "/v1/completions"):
        r = httpx.post(
            f"{lead}{path}",
            content=b"{not json",
            headers={"content-type": "application/json"},
            timeout=10,
        )
        assert_error(r, 400)
    # Sampling (temperature > 0) is served.
    r = post(lead, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 0.7})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert r.json()["usage"]["completion_tokens"] <= 4
    assert_error(httpx.get(f"{lead}/v1/nowhere", timeout=10), 404)
    assert_error(httpx.get(f"{lead}/v1/completions", timeout=10), 405)
    # None of that disturbed the lead.
    assert chat(lead, "hi", 4)["choices"][0]["message"]["content"]


def test_prompt_longer_than_context(cluster: Cluster) -> None:
    proc, url = cluster.lead("-c", "128", "--quiet")
    # llama.cpp rounds a context up (to 256 cells); a request still gets the -c asked for.
    n_ctx = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["meta"]["n_ctx"]
    assert n_ctx == 128
    long = "the quick brown fox jumps over the lazy dog " * (n_ctx // 4)
    r = post(url, "/v1/completions", {"prompt": long, "max_tokens": 8})
    assert_error(r, 400, "context_length_exceeded")
    r = post(url, "/v1/completions", {"prompt": list(range(1000, 1000 + n_ctx))})
    assert_error(r, 400, "context_length_exceeded")
    body = {"messages": [{"role": "user", "content": long}], "max_tokens": 8}
    assert_error(post(url, "/v1/chat/completions", body), 400, "context_length_exceeded")
    # A prompt that fits but leaves less room than max_tokens: cut short, not an error.
    counting = ", ".join(str(i) for i in range(1, 21)) + ","
    body = {"prompt": counting, "max_tokens": n_ctx, "temperature": 0}
    r = post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["total_tokens"] == n_ctx
    assert proc.alive()
    assert health(url)["status"] == "ok"
