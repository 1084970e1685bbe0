"""llama.cpp's own binaries as the peer in `duo bench`: same models, prompts and cores.

    llama.cpp          llama-completion: the main model alone (greedy, -t threads)
    llama.cpp-spec     llama-speculative-simple: llama.cpp's synchronous speculation

Build them with scripts/build-llama-cpp.sh (from the sources vendored in the pinned
llama-cpp-python), then pass `--llama-cpp-bin DIR`, or put them on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from duo.errors import UsageError

EVAL = re.compile(r"(?<!prompt )eval time\s*=\s*([\d.]+) ms /\s*(\d+) (?:runs|tokens)")
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
ACCEPTED = re.compile(r"n_accept\s*=\s*(\d+)")


def find_bin(directory: str | None, name: str) -> Path:
    path = Path(directory) / name if directory else Path(shutil.which(name) or name)
    if not (path.is_file() and os.access(path, os.X_OK)):
        where = directory or "PATH"
        raise UsageError(
            f"{name} not found in {where}; build llama.cpp's binaries with "
            "scripts/build-llama-cpp.sh and pass --llama-cpp-bin DIR"
        )
    return path


def _run(argv: list[str], cores: frozenset[int] | None) -> str:
    def pin() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, preexec_fn=pin, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise UsageError(f"{Path(argv[0]).name} failed: {' / '.join(tail)}")
    return result.stdout + result.stderr


def _greedy(main: Path, prompt: str, n: int, threads: int, gpu_layers: int) -> list[str]:
    """The flags both tools share: model, prompt, length, threads, offloaded layers (llama.cpp
    offloads every layer by default where it has a GPU; duo offloads none unless told),
    greedy, context."""
    return [
        *("-m", str(main), "-p", prompt, "-n", str(n), "-t", str(threads)),
        *("-ngl", str(gpu_layers), "--temp", "0", "-c", "4096"),
    ]


def target(
    bin_dir: str | None,
    main: Path,
    prompt: str,
    n: int,
    threads: int,
    cores: frozenset[int] | None,
    gpu_layers: int = 0,
) -> dict[str, Any]:
    """Decode speed of the main model alone, from llama-completion's own timings."""
    out = _run(
        [
            str(find_bin(bin_dir, "llama-completion")),
            *_greedy(main, prompt, n, threads, gpu_layers),
            *("-no-cnv", "--no-warmup", "--ignore-eos"),
        ],
        cores,
    )
    match = EVAL.findall(out)
    if not match:
        raise UsageError("could not read llama-completion's timings")
    ms, runs = float(match[-1][0]), int(match[-1][1])
    return {"tokens": runs, "seconds": ms / 1000, "drafted": 0, "accepted": 0}


def speculative(
    bin_dir: str | None,
    main: Path,
    draft: Path,
    prompt: str,
    n: int,
    k: int,
    threads: int,
    draft_threads: int,
    cores: frozenset[int] | None,
    gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
) -> dict[str, Any]:
    """llama.cpp's synchronous speculative decoding on the main device."""
    out = _run(
        [
            str(find_bin(bin_dir, "llama-speculative-simple")),
            *_greedy(main, prompt, n, threads, gpu_layers),
            *("-md", str(draft), "-td", str(draft_threads), "-ngld", str(draft_gpu_layers)),
            *("--spec-type", "draft-simple", "--spec-draft-n-max", str(k)),
        ],
        cores,
    )
    decoded = DECODED.search(out)
    drafted, accepted = DRAFTED.search(out), ACCEPTED.search(out)
    if not (decoded and drafted and accepted):
        raise UsageError("could not read llama-speculative-simple's summary")
    return {
        "tokens": int(decoded.group(1)),
        "seconds": float(decoded.group(2)),
        "drafted": int(drafted.group(1)),
        "accepted": int(accepted.group(1)),
    }
