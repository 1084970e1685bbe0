"""A second host on this machine: a network namespace joined to this one by a veth pair.

`duo bench --rtt` runs each back (and llama.cpp's rpc-server) in one, so that what a lead
and its drafter say to each other leaves one network stack and enters another through a
network interface, as between two machines. The delay and jitter come from the bench's
proxy (`duo.bench.net.link`) on this side; a rate limit is a `tbf` qdisc on both ends of the
pair; loss is a `netem` qdisc, where the kernel has one.

Needs root and iproute2's `ip` (and `tc` for a rate or loss). Everything made here is
named after the process that made it (namespace `duo-PID-N`, interfaces `duoPIDnN` here
and `duoPIDfN` there, addresses from 10.231.0.0/16 that no interface here uses) and is
removed when the block ends, Ctrl-C included; what a killed process left behind is removed
by the next one (`sweep`). No other interface, address or qdisc is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUBNETS = ipaddress.ip_network("10.231.0.0/16")
_NAMESPACE = re.compile(r"duo-(\d+)-(\d+)")
_LINK = re.compile(r"duo(\d+)n(\d+)")
_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "duo-netns.lock"
_counter = itertools.count()


class NamespaceError(Exception):
    """A namespace or its link could not be made: the message says why, in one line."""


@dataclass(frozen=True)
class FarHost:
    """A namespace across a veth pair: `near` is this side's address, `far` the other's."""

    name: str
    near_dev: str
    far_dev: str
    near: str
    far: str

    def run(self, cmd: list[str]) -> list[str]:
        """`cmd` as a command that runs in the namespace (its PID is the command's own)."""
        return ["ip", "netns", "exec", self.name, *cmd]


def unavailable() -> str | None:
    """Why this process cannot make namespaces, or None where it can."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (Debian: apt install iproute2)"
    return None


@contextlib.contextmanager
def far_host(rate_mbit: float | None = None, loss_pct: float | None = None) -> Iterator[FarHost]:
    """A namespace with a veth pair to this one for the block; `rate_mbit` limits each
    direction, `loss_pct` drops that share of packets each way (netem)."""
    why = unavailable()
    if why:
        raise NamespaceError(why)
    i, pid = next(_counter), os.getpid()
    with _locked():  # another process's choice of addresses cannot cross this one's
        sweep()
        near, far = _free_pair()
        host = FarHost(f"duo-{pid}-{i}", f"duo{pid}n{i}", f"duo{pid}f{i}", near, far)
        try:
            _create(host)
        except BaseException:
            _remove(host.name, host.near_dev)
            raise
    try:
        _shape(host, rate_mbit, loss_pct)
        yield host
    finally:
        _remove(host.name, host.near_dev)


def sweep() -> list[str]:
    """Remove the namespaces and interfaces of duo processes that are gone; their names."""
    gone = [(kind, name) for kind, name, pid in _ours() if not _alive(pid)]
    for kind, name in gone:  # a namespace's end of a pair takes the pair with it
        _run("ip", kind, "delete", name, check=False)
    return [name for _, name in gone]


def _ours() -> list[tuple[str, str, int]]:
    """(kind, name, the process that made it) of every namespace ("netns") and interface
    ("link") a duo process made."""
    found = [("netns", n, m[1]) for n in _run("ip", "netns", "list").split()
             if (m := _NAMESPACE.fullmatch(n))]  # fmt: skip
    found += [("link", d, m[1]) for d in _our_links() if (m := _LINK.fullmatch(d))]
    return [(kind, name, int(pid)) for kind, name, pid in found]


def _create(host: FarHost) -> None:
    _run("ip", "netns", "add", host.name)
    _run("ip", "link", "add", host.near_dev, "type", "veth", "peer", "name", host.far_dev)
    _run("ip", "link", "set", host.far_dev, "netns", host.name)
    _run("ip", "addr", "add", f"{host.near}/30", "dev", host.near_dev)
    _run("ip", "link", "set", host.near_dev, "up")
    _run("ip", "-n", host.name, "addr", "add", f"{host.far}/30", "dev", host.far_dev)
    _run("ip", "-n", host.name, "link", "set", host.far_dev, "up")
    _run("ip", "-n", host.name, "link", "set", "lo", "up")


def _shape(host: FarHost, rate_mbit: float | None, loss_pct: float | None) -> None:
    if rate_mbit is None and loss_pct is None:
        return
    if shutil.which("tc") is None:
        raise NamespaceError("a rate or loss needs iproute2's `tc`, which is not installed")
    if loss_pct is not None:  # netem carries the rate too
        qdisc = ["netem", "loss", f"{loss_pct:g}%"]
        if rate_mbit is not None:
            qdisc += ["rate", f"{rate_mbit:g}mbit"]
    else:
        assert rate_mbit is not None
        burst = max(16_000, int(rate_mbit * 1e6 / 8 / 100))  # 10 ms of bytes at the rate
        qdisc = ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", "100ms"]
    for where, dev in (([], host.near_dev), (["-n", host.name], host.far_dev)):
        done = _exec(["tc", *where, "qdisc", "add", "dev", dev, "root", *qdisc])
        if done.returncode:
            if "unknown" in done.stderr.lower() and qdisc[0] == "netem":
                raise NamespaceError(
                    "a loss needs the kernel's netem qdisc (sch_netem), which this kernel lacks"
                )
            raise NamespaceError(f"tc qdisc add dev {dev}: {done.stderr.strip()}")


def _remove(name: str, near_dev: str) -> None:
    """Deleting the namespace deletes its end of the pair, and so the pair."""
    _run("ip", "netns", "delete", name, check=False)
    if near_dev in _our_links():
        _run("ip", "link", "delete", near_dev, check=False)


def _free_pair() -> tuple[str, str]:
    """The two host addresses of the first /30 in SUBNETS that no interface here overlaps."""
    used = [
        ipaddress.ip_interface(word).network
        for line in _run("ip", "-4", "-o", "addr", "show").splitlines()
        for word in line.split()[3:4]
    ]
    for net in SUBNETS.subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            near, far = net.hosts()
            return str(near), str(far)
    raise NamespaceError(f"no free /30 left in {SUBNETS}")


def _our_links() -> list[str]:
    out = _run("ip", "-o", "link", "show")
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line)
    return [n for n in names if _LINK.fullmatch(n)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with _LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _exec(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _run(*cmd: str, check: bool = True) -> str:
    done = _exec(list(cmd))
    if check and done.returncode:
        raise NamespaceError(f"{' '.join(cmd)}: {done.stderr.strip() or 'failed'}")
    return done.stdout
