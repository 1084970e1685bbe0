"""A reasoning model's thoughts apart from its answer, whole and while streaming."""

from __future__ import annotations

import itertools

import pytest

from duo.lead.openai.reasoning import Thoughts, opened_by, split

CASES = [
    # (reply, opened by the prompt, thoughts, answer)
    ("Paris.", False, None, "Paris."),
    ("<think>It is Paris.</think>\n\nParis.", False, "It is Paris.", "Paris."),
    ("\n<think>a < b</think>b", False, "a < b", "b"),
    ("<think>still thinking", False, "still thinking", ""),
    ("It is Paris.</think>\nParis.", True, "It is Paris.", "Paris."),
    ("no tag at all", True, "no tag at all", ""),
    ("<thing>not a tag", False, None, "<thing>not a tag"),
    ("Say <think> later", False, None, "Say <think> later"),
    ("<think></think>", False, "", ""),
    ("  ", False, None, "  "),
    ("<thi", False, None, "<thi"),
]


@pytest.mark.parametrize(("text", "opened", "thoughts", "answer"), CASES)
def test_split(text: str, opened: bool, thoughts: str | None, answer: str) -> None:
    assert split(text, opened) == (thoughts, answer)


@pytest.mark.parametrize(("text", "opened", "thoughts", "answer"), CASES)
def test_streamed_in_any_pieces_joins_to_the_whole(
    text: str, opened: bool, thoughts: str | None, answer: str
) -> None:
    for cuts in itertools.combinations(range(1, len(text)), min(2, max(0, len(text) - 1))):
        bounds = [0, *cuts, len(text)]
        stream = Thoughts(opened)
        pieces = [stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
        pieces.append(stream.finish())
        assert "".join(t for t, _ in pieces) == (thoughts or "")
        assert "".join(a for _, a in pieces) == answer


def test_thoughts_go_out_as_they_come() -> None:
    stream = Thoughts()
    assert stream.feed("<think>Fir") == ("Fir", "")
    assert stream.feed("st</thi") == ("st", "")  # the tag's beginning is held back
    assert stream.feed("nk>\n") == ("", "")
    assert stream.feed("Answer") == ("", "Answer")


def test_opened_by() -> None:
    assert opened_by("<|im_start|>assistant\n<think>\n")
    assert not opened_by("<|im_start|>assistant\n")
