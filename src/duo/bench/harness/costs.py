"""Device costs for `duo bench` and `duo sim`: how long each model takes on its cores.

The main model's pass time by batch size on the main cores (logits for every position, as
in a verification), the draft model's by batch size on the draft cores (logits for the last
position, as in a catch-up), each measured alone, and how much slower each runs while the
other decodes at the same time on its own cores.

A shared host drifts by tens of percent over a minute, so the bench does not measure these
once: it measures a round before every mode and after the last one (`Profiler`), reports
the median of the rounds, and how far apart the rounds were (the drift during the run).
Passes are timed after as many tokens of context as the bench's generations hold on
average: attention makes a pass after 128 tokens ~13% slower than after 8 on a small model.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import replace
from typing import Any

from duo.llama.backend import Model
from duo.llama.calibrate import calibrate
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session, pinned

ALTERNATIONS = 2  # main, draft, main, draft within one round
SLOWDOWN_BLOCKS = 3  # alone / together blocks per round
Cores = frozenset[int] | None


class Profiler:
    """The device costs of the module doc, measured in rounds spread over a bench run."""

    def __init__(self, models: ModelConfig, spec: SpecConfig, max_batch: int, context: int):
        self.models = models
        self.spec = spec
        self.max_batch = max_batch
        self.context = context
        self.rounds: list[dict[str, Any]] = []

    def measure(self) -> None:
        """One round: both models alone in alternation, then together. Each model is loaded
        for the round only, so the profile never holds a second copy during a mode."""
        target = SpecConfig(mode="target")
        models = self.models
        main = Session(replace(models, draft=None), target)
        draft = None
        try:
            # (name, session, cores, batches, logits for every position)
            jobs = [("main", main, self.spec.main_cores, self.max_batch, True)]
            if models.draft is not None:
                cfg = ModelConfig(
                    models.draft,
                    None,
                    threads=models.draft_threads,
                    n_gpu_layers=models.n_gpu_layers_draft,
                    devices=models.draft_devices,
                    n_ctx=models.n_ctx,
                )
                draft = Session(cfg, target)
                jobs.append(("draft", draft, self.spec.draft_cores, self.max_batch, False))
            samples: dict[str, list[dict[int, float]]] = {name: [] for name, *_ in jobs}
            for _ in range(ALTERNATIONS):
                for name, session, cores, batches, every in jobs:
                    with pinned(cores):
                        costs = calibrate(session.main, batches, 3, self.context, every)
                    samples[name].append(costs.seconds)
            out: dict[str, Any] = {
                f"{name}_ms_by_batch": {
                    n: 1000 * statistics.median(s[n] for s in measured) for n in measured[0]
                }
                for name, measured in samples.items()
            }
            if draft is not None:
                out.update(
                    concurrent_slowdown(
                        main, self.spec.main_cores, draft, self.spec.draft_cores, self.context
                    )
                )
            self.rounds.append(out)
        finally:
            main.close()
            if draft is not None:
                draft.close()

    def result(self) -> dict[str, Any]:
        """Median of every figure over the rounds, with the context and the drift: for the
        one-token pass of each model, how far apart its fastest and slowest rounds were."""
        if not self.rounds:
            return {}
        first = self.rounds[0]
        out: dict[str, Any] = {"context_tokens": self.context, "rounds": len(self.rounds)}
        drift: dict[str, float] = {}
        for key, value in first.items():
            if isinstance(value, dict):
                out[key] = {
                    n: statistics.median(r[key][n] for r in self.rounds) for n in sorted(value)
                }
                ones = [r[key][1] for r in self.rounds]
                drift[key.replace("_by_batch", "_1")] = 100 * (max(ones) / min(ones) - 1)
            else:
                out[key] = statistics.median(r[key] for r in self.rounds)
        out["drift_percent"] = drift
        return out


def concurrent_slowdown(
    main: Session,
    main_cores: Cores,
    draft: Session,
    draft_cores: Cores,
    context: int,
    blocks: int = SLOWDOWN_BLOCKS,
) -> dict[str, float]:
    """How much slower a one-token pass of each model is while the other model decodes at
    the same time on its own cores (shared caches, memory bandwidth, a host's other
    tenants): together / alone, in alternating blocks, median over blocks."""
    ratios: dict[str, list[float]] = {"main": [], "draft": []}
    for _ in range(blocks):
        main_alone = _pass_ms(main.main, main_cores, context)
        draft_alone = _pass_ms(draft.main, draft_cores, context)
        busy = threading.Event()
        busy.set()
        draft_busy: list[float] = []
        args = (draft.main, draft_cores, context, busy, draft_busy)
        thread = threading.Thread(target=_decode_while, args=args)
        thread.start()
        try:
            main_busy = _pass_ms(main.main, main_cores, context)
        finally:
            busy.clear()
            thread.join()
        ratios["main"].append(main_busy / main_alone)
        if draft_busy:
            ratios["draft"].append(statistics.median(draft_busy) / draft_alone)
    return {f"{name}_concurrent_slowdown": statistics.median(r) for name, r in ratios.items()}


def _decode_while(
    model: Model, cores: Cores, context: int, running: threading.Event, out: list[float]
) -> None:
    with pinned(cores):
        while running.is_set():
            out.append(_pass_ms(model, None, context, passes=1))


def _pass_ms(model: Model, cores: Cores, context: int, passes: int = 15) -> float:
    """Median ms of a one-token pass after `context` tokens, on `cores`."""
    missing = context - len(model.tokens)
    if missing < 0:
        model.truncate(context)
    elif missing:
        model.decode([100] * missing, all_logits=False)  # any valid token will do
    times = []
    with pinned(cores):
        for _ in range(passes):
            t0 = time.perf_counter()
            model.decode([100])
            times.append(1000 * (time.perf_counter() - t0))
            model.truncate(context)
    return statistics.median(times)
