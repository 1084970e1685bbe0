from __future__ import annotations

import asyncio
import threading

from duo.mailbox import Mailbox


class Received:
    """What the loop was handed, and a way to wait for it (no fixed sleeps)."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.threads: set[int] = set()
        self._changed = asyncio.Event()

    def put(self, x: int) -> None:
        self.got.append(x)
        self.threads.add(threading.get_ident())
        self._changed.set()

    async def until(self, n: int) -> list[int]:
        while len(self.got) < n:
            await asyncio.wait_for(self._changed.wait(), 10)
            self._changed.clear()
        return list(self.got)


def test_posted_calls_run_on_the_loop_in_order_after_a_flush_from_another_thread() -> None:
    async def main() -> tuple[list[int], list[int], list[int], bool]:
        mailbox = Mailbox(asyncio.get_running_loop())
        received = Received()

        def engine() -> None:
            for i in range(3):
                mailbox.post(received.put, i)
            mailbox.flush()
            mailbox.post(received.put, 3)  # not flushed yet

        worker = threading.Thread(target=engine)
        worker.start()
        worker.join()
        flushed = await received.until(3)
        held = list(mailbox._posted)  # the fourth waits for a flush
        mailbox.flush()
        everything = await received.until(4)
        mailbox.close()
        return (
            flushed,
            [arg for _, arg in held],
            everything,
            received.threads == {threading.get_ident()},
        )

    flushed, unflushed, everything, on_loop = asyncio.run(main())
    assert flushed == [0, 1, 2]
    assert unflushed == [3]
    assert everything == [0, 1, 2, 3]
    assert on_loop


def test_many_flushes_before_the_loop_runs_deliver_everything_once() -> None:
    async def main() -> list[int]:
        mailbox = Mailbox(asyncio.get_running_loop())
        received = Received()
        for i in range(100):  # the loop does not run in between: one wake-up, all calls
            mailbox.post(received.put, i)
            mailbox.flush()
        mailbox.flush()  # nothing new: nothing to do
        await received.until(100)
        mailbox.post(received.put, 100)  # a duplicate of the above would arrive before it
        mailbox.flush()
        got = await received.until(101)
        mailbox.close()
        return got

    assert asyncio.run(main()) == list(range(101))
