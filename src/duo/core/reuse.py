"""Reusing moved chunks of a KV cache (llama-server's `--cache-reuse N`).

An editor's requests share most of their context, but not as a prefix: a chunk of another
file enters or leaves the prompt's head, and everything after it moves. The KV cells of a
run of cached tokens that the new prompt holds again, further back or forward, can be
shifted to their new positions (llama.cpp re-applies RoPE to the keys: `seq_add`) instead
of being computed again. The shifted keys differ from freshly computed ones by float
rounding only; attention over them is the same maths.

`chunk_moves` finds the runs as llama-server does (server-context.cpp, the slot's prompt
loop): after the shared prefix, walk the cache and the prompt together; a run of at least
`least` equal tokens is kept and shifted into place, else the cache's head moves on by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    """Cached tokens [src, src + n) become prompt positions [dst, dst + n) (dst <= src)."""

    src: int
    dst: int
    n: int


def chunk_moves(
    cached: Sequence[int], prompt: Sequence[int], start: int, least: int, floor: int = 0
) -> list[Move]:
    """The moves that extend a shared prefix of `start` tokens, in order, each of at least
    `least` tokens (least < 1: none); a run starting below `floor` is not moved (cells a
    sequence shares with another must keep their positions)."""
    if least < 1:
        return []
    moves: list[Move] = []
    head_c = head_p = start
    while head_c < len(cached) and head_p < len(prompt):
        n = 0
        while (
            head_c + n < len(cached)
            and head_p + n < len(prompt)
            and cached[head_c + n] == prompt[head_p + n]
        ):
            n += 1
        if n >= least and head_c >= floor:
            moves.append(Move(head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves
