"""Agent traffic for `duo bench --clients --suite agent-edit`: code-edit sessions as a coding
agent makes them through Anthropic's Messages API (/v1/messages), sent by the `anthropic`
SDK, tools and all.

A session is an agent at work on one Python file (duo.bench.harness.workloads makes the
files): its system prompt and two tools, read_file and write_file; the user's first request
(an edit), the agent's read_file call and the file as its result already in the history, as
an agent's loop leaves them; then the model's answer, in the model's own words: a
write_file call with the whole file rewritten, as agents write files, or text. Each later
turn answers the model's calls (a read gets the file, a write "written") and asks for the
next edit, then for a summary. Every request holds the whole session so far, the file and
each of its rewrites, so a server that remembers text meets much of it again.

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
READ_ID = "toolu_read_0"


@dataclass(frozen=True)
class AgentSession:
    name: str
    path: str
    file: str
    asks: tuple[str, ...]  # the user's request of each turn

    def opening(self) -> list[Json]:
        """The history before the first request: the ask, the agent's read, the file."""
        read = {"type": "tool_use", "id": READ_ID, "name": "read_file",
                "input": {"path": self.path}}  # fmt: skip
        result = {"type": "tool_result", "tool_use_id": READ_ID, "content": self.file}
        return [
            {"role": "user", "content": self.asks[0]},
            {"role": "assistant", "content": [read]},
            {"role": "user", "content": [result]},
        ]

    def results(self, answer: list[Json]) -> list[Json]:
        """The tool_result blocks that answer the calls in the model's `answer`."""
        out = []
        for block in answer:
            if block.get("type") != "tool_use":
                continue
            written = f"Wrote {len(str(block['input'].get('content', '')))} characters."
            content = self.file if block["name"] == "read_file" else written
            out.append({"type": "tool_result", "tool_use_id": block["id"], "content": content})
        return out


def agent_sessions(count: int = SESSIONS, seed: int = 0) -> list[AgentSession]:
    """`count` sessions, the same for the same arguments."""
    rng = random.Random(f"{SUITE}-{seed}")
    out = []
    for i in range(count):
        noun = NOUNS[i % len(NOUNS)]
        file = _python_file(rng, noun, rng.sample(FIELDS, rng.randint(3, 5)))
        path = f"src/{noun}s.py"
        asks = (
            f"In {path}, rename `load_{noun}s` to `read_{noun}s` everywhere.",
            f"Now change every `ValueError` in {path} to `TypeError`.",
            "Summarize the changes you made to the file, in two sentences.",
        )
        out.append(AgentSession(f"{SUITE}-{i}", path, file, asks))
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
    """Play `session` on an `anthropic.Anthropic` client: each turn's request streamed
    (`n` tokens at most), the model's answer kept in the history as it came."""
    messages = session.opening()
    figures = []
    for k, ask in enumerate(session.asks):
        if k:
            results = session.results(messages[-1]["content"])
            messages.append({"role": "user", "content": [*results, {"type": "text", "text": ask}]})
        timed, answer = _request(client, messages, n, sampling)
        figures.append(timed)
        messages.append({"role": "assistant", "content": answer or [{"type": "text", "text": ""}]})
    return figures


def _request(
    client: Any, messages: list[Json], n: int, sampling: SamplingParams
) -> tuple[Timed, list[Json]]:
    t0 = last = time.perf_counter()
    ttft, gaps, timings = None, [], {}
    # The current SDK has no sampling arguments; the servers read them from the body.
    sampler = {"temperature": sampling.temperature}
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
    answer = [block.model_dump(exclude_none=True) for block in final.content]
    return Timed(ttft, gaps, final.usage.output_tokens, timings), answer


def _delta_text(delta: Any) -> str:
    return str(
        getattr(delta, "text", None)
        or getattr(delta, "partial_json", None)
        or getattr(delta, "thinking", None)
        or ""
    )
