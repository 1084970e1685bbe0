"""The bench's delayed link: a TCP proxy that adds the delay asked, in each direction,
without reordering or losing a byte."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from duo.bench.net.link import DelayProxy


@contextlib.contextmanager
def delayed(
    target: tuple[str, int], rtt_ms: float, jitter_ms: float = 0.0, host: str = "127.0.0.1"
) -> Iterator[DelayProxy]:
    """A delay proxy in front of `target` for the block, listening on `host` (its port:
    `.port`)."""
    proxy = DelayProxy.started(target, rtt_ms, jitter_ms, host)
    try:
        yield proxy
    finally:
        proxy.stop()


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()


def receive(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the link closed early"
        out += chunk
    return out


def test_each_direction_is_delayed_by_half_the_round_trip(echo: tuple[str, int]) -> None:
    with (
        delayed(echo, rtt_ms=80) as link,
        socket.create_connection(("127.0.0.1", link.port)) as s,
    ):
        s.sendall(b"warm")
        receive(s, 4)
        for _ in range(3):
            start = time.monotonic()
            s.sendall(b"ping")
            assert receive(s, 4) == b"ping"
            assert time.monotonic() - start >= 0.080  # there and back, 40 ms each way


def test_bytes_arrive_whole_and_in_order_even_with_jitter(echo: tuple[str, int]) -> None:
    sent = b"".join(i.to_bytes(4, "little") for i in range(5000))
    with (
        delayed(echo, rtt_ms=10, jitter_ms=5) as link,
        socket.create_connection(("127.0.0.1", link.port)) as s,
    ):
        for i in range(0, len(sent), 100):  # many small writes: many chunks to reorder
            s.sendall(sent[i : i + 100])
        assert receive(s, len(sent)) == sent
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""  # the end of the stream is passed on too


def test_a_cut_breaks_the_open_connections_and_takes_new_ones(echo: tuple[str, int]) -> None:
    with delayed(echo, rtt_ms=2) as link:
        with socket.create_connection(("127.0.0.1", link.port)) as s:
            s.sendall(b"one")
            assert receive(s, 3) == b"one"
            link.cut()
            s.settimeout(5)
            assert s.recv(1) == b""  # the link went down
        with socket.create_connection(("127.0.0.1", link.port)) as s:
            s.sendall(b"two")
            assert receive(s, 3) == b"two"
        assert link.connections == 2
