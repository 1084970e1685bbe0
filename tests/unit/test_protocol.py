from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.channel import protocol as p
from duo.core.draft import Draft, delta, merge
from duo.errors import ProtocolError

MESSAGES = [
    p.Hello(1, 49152, "0123456789abcdef", "gpu-box"),
    p.Welcome(1, 2),
    p.Refuse("the draft model's vocabulary differs"),
    p.Begin(7, (1, 2, 3)),
    p.Commit(7, 3, (4, 5)),
    p.End(7),
    p.DraftMsg(7, 5, (6, 7, 8)),
    p.Append((9,)),
]


@pytest.mark.parametrize("msg", MESSAGES)
@pytest.mark.parametrize("width", [2, 4])
def test_roundtrip(msg: p.Message, width: int) -> None:
    assert p.decode(p.encode(msg, width), width) == msg


def test_frames_are_small() -> None:
    assert len(p.encode(p.Append((123,)), 2)) == 3  # 1 byte of header + a 2-byte token
    assert len(p.encode(p.Commit(1, 100, (5, 6)), 2)) == 13


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xff",
        b"\x04\x01",
        b"\x05\x01\x00\x00\x00\x02",
        b"\x06\x01\x00\x00\x00\x00",
        b"\x07\x01\x00\x00\x00\x00\x00\x00\x00\x01",
        b"\x02\x01\x00\x03",
        "text frame",
    ],
)
def test_malformed_frames_raise_protocol_error(frame: bytes | str) -> None:
    with pytest.raises(ProtocolError):
        p.decode(frame, 2)


def test_tokens_must_fit_the_width() -> None:
    with pytest.raises(ProtocolError):
        p.encode(p.Append((70000,)), 2)


@given(
    st.lists(st.integers(0, 5), max_size=12),
    st.lists(st.integers(0, 5), max_size=12),
    st.integers(0, 4),
)
def test_delta_then_merge_reproduces_the_draft(old: list[int], new: list[int], shift: int) -> None:
    """What a back sends (delta) is what the lead needs to hold the back's draft (merge)."""
    sent = Draft(10, tuple(old))
    draft = Draft(10 + min(shift, len(old)), tuple(new))
    d = delta(sent, draft)
    held = sent if d is None else merge(sent, d.start, d.tokens)
    offset = draft.start - held.start
    assert held.tokens[offset : offset + len(draft.tokens)] == draft.tokens
