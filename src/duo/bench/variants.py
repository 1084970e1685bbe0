"""The variants of `duo bench`'s modes: each async mode at each fan-out (MODE:fF), each
mode with a drafter across a link at each round-trip time (MODE@Nms), and each mode with
its main model in each 16-bit type (MODE/BF16, MODE/F16)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from duo.llama.models import HALVES

REMOTE_DRAFT = "llama-server-rd"  # llama.cpp's draft model on an rpc-server (harness.peers)


@dataclass(frozen=True)
class ModeFacts:
    """What the bench, its variants and the simulator know of a mode (how it runs is
    duo.bench.harness.modes'); a mode not listed has none of these."""

    fanout: bool = False  # an asynchronous model drafter: it runs at each --fanout
    link: bool = False  # its drafter sits across a link: it runs at each --rtt
    simulated: bool = False  # duo sim projects it (duo.bench.sim.sim.simulate)


MODE_FACTS: dict[str, ModeFacts] = {
    "target-1": ModeFacts(simulated=True),
    "sync": ModeFacts(simulated=True),
    "async": ModeFacts(fanout=True, simulated=True),
    "async+free": ModeFacts(fanout=True),
    "lead+back": ModeFacts(fanout=True, link=True, simulated=True),
    "lead+back+free": ModeFacts(fanout=True, link=True),
    "lead+client": ModeFacts(link=True),
    REMOTE_DRAFT: ModeFacts(link=True),
}
FANOUT_MODES = tuple(mode for mode, f in MODE_FACTS.items() if f.fanout)
LINK_MODES = tuple(mode for mode, f in MODE_FACTS.items() if f.link)
SIM_MODES = tuple(mode for mode, f in MODE_FACTS.items() if f.simulated)
_VARIANT = re.compile(r"(?P<mode>[^:@/]+)(?::f(?P<fanout>\d+))?(?:@(?P<rtt>[\d.]+)ms)?")


def variants(
    modes: Sequence[str],
    fanouts: Sequence[int],
    rtts: Sequence[float],
    halves: Sequence[str] = (),
) -> list[str]:
    """Each mode at each fan-out (MODE:fF) and link (MODE@Nms) that applies to it, when
    there is more than the default one, and with each of several `halves` (MODE/BF16)."""
    out = []
    hs = [f"/{h}" for h in halves] if len(halves) > 1 else [""]
    for mode in modes:
        fs = [f":f{f}" for f in fanouts] if mode in FANOUT_MODES and len(fanouts) > 1 else [""]
        links = list(rtts) != [0] and mode in LINK_MODES
        ls = [f"@{r:g}ms" for r in rtts] if links else [""]
        out += [mode + f + link + h for f in fs for link in ls for h in hs]
    return list(dict.fromkeys(out))


def split_half(label: str) -> tuple[str, str | None]:
    """MODE.../BF16 -> (MODE..., "BF16"); a label without a type -> (label, None)."""
    rest, _, half = label.rpartition("/")
    return (rest, half) if rest and half in HALVES else (label, None)


def parse_variant(label: str) -> tuple[str, int | None, float | None]:
    """MODE[:fF][@Nms][/HALF] -> (mode, fan-out or None, round trip or None)."""
    label = split_half(label)[0]
    match = _VARIANT.fullmatch(label)
    if match is None:
        return label, None, None
    fanout, rtt = match["fanout"], match["rtt"]
    return match["mode"], int(fanout) if fanout else None, float(rtt) if rtt else None
