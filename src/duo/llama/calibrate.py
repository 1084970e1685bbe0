"""How long a model's passes take by batch size: the cost model a policy starts from.

Measured once when a session first needs its policy (duo.session), and in rounds spread
over a bench run for the device profile (duo.bench.harness.costs). Timing a real model is I/O,
so it lives here, next to the model, while the cost model itself is pure maths
(duo.core.policy.CostModel).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from duo.busy import BUSY_SHARE, OtherLoad
from duo.core.policy import CostModel
from duo.llama.backend import Model
from duo.llama.models import duo_home

T = TypeVar("T")

LONG_PASS = 0.25  # seconds: a pass timed once
FILLER = 100  # the token passes are timed with: any valid one, only the timing matters


def calibrate(
    model: Model,
    max_batch: int,
    repeats: int = 3,
    context: int = 8,
    all_logits: bool = True,
    extra: Iterable[int] = (),
) -> CostModel:
    """Measure the model's pass time for the batch sizes `spread(max_batch)`, the fastest
    of `repeats` (other work only ever adds time: a table kept with medians had a single
    smollm2 token at 1.9x its cost, and a lead placed its drafter by it at every start),
    and `extra` once each (the passes of several slots' rounds, which those rounds then
    time again), after `context` tokens (a pass costs more the longer the context:
    attention), with logits for every position (a verification) or for the last only (a
    drafter catching up). A pass of LONG_PASS seconds or more is timed once: a hiccup is a
    small part of it, and a long lookup cap's sizes (49 tokens of a 1.5B model: 0.35 s on
    2 cores) would take seconds more at every first start. Sizes that do not fit a
    sequence's context beside `context` are not timed (no round can pass them: the cost
    model takes larger sizes at the largest one's cost a token). The model's KV holds what
    it held before."""
    base, start = len(model.tokens), _warm(model, context)
    seconds: dict[int, float] = {}
    sizes = spread(max_batch)
    for batch in [*sizes, *(n for n in extra if n not in sizes)]:
        if batch > model.n_ctx - start:
            continue
        times = []
        for _ in range(repeats if batch <= max_batch else 1):
            times.append(_time_pass(model, batch, start, all_logits))
            if times[-1] >= LONG_PASS:
                break
        seconds[batch] = min(times)
    model.truncate(base)
    return CostModel(seconds)


def median_costs(
    model: Model, sizes: Iterable[int], repeats: int = 7, context: int = 8, seed: int = 0
) -> CostModel:
    """Each size's median pass time over `repeats` passes, the sizes taken in shuffled
    turns, long ones too: a table for a replay (duo.bench.replay), which no pass corrects
    later as a lead's is corrected. The fastest of three, which `calibrate` keeps for a
    quick start, can be a fluke where llama.cpp's kernels are uneven by batch size: on an
    AVX2-only CPU, 7 tokens of qwen-coder-1.5b once timed 269 ms at best against 352 at the
    median of 8, and a replay on that table verified 6-token drafts where a lead, which had
    timed them slower, did not.
    The model's KV holds what it held before."""
    base, start = len(model.tokens), _warm(model, context)
    order = [n for n in dict.fromkeys(sizes) if n <= model.n_ctx - start]
    times: dict[int, list[float]] = {n: [] for n in order}
    shuffle = random.Random(seed).shuffle
    for _ in range(repeats):
        shuffle(order)
        for batch in order:
            times[batch].append(_time_pass(model, batch, start, True))
    model.truncate(base)
    return CostModel({n: statistics.median(t) for n, t in times.items()})


def _warm(model: Model, context: int) -> int:
    """Fill `context` tokens (leaving room for a pass beside them); the KV's length."""
    warm = min(max(1, context), model.n_ctx - 1)
    if warm > 0:
        model.decode([FILLER] * warm, all_logits=False)  # warm up, with context
    return len(model.tokens)


def _time_pass(model: Model, batch: int, start: int, all_logits: bool) -> float:
    t0 = time.perf_counter()
    model.decode([FILLER] * batch, all_logits=all_logits)
    seconds = time.perf_counter() - t0
    model.truncate(start)
    return seconds


