"""What a generation runs with: which models, where, and how to speculate.

Parsed once by the CLI (or built by a test or the bench) into frozen dataclasses and
passed down; each field names the flag that sets it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from duo.errors import UsageError
from duo.llama.models import DEFAULT_PAIR, get_pair, prepare

Mode = Literal["target", "sync", "async"]
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True)
class ModelConfig:
    """Which models to load and where they run."""

    main: Path  # main (target) model GGUF
    draft: Path | None  # draft model GGUF (needed by sync and async)
    threads: int = 1  # -t: threads of the main model
    draft_threads: int = 1  # -td: threads of the draft model
    n_gpu_layers: int = 0  # -ngl: main model layers offloaded to a GPU/remote device
    n_gpu_layers_draft: int = 0  # -ngld: same, for the draft model
    n_ctx: int = 4096  # -c: context size in tokens


@dataclass(frozen=True)
class SpecConfig:
    """How to speculate."""

    mode: Mode = "async"
    draft_max: int = 8  # --draft: most draft tokens verified per round
    max_ahead: int = 12  # --max-ahead: how far an async drafter runs past the commits
    main_cores: frozenset[int] | None = None  # --pin: cores of the main model
    draft_cores: frozenset[int] | None = None  # --pin: cores of the drafter
    adaptive: bool = True  # --policy: verify only the draft prefix worth its cost (async)
    deterministic: bool = False  # --deterministic: pad rounds to batches (identical numerics)


def resolve_models(
    main: str | None, draft: str | None, pair: str | None
) -> tuple[Path, Path | None]:
    """-m/-md paths, or the files of a named (default) pair, prepared on first use."""
    if main is None:
        if draft is not None:
            raise UsageError("-md needs -m (a draft model for which main model?)")
        paths = prepare(get_pair(pair or DEFAULT_PAIR))
        return paths
    if pair is not None:
        raise UsageError("give either --pair or -m/-md, not both")
    return Path(main), Path(draft) if draft else None


def parse_pin(spec: str | None) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """'0:1' -> main on core 0, drafter on core 1; '0,1:2,3' for core sets."""
    if not spec:
        return None, None
    try:
        main, _, draft = spec.partition(":")
        cores = [
            frozenset(int(c) for c in part.split(",")) if part else None for part in (main, draft)
        ]
    except ValueError:
        raise UsageError(
            f"--pin expects MAIN_CORES:DRAFT_CORES such as 0:1, not {spec!r}"
        ) from None
    available = os.sched_getaffinity(0)
    for group in cores:
        if group and not group <= available:
            raise UsageError(f"--pin {spec}: cores {sorted(group - available)} are not available")
    return cores[0], cores[1]
