"""Transparent huge pages for a model's weights, which llama.cpp does not ask for.

llama.cpp keeps the weights it repacks for the CPU (most of a Q4_K model), the KV cache and
its compute buffers in memory from malloc, in 4 KiB pages, unless the kernel gives huge
pages to every allocation (THP "always"). Where it gives them only to memory that asks for
them (THP "madvise", Ubuntu's default), glibc asks when its tunable glibc.malloc.hugetlb=1
is set, and glibc reads its tunables only as a process starts. So a command that loads a
model starts again at once, in the same process (exec), with the tunable set. A pass then
reads its weights through far fewer TLB entries: on a 2-core AMD EPYC (Zen 5), a token of
Qwen2.5-Coder-1.5B Q4_K_M on 2 threads took 25.7 ms instead of 26.7 (ten pairs of runs, each
pair faster with huge pages). `DUO_HUGEPAGES=0` turns this off.

`duo bench` starts its peers (llama.cpp's tools) and its own processes with the environment
the user gave, without the tunable (user_environment): duo's start again with it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

TUNABLE = "glibc.malloc.hugetlb=1"
THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"
# The GLIBC_TUNABLES duo was started with ("" where unset), kept across the restart.
BEFORE = "DUO_GLIBC_TUNABLES_BEFORE"
LOADS_MODELS = frozenset({"generate", "demo", "bench", "lead", "back", "draft", "rpc-server"})


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand in duo's arguments (options before it are global flags)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _glibc_has_tunable(version: str) -> bool:
    """glibc 2.35 brought glibc.malloc.hugetlb: `version` as os.confstr gives it."""
    name, _, number = version.partition(" ")
    parts = number.split(".")
    if name != "glibc" or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return False
    return (int(parts[0]), int(parts[1])) >= (2, 35)


def wanted(argv: Sequence[str], environ: Mapping[str, str], thp: str, glibc: str) -> bool:
    """Whether `duo argv` should start again with the tunable: it loads a model, the kernel
    gives huge pages to memory that asks (`thp`: the THP_MODE file's text), glibc can ask,
    and neither the user nor an earlier start has settled it."""
    return (
        _command(argv) in LOADS_MODELS
        and "[madvise]" in thp
        and _glibc_has_tunable(glibc)
        and environ.get("DUO_HUGEPAGES", "1") != "0"
        and "glibc.malloc.hugetlb" not in environ.get("GLIBC_TUNABLES", "")
    )


def with_tunable(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment to start again with: the tunable added to the user's."""
    before = environ.get("GLIBC_TUNABLES", "")
    tunables = f"{before}:{TUNABLE}" if before else TUNABLE
    return {**environ, "GLIBC_TUNABLES": tunables, BEFORE: before}


def user_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ as the user gave it: GLIBC_TUNABLES without what duo added."""
    env = dict(os.environ if environ is None else environ)
    if BEFORE in env:
        before = env.pop(BEFORE)
        if before:
            env["GLIBC_TUNABLES"] = before
        else:
            env.pop("GLIBC_TUNABLES", None)
    return env


def in_effect() -> bool:
    """Whether this process's malloc gets huge pages (a pass's cost depends on it)."""
    thp = _read(THP_MODE)
    return "[always]" in thp or (
        "[madvise]" in thp and TUNABLE in os.environ.get("GLIBC_TUNABLES", "").split(":")
    )


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def restart_with_hugepages() -> None:
    """Start this process again with the tunable where `wanted`; else return. Call it
    first thing, before any thread starts and before anything is printed."""
    if sys.platform != "linux":
        return
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not wanted(sys.argv[1:], os.environ, _read(THP_MODE), glibc):
        return
    try:
        os.execve(sys.executable, sys.orig_argv, with_tunable(os.environ))
    except OSError:  # run on as started: slower passes, the same output
        return
