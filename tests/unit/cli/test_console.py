"""The lead's console: one generation streams; several at once show in marked lines."""

from __future__ import annotations

import io

from duo.cli.console import Console
from duo.core.text import GREEN, RESET, Chunk


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(color=False, out=out), out


def test_a_generation_alone_streams_as_it_is_made_unmarked() -> None:
    console, out = _console()
    console.show(2, Chunk("Hel", "lo"))
    assert out.getvalue() == "Hello"  # not held back for a whole line
    console.show(2, Chunk("", " there\nand"))
    console.show(2, " on\n")  # the end: its last text and a newline
    assert out.getvalue() == "Hello there\nand on\n"


def test_accepted_draft_text_is_green_on_a_terminal() -> None:
    out = io.StringIO()
    Console(color=True, out=out).show(0, Chunk("def", " f"))
    assert out.getvalue() == f"{GREEN}def{RESET} f"


def test_generations_at_once_show_in_whole_lines_marked_with_their_slots() -> None:
    console, out = _console()
    console.show(0, Chunk("", "one, "))
    console.show(1, Chunk("", "first"))  # the streaming line ends; both marked from here
    console.show(0, Chunk("", "two\nthree"))
    console.show(1, Chunk("", " line\nsecond"))
    console.show(0, "\n")
    assert out.getvalue() == "one, \n[0] two\n[1] first line\n[0] three\n"
    console.show(1, " line\n")
    assert out.getvalue().endswith("[0] three\n[1] second line\n")


def test_once_all_have_ended_the_next_generation_streams_again() -> None:
    console, out = _console()
    console.show(0, Chunk("", "a"))
    console.show(1, Chunk("", "b"))
    console.show(0, "\n")
    console.show(1, "\n")
    start = len(out.getvalue())
    console.show(3, Chunk("", "alone"))
    assert out.getvalue()[start:] == "alone"


def test_a_generation_that_ends_without_text_leaves_no_unfinished_line() -> None:
    console, out = _console()
    console.show(0, Chunk("", "partial"))
    console.show(0, "\n")  # failed or cancelled: its line is ended
    console.show(1, Chunk("", "next"))
    assert out.getvalue() == "partial\nnext"
