from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

import pytest

from duo.core.draft import Draft
from duo.drafting.drafter import DraftWorker, Mirror
from duo.drafting.sources import ThreadDrafts
from duo.llama.backend import Model
from tests.unit.fakes import FakeBatchModel, FakeModel, Published, reference, table_model


def test_mirror_catches_up_guesses_ahead_and_rolls_back() -> None:
    table = table_model(20)
    model = FakeModel(table)
    mirror = Mirror(cast(Model, model))
    prompt = [3, 1, 4]
    assert mirror.step(prompt, 5)  # catch-up: one batched decode of the whole prompt
    assert model.decode_calls == [3]
    while mirror.step(prompt, 5):  # then one guess at a time, up to 5 ahead
        pass
    assert model.decode_calls == [3, 1, 1, 1, 1]
    guess = reference(table, prompt, 5)
    assert list(mirror.draft(len(prompt))) == guess

    # The lead accepts two guesses, then corrects the third.
    correction = (guess[2] + 1) % 16 or 1
    committed = [*prompt, *guess[:2], correction]
    assert mirror.step(committed, 1)
    assert model.tokens == committed  # KV rolled back to the disagreement, then fed
    assert list(mirror.draft(len(committed))) == reference(table, committed, 1)

    # Committed tokens that are a prefix of the guesses need no work.
    assert mirror.step(committed, 2)
    calls = len(model.decode_calls)
    assert not mirror.step(committed, 2)
    assert not mirror.step(committed[:-1], 3)
    assert len(model.decode_calls) == calls


def test_worker_drafts_ahead_up_to_max_ahead_and_publishes() -> None:
    table = table_model(21)
    drafts: list[Draft] = []
    done = threading.Event()

    def publish(key: int, d: Draft, branches: tuple[Draft, ...]) -> None:
        assert key == 7 and branches == ()
        drafts.append(d)
        if len(d.tokens) >= 5:
            done.set()

    worker = DraftWorker(cast(Model, FakeModel(table)), publish, max_ahead=5).start()
    try:
        worker.begin(7, [1, 2])
        assert done.wait(5)
        assert drafts[-1] == Draft(2, tuple(reference(table, [1, 2], 5)))
        assert all(len(d.tokens) <= 5 for d in drafts)
    finally:
        worker.stop()


def test_one_worker_drafts_for_several_generations_in_one_pass_each_round() -> None:
    """Three generations on three sequences: each one's drafts are its own, their next
    tokens share passes, and a fourth takes the sequence of the one that began first."""
    table = table_model(23)
    model = FakeBatchModel([FakeModel(table) for _ in range(3)])
    published = Published()
    worker = DraftWorker(cast(Model, model), published, sequences=3, max_ahead=4).start()
    prompts = {10: [1, 2], 11: [3, 4, 5], 12: [6]}
    try:
        for key, prompt in prompts.items():
            worker.begin(key, prompt)
        for key, prompt in prompts.items():
            draft = published.wait_for(key, len(prompt), 4)
            assert list(draft.tokens) == reference(table, prompt, 4)
        assert max(len(parts) for parts in model.passes) > 1  # several in one pass

        worker.begin(13, [7, 8])  # every sequence is taken: 10's, the first, is lent
        draft = published.wait_for(13, 2, 4)
        assert list(draft.tokens) == reference(table, [7, 8], 4)
        assert {t.key for t in worker.tracks} == {11, 12, 13}
        worker.commit(10, 2, [9])  # 10 has no sequence any more: nothing happens
        worker.end(11)
        assert {t.key for t in worker.tracks} == {None, 12, 13}
        committed = [3, 4, 5, *reference(table, [3, 4, 5], 2)]
        worker.begin(14, committed)  # the free sequence, which holds 11's tokens
        draft = published.wait_for(14, len(committed), 4)
        assert list(draft.tokens) == reference(table, committed, 4)
    finally:
        worker.stop()


def test_an_ended_generation_s_sequence_is_parked_at_the_worker_s_next_pass() -> None:
    """Parked once, with the worker's limit, when it next drafts for another generation
    (its cells would slow that pass); never a running generation's."""
    table = table_model(23)
    model = FakeBatchModel([FakeModel(table) for _ in range(2)])
    published = Published()
    worker = DraftWorker(
        cast(Model, model), published, sequences=2, max_ahead=4, cache_bytes=1234
    ).start()
    try:
        worker.begin(10, [1, 2])
        worker.begin(11, [3, 4])
        published.wait_for(10, 2, 4)
        published.wait_for(11, 2, 4)
        assert model.parked == []
        worker.end(10)
        worker.commit(11, 2, [9])
        published.wait_for(11, 3, 4)
        assert model.parked == [(0, 1234)]
        worker.commit(11, 3, [8])
        published.wait_for(11, 4, 4)
        assert model.parked == [(0, 1234)]
        worker.begin(12, [1, 2])  # takes the parked sequence, as any free one
        draft = published.wait_for(12, 2, 4)
        assert list(draft.tokens) == reference(table, [1, 2], 4)
        assert model.parked == [(0, 1234)]
    finally:
        worker.stop()