def cached(
    model: Model,
    max_batch: int,
    *,
    threads: int | None = None,
    context: int = 8,
    all_logits: bool = True,
    extra: Iterable[int] = (),
) -> CostModel:
    """`calibrate` on `threads` threads (default: the model's), measured once per model
    file, machine and settings, then read from $DUO_HOME/costs: a lead starts without a
    few seconds of timing passes, and its cost model learns from the passes it runs.
    Costs timed while other work took more than a tenth of the machine are used, not kept
    (a pass timed beside a compiler can cost twice what it will)."""
    sizes = sorted({*spread(max_batch), *extra})
    threads = threads or model.n_threads
    key = [*_identity(model), threads, sizes, context, all_logits, repr(model.settings)]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    path = duo_home() / "costs" / f"{model.path.stem}-{threads}t-{digest}.json"
    try:
        return CostModel({int(n): float(s) for n, s in json.loads(path.read_text()).items()})
    except (OSError, ValueError, AttributeError):
        pass
    before, others = model.n_threads, OtherLoad()
    model.set_threads(threads)
    try:
        costs = apart(
            lambda: calibrate(model, max_batch, context=context, all_logits=all_logits, extra=extra)
        )
    finally:
        model.set_threads(before)
    if (others.share() or 0.0) > BUSY_SHARE:
        return costs
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(costs.seconds))
        tmp.replace(path)
    except OSError:  # a home that cannot be written: timed again at the next start
        pass
    return costs


def contended(main: Model, draft: Model, passes: int = 9) -> tuple[float, float]:
    """What running together costs two models whose work shares hardware that no thread
    count shows (the draft model on an rpc-server that shares cores with the main
    model's): the main model's single-token pass beside the draft model decoding non-stop,
    as a ratio to its pass alone, and the draft model's step meanwhile (seconds), both
    medians of `passes`. Both KVs hold what they held before."""

    def timed() -> tuple[float, float]:
        base = len(main.tokens), len(draft.tokens)
        start_main, start_draft = _warm(main, 8), _warm(draft, 8)
        quiet = [_time_pass(main, 1, start_main, True) for _ in range(passes)]
        steps: list[float] = []
        stop = threading.Event()

        def busy() -> None:
            while not stop.is_set():
                steps.append(_time_pass(draft, 1, start_draft, False))

        worker = threading.Thread(target=busy, name="contention")
        worker.start()
        try:
            loud = [_time_pass(main, 1, start_main, True) for _ in range(passes)]
        finally:
            stop.set()
            worker.join()
        main.truncate(base[0])
        draft.truncate(base[1])
        return statistics.median(loud) / statistics.median(quiet), statistics.median(steps)

    return apart(timed)


def apart(timing: Callable[[], T]) -> T:
    """Run `timing` on a thread of its own, which ends with it. llama.cpp's OpenMP build
    keeps a team of worker threads for each thread that has run a pass on several threads,
    for as long as that thread lives: a lead's main thread that timed passes at start
    would keep its idle team, and every pass of the engine thread then took ~10 ms more
    (a 1.5B pass of one token on 2 cores: 36-40 ms instead of 24-27). Its errors are
    raised again here."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="timing") as thread:
        return thread.submit(timing).result()  # the thread ends as the block does


def _identity(model: Model) -> list[str | int]:
    """The model file (path, size, time) and this machine: a cost measured for another
    file or machine is not this one's."""
    stat = model.path.stat()
    return [str(model.path.resolve()), stat.st_size, stat.st_mtime_ns, this_cpu()]


@functools.cache
def this_cpu() -> str:
    """This CPU (read once: a start times or reads several cost tables)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    return describe_cpu(info, os.cpu_count() or 1, platform.machine())


# The vector extensions llama.cpp's CPU kernels choose by (x86 flags, Arm features): a
# virtual machine's CPU may be named "AMD EPYC" on hosts with and without AVX-512, whose
# passes cost 2x (one token) to 4x (a batch of 8) apart for qwen-coder-1.5b.
VECTOR_EXTENSIONS = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512vbmi", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "asimddp", "i8mm", "sve", "sve2", "bf16",
)  # fmt: skip


def describe_cpu(cpuinfo: str, cpus: int, arch: str) -> str:
    """The CPU's name, count, architecture and vector extensions, from /proc/cpuinfo's
    text: what a pass's cost depends on."""
    lines = cpuinfo.splitlines()
    named = next((line for line in lines if line.startswith("model name")), "")
    name = named.partition(":")[2].strip() or platform.processor() or "unknown CPU"
    listed = next((line for line in lines if line.startswith(("flags", "Features"))), "")
    have = set(listed.partition(":")[2].split())
    extensions = " ".join(x for x in VECTOR_EXTENSIONS if x in have)
    return f"{name} x{cpus} {arch} [{extensions}]"


def spread(max_batch: int) -> list[int]:
    """Every batch size up to 9, then sizes about 1.4x apart, and max_batch: the cost
    model interpolates between them (a pass's cost grows smoothly with its batch), so a
    long lookup cap costs a few more sizes to measure, not one per token."""
    sizes = list(range(1, min(max_batch, 9) + 1))
    while sizes[-1] < max_batch:
        sizes.append(min(max_batch, round(sizes[-1] * 1.4)))
    return sizes
