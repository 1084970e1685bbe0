from __future__ import annotations

import pytest

from duo.channel.endpoint import Pacing


def test_pacing_lets_bursts_through_then_holds_the_rate() -> None:
    now = [0.0]
    pacing = Pacing(rate=1000, burst=100, clock=lambda: now[0])
    assert [pacing.delay(10) for _ in range(10)] == [0.0] * 10  # the burst
    assert pacing.delay(50) == pytest.approx(0.05)  # 50 bytes over budget at 1000 B/s
    now[0] += 0.05  # the caller waited
    assert pacing.delay(0) == 0.0
    now[0] += 10.0  # idle: the budget refills, but only up to the burst
    assert pacing.delay(100) == 0.0
    assert pacing.delay(1) > 0.0


def test_a_flood_is_slowed_to_the_rate() -> None:
    now = [0.0]
    pacing = Pacing(rate=64_000, burst=16_000, clock=lambda: now[0])
    for _ in range(1000):  # 1000 maximal frames: the sender waits as told
        now[0] += pacing.delay(1033)
    assert now[0] == pytest.approx((1000 * 1033 - 16_000) / 64_000, rel=1e-6)
