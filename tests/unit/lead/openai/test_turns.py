"""A chat reply read as blocks (duo.lead.openai.turns): thoughts, text and tool calls, each
opened, grown and closed in order, whatever the pieces the text arrives in."""

from __future__ import annotations

import pytest

from duo.core.stats import Stats
from duo.lead.engine.events import Done
from duo.lead.openai.replies import ChatReply
from duo.lead.openai.turns import Closed, Ended, Grown, Opened, Step, _Blocks
from duo.lead.tools.calls import Tools

TOOL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
REPLY = (
    '<think>Look first.</think>\n\nI will run it.<tool_call>\n{"name": "shell", '
    '"arguments": {"command": ["ls"]}}\n</tool_call>'
)


def steps_of(pieces: list[str], finish: str = "stop", word: str = "") -> list[Step]:
    reply = ChatReply(0, Tools([TOOL], "auto"), reasoning="deepseek")
    blocks = _Blocks()
    steps: list[Step] = []
    for piece in pieces:
        steps += blocks.entries(reply.text(piece))
    return steps + blocks.end(reply.end(finish), Done(finish, Stats(), word))  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 3, 7, len(REPLY)])
def test_thoughts_text_and_a_call_become_three_blocks(size: int) -> None:
    steps = steps_of([REPLY[i : i + size] for i in range(0, len(REPLY), size)])
    ended = steps[-1]
    assert isinstance(ended, Ended) and ended.finish == "tool_calls"
    kinds = [(b.kind, b.text) for b in ended.blocks]
    assert kinds == [
        ("thinking", "Look first."),
        ("text", "I will run it."),
        ("call", '{"command": ["ls"]}'),
    ]
    assert ended.blocks[2].name == "shell" and ended.blocks[2].call_id.startswith("call_")
    # Each block opens once, grows, and closes before the next one opens.
    order = [(type(s).__name__, s.block.index) for s in steps if not isinstance(s, Ended)]
    opened = [i for name, i in order if name == "Opened"]
    closed = [i for name, i in order if name == "Closed"]
    assert opened == closed == [0, 1, 2]
    for index in range(3):
        at = [k for k, (_, i) in enumerate(order) if i == index]
        assert order[at[0]][0] == "Opened" and order[at[-1]][0] == "Closed"
        grown = "".join(s.delta for s in steps if isinstance(s, Grown) and s.block.index == index)
        assert grown == ended.blocks[index].text


def test_plain_text_is_one_block_and_a_stop_word_is_kept() -> None:
    steps = steps_of(["Hello", ", world"], word="\n\n")
    assert isinstance(steps[0], Opened) and isinstance(steps[-2], Closed)
    ended = steps[-1]
    assert isinstance(ended, Ended) and ended.word == "\n\n" and ended.finish == "stop"
    assert [(b.kind, b.text) for b in ended.blocks] == [("text", "Hello, world")]


def test_an_empty_reply_has_no_blocks() -> None:
    ended = steps_of([], finish="length")[-1]
    assert isinstance(ended, Ended) and ended.blocks == [] and ended.finish == "length"
