"""llama.cpp's own binaries as the peers in `duo bench`: same models, prompts and cores.

    llama.cpp             llama-completion: the main model alone (peer of target-1)
    llama.cpp-all         the same on every core (peer of target-all)
    llama.cpp-spec        llama-speculative-simple, draft-simple: synchronous speculation
                          with the draft model, on the main and draft cores (peer of sync)
    llama.cpp-ngram-*     llama-speculative-simple with one n-gram spec type and no draft
                          model (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod,
                          ngram-cache), on every core (peers of free-all)
    llama.cpp-spec+ngram  draft-simple chained with ngram-mod (peer of async+free)

Clocks. duo's modes count the wall time of their rounds, from the first generated token's
round to the last: each round's pass, logits read, sampling, verifying and bookkeeping
(not the prompt, not printing). The peers of target-1 and target-all are timed the same
way from llama-completion's own breakdown: its `eval time` (its llama_decode calls after
the prompt, one per token but the first, which the prompt's pass yields) plus its
`sampling time` for those tokens; left out are the prompt, printing, and its loop's
`unaccounted time` (about 0.5%), a shade in its favour. Both parts are in the report
(`pass_ms_per_token`, `outside_pass_ms_per_token`), as for duo's modes.
llama-speculative-simple's `decoded N tokens in S seconds` is the wall time of its whole
generation loop after the prompt (drafting, verifying, sampling), as duo's sync mode is
timed.

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
from duo.llama.hugepages import user_environment

EVAL = re.compile(r"(?<!prompt )eval time\s*=\s*([\d.]+) ms /\s*(\d+) (?:runs|tokens)")
SAMPLING = re.compile(r"sampling time\s*=\s*([\d.]+) ms")
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


def llama_server_command(
    directory: str | None, main: Path, port: int, *, ctx: int, ngl: int, extra: list[str]
) -> list[str]:
    """llama-server on loopback: the one command line every peer of the bench starts it
    with (`extra`: its slots, threads, drafting)."""
    return [
        str(find_bin(directory, "llama-server")), "-m", str(main), "--host", "127.0.0.1",
        "--port", str(port), "-c", str(ctx), "-ngl", str(ngl), "--no-webui", *extra,
    ]  # fmt: skip


def rpc_server_bin(directory: str | None) -> Path:
    """llama.cpp's RPC server: ggml-rpc-server as llama-cpp-python's vendored build names
    it, rpc-server in llama.cpp's own."""
    try:
        return find_bin(directory, "ggml-rpc-server")
    except UsageError:
        return find_bin(directory, "rpc-server")


def _run(argv: list[str], cores: frozenset[int] | None) -> str:
    def pin() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=pin,
        stdin=subprocess.DEVNULL,
        env=user_environment(),  # llama.cpp as the user runs it (duo.llama.hugepages)
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise UsageError(f"{Path(argv[0]).name} failed: {' / '.join(tail)}")
    return result.stdout + result.stderr


def _greedy(main: Path, prompt: str, n: int, threads: int | None, gpu_layers: int) -> list[str]:
    """The flags both tools share: model, prompt, length, threads (None: llama.cpp's
    default), offloaded layers (llama.cpp offloads every layer by default where it has a
    GPU; duo offloads none unless told), greedy, context."""
    return [
        *("-m", str(main), "-p", prompt, "-n", str(n)),
        *(("-t", str(threads)) if threads else ()),
        *("-ngl", str(gpu_layers), "--temp", "0", "-c", "4096"),
    ]


def target(
    bin_dir: str | None,
    main: Path,
    prompt: str,
    n: int,
    threads: int | None,
    cores: frozenset[int] | None,
    gpu_layers: int = 0,
) -> dict[str, Any]:
    """Decode speed of the main model alone, from llama-completion's own timings: its
    passes after the prompt, and its sampling of the tokens they yield (see Clocks)."""
    out = _run(
        [
            str(find_bin(bin_dir, "llama-completion")),
            *_greedy(main, prompt, n, threads, gpu_layers),
            *("-no-cnv", "--no-warmup", "--ignore-eos"),
        ],
        cores,
    )
    return completion_timings(out)


def completion_timings(out: str) -> dict[str, Any]:
    """llama-completion's summary -> the tokens its passes after the prompt yielded, and the
    seconds of those passes plus their tokens' sampling (`pass_seconds`: the passes)."""
    match, sampling = EVAL.findall(out), SAMPLING.findall(out)
    if not (match and sampling):
        raise UsageError("could not read llama-completion's timings")
    ms, runs = float(match[-1][0]), int(match[-1][1])
    # Every generated token is sampled, the first (from the prompt's pass) too.
    sampled_ms = float(sampling[-1]) * runs / (runs + 1)
    return {
        "tokens": runs,
        "seconds": (ms + sampled_ms) / 1000,
        "pass_seconds": ms / 1000,
        "drafted": 0,
        "accepted": 0,
    }


NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


# llama.cpp's n-gram drafters (llama-server --spec-type), and the one its peers run by default
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
DEFAULT_NGRAM = "ngram-mod"


def ngram_flags(spec_types: str, k: int, key: int = 3) -> list[str]:
    """Each n-gram type's settings, as duo's lookup uses them: a short key (`key` tokens,
    3 unless a bench sweeps it) and drafts of at most k tokens. llama.cpp's defaults
    (12-token keys, 48-64-token drafts, made for GPUs) drafted nothing on these prompts."""
    flags: list[str] = []
    for kind in spec_types.split(","):
        if kind in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            flags += [f"--spec-{kind}-size-n", str(key), f"--spec-{kind}-size-m", str(k)]
        elif kind == "ngram-mod":
            flags += ["--spec-ngram-mod-n-match", str(key), "--spec-ngram-mod-n-min", "1"]
            flags += ["--spec-ngram-mod-n-max", str(k)]
    return flags


def speculative(
    bin_dir: str | None,
    main: Path,
    draft: Path | None,
    prompt: str,
    n: int,
    k: int,
    threads: int,
    draft_threads: int,
    cores: frozenset[int] | None,
    gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
    spec_types: str = "draft-simple",
) -> dict[str, Any]:
    """llama.cpp's synchronous speculative decoding: a draft model (draft-simple), n-gram
    lookups (without a draft model), or both, as `spec_types` says."""
    model = (
        []
        if draft is None
        else [
            *("-md", str(draft), "-td", str(draft_threads), "-ngld", str(draft_gpu_layers)),
            *("--spec-draft-n-max", str(k)),
        ]
    )
    out = _run(
        [
            str(find_bin(bin_dir, "llama-speculative-simple")),
            *_greedy(main, prompt, n, threads, gpu_layers),
            *model,
            *("--spec-type", spec_types),
            *ngram_flags(spec_types, k),
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
        "pass_seconds": float(decoded.group(2)),  # its summary does not split the loop
        "drafted": int(drafted.group(1)),
        "accepted": int(accepted.group(1)),
    }
