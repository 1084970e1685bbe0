"""The agent sessions of `duo bench --suite agent-edit` (duo.bench.harness.agents): the same
every time, valid Messages API requests, and each model call answered."""

from __future__ import annotations

import json

from duo.bench.harness.agents import SYSTEM, TOOLS, agent_sessions
from duo.lead.anthropic.requests import MessagesRequest
from duo.lead.body import decode


def test_sessions_are_the_same_every_time_and_differ_from_each_other() -> None:
    first, again = agent_sessions(), agent_sessions()
    assert first == again and len(first) == 8
    assert len({s.file for s in first}) == 8
    assert all(len(s.asks) == 3 and "def " in s.file for s in first)


def test_a_session_s_requests_are_valid_messages_requests() -> None:
    session = agent_sessions(1)[0]
    messages = session.opening()
    written = {"type": "tool_use", "id": "toolu_w", "name": "write_file",
               "input": {"path": session.path, "content": "x = 1\n"}}  # fmt: skip
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}, written]})
    results = session.results(messages[-1]["content"])
    assert results == [
        {"type": "tool_result", "tool_use_id": "toolu_w", "content": "Wrote 6 characters."}
    ]
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": "Next"}]})
    body = {"model": "m", "max_tokens": 8, "system": SYSTEM, "tools": TOOLS, "messages": messages}
    chat = decode(json.dumps(body).encode(), MessagesRequest).chat()
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert chat.messages[3].content == session.file  # the file, as read_file's result
    assert session.results([{"type": "text", "text": "no calls"}]) == []
