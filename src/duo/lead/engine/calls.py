"""Calls: work for the engine thread on one sequence of the main model, between rounds (a
drafter-driven client's verification, a /prefill). A call whose function returns a
generator runs a step of it between two rounds, holding its slot until it returns: a long
prompt read in pieces, never one pass that holds up everyone else's rounds."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from duo.core.rounds import MainModel


@dataclass(eq=False)
class Call:
    fn: Callable[[MainModel], Any]
    tokens: list[int]  # what it will evaluate: the free slot that shares most is chosen
    future: Future[Any] = field(default_factory=Future)


class Stepping:
    """The calls that hold a slot while they run a step at a time, by slot."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[Call, Generator[Any, None, Any]]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, slot: object) -> bool:
        return slot in self._held

    def __iter__(self) -> Iterator[Call]:
        return iter([call for call, _ in self._held.values()])

    def start(self, call: Call, slot: int, seq: MainModel) -> None:
        """Run `call` on sequence `seq` of slot `slot`: at once, or its first step now."""
        try:
            result = call.fn(seq)
        except Exception as e:
            call.future.set_exception(e)
            return
        if isinstance(result, Generator):
            self._held[slot] = (call, result)
            self._step(slot)
        else:
            call.future.set_result(result)

    def step_all(self) -> bool:
        """A step of every call that holds a slot; whether there was any."""
        stepped = bool(self._held)
        for slot in list(self._held):
            self._step(slot)
        return stepped

    def _step(self, slot: int) -> None:
        call, steps = self._held[slot]
        try:
            next(steps)
        except StopIteration as done:
            del self._held[slot]
            call.future.set_result(done.value)
        except Exception as e:
            del self._held[slot]
            call.future.set_exception(e)
