"""The values duo's flags take, each parsed or refused with a message that names the
range: argparse `type=` functions, shared by every command."""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from typing import TypeVar

from duo.llama.backend import MAX_DEVICES
from duo.llama.models import HALVES

N = TypeVar("N", int, float)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def port(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {value}")
    return value


# A host name: dot-separated labels of letters, digits, hyphens (and underscores, which
# /etc/hosts and container networks allow), none starting or ending with a hyphen.
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def bind_address(text: str) -> str:
    """--host: an IPv4 or IPv6 address (0.0.0.0 or :: for every interface) or a host name
    such as localhost. Never empty: an empty host would listen on every interface."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if len(text) <= 253 and _HOST_NAME.fullmatch(text):
        return text
    hint = " (an IPv6 address goes without brackets)" if text.startswith("[") else ""
    raise argparse.ArgumentTypeError(
        "expected an address to listen on (127.0.0.1, ::1, 0.0.0.0 for every interface, or a "
        f"host name such as localhost), got {text[:100]!r}{hint}"
    )


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def mebibytes(text: str) -> int:
    """An amount of memory in MiB, or -1 for no limit (as llama-server's --cache-ram)."""
    value = int(text) if re.fullmatch(r"-?[0-9]+", text.strip()) else None
    if value is None or value < -1:
        raise argparse.ArgumentTypeError(f"expected MiB (0 or more, -1: no limit), got {text!r}")
    return value


def _numbers(
    text: str, kind: Callable[[str], N], example: str, low: N, high: N, bounds: str
) -> list[N]:
    """A comma-separated list of numbers between low and high (repeats dropped)."""
    try:
        values = list(dict.fromkeys(kind(v) for v in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {example}, got {text!r}") from None
    if not all(low <= v <= high for v in values):  # NaN too
        raise argparse.ArgumentTypeError(bounds)
    return values


def fanouts(text: str) -> list[int]:
    return _numbers(text, int, "settings like 0,2", 0, 16, "a fan-out is between 0 and 16 branches")


def round_trips(text: str) -> list[float]:
    bounds = "a round trip is between 0 and 10000 ms"
    return _numbers(text, float, "milliseconds like 0,20", 0.0, 10_000.0, bounds)


def _one(text: str, unit: str, example: str, high: float, bounds: str) -> float:
    values = _numbers(text, float, f"{unit} like {example}", 0.0, high, bounds)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one number of {unit}, got {text!r}")
    return values[0]


def milliseconds(text: str) -> float:
    return _one(text, "milliseconds", "5", 10_000.0, "a delay is between 0 and 10000 ms")


def megabits(text: str) -> float:
    rate = _one(text, "Mbit/s", "100", 100_000.0, "a rate is between 0 and 100000 Mbit/s")
    if rate <= 0:
        raise argparse.ArgumentTypeError("a rate is above 0 Mbit/s")
    return rate


def percent(text: str) -> float:
    return _one(text, "percent", "1", 100.0, "a loss is between 0 and 100%")


def proportions(text: str) -> tuple[float, ...]:
    """-ts: shares per GPU, separated by commas or slashes (llama-server takes both)."""
    try:
        shares = tuple(float(v) for v in text.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected shares like 3,1, got {text!r}") from None
    if not all(0 <= v < float("inf") for v in shares) or not any(shares):
        raise argparse.ArgumentTypeError("shares are numbers of 0 or more, not all 0")
    if len(shares) > MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEVICES} shares (llama.cpp's devices)")
    return shares


def stretch(text: str) -> float:
    """--prompt-stretch: a factor of 1 or more, or inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor like 8 or inf, got {text!r}") from None
    if not value >= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"the stretch is 1 or more (or inf), not {text}")
    return value


def halves(text: str) -> list[str]:
    """--half BF16,F16: a main model's 16-bit types, in order, each once."""
    chosen = [v.strip().upper() for v in text.split(",")]
    if not all(v in HALVES for v in chosen):
        raise argparse.ArgumentTypeError(f"expected BF16, F16 or BF16,F16, got {text!r}")
    return list(dict.fromkeys(chosen))


def client_counts(text: str) -> list[int]:
    bounds = "client counts must be between 1 and 64"
    return sorted(_numbers(text, int, "counts like 1,2,4", 1, 64, bounds))


def draft_lengths(text: str) -> list[int]:
    bounds = "draft lengths must be between 1 and 256"
    return sorted(set(_numbers(text, int, "lengths like 4,8,16", 1, 256, bounds)))
