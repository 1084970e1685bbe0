"""A main model with several sequences (the lead's slots), on the real default model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from duo.errors import PromptTooLong
from duo.llama.backend import Model

pytestmark = pytest.mark.integration


def test_every_sequence_has_room_for_its_whole_context(pair: tuple[Path, Path]) -> None:
    with Model(pair[0], n_ctx=256, n_seq=3) as model:
        assert model.n_ctx == 256
        filler = model.tokenize("The quick brown fox jumps over the lazy dog. " * 40)
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


def test_a_mixed_batch_predicts_what_each_sequence_predicts_alone(
    pair: tuple[Path, Path],
) -> None:
    """Sequences holding different numbers of tokens in one pass (a draft in one slot, a
    piece of prompt in another) get the same predictions as each decoded by itself."""
    texts = ["Paris is the capital of", "One, two, three, four,", "def add(a, b):\n    return"]
    with Model(pair[0], n_ctx=256) as alone, Model(pair[0], n_ctx=256, n_seq=3) as shared:
        prompts = [alone.tokenize(t) for t in texts]
        expected = []
        for prompt in prompts:
            alone.truncate(0)
            expected.append(np.argmax(alone.decode(prompt), axis=1).tolist())
        rows = shared.decode_batch([(seq, prompt) for seq, prompt in enumerate(prompts)])
        assert [np.argmax(r, axis=1).tolist() for r in rows] == expected
