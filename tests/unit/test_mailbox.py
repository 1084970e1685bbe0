from __future__ import annotations

import asyncio
import threading

from duo.mailbox import Mailbox


def test_posted_calls_run_on_the_loop_in_order_after_a_flush_from_another_thread() -> None:
    async def main() -> tuple[list[int], list[int], list[int], bool]:
        loop = asyncio.get_running_loop()
        mailbox = Mailbox(loop)
        got: list[int] = []
        threads: set[int] = set()

        def put(x: int) -> None:
            got.append(x)
            threads.add(threading.get_ident())

        def engine() -> None:
            for i in range(3):
                mailbox.post(put, i)
            mailbox.flush()
            mailbox.post(put, 3)  # not flushed yet

        worker = threading.Thread(target=engine)
        worker.start()
        worker.join()
        for _ in range(50):
            if len(got) == 3:
                break
            await asyncio.sleep(0.01)
        flushed = list(got)
        await asyncio.sleep(0.05)
        unflushed = list(got)  # the fourth waits for a flush
        mailbox.flush()
        for _ in range(50):
            if len(got) == 4:
                break
            await asyncio.sleep(0.01)
        mailbox.close()
        return flushed, unflushed, got, threads == {threading.get_ident()}

    flushed, unflushed, everything, on_loop = asyncio.run(main())
    assert flushed == unflushed == [0, 1, 2]
    assert everything == [0, 1, 2, 3]
    assert on_loop


def test_many_flushes_before_the_loop_runs_deliver_everything_once() -> None:
    async def main() -> list[int]:
        mailbox = Mailbox(asyncio.get_running_loop())
        got: list[int] = []
        for i in range(100):  # the loop does not run in between: one wake-up, all calls
            mailbox.post(got.append, i)
            mailbox.flush()
        mailbox.flush()  # nothing new: nothing to do
        for _ in range(50):
            if len(got) == 100:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)
        mailbox.close()
        return got

    assert asyncio.run(main()) == list(range(100))
