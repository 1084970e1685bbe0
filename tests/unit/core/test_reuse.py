"""Which moved runs of a slot's cache a new prompt reuses (llama-server's --cache-reuse)."""

from __future__ import annotations

import pytest

from duo.core.reuse import Move, chunk_moves

CASES = {
    # cached, prompt, shared prefix, least run, floor -> moves
    "a chunk left the head: the rest moves back": (
        "AB" + "xxxx" + "cdefgh",
        "AB" + "cdefgh",
        2,
        4,
        0,
        [Move(6, 2, 6)],
    ),
    "a run shorter than the least is read again": (
        "AB" + "xx" + "cde" + "yy",
        "AB" + "cde",
        2,
        4,
        0,
        [],
    ),
    "two runs, each moved after the one before": (
        "AB" + "x" + "cdef" + "y" + "ghij",
        "AB" + "cdef" + "ghij",
        2,
        4,
        0,
        [Move(3, 2, 4), Move(8, 6, 4)],
    ),
    "a run below the floor keeps its cells' positions": (
        "AB" + "xxxx" + "cdefgh",
        "AB" + "cdefgh",
        2,
        4,
        7,
        [],
    ),
    "off": ("AB" + "xxxx" + "cdefgh", "AB" + "cdefgh", 2, 0, 0, []),
    "the prompt's head never skips: a later run is not taken": (
        "AB" + "x" + "cdef",
        "AB" + "z" + "cdef",
        2,
        4,
        0,
        [],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_moved_runs_are_found_as_llama_server_finds_them(case: str) -> None:
    cached, prompt, start, least, floor, moves = CASES[case]
    assert chunk_moves(list(cached), list(prompt), start, least, floor) == moves


def test_each_move_lands_where_the_prompt_holds_its_tokens() -> None:
    cached = list("ABxxcdefgyyhijkl")
    prompt = list("ABcdefghijklmn")
    for m in chunk_moves(cached, prompt, 2, 3):
        assert m.dst <= m.src
        assert cached[m.src : m.src + m.n] == prompt[m.dst : m.dst + m.n]
