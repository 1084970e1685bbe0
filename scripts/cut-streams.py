"""How fast /health answers while streaming requests are cut, many at once.

    .venv/bin/duo lead -np 2 --port 18111 &
    .venv/bin/python scripts/cut-streams.py http://127.0.0.1:18111 [WAVES] [AT_ONCE]

Starts AT_ONCE (default 20) streaming completions of 400 tokens, cuts each after its fifth
chunk, WAVES (default 5) times, while another client asks /health every 20 ms; prints the
slowest and the median /health and the lead's health after the last wave (every slot free).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx


async def stream_and_cut(c: httpx.AsyncClient, url: str, i: int) -> None:
    body = {
        "prompt": f"Count to a thousand, number {i}:",
        "max_tokens": 400,
        "stream": True,
        "temperature": 0,
    }
    async with c.stream("POST", url + "/v1/completions", json=body) as r:
        chunks = 0
        async for line in r.aiter_lines():
            chunks += line.startswith("data:")
            if chunks >= 5:
                break  # the client goes away mid-stream


async def probe(c: httpx.AsyncClient, url: str, out: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await c.get(url + "/health")
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.02)


async def main(url: str, waves: int, at_once: int) -> None:
    async with httpx.AsyncClient(timeout=120) as c:
        seconds: list[float] = []
        stop = asyncio.Event()
        health = asyncio.create_task(probe(c, url, seconds, stop))
        for wave in range(waves):
            await asyncio.gather(
                *(stream_and_cut(c, url, wave * at_once + i) for i in range(at_once))
            )
        await asyncio.sleep(1)
        stop.set()
        await health
        after = (await c.get(url + "/health")).json()
    print(
        f"/health: {len(seconds)} answers, slowest {max(seconds) * 1000:.0f} ms, median "
        f"{statistics.median(seconds) * 1000:.0f} ms; after: {after['slots_busy']} of "
        f"{after['slots']} slots busy, {after['queued']} queued"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(
        main(args[0], int(args[1]) if len(args) > 1 else 5, int(args[2]) if len(args) > 2 else 20)
    )
