"""A main model with several sequences (the lead's slots), on the real default model."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from duo.errors import PromptTooLong
from duo.llama.backend import Model

pytestmark = pytest.mark.integration


LAYOUTS = pytest.mark.parametrize("shared", [True, False], ids=["one-buffer", "buffer-each"])


@LAYOUTS
def test_every_sequence_has_room_for_its_whole_context(
    pair: tuple[Path, Path], shared: bool
) -> None:
    with Model(pair[0], n_ctx=256, n_seq=3, shared=shared) as model:
        assert model.n_ctx == 256
        assert model.shares_cells == shared
        filler = model.vocab.tokenize("The quick brown fox jumps over the lazy dog. " * 40)
        # Fill the sequences a piece at a time, interleaved, so their cells mix in the
        # shared buffer; every one still takes its whole context.
        for start in range(0, 256, 64):
            parts = [(seq, filler[start + seq : start + seq + 64]) for seq in range(3)]
            model.decode_batch(parts)
        assert [len(model.seqs[seq]) for seq in range(3)] == [256, 256, 256]
        with pytest.raises(PromptTooLong):
            model.decode(filler[:1], seq=1)
        model.truncate(200, seq=1)  # room again, for that sequence only
        model.decode(filler[:8], seq=1)
        with pytest.raises(PromptTooLong):
            model.decode(filler[:1], seq=0)


@LAYOUTS
def test_a_mixed_batch_predicts_what_each_sequence_predicts_alone(
    pair: tuple[Path, Path], shared: bool
) -> None:
    """Sequences holding different numbers of tokens in one pass (a draft in one slot, a
    piece of prompt in another) get the same predictions as each decoded by itself."""
    texts = ["Paris is the capital of", "One, two, three, four,", "def add(a, b):\n    return"]
    with (
        Model(pair[0], n_ctx=256) as alone,
        Model(pair[0], n_ctx=256, n_seq=3, shared=shared) as several,
    ):
        prompts = [alone.vocab.tokenize(t) for t in texts]
        expected = []
        for prompt in prompts:
            alone.truncate(0)
            expected.append(np.argmax(alone.decode(prompt), axis=1).tolist())
        rows = several.decode_batch([(seq, prompt) for seq, prompt in enumerate(prompts)])
        assert [np.argmax(r, axis=1).tolist() for r in rows] == expected


@LAYOUTS
def test_a_forked_prefix_predicts_what_reading_it_predicts(
    pair: tuple[Path, Path], shared: bool
) -> None:
    """A sequence that takes the first n tokens of another (shared cells in one buffer, a
    copy of the other's buffer with a buffer each) then predicts what it predicts having
    read them itself; the other sequence keeps all it held."""
    text = "You are a careful assistant. Answer briefly. Question: name three rivers in"
    with Model(pair[0], n_ctx=256, n_seq=3, shared=shared) as model:
        tokens = model.vocab.tokenize(text)
        n = len(tokens) - 4
        model.decode(tokens, all_logits=False, seq=0)
        model.decode(tokens[:3], all_logits=False, seq=2)  # a sequence left as it is
        model.decode(tokens[:5], all_logits=False, seq=1)  # what the fork replaces
        model.fork(0, 1, n)
        assert model.seqs[1] == tokens[:n]
        forked = np.argmax(model.decode(tokens[n:], seq=1), axis=1).tolist()
        model.truncate(0, seq=1)
        model.decode(tokens[:n], all_logits=False, seq=1)
        read = np.argmax(model.decode(tokens[n:], seq=1), axis=1).tolist()
        assert forked == read
        assert model.seqs[0] == tokens and model.seqs[2] == tokens[:3]
        more = np.argmax(model.decode(tokens[:4], seq=0), axis=1).tolist()  # still usable
        assert len(more) == 4


def test_a_parked_sequence_frees_its_cells_and_predicts_as_before(pair: tuple[Path, Path]) -> None:
    """park saves a sequence's KV cells to host memory and frees them; used again
    (continued, forked from, truncated), it predicts what it predicted before."""
    text = "You are a careful assistant. Answer briefly. Question: name three rivers in"
    with Model(pair[0], n_ctx=256, n_seq=3) as model:
        tokens = model.vocab.tokenize(text)
        n = len(tokens) - 4
        model.decode(tokens[:n], all_logits=False)
        expected = np.argmax(model.decode(tokens[n:]), axis=1).tolist()
        model.truncate(n)
        assert not model.park(0, limit=1024)  # more than the memory allowed
        assert model.park(0, limit=2**30)
        assert model.parked_bytes > 1024 and model.seqs[0] == tokens[:n]
        assert model._lib.llama_memory_seq_pos_max(model._mem, 0) == -1  # no cells left
        assert not model.park(0, limit=2**30)  # parked already
        model.decode(tokens[:5], all_logits=False, seq=1)  # the others go on meanwhile
        model.fork(0, 2, n - 2)  # copied from host memory; sequence 0 stays parked
        assert model.seqs[2] == tokens[: n - 2] and model.parked_bytes > 1024
        forked = np.argmax(model.decode(tokens[n - 2 :], seq=2), axis=1).tolist()
        assert forked[2:] == expected
        continued = np.argmax(model.decode(tokens[n:]), axis=1).tolist()  # back first
        assert continued == expected and model.parked_bytes == 0
        model.park(0, limit=2**30)
        model.truncate(n)  # back, and cut
        assert np.argmax(model.decode(tokens[n:]), axis=1).tolist() == expected
        model.park(0, limit=2**30)
        model.truncate(0)  # forgotten without coming back
        assert model.seqs[0] == [] and model.parked_bytes == 0
    with Model(pair[0], n_ctx=256, n_seq=3, shared=False) as model:
        model.decode(tokens, all_logits=False)
        assert not model.park(0, limit=2**30)  # its own buffer slows no one


def test_deterministic_logits_do_not_depend_on_the_rest_of_the_pass(
    pair: tuple[Path, Path],
) -> None:
    """With --deterministic, a sequence's logits are bit for bit those of the same tokens
    decoded alone, whatever else each pass holds: pieces of prompt of any size (one token
    too), other sequences' parts before and after it, one-token rounds."""
    text = "Rewrite this list as JSON: apples 3, pears 5, plums 7, and figs 11."
    with Model(pair[0], n_ctx=256, deterministic=True) as alone:
        tokens = alone.vocab.tokenize(text)
        last = alone.decode(tokens[:-5], all_logits=False)[-1].copy()
        alone.truncate(len(tokens) - 6)
        assert np.array_equal(alone.decode(tokens[-6:-5])[-1], last)  # the row asked for
        expected = [alone.decode(tokens[-5:-4]).copy(), alone.decode(tokens[-4:]).copy()]
    rng = random.Random(7)
    with Model(pair[0], n_ctx=256, n_seq=4, deterministic=True) as shared:
        for seq in range(4):
            shared.truncate(0, seq)
            others = [s for s in range(4) if s != seq]
            done = 0
            while done < len(tokens) - 5:  # the prompt in pieces of 1 to 5 tokens
                piece = tokens[done : min(done + rng.randint(1, 5), len(tokens) - 5)]
                shared.decode_batch(_beside(shared, rng, others, tokens), [(seq, piece)])
                done += len(piece)
            got = []
            for part in (tokens[-5:-4], tokens[-4:]):  # a one-token round, then a draft
                parts = sorted([(seq, part), *_beside(shared, rng, others, tokens)])
                rows = shared.decode_batch(parts)
                got.append(rows[[s for s, _ in parts].index(seq)].copy())
            assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))


