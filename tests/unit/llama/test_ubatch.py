"""How a batch splits into llama.cpp's micro-batches, and the deterministic layout."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from duo.llama.ubatch import layout, ubatches


def test_consecutive_sequences_share_a_micro_batch_as_far_as_the_shortest_goes() -> None:
    assert ubatches([(0, 2), (1, 3)], 512) == [[2, 2], [0, 1]]
    assert ubatches([(0, 4), (1, 4), (2, 4), (3, 4)], 512) == [[4, 4, 4, 4]]
    # Sequence 2 does not follow 0: it waits for a micro-batch of its own.
    assert ubatches([(0, 2), (2, 3), (1, 1)], 512) == [[1, 0, 1], [1, 0, 0], [0, 3, 0]]
    # No micro-batch takes more than n_ubatch tokens.
    assert ubatches([(0, 6), (1, 6)], 8) == [[4, 4], [2, 2]]


def test_a_round_of_one_token_is_padded_and_computes_two_rows() -> None:
    assert layout([(0, [True])], 512) == [[True, True]]


def test_a_prompt_piece_of_one_token_is_padded_without_logits() -> None:
    assert layout([(0, [False])], 512) == [[False, False]]


def test_a_lone_row_of_logits_gets_a_second_one() -> None:
    # Sequence 0 verifies 2 tokens beside a 1-token piece of sequence 1's prompt: the first
    # micro-batch holds one token of each, of which one computes logits.
    assert layout([(0, [True, True]), (1, [False])], 512) == [[True, True, True], [True]]


parts = st.lists(st.tuples(st.booleans(), st.integers(1, 6)), min_size=1, max_size=4).flatmap(
    lambda ps: st.permutations(range(5)).map(
        lambda seqs: [(seqs[i], [logits] * n) for i, (logits, n) in enumerate(ps)]
    )
)


@given(parts, st.sampled_from([512, 16, 9]))
def test_no_micro_batch_has_one_token_or_one_row_of_logits(
    batch: list[tuple[int, list[bool]]], n_ubatch: int
) -> None:
    flags = layout(batch, n_ubatch)
    for (_, wanted), got in zip(batch, flags, strict=True):
        assert len(wanted) <= len(got) <= len(wanted) + 1  # at most one padding token
        assert all(g for w, g in zip(wanted, got, strict=False) if w)  # every row asked for
    split = ubatches([(seq, len(f)) for (seq, _), f in zip(batch, flags, strict=True)], n_ubatch)
    taken = [0] * len(batch)
    for u in split:
        assert sum(u) >= 2
        rows = 0
        for i, n in enumerate(u):
            rows += sum(flags[i][taken[i] : taken[i] + n])
            taken[i] += n
        assert rows != 1
