"""Speculative decoding in one process: the composition behind `duo generate` and `duo demo`.

Modes:
    target  the main model alone (the baseline)
    sync    classic speculative decoding: draft k tokens, then verify them
    async   the drafter runs concurrently on its own thread (and core) and drafts
            continuously; the main model verifies whatever is ready, never waiting
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from duo.core.engine import DraftSource, NoDrafts, Round, generate
from duo.core.policy import AdaptivePolicy, FixedPolicy, Policy, calibrate
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.drafting.sources import SyncDrafts, ThreadDrafts
from duo.errors import IncompatibleModels, UsageError
from duo.llama.backend import Model
from duo.llama.models import DEFAULT_PAIR, get_pair, prepare

MODES = ("target", "sync", "async")


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

    mode: str = "async"
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


def check_compatible(main: Model, draft: Model) -> None:
    if main.fingerprint != draft.fingerprint:
        raise IncompatibleModels(
            f"the draft model {draft.path.name} has another vocabulary than the main model "
            f"{main.path.name} (n_vocab {draft.n_vocab} vs {main.n_vocab}, fingerprint "
            f"{draft.fingerprint} vs {main.fingerprint}); their token IDs are not interchangeable"
        )


class Session:
    """Loaded models plus a draft source, reusable across generations."""

    def __init__(self, models: ModelConfig, spec: SpecConfig) -> None:
        if spec.mode not in MODES:
            raise UsageError(f"unknown mode {spec.mode!r} (choose from {', '.join(MODES)})")
        if spec.mode != "target" and models.draft is None:
            raise UsageError(f"mode {spec.mode} needs a draft model (-md)")
        self.spec = spec
        self._adaptive: AdaptivePolicy | None = None
        self.main = Model(
            models.main,
            n_ctx=models.n_ctx,
            n_threads=models.threads,
            n_gpu_layers=models.n_gpu_layers,
        )
        self.draft: Model | None = None
        self.drafts: DraftSource = NoDrafts()
        try:
            if spec.mode != "target" and models.draft is not None:
                self.draft = Model(
                    models.draft,
                    n_ctx=self.main.n_ctx,
                    n_threads=models.draft_threads,
                    n_gpu_layers=models.n_gpu_layers_draft,
                )
                check_compatible(self.main, self.draft)
                if spec.mode == "sync":
                    self.drafts = SyncDrafts(self.draft)
                else:
                    cores = set(spec.draft_cores) if spec.draft_cores else None
                    self.drafts = ThreadDrafts(self.draft, max_ahead=spec.max_ahead, cores=cores)
        except BaseException:
            self.close()
            raise

    def rounds(
        self, prompt: list[int], max_tokens: int, stats: Stats, sampling: SamplingParams = GREEDY
    ) -> Iterator[Round]:
        """Generate on the calling thread (pinned to the main cores, if any), round by round."""
        with pinned(self.spec.main_cores):
            for r in generate(
                self.main,
                prompt,
                max_tokens=max_tokens,
                drafts=self.drafts,
                draft_max=self.spec.draft_max,
                sampler=sampling.sampler(),
                policy=self._policy(),
                on_prefill=stats.add_prefill,
                min_batch=2 if self.spec.deterministic else 1,
            ):
                stats.add(r)
                yield r

    def run(
        self,
        prompt: list[int],
        max_tokens: int,
        on_round: Callable[[Round], object] | None = None,
        sampling: SamplingParams = GREEDY,
    ) -> Stats:
        stats = Stats()
        for r in self.rounds(prompt, max_tokens, stats, sampling):
            if on_round:
                on_round(r)
        return stats

    def _policy(self) -> Policy:
        """Async verifies what is worth it (costs measured once); sync is classic."""
        if self.spec.mode != "async" or not self.spec.adaptive:
            return FixedPolicy()
        if self._adaptive is None:
            self._adaptive = AdaptivePolicy(calibrate(self.main, self.spec.draft_max + 1))
        return self._adaptive

    def close(self) -> None:
        if isinstance(self.drafts, ThreadDrafts):
            self.drafts.close()
        for model in (self.draft, self.main):
            if model is not None:
                model.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def pinned(cores: frozenset[int] | None) -> Iterator[None]:
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
