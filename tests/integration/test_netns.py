"""The bench's second host: a network namespace across a veth pair, made and removed by
duo, including when the process that made it is interrupted or killed. Needs root."""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from duo.bench.net import netns
from tests.unit.bench.net.test_link import delayed

pytestmark = pytest.mark.integration

if why := netns.unavailable():
    pytest.skip(why, allow_module_level=True)


def leftovers(pid: int) -> list[str]:
    """The namespaces and interfaces process `pid` made that still exist."""
    return [name for _, name, owner in netns._ours() if owner == pid]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _qdiscs(host: netns.FarHost) -> tuple[str, str]:
    def show(*where: str, dev: str) -> str:
        cmd = ["tc", *where, "qdisc", "show", "dev", dev]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    return show(dev=host.near_dev), show("-n", host.name, dev=host.far_dev)


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    """A process that makes a namespace, says its name, and waits to be stopped."""
    code = textwrap.dedent("""
        import time
        from duo.bench.net.netns import far_host
        with far_host() as host:
            print(host.name, flush=True)
            time.sleep(120)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None
    name = proc.stdout.readline().strip()
    assert name.startswith(f"duo-{proc.pid}-"), name
    assert leftovers(proc.pid), "the namespace was not made"
    yield proc
    proc.kill()
    proc.wait(timeout=30)
    netns.sweep()


def test_the_far_side_is_another_host_reached_across_the_pair() -> None:
    server = textwrap.dedent("""
        import socket, sys
        s = socket.create_server((sys.argv[1], 7000))
        print("ready", flush=True)
        conn, peer = s.accept()
        conn.sendall(f"{peer[0]}".encode())
        conn.close()
    """)
    with netns.far_host() as host:
        assert host.near != host.far
        proc = subprocess.Popen(
            host.run([sys.executable, "-c", server, host.far]), stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with socket.create_connection((host.far, 7000), timeout=10) as c:
            seen_from = c.recv(100).decode()
        proc.wait(timeout=30)
        assert seen_from == host.near, "the far side did not see this side's veth address"
        # nothing listens on the far side's loopback port from here: it is another stack
        with socket.socket() as probe:
            probe.settimeout(1)
            assert probe.connect_ex(("127.0.0.1", 7000)) != 0
    assert leftovers(os.getpid()) == []


def test_a_delayed_link_between_the_two_sides() -> None:
    """A client on the far side, a proxy on this side's veth address holding bytes 10 ms
    each way, and an echo server on this side's loopback."""

    class Echo(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while data := self.request.recv(65536):
                self.request.sendall(data)

    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    client = textwrap.dedent("""
        import socket, sys, time
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            trips = []
            for i in range(5):
                t = time.monotonic()
                c.sendall(b"%d" % i)
                assert c.recv(10) == b"%d" % i
                trips.append(time.monotonic() - t)
        print(min(trips) * 1000, max(trips) * 1000)
    """)
    try:
        with netns.far_host() as host, delayed(echo.server_address, 20, host=host.near) as link:
            cmd = host.run([sys.executable, "-c", client, host.near, str(link.port)])
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
        fastest, slowest = map(float, out.stdout.split())
        assert fastest >= 20 and slowest < 200, out.stdout
    finally:
        echo.shutdown()
        echo.server_close()


def test_a_rate_limits_both_ends_and_goes_with_the_namespace() -> None:
    with netns.far_host(rate_mbit=50) as host:
        near, far = _qdiscs(host)
        assert "tbf" in near and "50Mbit" in near, near
        assert "tbf" in far and "50Mbit" in far, far
    assert leftovers(os.getpid()) == []


def test_a_loss_is_netem_or_a_one_line_refusal() -> None:
    try:
        with netns.far_host(loss_pct=1) as host:
            near, far = _qdiscs(host)
            assert "netem" in near and "loss 1%" in near, near
            assert "netem" in far and "loss 1%" in far, far
    except netns.NamespaceError as e:  # a kernel without sch_netem, like this project's
        assert "netem" in str(e) and "\n" not in str(e)
    assert leftovers(os.getpid()) == []


def test_ctrl_c_removes_everything(holder: subprocess.Popen[str]) -> None:
    holder.send_signal(signal.SIGINT)
    holder.wait(timeout=30)
    assert leftovers(holder.pid) == []


def test_what_a_killed_process_left_the_next_one_removes(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait(timeout=30)
    left = leftovers(holder.pid)
    assert left, "SIGKILL cannot be cleaned up after by the process itself"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and netns.sweep() == []:  # the pid may linger a moment
        time.sleep(0.1)
    assert leftovers(holder.pid) == []
