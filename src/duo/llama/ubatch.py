"""How llama.cpp splits a batch into micro-batches, and how a batch is laid out so that
every token's results are the same whatever else its pass holds (--deterministic).

llama.cpp computes a micro-batch of one token with other kernels than a larger one, and
the results differ in the last digits; so does its last layer, which it evaluates only for
the tokens that compute logits, when a micro-batch has one such token. A token's keys,
values and logits are otherwise the same whatever else its micro-batch holds (with a KV
buffer per sequence). So generations are bit-identical to the same requests served one at
a time as long as every micro-batch has two tokens or more, and none or two or more that
compute logits: a part of a batch that would end alone in a micro-batch gets one more
token (its last one repeated, at the next position), whose row and KV cell are thrown
away, and where one token would compute logits, a second one does too.

With a KV buffer per sequence, llama.cpp (llama_batch_allocr::split_equal, sequential)
takes, from the first part with tokens left, the following parts of consecutive sequence
IDs, and the same number of tokens from each: as many as the shortest of them has left.
(With one sequence, that is the batch whole, as llama.cpp's split_simple takes it.)
"""

from __future__ import annotations

from collections.abc import Sequence


def ubatches(parts: Sequence[tuple[int, int]], n_ubatch: int) -> list[list[int]]:
    """The micro-batches of a batch of `parts` [(sequence ID, tokens), ...] (in batch
    order, one part per sequence, a KV buffer per sequence): for each, the number of tokens
    it takes from each part."""
    left = [n for _, n in parts]
    out: list[list[int]] = []
    while any(left):
        chosen: list[int] = []
        for i, (seq, _) in enumerate(parts):
            if left[i] and (not chosen or seq == parts[chosen[-1]][0] + 1):
                chosen.append(i)
        each = 0
        while all(left[i] > each for i in chosen):
            each += 1
            if (each + 1) * len(chosen) > n_ubatch:
                break
        taken = [0] * len(parts)
        for i in chosen:
            taken[i] = each
            left[i] -= each
        out.append(taken)
    return out


def layout(parts: Sequence[tuple[int, Sequence[bool]]], n_ubatch: int) -> list[list[bool]]:
    """Where a batch of `parts` [(sequence ID, whether each token computes logits), ...]
    keeps every micro-batch at two tokens or more, and at none or two or more tokens that
    compute logits (llama.cpp evaluates the last layer only for those): for each part, the
    flags of the tokens it puts in the batch. A part that would end alone in a micro-batch
    gets a padding token flagged as its last one; in a micro-batch with one token that
    computes logits, another one does too."""
    flags = [list(f) for _, f in parts]
    for _ in range(len(parts) + 1):
        sizes = [(seq, len(f)) for (seq, _), f in zip(parts, flags, strict=True)]
        split = ubatches(sizes, n_ubatch)
        lone = [u.index(1) for u in split if sum(u) == 1]
        if not lone:
            break
        flags[lone[0]].append(flags[lone[0]][-1])
    done = [0] * len(parts)
    for u in split:
        spans = [(i, done[i], done[i] + n) for i, n in enumerate(u) if n]
        for i, _, end in spans:
            done[i] = end
        if sum(sum(flags[i][start:end]) for i, start, end in spans) == 1:
            i, j = next((i, j) for i, a, b in spans for j in range(a, b) if not flags[i][j])
            flags[i][j] = True
    return flags
