"""The lead's engine thread (duo.lead.engine.jobs) on a fake main model: why each request
ended, as its log line, its Done event and /metrics tell it."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from duo.channel.endpoint import WireStats
from duo.core.choice import Chooser, Longest
from duo.core.rounds import Generation
from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.core.text import Chunk
from duo.lead.engine.events import Done, Ending, Event, Failed, Job, Ticket
from duo.lead.engine.jobs import Engine
from duo.lead.engine.metrics import Metrics
from tests.unit.fakes import FakeModel, table_model
from tests.unit.lead.engine.test_metrics import samples


class FakeMain:
    """The main model's sequences, one FakeModel each, evaluated in one pass."""

    n_batch = 512
    deterministic = True  # no prefix taken over from another slot
    on_pass: Any = None  # sees (prompt tokens, other tokens) of every pass

    def __init__(self, slots: int) -> None:
        table = table_model(1)
        self.models = [FakeModel(table, n_ctx=4096) for _ in range(slots)]
        self.vocab = SimpleNamespace(piece=lambda token: b"a")
        self.parked: list[tuple[int, int]] = []  # (slot, limit) of every park asked for

    def park(self, seq: int, limit: int) -> bool:
        self.parked.append((seq, limit))
        return True

    def fork(self, src: int, dst: int, n: int) -> None:
        raise AssertionError("a deterministic model shares no cells")

    def truncate(self, n: int, seq: int = 0) -> None:
        self.models[seq].truncate(n)

    @property
    def seqs(self) -> list[list[int]]:
        return [m.tokens for m in self.models]

    def sequence(self, slot: int) -> FakeModel:
        return self.models[slot]

    def decode_batch(
        self,
        parts: Sequence[tuple[int, Sequence[int]]],
        prefill: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> list[np.ndarray]:
        if self.on_pass is not None:
            self.on_pass(sum(len(t) for _, t in prefill), sum(len(t) for _, t in parts))
        for slot, tokens in prefill:
            self.models[slot].decode(tokens, all_logits=False)
        return [self.models[slot].decode(tokens) for slot, tokens in parts]


class FakeSession:
    """What the engine asks of a Session: the main model alone, greedy, no drafts."""

    slots = 1
    spec = SimpleNamespace(main_cores=None)

    def __init__(self) -> None:
        self.main = FakeMain(self.slots)

    def ready(self) -> None:
        pass

    def policy(self, slot: int = 0) -> Chooser:
        return Longest()

    def costs(self) -> Any:  # a prompt is read whole beside the others' rounds
        return SimpleNamespace(room=lambda decoding, stretch, most, admitted: most)

    def after_pass(self, rounds: Sequence[Any]) -> None:  # the cores' sharing, looked at again
        pass

    def generation(
        self,
        prompt: list[int],
        max_tokens: int,
        sampling: SamplingParams,
        slot: int = 0,
        record: Any = None,
    ) -> Generation:
        return Generation(self.main.sequence(slot), prompt, max_tokens=max_tokens)


def test_a_request_its_client_cancels_ends_cancelled_not_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A streaming request for 400 tokens, cut by its client after 39 (or the web page's
    Stop button): logged `finish cancelled` and counted as cancelled (llama-server's and
    vLLM's abort), never as `length`, which a client reads as a reply cut at max_tokens.
    A request that runs to its max_tokens still ends with `length`."""
    metrics = Metrics(WireStats(), drafters=lambda: 0, local_drafter=False)
    ended: list[Ending] = []
    gone = threading.Event()

    def done(stats: Stats, ending: Ending) -> None:
        metrics.add(stats, ending)
        ended.append(ending)
        gone.set()

    job = Job(prompt=[1, 2, 3], max_tokens=400)
    chunks = 0
    ends: list[str] = []  # what the console is told at each request's end

    def show(slot: int, chunk: Chunk | str) -> None:
        nonlocal chunks
        if isinstance(chunk, str):
            ends.append(chunk)
        else:
            chunks += 1
            if chunks == 39:  # the client goes away (duo.lead.engine.lead: Lead.events)
                job.cancelled.set()
                engine.cancelled()

    caplog.set_level(logging.INFO, logger="duo.lead.engine")
    engine = Engine(FakeSession(), show=show, done=done)
    try:
        events: list[Event] = []
        engine.submit(Ticket(job, events.append))
        assert gone.wait(30), "the cancelled request never left its slot"
        gone.clear()
        finished: list[Event] = []
        engine.submit(Ticket(Job(prompt=[4, 5, 6], max_tokens=5), finished.append))
        assert gone.wait(30), "the next request never ended"
    finally:
        engine.close()
    assert ended == ["cancelled", "length"]
    assert ends == ["\n", "\n"]  # each request's line ended, the cancelled one's too
    assert not any(isinstance(e, Done) for e in events)  # nobody waits for it any more
    assert isinstance(finished[-1], Done) and finished[-1].finish_reason == "length"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request")]
    assert "generated 39 tokens" in lines[0] and lines[0].endswith("finish cancelled"), lines
    assert "generated 5 tokens" in lines[1] and lines[1].endswith("finish length"), lines
    m = samples(metrics.render())
    assert m['duo_requests_ended_total{reason="cancelled"}'] == 1
    assert m['duo_requests_ended_total{reason="length"}'] == 1
    assert m['duo_requests_ended_total{reason="stop"}'] == 0
    assert m["duo_requests_total"] == 2
    assert m["duo_tokens_generated_total"] == 39 + 5


class TwoSlots(FakeSession):
    slots = 2


def test_a_long_prefill_call_takes_turns_with_the_running_requests() -> None:
    """/prefill and /verify read a long prompt in pieces (duo.core.prompt.prefill_steps):
    between two pieces, the other slots' requests run a round, so a short request that
    starts meanwhile ends before the long prompt is read, never after it."""
    from duo.core.prompt import prefill_steps

    order: list[str] = []
    short_done = threading.Event()
    model = FakeMain(1).models[0]
    prompt = [1, 2]
    while len(prompt) < 4000:  # a long prompt the fake model can read
        prompt.append(model.next_token(prompt))

    def done(stats: Stats, ending: Ending) -> None:
        order.append("short request done")
        short_done.set()

    engine = Engine(TwoSlots(), done=done)
    try:
        pieces = 0

        def prefill(seq: Any) -> Any:
            def steps() -> Any:
                nonlocal pieces
                reading = prefill_steps(seq, prompt, piece=100)
                while True:
                    try:
                        next(reading)
                    except StopIteration as end:
                        order.append("prefill done")
                        return end.value
                    pieces += 1
                    if pieces == 2:  # the long prompt is being read: a short request comes
                        engine.submit(Ticket(Job(prompt=[1, 2], max_tokens=3), lambda e: None))
                    yield  # the engine's turn: other requests' rounds

            return steps()

        call = engine.call(prefill, prompt)
        filled = call.result(timeout=60)
        assert short_done.wait(30)
    finally:
        engine.close()
    assert filled.prompt_tokens == 4000
    assert pieces == 39  # 40 passes of 100 tokens, a turn for the others between two
    assert order == ["short request done", "prefill done"]


class Paced(FakeSession):
    """Slots whose rounds cost what a pass holds: whole passes by default, a few
    prompt tokens in a round held within a stretch."""

    def __init__(self, on_pass: Any, slots: int) -> None:
        self.slots = slots
        super().__init__()
        self.main.on_pass = on_pass

    def costs(self) -> Any:
        def room(decoding: int, stretch: float, most: int, admitted: int) -> int:
            return most if stretch == float("inf") else min(most, 4)

        return SimpleNamespace(room=room)


def long_prompt(n: int) -> list[int]:
    model = FakeMain(1).models[0]
    prompt = [1, 2]
    while len(prompt) < n:  # a long prompt the fake model can read
        prompt.append(model.next_token(prompt))
    return prompt


@pytest.mark.parametrize("stream", [False, True], ids=["alone", "beside a stream"])
def test_a_short_request_is_not_held_behind_a_long_prompt(stream: bool) -> None:
    """A 4,000-token prompt is read in passes of n_batch. A short request that comes
    meanwhile is read first (the shortest prompt first) and answered in the running
    requests' turns, which take as long as the long prompt's passes: it ends before the
    long prompt is read, never after it; a running stream waits one pass at a time."""
    order: list[str] = []
    passes: list[tuple[int, int]] = []  # (prompt tokens, tokens decoded) of each pass
    short = Ticket(Job(prompt=[1, 2, 3], max_tokens=8), lambda e: record(e, "short"))
    sent = threading.Event()

    def record(event: Event, name: str) -> None:
        if isinstance(event, Done):
            order.append(name)

    def on_pass(read: int, decoded: int) -> None:
        passes.append((read, decoded))
        time.sleep(0.001 + 0.00002 * (read + decoded))  # a pass's time grows with its size
        if sum(1 for r, _ in passes if r > 100) == 2 and not sent.is_set():
            sent.set()  # the long prompt is being read: the short request comes
            engine.submit(short)

    engine = Engine(Paced(on_pass, 3 if stream else 2))
    try:
        if stream:  # a running request, in its own slot until the test ends
            engine.submit(Ticket(Job(prompt=[1, 2], max_tokens=3000), lambda e: None))
        engine.submit(
            Ticket(Job(prompt=long_prompt(4000), max_tokens=1), lambda e: record(e, "long"))
        )
        deadline = time.monotonic() + 30
        while len(order) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        engine.close()
    assert order == ["short", "long"]
    big = [i for i, (read, _) in enumerate(passes) if read > 100]
    assert len(big) >= 7  # the long prompt in passes of up to n_batch
    if stream:  # the stream's token rides in every pass, and between two whole passes
        # of the long prompt (after the one that read the stream's prompt too) it has a
        # turn of its own rounds
        assert all(decoded for _, decoded in passes[1:])
        whole = [i for i, (read, _) in enumerate(passes) if read >= 500]
        assert all(b - a > 1 for a, b in itertools.pairwise(whole[1:]))


def test_a_request_whose_pass_fails_ends_its_line_on_the_console() -> None:
    """A failed request is ended on the console as a finished one is (`show` gets a str),
    so the console never waits on a generation that is gone."""
    shown: list[Chunk | str] = []
    session = FakeSession()
    passes = itertools.count()

    def on_pass(prompt: int, tokens: int) -> None:
        if next(passes) == 3:
            raise RuntimeError("llama_decode failed")

    session.main.on_pass = on_pass
    engine = Engine(session, show=lambda slot, chunk: shown.append(chunk))
    try:
        events: list[Event] = []
        engine.submit(Ticket(Job(prompt=[1, 2, 3], max_tokens=50), events.append))
        deadline = time.monotonic() + 30
        while not any(isinstance(e, Failed) for e in events) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        engine.close()
    assert isinstance(events[-1], Failed), events
    assert shown and all(isinstance(c, Chunk) for c in shown[:-1]) and shown[-1] == "\n"


class ThreeSlots(FakeSession):
    slots = 3


def test_a_request_parks_the_idle_slots_it_does_not_take() -> None:
    """When a request takes a slot, every other free slot is parked (its KV cells to host
    memory, duo.llama.backend.Model.park) within the engine's memory; a running one never."""
    session = ThreeSlots()
    session.main.on_pass = lambda prompt, tokens: time.sleep(0.005)  # the second runs on
    engine = Engine(session, cache_bytes=12345)
    try:
        first: list[Event] = []
        engine.submit(Ticket(Job(prompt=[1, 2, 3], max_tokens=3), first.append))
        _wait_for_done(first)
        taken = {slot for slot, _ in session.main.parked}
        assert len(taken) == 2 and all(limit == 12345 for _, limit in session.main.parked)
        (first_slot,) = {0, 1, 2} - taken
        session.main.parked.clear()
        running: list[Event] = []
        engine.submit(Ticket(Job(prompt=[4, 5, 6], max_tokens=3000), running.append))
        deadline = time.monotonic() + 30
        while not running:
            assert time.monotonic() < deadline, "the second request never started"
            time.sleep(0.01)
        second_slot = next(iter({0, 1, 2} - {slot for slot, _ in session.main.parked}))
        assert (first_slot, 12345) in session.main.parked  # the first request's, now idle
        session.main.parked.clear()
        third: list[Event] = []
        engine.submit(Ticket(Job(prompt=[7, 8, 9], max_tokens=3), third.append))
        _wait_for_done(third)
        assert second_slot not in {slot for slot, _ in session.main.parked}  # it runs
        assert len(session.main.parked) == 1
    finally:
        engine.close()


def _wait_for_done(events: list[Event]) -> None:
    deadline = time.monotonic() + 30
    while not any(isinstance(e, Done) for e in events) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(events[-1], Done), events
