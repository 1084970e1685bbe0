"""`duo lead --rpc`: keep the API up when a remote device dies.

llama.cpp aborts the process that loses an RPC device mid-generation. So when the main model
lives on rpc-servers, `duo lead` runs as a supervisor: it serves the public address itself,
runs the real lead (model, engine, drafter channel) as a worker process on a private
loopback port, and forwards HTTP and drafter connections to it. When the worker dies, the
request in flight gets a clear error, /health says what went wrong, and the worker is
restarted (with backoff) until its rpc-servers are back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from duo.channel import protocol
from duo.lead.format import error_body, error_response
from duo.lead.protocol.llama import Health
from duo.sse import DONE, encode

log = logging.getLogger(__name__)

WORKER_ENV = "DUO_LEAD_WORKER"  # set in the worker: it serves, it does not supervise
HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class Worker:
    """The lead process that owns the model; restarted whenever it dies. Each line it
    writes (its console) goes to `show`."""

    def __init__(
        self, argv: list[str], port: int, show: Callable[[str], object] = lambda line: None
    ) -> None:
        self.argv = argv
        self.show = show
        self.url = f"http://127.0.0.1:{port}"
        self.state = "starting"  # starting | running | down
        self.last_error = ""
        self.restarts = 0
        self.since = time.time()
        self._tail: deque[str] = deque(maxlen=20)
        self._down = asyncio.Event()  # set while the worker is down, its last words read

    async def run(self) -> None:
        delay = 0.5
        while True:
            self.state, self.since = "starting", time.time()
            self._down.clear()
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, WORKER_ENV: "1"},
            )
            reader = asyncio.create_task(self._read(proc))
            ready = asyncio.create_task(self._wait_ready(proc))
            try:
                await proc.wait()
            except asyncio.CancelledError:  # the supervisor is stopping: stop the worker too
                proc.terminate()
                await proc.wait()
                raise
            finally:
                ready.cancel()
            await reader
            was_running = self.state == "running"
            self.state, self.since = "down", time.time()
            self.last_error = self._reason(proc.returncode)
            self._down.set()
            log.warning("lead worker exited (%s); restarting in %.1fs", self.last_error, delay)
            self.restarts += 1
            await asyncio.sleep(delay)
            delay = 0.5 if was_running else min(delay * 2, 5.0)

    async def exited(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) until the worker is down and its last words
        are in last_error."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._down.wait(), timeout)

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._tail.append(line)
                self.show(line)

    async def _wait_ready(self, proc: asyncio.subprocess.Process) -> None:
        async with httpx.AsyncClient(timeout=2) as client:
            while proc.returncode is None:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        self.state, self.since = "running", time.time()
                        self.last_error = ""
                        return
                await asyncio.sleep(0.2)

    def _reason(self, code: int | None) -> str:
        for line in reversed(self._tail):
            if line.startswith(("duo: fatal:", "duo: error:", "duo: internal error")):
                return line.removeprefix("duo: ")
        return f"the worker exited with code {code}"


@dataclass(frozen=True)
class Served:
    """What /health says of the lead while its worker is down: the model's name, and its
    slots and drafter as the command line gives them."""

    model: str
    slots: int = 1
    local_drafter: bool = False


class Supervisor:
    def __init__(self, worker: Worker, served: Served) -> None:
        self.worker = worker
        self.served = served
        self.client = httpx.AsyncClient(base_url=worker.url, timeout=None)

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health),
            WebSocketRoute(protocol.PATH, self.drafter),
            Route("/{path:path}", self.forward, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
        return Starlette(routes=routes, lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(self.worker.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _unavailable(self) -> JSONResponse:
        w = self.worker
        why = w.last_error or "it is starting"
        message = f"the main model is unavailable ({why}); retrying, try again shortly"
        response = error_response(503, message, kind="server_error", code="worker_" + w.state)
        response.headers["Retry-After"] = "2"
        return response

    async def health(self, request: Request) -> Response:
        """The lead's Health (its worker's, while it runs; else "unavailable", no slot
        busy), and the worker's state besides."""
        w = self.worker
        status = {
            "worker": w.state,
            "restarts": w.restarts,
            "last_error": w.last_error,
            "state_since": w.since,
        }
        if w.state == "running":
            with contextlib.suppress(httpx.HTTPError, ValueError):
                inner = (await self.client.get("/health", timeout=5)).json()
                return JSONResponse({**inner, **status})
        down: Health = {
            "status": "unavailable",
            "model": self.served.model,
            "drafters": 0,
            "local_drafter": self.served.local_drafter,
            "busy": False,
            "slots": self.served.slots,
            "slots_busy": 0,
            "queued": 0,
            "time": time.time(),
        }
        return JSONResponse({**down, **status}, status_code=503)

    async def forward(self, request: Request) -> Response:
        if self.worker.state != "running":
            return self._unavailable()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        outgoing = self.client.build_request(
            request.method,
            request.url.path,
            params=request.query_params,
            headers=headers,
            content=await request.body(),
        )
        try:
            response = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError:
            return self._unavailable()
        kept = {k: v for k, v in response.headers.items() if k.lower() not in HOP_HEADERS}
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                body = await response.aread()
            except httpx.HTTPError:
                return self._unavailable()
            finally:
                await response.aclose()
            return Response(body, status_code=response.status_code, headers=kept)
        return StreamingResponse(
            self._relay(response), status_code=response.status_code, headers=kept
        )

    async def _relay(self, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            await self.worker.exited(timeout=2)  # its last words reach last_error
            why = self.worker.last_error or "the worker process died"
            error = error_body(f"generation interrupted: {why}", "server_error", code="worker_died")
            yield encode(error) + encode(DONE)
        finally:
            await response.aclose()

    async def drafter(self, ws: WebSocket) -> None:
        """Relay a back's connection to the worker; a worker restart drops it (it reconnects)."""
        await ws.accept()
        if self.worker.state != "running":
            await ws.close(1013, "the lead is restarting")
            return
        url = self.worker.url.replace("http://", "ws://") + protocol.PATH
        auth = ws.headers.get("authorization")
        headers = {"Authorization": auth} if auth else {}
        if model := ws.headers.get(protocol.MODEL_HEADER):  # for the dashboard
            headers[protocol.MODEL_HEADER] = model
        if ws.client:
            headers[protocol.PEER_HEADER] = ws.client.host
        try:
            async with websockets.connect(
                url, additional_headers=headers, compression=None
            ) as inner:
                await _pump(ws, inner)
        except (OSError, websockets.exceptions.WebSocketException):
            pass
        with contextlib.suppress(RuntimeError):
            await ws.close()


async def _pump(outer: WebSocket, inner: websockets.ClientConnection) -> None:
    async def up() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                await inner.send(await outer.receive_bytes())

    async def down() -> None:
        async for message in inner:
            await outer.send_bytes(message if isinstance(message, bytes) else message.encode())

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
