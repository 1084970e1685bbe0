"""--rpc endpoint parsing, and the handshake check that keeps ggml from aborting duo."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from duo.errors import UsageError
from duo.llama.rpc import parse_endpoints, probe


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50052", ["127.0.0.1:50052"]),
        ("10.0.0.2:50052,10.0.0.3:50053", ["10.0.0.2:50052", "10.0.0.3:50053"]),
        (" gpu-box.lan:1 , other:65535 ", ["gpu-box.lan:1", "other:65535"]),
        ("localhost:0050052", ["localhost:50052"]),
    ],
)
def test_parse_endpoints(text: str, expected: list[str]) -> None:
    assert parse_endpoints(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expects HOST:PORT"),
        ("127.0.0.1:50052,", "expects HOST:PORT"),
        ("127.0.0.1", "needs a port"),
        (":50052", "needs a port"),
        ("127.0.0.1:", "port must be a number"),
        ("127.0.0.1:0", "port must be a number"),
        ("127.0.0.1:65536", "port must be a number"),
        ("127.0.0.1:5x", "port must be a number"),
        ("127.0.0.1:-1", "port must be a number"),
        ("::1:50052", "IPv4 only"),
        ("[::1]:50052", "IPv4 only"),
        ("bad host:1", "not a host name"),
        ("-host:1", "not a host name"),
        ("a:1,a:1", "listed twice"),
    ],
)
def test_parse_endpoints_refuses(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as e:
        parse_endpoints(text)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match=f"^--rpcd.*{message}"):  # named by its own flag
        parse_endpoints(text, "--rpcd")


Server = Callable[[bytes | None], str]  # answer -> endpoint


def hello_answer(major: int = 7, minor: int = 0, patch: int = 0) -> bytes:
    return struct.pack("=Q", 28) + bytes([major, minor, patch, 0]) + bytes(24)


@pytest.fixture
def fake_server() -> Iterator[Server]:
    """A one-shot TCP server that reads a HELLO and answers with given bytes (None: nothing)."""
    sockets: list[socket.socket] = []
    stop = threading.Event()

    def start(answer: bytes | None) -> str:
        server = socket.create_server(("127.0.0.1", 0))
        sockets.append(server)

        def run() -> None:
            conn, _ = server.accept()
            with conn:
                request = b""
                while len(request) < 33:
                    request += conn.recv(33 - len(request))
                assert request == bytes([14]) + struct.pack("=Q", 24) + bytes(24)
                if answer is not None:
                    conn.sendall(answer)
                stop.wait(5)

        threading.Thread(target=run, daemon=True).start()
        return f"127.0.0.1:{server.getsockname()[1]}"

    yield start
    stop.set()
    for s in sockets:
        s.close()


def test_probe_accepts_a_server_of_the_same_protocol(fake_server: Server) -> None:
    assert probe(fake_server(hello_answer(7, 0, 3)), timeout=2) == (7, 0, 3)


def test_probe_refuses_another_protocol_version(fake_server: Server) -> None:
    with pytest.raises(UsageError, match=r"protocol 8\.0\.0"):
        probe(fake_server(hello_answer(8)), timeout=2)


def test_probe_refuses_something_else(fake_server: Server) -> None:
    with pytest.raises(UsageError, match=r"not a llama\.cpp RPC server"):
        probe(fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n"), timeout=2)


def test_probe_times_out_on_a_silent_server(fake_server: Server) -> None:
    with pytest.raises(UsageError, match=r"no RPC answer within 0\.3 s"):
        probe(fake_server(None), timeout=0.3)


def test_probe_refused_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(UsageError, match="nothing listens there"):
            probe(f"127.0.0.1:{port}", timeout=2)
