"""How a lead cuts the prompts it reads into a pass (duo.lead.engine.schedule)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from duo.lead.engine.schedule import prompt_pieces


def pieces(prompts: list[list[int]], room: int, whole: int = 0) -> list[list[int]]:
    feeding: Any = [SimpleNamespace(prompt=p, since=i) for i, p in enumerate(prompts)]
    return [piece for _, piece in prompt_pieces(feeding, room, whole)]


def test_a_prompt_that_ends_in_the_pass_leaves_room_for_its_first_round() -> None:
    assert pieces([[1] * 10], 12) == [[1] * 10]  # 10 + its first token fit 12
    assert pieces([[1] * 12], 12) == [[1] * 11]  # it ends in the next pass instead
    assert pieces([[1] * 11], 12) == [[1] * 11]
    assert pieces([[1] * 5, [2] * 9], 12) == [[1] * 5, [2] * 6]  # 5 + 1, then 6 left
    assert pieces([[1] * 2, [2] * 3], 4) == [[1] * 2, [2]]  # then what is left: a piece


def test_the_shortest_prompt_is_read_first() -> None:
    """A short request that comes while a long prompt is read is not held behind it."""
    assert pieces([[1] * 900, [2] * 5], 12) == [[2] * 5, [1] * 6]
    assert pieces([[1] * 3, [2] * 2], 4) == [[2] * 2, [1]]  # the older one, a token of it
    assert pieces([[1] * 3, [2] * 3], 4) == [[1] * 3]  # as long: the older first


def test_in_the_running_requests_turn_a_prompt_that_ends_is_read_whole() -> None:
    """The turn reads a long prompt a few tokens a round, and a short one to its end."""
    assert pieces([[1] * 900], 4, 500) == [[1] * 4]
    assert pieces([[1] * 900, [2] * 50], 60, 500) == [[2] * 50, [1] * 9]
    assert pieces([[1] * 900, [2] * 50], 4, 500) == [[2] * 50]  # the room is spent
    assert pieces([[2] * 50], 4, 40) == [[2] * 4]  # too long to end in the pass
