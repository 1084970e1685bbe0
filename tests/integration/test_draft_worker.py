"""The draft worker (duo.drafting.drafter) on the real default draft model."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.drafting.drafter import DraftWorker
from duo.llama.backend import Model
from tests.unit.fakes import Published

pytestmark = pytest.mark.integration


def _drafts_after_a_return(path: Path, cache_bytes: int) -> tuple[tuple[int, ...], int, int]:
    """Two generations; the first ends while the second drafts on, and a third takes up the
    first one's text: the third's draft, and the bytes parked before and after it."""
    with Model(path, n_ctx=512, n_seq=2) as model:
        published = Published()
        worker = DraftWorker(model, published, sequences=2, max_ahead=6, cache_bytes=cache_bytes)
        worker.start()
        try:
            p = model.vocab.tokenize("The three largest rivers of Europe are the")
            q = model.vocab.tokenize("def fibonacci(n):\n    ")
            worker.begin(10, p)
            worker.begin(11, q)
            first = published.wait_for(10, len(p), 6, timeout=60).tokens
            second = published.wait_for(11, len(q), 6, timeout=60).tokens
            worker.end(10)
            worker.commit(11, len(q), second[:3])  # its pass parks 10's sequence first
            published.wait_for(11, len(q) + 3, 6, timeout=60)
            parked = model.parked_bytes
            worker.begin(12, p)  # the one free sequence: 10's tokens, parked
            worker.commit(12, len(p), first)
            again = published.wait_for(12, len(p) + len(first), 6, timeout=60).tokens
            return again, parked, model.parked_bytes
        finally:
            worker.stop()


def test_an_ended_generation_s_cells_are_parked_and_come_back_whole(
    pair: tuple[Path, Path],
) -> None:
    """In one KV buffer the worker parks an ended generation's cells while it drafts for
    another, and the generation that takes its text up again drafts what it would have
    drafted had nothing been parked."""
    again, parked, after = _drafts_after_a_return(pair[1], cache_bytes=2**30)
    assert parked > 0 and after == 0
    unparked, none, _ = _drafts_after_a_return(pair[1], cache_bytes=0)
    assert none == 0
    assert again == unparked
