"""How busy the machine was with other work while we measured (Linux: /proc/stat).

A speed comparison between modes is only fair on a quiet machine: another process on the
cores (or, in a VM, another tenant of the host: steal time) slows whichever mode it lands
on. `OtherLoad` notes the CPU time the whole machine used, less our own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

BUSY_SHARE = 0.10  # of the machine's CPU time: above it, a comparison is not fair


def machine_busy_seconds() -> float | None:
    """CPU seconds every process used since boot, plus time stolen by the host; None where
    there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, first[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """Started when a measurement starts; `share()` at its end: the fraction of the
    machine's CPU time that others used meanwhile (None where it cannot be read)."""

    def __init__(self) -> None:
        self.busy = machine_busy_seconds()
        self.own = time.process_time()
        self.wall = time.monotonic()

    def share(self) -> float | None:
        busy = machine_busy_seconds()
        if busy is None or self.busy is None:
            return None
        others = (busy - self.busy) - (time.process_time() - self.own)
        wall = time.monotonic() - self.wall
        return busy_share(others, wall, os.cpu_count() or 1)


def busy_share(others_seconds: float, wall_seconds: float, cores: int) -> float:
    """Others' CPU seconds as a share of what `cores` offer over `wall_seconds`."""
    return max(0.0, others_seconds) / (wall_seconds * cores) if wall_seconds > 0 else 0.0


def busy_note(share: float | None) -> str | None:
    """A warning for the end of a comparison, if others took more than BUSY_SHARE."""
    if share is None or share <= BUSY_SHARE:
        return None
    return (
        f"note: other work used {100 * share:.0f}% of this machine's CPU during the run, so "
        "the modes' speeds are not a fair comparison; run again when it is quiet"
    )
