"""How many threads each model gets when the command line does not say.

As llama.cpp: the main model gets every core useful for math (`cpu_get_num_math()`:
physical cores, hyper-threads and efficiency cores left out), here counted among the
cores this process may run on. A model drafter that runs beside the main model in this
process, on the CPU, takes its threads out of the main model's: a quarter of the cores
(at least one), the rest for the main model. Which of the two ways to share the cores
pays, the main model alone on all of them or beside the drafter, is then measured
(duo.session.share). A back on this machine borrows threads the same way while it drafts
(duo.session.placement), where the main model's threads were chosen here. Given flags
win.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from duo.session.config import ModelConfig, SpecConfig

SYS_CPU = Path("/sys/devices/system/cpu")
EFFICIENCY_CORES = Path("/sys/devices/cpu_atom/cpus")  # Linux, on Intel's hybrid CPUs


def parse_cpu_list(text: str) -> set[int]:
    """Linux's CPU list format: '0-3,8,10-11'."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def math_cores(
    available: set[int] | None = None,
    sys_cpu: Path = SYS_CPU,
    efficiency: Path = EFFICIENCY_CORES,
) -> int:
    """Physical cores among the CPUs this process may run on, efficiency cores left out:
    one thread per core, as llama.cpp's `cpu_get_num_math()` counts them."""
    cpus = set(os.sched_getaffinity(0)) if available is None else available
    with contextlib.suppress(OSError, ValueError):  # else not a hybrid CPU
        cpus -= parse_cpu_list(efficiency.read_text())
    cores: set[str] = set()
    for cpu in cpus:
        try:
            cores.add((sys_cpu / f"cpu{cpu}" / "topology" / "thread_siblings").read_text().strip())
        except OSError:
            cores.add(f"cpu{cpu}")  # no topology: count the CPU as a core
    return max(1, len(cores))


@dataclass(frozen=True)
class ThreadPlan:
    """The threads each model runs with."""

    main: int  # the main model's, beside the drafter when one runs on this CPU
    draft: int  # the draft model's
    main_alone: int  # the main model's while that drafter rests (its threads lent back)
    measured: bool  # the sharing is chosen by measured cost, and switched online


def plan_threads(
    cores: int,
    threads: int | None,
    draft_threads: int | None,
    *,
    beside: bool,
    explicit: bool = False,
) -> ThreadPlan:
    """`threads`, `draft_threads`: -t and -td (None: not given). `beside`: a model drafter
    drafts concurrently with the main model on this machine's CPU (async, in process, no
    GPU layers). `explicit`: the draft sources or cores were given (--spec-type, --pin),
    which turns the measured sharing off, as given threads do."""
    if not beside:
        main = threads or cores
        return ThreadPlan(main, draft_threads or main, main, measured=False)
    draft = draft_threads or max(1, cores // 4)
    main = threads or max(1, cores - draft)
    measured = threads is None and draft_threads is None and not explicit and cores > draft
    return ThreadPlan(main, draft, cores if measured else main, measured)


def drafts_beside(models: ModelConfig, spec: SpecConfig) -> bool:
    """Whether a model drafter runs concurrently with the main model on this CPU."""
    return (
        spec.mode == "async"
        and "model" in spec.spec_types
        and models.draft is not None
        and models.n_gpu_layers_draft == 0
        and models.draft_devices is None
    )


def with_threads(
    models: ModelConfig,
    spec: SpecConfig,
    threads: int | None = None,
    draft_threads: int | None = None,
    *,
    explicit: bool = False,
) -> ModelConfig:
    """`models` with the threads of `plan_threads` (-t, -td: None where not given; on
    pinned cores, as many threads as cores). `explicit`: --spec-type was given."""
    if spec.main_cores:  # --pin: a device per core set, a thread per core
        threads = threads or len(spec.main_cores)
        draft_threads = draft_threads or len(spec.draft_cores or spec.main_cores)
    pinned = spec.main_cores is not None or spec.draft_cores is not None
    plan = plan_threads(
        math_cores(),
        threads,
        draft_threads,
        beside=drafts_beside(models, spec),
        explicit=explicit or pinned,
    )
    on_cpu = models.n_gpu_layers == 0 and not models.rpc
    chosen = threads is None and not pinned and on_cpu
    return replace(
        models,
        threads=plan.main,
        draft_threads=plan.draft,
        threads_alone=plan.main_alone if plan.measured else 0,
        threads_lendable=max(plan.main, plan.main_alone) if chosen else 0,
    )
