"""Addresses and ports, as every server command checks them before loading a model."""

from __future__ import annotations

import errno
import ipaddress
import socket

from duo.errors import UsageError


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, "localhost")."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """Fail in one line, before a model loads, if host:port cannot be listened on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UsageError(f"port {port} on {host} is already in use") from None
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
