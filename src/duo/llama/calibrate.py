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
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from duo.core.policy import CostModel
from duo.llama.backend import Model
from duo.llama.models import duo_home
from duo.load import BUSY_SHARE, OtherLoad

LONG_PASS = 0.25  # seconds: a pass timed once


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
    base = len(model.tokens)
    filler = 100  # any valid token: only the timing matters
    warm = min(max(1, context), model.n_ctx - 1)  # leaving room for a pass beside it
    if warm > 0:
        model.decode([filler] * warm, all_logits=False)  # warm up, with context
    start = len(model.tokens)
    room = model.n_ctx - start
    seconds: dict[int, float] = {}
    sizes = spread(max_batch)
    for batch in [*sizes, *(n for n in extra if n not in sizes)]:
        if batch > room:
            continue
        times = []
        for _ in range(repeats if batch <= max_batch else 1):
            t0 = time.perf_counter()
            model.decode([filler] * batch, all_logits=all_logits)
            times.append(time.perf_counter() - t0)
            model.truncate(start)
            if times[-1] >= LONG_PASS:
                break
        seconds[batch] = min(times)
    model.truncate(base)
    return CostModel(seconds)


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


def apart(timing: Callable[[], CostModel]) -> CostModel:
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
