"""How the engine shares its passes: prompt pieces beside the running requests' rounds,
and turns of equal time between the two (pure: token counts and seconds in, a plan out).

While other requests run, a new prompt is evaluated in pieces alongside their rounds.
By default (PIECE_STRETCH, no bound) a prompt longer than what one pass holds is read in
turns of equal time with the running requests (`Turns`): a pass of up to n_batch prompt
tokens beside their tokens, then as long in rounds that carry at most TURN_STRETCH times
a round's cost of prompt tokens, shortest prompt first. A running stream then waits for
one pass at most, a short request that comes meanwhile is read and answered in the
running requests' turn, not after the long prompt, and the long prompt is read at half
speed or more. A prompt that fits one pass is read in it, as llama-server reads it (with
four clients on agent sessions that halved the time to first token against a stretch of
2.5 at the same throughput, docs/bench/prompt-pieces.md). `duo lead --prompt-stretch X`
bounds every round instead: one with a piece costs at most X times a round of every
admitted request (the running ones and those reading their prompts), by the measured cost
of a pass; a piece has at least PIECE_LEAST tokens, so every prompt moves on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

PIECE_STRETCH = math.inf
TURN_STRETCH = 1.5
PIECE_LEAST = 4


class Reading(Protocol):
    """A request as the schedule sees it: the prompt tokens it still has to read, and
    when it took its slot."""

    @property
    def prompt(self) -> list[int]: ...

    @property
    def since(self) -> float: ...


R = TypeVar("R", bound=Reading)


class Room(Protocol):
    def room(self, tokens: int, stretch: float, most: int, reference: int = 0) -> int: ...


def prompt_room(
    costs: Room, n_batch: int, decoding: int, admitted: int, stretch: float, turn: bool = False
) -> int:
    """Prompt tokens a round may evaluate beside the `decoding` requests' tokens (each at
    least one) while it costs at most `stretch` times a round of every `admitted` request
    (by `costs`, the measured cost of a pass): whole batches when nothing else runs, but
    in the running requests' `turn`."""
    if not decoding and not turn:
        return n_batch
    room = costs.room(decoding, stretch, n_batch - decoding, admitted)
    return max(room, PIECE_LEAST)


def prompt_pieces(feeding: Sequence[R], room: int, whole: int = 0) -> list[tuple[R, list[int]]]:
    """The prompt tokens a round evaluates: up to `room` in all, or up to `whole` for the
    prompts it reads to their end, each with its first round's token; the shortest rest of
    a prompt first (a short request is not held behind a long prompt; a long one still
    gets what the short ones leave of every pass). A prompt evaluated in pieces alongside
    the running requests' rounds delays each of their rounds a little, where a pass of its
    own would stall them all for the whole prompt."""
    pieces = []
    for running in sorted(feeding, key=lambda r: (len(r.prompt), r.since)):
        prompt = running.prompt
        if len(prompt) < max(room, whole):  # it ends here: its first round rides too
            piece, used = prompt, len(prompt) + 1
        else:
            piece = prompt[: min(max(room, 0), len(prompt) - 1)]
            used = len(piece)
        if not piece:
            break
        pieces.append((running, piece))
        room, whole = room - used, whole - used
    return pieces


class Turns:
    """The seconds the running requests are owed: after the pieces (stepping calls, and
    prompts read in whole passes) took T seconds, the requests' rounds run for T seconds.
    `clock`: seconds, injected so a test can drive it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.owed = 0.0

    def requests_turn(self, served: bool) -> bool:
        """Whether the next turn is the running requests': some are owed time, and some
        of them can be served (Engine._served)."""
        return self.owed > 0 and served

    def served_for(self, seconds: float) -> None:
        """The requests' turn took `seconds` of what they are owed."""
        self.owed -= seconds

    def pieces_took(self, seconds: float, owing: bool) -> None:
        """A turn of pieces took `seconds`; the requests are owed as long if `owing` (a
        call stepped, or a prompt longer than what a pass holds is being read)."""
        self.owed = seconds if owing else 0.0
