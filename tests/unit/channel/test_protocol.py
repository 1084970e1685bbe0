from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.channel import protocol as p
from duo.core.draft import Draft, delta, merge
from duo.errors import ProtocolError

MESSAGES = [
    p.Hello(3, 49152, "0123456789abcdef", "gpu-box"),  # version 3: no machine, no threads
    p.Hello(4, 49152, "0123456789abcdef", "gpu-box", "fedcba9876543210", 6),
    p.Rest(True),
    p.Rest(False),
    p.Welcome(1, 2),
    p.Refuse("the draft model's vocabulary differs"),
    p.Begin(7, (1, 2, 3)),
    p.Commit(7, 3, (4, 5)),
    p.End(7),
    p.DraftMsg(7, 5, (6, 7, 8)),
    p.Append((9,)),
    p.Branch(7, 6, 0, (10, 11)),
    p.Branch(7, 6, 2, (12,)),
]


@pytest.mark.parametrize("msg", MESSAGES)
@pytest.mark.parametrize("width", [2, 4])
def test_roundtrip(msg: p.Message, width: int) -> None:
    assert p.decode(p.encode(msg, width), width) == msg


def test_a_version_4_hello_carries_machine_and_threads_and_a_version_3_one_does_not() -> None:
    v4 = p.encode(p.Hello(4, 100, "00" * 8, "box", "11" * 8, 2))
    v3 = p.encode(p.Hello(3, 100, "00" * 8, "box"))
    assert len(v4) == len(v3) + 10
    assert p.decode(v3) == p.Hello(3, 100, "00" * 8, "box", "", 0)
    assert len(p.encode(p.Rest(True))) == 2


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
        b"\x09\x01\x00\x00\x00\x02\x00\x00",  # a BRANCH cut short of its `at`
        b"\x09\x01\x00\x00\x00\x02\x00\x00\x00\x00\x01",  # half a token
        b"\x0a",  # a REST without its flag
        b"\x0a\x02",  # a REST that is neither 0 nor 1
        b"\x0a\x01\x00",
        b"\x01\x04\x00\x00\xc0\x00\x00" + bytes(8),  # a version 4 HELLO without its machine
        "text frame",
    ],
)
def test_malformed_frames_raise_protocol_error(frame: bytes | str) -> None:
    with pytest.raises(ProtocolError):
        p.decode(frame, 2)


@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, p.MAX_AT),
    st.lists(st.integers(0, 99), max_size=p.MAX_DRAFT_TOKENS),
    st.sampled_from([2, 4]),
)
def test_a_branch_frame_round_trips_within_the_bounds(
    session: int, fork: int, at: int, tokens: list[int], width: int
) -> None:
    frame = p.encode(p.Branch(session, fork, at, tuple(tokens)), width)
    assert len(frame) == 10 + width * len(tokens)
    assert p.decode_draft(frame, width, 100) == p.Branch(session, fork, at, tuple(tokens))


def test_a_back_s_branch_is_refused_past_the_bounds() -> None:
    too_many = p.encode(p.Branch(1, 2, 0, (1,) * (p.MAX_DRAFT_TOKENS + 1)), 2)
    outside = p.encode(p.Branch(1, 2, 0, (5, 100)), 2)
    for frame in (too_many, outside, too_many[:9]):
        with pytest.raises(ProtocolError):
            p.decode_draft(frame, 2, 100)


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
