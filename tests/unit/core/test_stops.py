from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duo.core.stops import StopMatcher


def run(pieces: list[str], stops: list[str]) -> tuple[str, bool]:
    m = StopMatcher(stops)
    out = "".join(m.feed(p) for p in pieces)
    return out + m.flush(), m.stopped


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["Hello", " world"], [], ("Hello world", False)),
        (["Hello", " wor", "ld!"], ["world"], ("Hello ", True)),
        (["a\n", "\nb"], ["\n\n"], ("a", True)),  # straddles two pieces
        (["abc STOP def"], ["STOP"], ("abc ", True)),  # inside one accepted chunk
        (["ab", "c"], ["abd"], ("abc", False)),  # a partial match that fails
        (["x", "y", "z"], ["yz", "xyz0"], ("x", True)),
    ],
)
def test_stop_strings(pieces: list[str], stops: list[str], expected: tuple[str, bool]) -> None:
    assert run(pieces, stops) == expected


@given(
    st.text("ab\n", max_size=30),
    st.lists(st.integers(1, 5), max_size=10),
    st.text("ab\n", min_size=1, max_size=3),
)
def test_matches_cutting_the_whole_text(text: str, cuts: list[int], stop: str) -> None:
    pieces, i = [], 0
    for c in cuts:
        pieces.append(text[i : i + c])
        i += c
    pieces.append(text[i:])
    out, stopped = run(pieces, [stop])
    idx = text.find(stop)
    assert out == (text[:idx] if idx >= 0 else text)
    assert stopped == (idx >= 0)