class WatchedCondition(threading.Condition):
    """A Condition that counts the waits begun on it, so a test can see the worker go
    back to sleep rather than sleep itself and hope."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0
        self.notifies = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1  # the lock is held here
        return super().wait(timeout)

    def notify(self, n: int = 1) -> None:
        self.notifies += 1
        super().notify(n)

    def next_wait(self, act: Callable[[], None]) -> None:
        """Do `act`, then return once the worker has begun a wait after it."""
        with self:  # an RLock: act() may take it again
            act()
            seen = self.waits
        deadline = time.monotonic() + 5
        while self.waits == seen:
            assert time.monotonic() < deadline, "the worker did not go back to waiting"
            time.sleep(0.001)


@pytest.mark.parametrize("pause", ["rest", "hold"])
def test_a_paused_worker_is_not_woken_by_commits_then_catches_up_in_one_batch(
    pause: str,
) -> None:
    """Resting (for one generation) or held (for all, its cores lent to the main model),
    the worker sleeps through every commit: woken each round, it would take a core from
    the main model for nothing. Released, it decodes the missed commits in one batch."""
    table = table_model(22)
    model = FakeModel(table)
    published = Published()
    worker = DraftWorker(cast(Model, model), published, max_ahead=3)
    cv = worker._cv = WatchedCondition()
    worker.start()

    def paused(on: bool) -> None:
        worker.rest(0, on) if pause == "rest" else worker.hold(on)

    try:
        worker.begin(0, [1, 2])
        published.wait_for(0, 2, 3)
        # A wait begun after the pause is a paused one: the worker checks under the lock
        # before every decode, so from here on it cannot decode until it is released.
        cv.next_wait(lambda: paused(True))
        calls, notifies = len(model.decode_calls), cv.notifies
        committed = [1, 2, *[(t + 1) % 16 or 1 for t in reference(table, [1, 2], 10)]]
        for n in range(3, len(committed) + 1):
            worker.commit(0, 2, committed[2:n])
        assert cv.notifies == notifies  # heard, and no one woken
        assert len(model.decode_calls) == calls
        paused(False)
        draft = published.wait_for(0, len(committed), 3)
        assert model.decode_calls[calls] >= 9  # the missed commits, in one batch
        assert draft.tokens == tuple(reference(table, committed, 3))
    finally:
        worker.stop()


def test_a_branch_at_an_unsure_guess_is_ready_for_the_lead_s_correction() -> None:
    """The drafter guesses x where the main model says y, and was unsure there (y its
    runner-up): it drafts a branch from y on, and when the lead commits y the branch
    becomes its chain, in the branch's sequence (no roll-back, nothing evaluated again)."""
    main = table_model(31)
    prompt = [1, 2]
    ref = reference(main, prompt, 8)
    draft = dict(main)
    draft[(2, ref[0])] = x = ref[1] % 15 + 1  # the second guess is wrong: x, not ref[1]
    models = [FakeModel(draft, runner_up=main) for _ in range(3)]
    published = Published()
    worker = DraftWorker(
        cast(Model, FakeBatchModel(models)), published, max_ahead=4, fanout=2
    ).start()
    try:
        worker.begin(0, prompt)
        assert published.wait_for(0, 2, 4).tokens[:2] == (ref[0], x)
        branch = published.wait_for_branch(0, (ref[0], ref[1], ref[2]))
        assert branch.start == 2 and branch.tokens == tuple(ref[: len(branch.tokens)])

        worker.commit(0, 2, ref[:2])  # the lead rejects x and commits y = ref[1]
        chain = published.wait_for(0, 4, 4)
        assert chain.tokens == tuple(ref[2:6])
        assert worker.tracks[0].seq != 0  # the chain is the branch's sequence now
    finally:
        worker.stop()


def test_the_lead_proposes_the_branch_that_continues_its_commits() -> None:
    drafts = ThreadDrafts(cast(Model, FakeModel(table_model(1))), max_ahead=4)
    try:
        slot = drafts.source(0)
        drafts._publish(0, Draft(2, (5, 6, 7)), (Draft(2, (5, 9, 10)), Draft(2, (8, 1))))
        assert slot.propose([1, 2], 8)[0].tokens == (5, 6, 7)
        assert slot.propose([1, 2, 5, 9], 8)[0].tokens == (10,)
        assert slot.propose([1, 2, 8], 1)[0].tokens == (1,)
        assert slot.propose([1, 2, 5, 4], 8) == []
        assert slot.received()["model"] == 3 + 2 + 2
    finally:
        drafts.close()


def test_a_held_drafter_is_sent_the_commits_it_missed_once_released() -> None:
    """Held, the worker drafts nothing: a generation keeps its commits rather than send
    them each round, and sends them all at its first proposal after the release."""
    table = table_model(22)
    drafts = ThreadDrafts(cast(Model, FakeModel(table)), max_ahead=3)
    worker = drafts.worker
    try:
        slot = drafts.source(0)
        slot.begin([1, 2])
        worker.hold(True)
        committed = [1, 2, *reference(table, [1, 2], 6)]
        for n in range(3, len(committed) + 1):
            slot.commit(n - 1, committed[n - 1 : n])
        assert worker.tracks[0].committed == [1, 2]  # nothing sent while held
        assert slot.propose(committed, 3) == []  # still held: still nothing sent
        worker.hold(False)
        slot.propose(committed, 3)
        assert worker.tracks[0].committed == committed
        deadline = time.monotonic() + 5

        def drafted() -> tuple[int, ...]:
            proposals = slot.propose(committed, 3)
            return proposals[0].tokens if proposals else ()

        while len(drafted()) < 3:  # a draft is offered as it grows: wait for all of it
            assert time.monotonic() < deadline, "no draft for the commits sent"
            time.sleep(0.001)
        assert drafted() == tuple(reference(table, committed, 3))
    finally:
        drafts.close()
