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
from duo.llama.backend import LAYER_SPLIT, Model, Split
from duo.llama.models import DEFAULT_HALF, DEFAULT_PAIR, Step, get_pair, prepare
from duo.llama.rpc import device_list

Mode = Literal["target", "sync", "async"]
MODES: tuple[Mode, ...] = get_args(Mode)

# Draft sources (--spec-type): a draft model (in process, or backs), n-gram lookup in the
# request itself, the suffix cache of earlier requests. llama.cpp's names are aliases
# where the idea is the same.
SPEC_TYPES = ("model", "ngram", "suffix")
SPEC_ALIASES = {
    "draft": "model",
    "draft-simple": "model",
    "ngram-simple": "ngram",
    "ngram-map-k": "ngram",
    "ngram-map-k4v": "ngram",
    "ngram-mod": "ngram",
    "ngram-cache": "suffix",
}
DEFAULT_SPEC_TYPES = frozenset(SPEC_TYPES)


def parse_spec_types(text: str) -> frozenset[str]:
    """'ngram,suffix,model' (or llama.cpp's names; 'none' for no drafting)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["none"]:
        return frozenset()
    types = set()
    for name in names:
        canonical = SPEC_ALIASES.get(name, name)
        if canonical not in SPEC_TYPES:
            known = ", ".join([*SPEC_TYPES, *SPEC_ALIASES, "none"])
            raise UsageError(f"--spec-type: unknown draft source {name!r} (known: {known})")
        types.add(canonical)
    if not types:
        raise UsageError("--spec-type needs at least one draft source, or 'none'")
    return frozenset(types)


@dataclass(frozen=True)
class ModelConfig:
    """Which models to load and where they run."""

    main: Path  # main (target) model GGUF
    draft: Path | None  # draft model GGUF (needed by sync and async)
    threads: int = 1  # -t: threads of the main model
    draft_threads: int = 1  # -td: threads of the draft model
    # The main model's threads while the in-process drafter rests, lent its cores (0: no
    # such lending): which way pays is measured and switched online (duo.session.share)
    threads_alone: int = 0
    # The main model's threads when the lead chose them (no -t, no --pin, all on the CPU):
    # a back on this machine drafts on some of them, lent while it drafts (0: none may be
    # lent; duo.session.placement)
    threads_lendable: int = 0
    n_gpu_layers: int = 0  # -ngl: main model layers offloaded to a GPU/remote device
    n_gpu_layers_draft: int = 0  # -ngld: same, for the draft model
    devices: tuple[str, ...] | None = None  # where the main model's layers may go (--rpcd)
    draft_devices: tuple[str, ...] | None = None  # where the draft model's may go (--rpcd)
    rpc: str | None = None  # --rpc: the main model's rpc-servers, for processes started with it
    rpcd: str | None = None  # --rpcd: the draft model's
    n_ctx: int = 4096  # -c: context size in tokens (0: the model's own)
    n_batch: int = 512  # -b: most tokens of the main model in one pass (llama.cpp's n_batch)
    flash_attn: str = "auto"  # -fa: on, off or auto (llama.cpp's choice), for the main model
    cache_types: tuple[str, str] = ("f16", "f16")  # -ctk, -ctv: the main model's KV cache
    mmap: bool = True  # --no-mmap: read the model files into memory instead
    split: Split = LAYER_SPLIT  # -sm, -ts, -mg: the main model over several GPUs
    chat_template: str | None = None  # --chat-template-file: in place of the GGUF's template
    kv_unified: bool = True  # -kvu / -no-kvu: one KV buffer for every slot, or one each


@dataclass(frozen=True)
class SpecConfig:
    """How to speculate."""

    mode: Mode = "async"
    draft_max: int = 8  # --draft: most draft tokens verified per round
    max_ahead: int = 12  # --max-ahead: how far an async drafter runs past the commits
    fanout: int = 0  # --fanout: branches an async drafter keeps past its chain's unsure guesses
    main_cores: frozenset[int] | None = None  # --pin: cores of the main model
    draft_cores: frozenset[int] | None = None  # --pin: cores of the drafter
    adaptive: bool = True  # --policy: verify only the draft prefix worth its cost (async)
    deterministic: bool = False  # --deterministic: pad rounds to batches (identical numerics)
    spec_types: frozenset[str] = DEFAULT_SPEC_TYPES  # --spec-type: the draft sources
    ngram_max: int = 5  # --spec-ngram-size-n: the longest n-gram looked up (down to 2)
    # --spec-ngram-size-m: most tokens a lookup (ngram, suffix) proposes; llama.cpp's
    # default for its n-gram types too
    lookup_max: int = 48

    @property
    def round_max(self) -> int:
        """Most draft tokens one round verifies: the model drafters' or the lookups'."""
        lookups = self.spec_types & {"ngram", "suffix"}
        return max(self.draft_max, self.lookup_max if lookups else 0)


def open_draft(models: ModelConfig, n_ctx: int, *, n_seq: int = 1, forks: int = 0) -> Model:
    """The draft model as `models` places it (its threads, layers, devices, mmap): the
    one way every drafter opens it (`n_seq` sequences of `n_ctx` tokens, `forks` more
    for fan-out)."""
    assert models.draft is not None
    return Model(
        models.draft,
        n_ctx=n_ctx,
        n_threads=models.draft_threads,
        n_gpu_layers=models.n_gpu_layers_draft,
        devices=device_list(models.draft_devices),
        mmap=models.mmap,
        n_seq=n_seq,
        forks=forks,
    )


def resolve_models(
    main: str | None,
    draft: str | None,
    pair: str | None,
    progress: Step | None = None,
    half: str = DEFAULT_HALF,
) -> tuple[Path, Path | None]:
    """-m/-md paths, or the files of a named (default) pair, prepared on first use (its
    main model, where made in a 16-bit type, in `half`)."""
    if main is None:
        if draft is not None:
            raise UsageError("-md needs -m (a draft model for which main model?)")
        paths = prepare(get_pair(pair or DEFAULT_PAIR), progress=progress, half=half)
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
