"""The agent sessions of `duo bench --suite agent-edit` (duo.bench.harness.agents): the same
every time, the same requests for every server, and valid Messages API requests."""

from __future__ import annotations

import json

from duo.bench.harness.agents import SYSTEM, TOOLS, agent_sessions
from duo.lead.anthropic.requests import MessagesRequest
from duo.lead.body import decode


def test_sessions_are_the_same_every_time_and_differ_from_each_other() -> None:
    first, again = agent_sessions(), agent_sessions()
    assert first == again and len(first) == 8
    assert len({s.files[0] for s in first}) == 8
    assert all(len(s.asks) == 3 and len(s.files) == 3 for s in first)


def test_each_edit_is_made_right_in_the_history() -> None:
    session = agent_sessions(1)[0]
    original, renamed, retyped = session.files
    assert "load_" in original and "load_" not in renamed and "read_" in renamed
    assert "ValueError" in renamed and "ValueError" not in retyped and "TypeError" in retyped
    call, result = session.after(0)
    written = call["content"][0]
    assert written["name"] == "write_file" and written["input"]["content"] == renamed
    assert result["content"][0]["tool_use_id"] == written["id"]
    assert result["content"][1] == {"type": "text", "text": session.asks[1]}


def test_a_session_s_requests_are_valid_messages_requests() -> None:
    session = agent_sessions(1)[0]
    messages = [*session.opening(), *session.after(0), *session.after(1)]
    body = {"model": "m", "max_tokens": 8, "system": SYSTEM, "tools": TOOLS, "messages": messages}
    chat = decode(json.dumps(body).encode(), MessagesRequest).chat()
    roles = [m.role for m in chat.messages]
    assert roles == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user", "assistant", "tool",
        "user",
    ]  # fmt: skip
    assert chat.messages[3].content == session.files[0]  # the file, as read_file's result
    assert chat.messages[-1].content == session.asks[2]