def test_the_end_of_a_prompt_and_the_first_round_in_one_pass(pair: tuple[Path, Path]) -> None:
    """A sequence's last piece of prompt (no logits) and its first round (logits) in the
    same pass, beside other sequences: with --deterministic, the first round's logits are
    bit for bit those of the prompt read first and the round decoded after it."""
    text = "Rewrite this list as JSON: apples 3, pears 5, plums 7, and figs 11."
    with Model(pair[0], n_ctx=256, deterministic=True) as alone:
        tokens = alone.vocab.tokenize(text)
        alone.decode(tokens[:-3], all_logits=False)
        expected = alone.decode(tokens[-3:]).copy()  # the last prompt token and a draft
    rng = random.Random(3)
    with Model(pair[0], n_ctx=256, n_seq=3, deterministic=True) as shared:
        shared.decode_batch(_beside(shared, rng, [1, 2], tokens), [(0, tokens[:10])])
        parts = sorted([(0, tokens[-3:]), *_beside(shared, rng, [1, 2], tokens)])
        rows = shared.decode_batch(parts, [(0, tokens[10:-3])])
        assert shared.seqs[0] == tokens
        assert np.array_equal(rows[[s for s, _ in parts].index(0)], expected)
        with pytest.raises(ValueError, match="one part and one piece"):
            shared.decode_batch([(1, tokens[:1])], [(1, tokens[:2]), (1, tokens[:2])])


def _beside(
    model: Model, rng: random.Random, seqs: list[int], tokens: list[int]
) -> list[tuple[int, list[int]]]:
    """Parts of 1 to 4 tokens for some of the other sequences (restarted when full)."""
    parts = []
    for seq in rng.sample(seqs, rng.randint(0, len(seqs))):
        if len(model.seqs[seq]) > 200:
            model.truncate(0, seq)
        parts.append((seq, tokens[: rng.randint(1, 4)]))
    return sorted(parts)


def test_a_sequence_holds_the_context_asked_for(pair: tuple[Path, Path]) -> None:
    """llama.cpp rounds a context up to 256 cells; -c 8 still means 8 tokens, not 256."""
    for n_seq in (1, 3):
        with Model(pair[0], n_ctx=8, n_seq=n_seq) as model:
            assert model.n_ctx == 8
