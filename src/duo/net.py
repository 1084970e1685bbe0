"""Addresses and ports, as every server command checks them before loading a model."""

from __future__ import annotations

import errno
import functools
import hashlib
import ipaddress
import socket
from pathlib import Path

from duo.errors import UsageError


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, "localhost")."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


@functools.cache
def machine_id(files: tuple[Path, ...] = MACHINE_ID_FILES) -> str:
    """This machine, as 16 hex digits that tell two processes whether they share it: a
    hash of the OS's machine ID (the host name where there is none), never the ID itself
    (systemd asks that it not be shown to others)."""
    raw = ""
    for path in files:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw:
            break
    raw = raw or socket.gethostname()
    return hashlib.sha256(f"duo machine {raw}".encode()).hexdigest()[:16]


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
