"""Server-sent events written and read (duo.sse), as the format defines them."""

from __future__ import annotations

import pytest

from duo.sse import DONE, Event, encode, iter_events, json_events


def test_an_event_is_written_compact_and_named_when_asked() -> None:
    assert encode({"a": [1, 2]}) == b'data: {"a":[1,2]}\n\n'
    assert encode({"type": "message_stop"}, "message_stop") == (
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert encode(DONE) == b"data: [DONE]\n\n"


def test_what_is_written_is_read_back() -> None:
    stream = b"".join([encode({"n": 1}, "first"), encode({"n": 2}), encode(DONE)]).decode()
    assert list(iter_events(stream.splitlines())) == [
        Event('{"n":1}', "first"),
        Event('{"n":2}'),
        Event(DONE),
    ]
    assert list(json_events(stream.splitlines(keepends=True))) == [{"n": 1}, {"n": 2}]


@pytest.mark.parametrize(
    ("lines", "events"),
    [
        (["data:no space", ""], [Event("no space")]),
        (["data: two", "data: lines", ""], [Event("two\nlines")]),
        ([": keep-alive", "", "data: x", ""], [Event("x")]),
        (["event: ping", ""], []),  # no data: no event
        (["data: cut off"], [Event("cut off")]),  # the stream ended mid-event
        (["id: 7", "retry: 10", "data: x\r\n", "\r\n"], [Event("x")]),
    ],
)
def test_the_format_s_rules(lines: list[str], events: list[Event]) -> None:
    assert list(iter_events(lines)) == events


def test_json_events_stop_at_done_and_refuse_what_is_not_json() -> None:
    assert list(json_events(["data: 1", "", "data: [DONE]", "", "data: 2", ""])) == [1]
    with pytest.raises(ValueError):
        list(json_events(["data: {oops", ""]))
