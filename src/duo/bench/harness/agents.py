"""Agent traffic for `duo bench --clients --suite agent-edit`: code-edit sessions as a coding
agent makes them through Anthropic's Messages API (/v1/messages), sent by the `anthropic`
SDK, tools and all.

A session is an agent at work on one Python file (duo.bench.harness.workloads makes the
files): its system prompt and two tools, read_file and write_file; the user's first request
(an edit), the agent's read_file call and the file as its result already in the history, as
an agent's loop leaves them. The model answers each request in its own words (as agents
write files, a write_file call with the whole file rewritten, or text), and that answer is
what is timed. The history then goes on as the agent's loop would have it once the edit
is made, the same for every server: the write_file call with the file edited right (the
bench makes the edit), its result, and the next request: a second edit, then a summary.
So every server reads the same requests, and every request holds the file and each of its
rewrites, which a server that remembers text meets again.

    agent_sessions(count)          the sessions, the same on every call and machine
    play(client, session, ...)     one session, each request streamed and timed
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from duo.bench.harness.workloads import FIELDS, NOUNS, SESSIONS, _python_file
from duo.core.sampling import SamplingParams
from duo.errors import UsageError

Json = dict[str, Any]
SUITE = "agent-edit"
SYSTEM = (
    "You are a coding agent working in the user's repository. Use the tools to read and "
    "write files. To change a file, call write_file with the file's whole new content; "
    "never answer with a partial file. When the user asks a question, answer in text."
)
TOOLS: list[Json] = [
    {"name": "read_file", "description": "Read a file of the repository.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                      "required": ["path"]}},
    {"name": "write_file", "description": "Write a file of the repository, replacing it whole.",
     "input_schema": {"type": "object", "properties": {
         "path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["path", "content"]}},
]  # fmt: skip


@dataclass(frozen=True)
class AgentSession:
    name: str
    path: str
    files: tuple[str, ...]  # the file as read, then after each edit
    asks: tuple[str, ...]  # the user's request of each turn (the edits, then a summary)

    def opening(self) -> list[Json]:
        """The history before the first request: the ask, the agent's read, the file."""
        return [{"role": "user", "content": self.asks[0]}, *self._call(0, "read_file", None)]

    def after(self, k: int) -> list[Json]:
        """The history the agent's loop adds once request `k` is answered: the edit
        written, its result and the next request."""
        written = self.files[k + 1]
        call, result = self._call(k + 1, "write_file", written)
        result["content"].append({"type": "text", "text": self.asks[k + 1]})
        return [call, result]

    def _call(self, k: int, name: str, content: str | None) -> list[Json]:
        """A call of the agent's (an assistant turn) and its result (a user turn)."""
        arguments: Json = {"path": self.path}
        if content is not None:
            arguments["content"] = content
        call_id = f"toolu_{name}_{k}"
        answer = self.files[0] if content is None else f"Wrote {len(content)} characters."
        return [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": call_id, "name": name, "input": arguments}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": answer}]},
        ]  # fmt: skip


def agent_sessions(count: int = SESSIONS, seed: int = 0) -> list[AgentSession]:
    """`count` sessions, the same for the same arguments."""
    rng = random.Random(f"{SUITE}-{seed}")
    out = []
    for i in range(count):
        noun = NOUNS[i % len(NOUNS)]
        file = _python_file(rng, noun, rng.sample(FIELDS, rng.randint(3, 5)))
        renamed = file.replace(f"load_{noun}s", f"read_{noun}s")
        path = f"src/{noun}s.py"
        asks = (
            f"In {path}, rename `load_{noun}s` to `read_{noun}s` everywhere.",
            f"Now change every `ValueError` in {path} to `TypeError`.",
            "Summarize the changes you made to the file, in two sentences.",
        )
        files = (file, renamed, renamed.replace("ValueError", "TypeError"))
        out.append(AgentSession(f"{SUITE}-{i}", path, files, asks))
    return out


def client(url: str) -> Any:
    """An `anthropic.Anthropic` client of the server at `url` (one connection per request, as
    the bench's other clients: llama-server may close one after a stream)."""
    try:
        import anthropic
    except ImportError:
        raise UsageError(
            f"--suite {SUITE} sends its requests with the anthropic SDK: pip install anthropic"
        ) from None
    return anthropic.Anthropic(
        base_url=url, api_key="duo-bench", max_retries=0, timeout=600,
        default_headers={"Connection": "close"},
    )  # fmt: skip


@dataclass
class Timed:
    """What one streamed request measured: its times (seconds) and what the server said."""

    ttft: float | None
    gaps: list[float]
    tokens: int
    timings: Json


def play(client: Any, session: AgentSession, n: int, sampling: SamplingParams) -> list[Timed]:
    """Play `session` on an `anthropic.Anthropic` client: each request streamed (`n`
    tokens at most) and timed, the history going on as the session says."""
    messages = session.opening()
    figures = []
    for k in range(len(session.asks)):
        if k:
            messages += session.after(k - 1)
        figures.append(_request(client, messages, n, sampling))
    return figures


def _request(client: Any, messages: list[Json], n: int, sampling: SamplingParams) -> Timed:
    t0 = last = time.perf_counter()
    ttft, gaps, timings = None, [], {}
    # The current SDK has no sampling arguments; the servers read them from the body.
    sampler = sampling.to_request()
    with client.messages.stream(
        model="duo-bench", max_tokens=n, system=SYSTEM, tools=TOOLS, messages=messages,
        extra_body=sampler,
    ) as stream:  # fmt: skip
        for event in stream:
            if event.type == "content_block_delta" and _delta_text(event.delta):
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
            elif event.type == "message_delta":
                timings = dict(getattr(event, "timings", None) or {})
        final = stream.get_final_message()
    return Timed(ttft, gaps, final.usage.output_tokens, timings)


def _delta_text(delta: Any) -> str:
    return str(
        getattr(delta, "text", None)
        or getattr(delta, "partial_json", None)
        or getattr(delta, "thinking", None)
        or ""
    )
