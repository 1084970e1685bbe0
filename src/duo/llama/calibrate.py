"""How long a model's passes take by batch size: the cost model a policy starts from.

Measured once when a session first needs its policy (duo.session), and in rounds spread
over a bench run for the device profile (duo.bench.harness.costs). Timing a real model is I/O,
so it lives here, next to the model, while the cost model itself is pure maths
(duo.core.policy.CostModel).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from duo.core.policy import CostModel
from duo.llama.backend import Model


def calibrate(
    model: Model,
    max_batch: int,
    repeats: int = 3,
    context: int = 8,
    all_logits: bool = True,
    extra: Iterable[int] = (),
) -> CostModel:
    """Measure the model's pass time for the batch sizes `spread(max_batch)` and `extra`
    (about a second for 9 sizes), after `context` tokens (a pass costs more the longer
    the context: attention), with logits for every position (a verification) or for the
    last only (a drafter catching up). The model's KV holds what it held before."""
    base = len(model.tokens)
    filler = 100  # any valid token: only the timing matters
    model.decode([filler] * max(1, context), all_logits=False)  # warm up, with context
    start = len(model.tokens)
    seconds: dict[int, float] = {}
    for batch in [*spread(max_batch), *extra]:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.decode([filler] * batch, all_logits=all_logits)
            times.append(time.perf_counter() - t0)
            model.truncate(start)
        seconds[batch] = sorted(times)[len(times) // 2]
    model.truncate(base)
    return CostModel(seconds)


def spread(max_batch: int) -> list[int]:
    """Every batch size up to 9, then sizes about 1.4x apart, and max_batch: the cost
    model interpolates between them (a pass's cost grows smoothly with its batch), so a
    long lookup cap costs a few more sizes to measure, not one per token."""
    sizes = list(range(1, min(max_batch, 9) + 1))
    while sizes[-1] < max_batch:
        sizes.append(min(max_batch, round(sizes[-1] * 1.4)))
    return sizes
