"""Server-sent events (the WHATWG `text/event-stream` format), written and read in one place:
the lead's streams, the web page's feed and the supervisor write them; `duo chat`, the bench
and the tests read them.

    encode(data, event=None)   one event: JSON (or text) as its data, named if given
    iter_events(lines)         a stream's events, as the format defines them
    json_events(lines)         the JSON objects of a stream's data, up to `[DONE]`

Read as browsers read them: a line `field: value` (one space after the colon dropped, or
none), `data` lines joined by newlines, `event` naming the event, `:` lines ignored, a blank
line ending the event; a stream that ends mid-event ends that event too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"  # OpenAI's last event


@dataclass(frozen=True)
class Event:
    data: str
    name: str | None = None  # its `event:` field; None: unnamed (a "message")

    def json(self) -> Any:
        return json.loads(self.data)


def encode(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One event: its JSON (compact) or text as `data`, named `event` if given (as
    Anthropic's and the Responses API's streams and the web page's feed name theirs)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    named = "" if event is None else f"event: {event}\n"
    return f"{named}data: {payload}\n\n".encode()


def iter_events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of a stream's lines (with or without their line ends)."""
    name: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Event("\n".join(data), name)
            name, data = None, []
            continue
        if line.startswith(":"):
            continue  # a comment: a keep-alive
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:
        yield Event("\n".join(data), name)


def json_events(lines: Iterable[str]) -> Iterator[Any]:
    """The JSON value of each event's data, up to OpenAI's `[DONE]` (a ValueError if one
    is not JSON)."""
    for event in iter_events(lines):
        if event.data == DONE:
            return
        yield event.json()
