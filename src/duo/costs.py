"""Device costs for `duo bench` and `duo sim`: how long each model takes on its cores.

The main model's pass time by batch size on the main cores, the draft model's time per
token on the draft cores (each measured alone), and how much slower each runs while the
other decodes at the same time on its own cores.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from duo.backend import Model
from duo.local import ModelConfig, Session, SpecConfig, pinned
from duo.policy import calibrate

PROFILE_ROUNDS = 5  # alternating measurement rounds; each figure is their median
Cores = frozenset[int] | None


def profile(models: ModelConfig, spec: SpecConfig, max_batch: int) -> dict[str, Any]:
    """The device costs of the module doc, as `duo bench` reports them.

    A shared host drifts by tens of percent over seconds, so the two models are measured
    in alternating rounds and each figure is the median over rounds.
    """
    target = SpecConfig(mode="target")
    main = Session(ModelConfig(models.main, None, threads=models.threads), target)
    draft = None
    try:
        if models.draft is not None:
            draft = Session(ModelConfig(models.draft, None, threads=models.draft_threads), target)
        jobs = [("main", main, spec.main_cores, max_batch)]
        if draft is not None:
            jobs.append(("draft", draft, spec.draft_cores, 1))
        rounds: dict[str, list[dict[int, float]]] = {name: [] for name, *_ in jobs}
        for _ in range(PROFILE_ROUNDS):
            for name, session, cores, batches in jobs:
                with pinned(cores):
                    rounds[name].append(calibrate(session.main, batches, repeats=3).seconds)
        out: dict[str, Any] = {}
        for name, measured in rounds.items():
            out[f"{name}_ms_by_batch"] = {
                n: 1000 * statistics.median(r[n] for r in measured) for n in sorted(measured[0])
            }
        if draft is not None:
            out.update(concurrent_slowdown(main, spec.main_cores, draft, spec.draft_cores))
        return out
    finally:
        main.close()
        if draft is not None:
            draft.close()


def concurrent_slowdown(
    main: Session, main_cores: Cores, draft: Session, draft_cores: Cores, blocks: int = 6
) -> dict[str, float]:
    """How much slower a one-token pass of each model is while the other model decodes at
    the same time on its own cores (shared caches, memory bandwidth, a host's other
    tenants): together / alone, in alternating blocks, median over blocks."""
    ratios: dict[str, list[float]] = {"main": [], "draft": []}
    for _ in range(blocks):
        main_alone = _pass_ms(main.main, main_cores)
        draft_alone = _pass_ms(draft.main, draft_cores)
        busy = threading.Event()
        busy.set()
        draft_busy: list[float] = []
        args = (draft.main, draft_cores, busy, draft_busy)
        thread = threading.Thread(target=_decode_while, args=args)
        thread.start()
        try:
            main_busy = _pass_ms(main.main, main_cores)
        finally:
            busy.clear()
            thread.join()
        ratios["main"].append(main_busy / main_alone)
        if draft_busy:
            ratios["draft"].append(statistics.median(draft_busy) / draft_alone)
    return {f"{name}_concurrent_slowdown": statistics.median(r) for name, r in ratios.items()}


def _decode_while(model: Model, cores: Cores, running: threading.Event, out: list[float]) -> None:
    with pinned(cores):
        while running.is_set():
            out.append(_pass_ms(model, None, passes=1))


def _pass_ms(model: Model, cores: Cores, passes: int = 15) -> float:
    """Median ms of a one-token pass (after a short context), on `cores`."""
    base = len(model.tokens)
    if base < 32:
        model.decode([100] * (32 - base), all_logits=False)  # any valid token will do
        base = 32
    times = []
    with pinned(cores):
        for _ in range(passes):
            t0 = time.perf_counter()
            model.decode([100])
            times.append(1000 * (time.perf_counter() - t0))
            model.truncate(base)
    return statistics.median(times)
