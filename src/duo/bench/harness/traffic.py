"""A server's traffic from concurrent clients, as `duo bench --clients` sends it: each
client's requests streamed, and what it measured of them (duo.bench.harness.clients runs
the servers and reports).

    load(url, work, clients, ...)   clients at once over texts, sessions, infill requests
                                    or agent sessions (duo.bench.harness.agents)
    stream_completion(...)          one streamed /v1/completions request
    stream_infill(...)              one streamed /infill request (llama.cpp's native events)

Every stream is read by one loop (`_timed`): the time to the first text and between
texts, and the tokens and drafts the answer's usage and timings report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from duo.bench.harness import agents
from duo.bench.harness.agents import AgentSession
from duo.bench.harness.fim import InfillRequest
from duo.bench.harness.workloads import WorkloadSession
from duo.core.sampling import SamplingParams
from duo.errors import GenerationFailed
from duo.sse import json_events

Work = list[str] | list[WorkloadSession] | list[InfillRequest] | list[AgentSession]


@dataclass
class ClientFigures:
    """What one client measured of its requests."""

    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    sources: dict[str, list[int]] = field(default_factory=dict)


Render = Callable[[list[dict[str, Any]]], str]  # chat messages -> the prompt text


def load(
    url: str,
    work: Work,
    clients: int,
    n: int,
    sampling: SamplingParams,
    render: Render | None = None,
) -> tuple[list[ClientFigures], float]:
    """`clients` clients at once over the prompts (texts), or over the sessions (played
    turn by turn, each prompt `render`ed from the session so far): each client's figures,
    and the seconds it all took."""
    runs = [ClientFigures() for _ in range(clients)]
    errors: list[BaseException] = []

    def client(j: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=600) as http:
                for item in work[j::clients]:
                    if isinstance(item, AgentSession):
                        play_agent(agents.client(url), item, n, sampling, runs[j])
                        continue
                    if isinstance(item, str):
                        stream_completion(http, item, n, sampling, runs[j])
                        continue
                    if isinstance(item, dict):
                        stream_infill(http, item, n, sampling, runs[j])
                        continue
                    assert render is not None
                    messages = item.start()
                    for turn in item.turns:
                        messages += turn
                        answer = stream_completion(http, render(messages), n, sampling, runs[j])
                        messages.append({"role": "assistant", "content": answer})
        except BaseException as e:  # reported after the others finish
            errors.append(e)

    threads = [threading.Thread(target=client, args=(j,)) for j in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return runs, seconds


def stream_completion(
    http: httpx.Client, text: str, n: int, sampling: SamplingParams, out: ClientFigures
) -> str:
    """One streamed completion; its figures go to `out`; returns its text."""
    body = {
        "prompt": text,
        "max_tokens": n,
        "stream": True,
        "stream_options": {"include_usage": True},
        **_sampling(sampling),
    }
    return _timed(http, "/v1/completions", body, out, openai_piece)


def stream_infill(
    http: httpx.Client, request: InfillRequest, n: int, sampling: SamplingParams, out: ClientFigures
) -> str:
    """One streamed fill-in-the-middle request (llama.cpp's /infill), as an editor sends it
    but with its time limits off; its figures go to `out`; returns its text. A warm-up
    (n_predict 0) is timed with the rest of the run but counts in no figure of a request:
    llama-server samples a token for it, duo none, and its short prompt's first token
    would pass for a completion's."""
    body = {"n_predict": n, **request, "stream": True, **_sampling(sampling)}
    if body["n_predict"] == 0:
        return stream(http, "/infill", body, _native_piece).text
    return _timed(http, "/infill", body, out, _native_piece)


def _sampling(sampling: SamplingParams) -> dict[str, Any]:
    return {**sampling.to_request(), "cache_prompt": True}


def openai_piece(chunk: dict[str, Any]) -> tuple[str, int]:
    """A /v1/completions or /v1/chat/completions event's text and the tokens that spelled
    it (duo says)."""
    choices = chunk.get("choices") or []
    first = choices[0] if choices else {}
    text = first.get("text") or (first.get("delta") or {}).get("content") or ""
    return text, max(1, int((chunk.get("duo") or {}).get("tokens", 1)))


def _native_piece(chunk: dict[str, Any]) -> tuple[str, int]:
    """A native event's text and tokens (none in the last, stop: true, event)."""
    if chunk.get("stop"):
        return "", 0
    return chunk.get("content") or "", max(1, len(chunk.get("tokens") or ()))


@dataclass
class Streamed:
    """One streamed answer as a client saw it: its text, the time to its first text and
    between its texts (and per token, where the server says how many tokens spelled a
    text), its tokens, and the timings the server reported (each chunk's that had any)."""

    text: str = ""
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tokens: int = 0
    timings: list[dict[str, Any]] = field(default_factory=list)


def stream(
    http: httpx.Client,
    path: str,
    body: dict[str, Any],
    piece: Callable[[dict[str, Any]], tuple[str, int]] | None = None,
) -> Streamed:
    """Stream `body` to `path` (server-sent events of JSON; `piece`: a chunk's text and
    the tokens that spelled it), timed: the one client of every streamed request the
    bench makes. A server's error mid-stream raises GenerationFailed."""
    out, pieces = Streamed(), []
    t0 = last = time.perf_counter()
    # One connection per request: llama-server may close a connection after a stream,
    # and a reused one then fails; both servers pay the same loopback connect.
    headers = {"Connection": "close"}
    with http.stream("POST", path, json=body, headers=headers) as r:
        r.raise_for_status()
        for chunk in json_events(r.iter_lines()):
            if "error" in chunk:  # a server's failure mid-stream: not a short answer
                err = chunk["error"]
                message = err.get("message", err) if isinstance(err, dict) else err
                raise GenerationFailed(f"the server failed a request: {message}")
            text, n_tokens = (piece or openai_piece)(chunk)
            if text:
                pieces.append(text)
                now = time.perf_counter()
                if out.ttft is None:
                    out.ttft = now - t0
                else:
                    out.gaps.append(now - last)
                    out.itl.extend([(now - last) / n_tokens] * n_tokens)
                last = now
            usage = chunk.get("usage") or {}
            timings = chunk.get("timings") or {}
            if usage.get("completion_tokens") or timings.get("predicted_n"):
                out.tokens = usage.get("completion_tokens") or timings["predicted_n"]
            if timings:
                out.timings.append(timings)
    out.text = "".join(pieces)
    return out


def _timed(
    http: httpx.Client,
    path: str,
    body: dict[str, Any],
    out: ClientFigures,
    piece: Callable[[dict[str, Any]], tuple[str, int]],
) -> str:
    """Stream `body` to `path`: its figures go to `out`; returns its text."""
    s = stream(http, path, body, piece)
    if s.ttft is not None:
        out.ttft.append(s.ttft)
    out.gaps += s.gaps
    out.itl += s.itl
    out.tokens += int(s.tokens)
    for timings in s.timings:
        drafts(out, timings)
    return s.text


def drafts(out: ClientFigures, timings: dict[str, Any]) -> None:
    """Add the drafts a server's `timings` report (duo's) to `out`."""
    if "draft_n" in timings:
        out.drafted += int(timings["draft_n"])
        out.accepted += int(timings.get("draft_n_accepted", 0))
        for source, x in (timings.get("draft_sources") or {}).items():
            accepted, drafted = int(x.get("draft_n_accepted", 0)), int(x.get("draft_n", 0))
            tally(out.sources, source, accepted, drafted)


def play_agent(
    client: Any, session: AgentSession, n: int, sampling: SamplingParams, out: ClientFigures
) -> None:
    """One agent session through /v1/messages (duo.bench.harness.agents); its figures go
    to `out` (each delta counted as one token among the inter-token latencies: Anthropic's
    events do not say how many tokens spelled them)."""
    for timed in agents.play(client, session, n, sampling):
        if timed.ttft is not None:
            out.ttft.append(timed.ttft)
        out.gaps += timed.gaps
        out.itl += timed.gaps
        out.tokens += timed.tokens
        drafts(out, timed.timings)


def tally(into: dict[str, list[int]], source: str, accepted: int, drafted: int) -> None:
    """Add a source's draft tokens accepted and verified to `into` ([accepted, drafted])."""
    counts = into.setdefault(source, [0, 0])
    counts[0] += accepted
    counts[1] += drafted
