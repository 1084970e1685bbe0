from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

from duo.core.draft import Draft
from duo.drafting.drafter import DraftWorker, Mirror
from duo.llama.backend import Model
from tests.unit.fakes import FakeModel, reference, table_model


def test_mirror_follows_catches_up_and_rolls_back() -> None:
    table = table_model(20)
    model = FakeModel(table)
    mirror = Mirror(cast(Model, model))
    prompt = [3, 1, 4]
    assert mirror.follow(prompt)  # catch-up: one batched decode of the whole prompt
    assert model.decode_calls == [3]
    for _ in range(4):
        mirror.extend()
    guess = reference(table, prompt, 5)
    assert list(mirror.draft(len(prompt))) == guess

    # The lead accepts two guesses, then corrects the third.
    correction = (guess[2] + 1) % 16 or 1
    committed = [*prompt, *guess[:2], correction]
    assert mirror.follow(committed)
    assert model.tokens == committed  # KV rolled back to the disagreement, then fed
    assert list(mirror.draft(len(committed))) == reference(table, committed, 1)

    # Committed tokens that are a prefix of the guesses need no work.
    mirror.extend()
    calls = len(model.decode_calls)
    assert not mirror.follow(committed)
    assert len(model.decode_calls) == calls


def test_worker_drafts_ahead_up_to_max_ahead_and_publishes() -> None:
    table = table_model(21)
    drafts: list[Draft] = []
    done = threading.Event()

    def publish(d: Draft) -> None:
        drafts.append(d)
        if len(d.tokens) >= 5:
            done.set()

    worker = DraftWorker(Mirror(cast(Model, FakeModel(table))), publish, max_ahead=5).start()
    try:
        worker.begin([1, 2])
        assert done.wait(5)
        assert drafts[-1] == Draft(2, tuple(reference(table, [1, 2], 5)))
        assert all(len(d.tokens) <= 5 for d in drafts)
    finally:
        worker.stop()


class WatchedCondition(threading.Condition):
    """A Condition that counts the waits begun on it, so a test can see the worker go
    back to sleep rather than sleep itself and hope."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1  # the lock is held here
        return super().wait(timeout)

    def next_wait(self, act: Callable[[], None]) -> None:
        """Do `act`, then return once the worker has begun a wait after it."""
        with self:  # an RLock: act() may take it again
            act()
            seen = self.waits
        deadline = time.monotonic() + 5
        while self.waits == seen:
            assert time.monotonic() < deadline, "the worker did not go back to waiting"
            time.sleep(0.001)


def test_a_resting_worker_hears_commits_without_decoding_then_catches_up_in_one_batch() -> None:
    table = table_model(22)
    model = FakeModel(table)
    drafts: list[Draft] = []
    published = threading.Condition()

    def publish(d: Draft) -> None:
        with published:
            drafts.append(d)
            published.notify_all()

    def wait_for(n_committed: int, length: int) -> None:
        with published:
            assert published.wait_for(
                lambda: any(d.start == n_committed and len(d.tokens) >= length for d in drafts),
                timeout=5,
            )

    worker = DraftWorker(Mirror(cast(Model, model)), publish, max_ahead=3)
    cv = worker._cv = WatchedCondition()
    worker.start()
    try:
        worker.begin([1, 2])
        wait_for(2, 3)
        # A wait begun after rest(True) is a resting one: the worker checks _resting under
        # the lock before every decode, so from here on it cannot decode until rest(False).
        cv.next_wait(lambda: worker.rest(True))
        calls = len(model.decode_calls)
        committed = [1, 2, *[(t + 1) % 16 or 1 for t in reference(table, [1, 2], 10)]]
        # The commit wakes the worker; it goes back to its wait without a decode.
        cv.next_wait(lambda: worker.commit(2, committed[2:]))
        assert len(model.decode_calls) == calls  # heard, not evaluated
        worker.rest(False)
        wait_for(len(committed), 3)
        assert model.decode_calls[calls] >= 9  # the missed commits, in one batch
        assert drafts[-1].tokens == tuple(reference(table, committed, 3))
    finally:
        worker.stop()
