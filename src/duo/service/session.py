"""The main model, its draft sources and its policy, composed once.

`duo generate`, `duo demo`, the bench and the lead all generate through a Session.

Modes:
    target  the main model alone (the baseline)
    sync    classic speculative decoding: draft k tokens, then verify them
    async   the drafter runs concurrently on its own thread (and core) and drafts
            continuously; the main model verifies whatever is ready, never waiting

Draft sources (`SpecConfig.spec_types`): the draft model (-md) in this process, n-gram
lookup in the request's own tokens, the suffix cache of earlier requests, and, for a
lead, its connected backs (`remote`). Every source proposes each round; in async mode the
policy verifies the proposal worth the most tokens per second (duo.core.policy.PerSource),
in sync mode the longest. The target mode uses none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext

from duo.core.choice import Chooser, Longest, PerSource
from duo.core.engine import DraftSource, NoDrafts, Round, generate
from duo.core.logprobs import TokenLogprob
from duo.core.policy import calibrate
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.drafting.lookup import NgramDrafts, SuffixDrafts
from duo.drafting.sources import Sources, SyncDrafts, ThreadDrafts
from duo.errors import IncompatibleModels, UsageError
from duo.llama.backend import Model
from duo.llama.grammar import Grammar
from duo.service.config import ModelConfig, SpecConfig


def check_compatible(main: Model, draft: Model) -> None:
    if main.fingerprint != draft.fingerprint:
        raise IncompatibleModels(
            f"the draft model {draft.path.name} has another vocabulary than the main model "
            f"{main.path.name} (n_vocab {draft.n_vocab} vs {main.n_vocab}, fingerprint "
            f"{draft.fingerprint} vs {main.fingerprint}); their token IDs are not interchangeable"
        )


class Session:
    """Loaded models plus draft sources and a policy, reusable across generations."""

    def __init__(
        self, models: ModelConfig, spec: SpecConfig, remote: DraftSource | None = None
    ) -> None:
        types = spec.spec_types if spec.mode != "target" else frozenset()
        if types == {"model"} and models.draft is None and remote is None:
            raise UsageError(f"mode {spec.mode} with --spec-type model needs a draft model (-md)")
        self.spec = spec
        self.main = _load(models.main, models.n_ctx, models.threads, models.n_gpu_layers)
        self.draft: Model | None = None
        self.local: SyncDrafts | ThreadDrafts | None = None
        self.suffix = SuffixDrafts() if "suffix" in types else None
        self._policy: Chooser | None = None
        try:
            if "model" in types and models.draft is not None:
                self.draft = _load(
                    models.draft, self.main.n_ctx, models.draft_threads, models.n_gpu_layers_draft
                )
                check_compatible(self.main, self.draft)
                self.local = _local_drafter(self.draft, spec)
        except BaseException:
            self.close()
            raise
        free: list[DraftSource] = [NgramDrafts(2, spec.ngram_max)] if "ngram" in types else []
        if self.suffix is not None:
            free.append(self.suffix)
        remote = remote if spec.mode != "target" else None
        sources = [s for s in (*free, self.local, remote) if s is not None]
        self.drafts: DraftSource = (
            NoDrafts() if not sources else sources[0] if len(sources) == 1 else Sources(sources)
        )

    def rounds(
        self,
        prompt: list[int],
        max_tokens: int,
        stats: Stats,
        sampling: SamplingParams = GREEDY,
        record: list[TokenLogprob] | None = None,
    ) -> Iterator[Round]:
        """Generate on the calling thread (pinned to the main cores, if any), round by round.

        With `sampling.logprobs` set, each sampled token's entry is appended to `record`
        (a round samples its tokens before it is yielded; past an end-of-generation token,
        entries belong to no emitted token)."""
        grammar = Grammar(self.main, sampling.grammar) if sampling.grammar else None
        with pinned(self.spec.main_cores), closing(grammar) if grammar else nullcontext():
            for r in generate(
                self.main,
                prompt,
                max_tokens=max_tokens,
                drafts=self.drafts,
                draft_max=self.spec.draft_max,
                sampler=sampling.sampler(grammar, record),
                policy=self.policy(),
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
        """Generate to the end; `on_round` sees every round."""
        stats = Stats()
        for r in self.rounds(prompt, max_tokens, stats, sampling):
            if on_round:
                on_round(r)
        return stats

    def chat_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt of a chat, through the main model's own chat template."""
        return self.main.tokenize(self.main.render_chat(messages), add_special=False)

    def policy(self) -> Chooser:
        """Async verifies what is worth it, per source (the main model's costs measured on
        first use, on the calling thread: call it where generation runs); sync verifies
        the longest proposal whole, as classic speculative decoding does."""
        if self._policy is None:
            adaptive = self.spec.mode == "async" and self.spec.adaptive
            self._policy = (
                PerSource(calibrate(self.main, self.spec.draft_max + 1)) if adaptive else Longest()
            )
        return self._policy

    def forget(self) -> None:
        """Forget earlier requests (the suffix cache): a benchmark's repeat starts afresh."""
        if self.suffix is not None:
            self.suffix.forget()

    def close(self) -> None:
        if isinstance(self.local, ThreadDrafts):
            self.local.close()
        for model in (self.draft, self.main):
            if model is not None:
                model.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _load(path: os.PathLike[str], n_ctx: int, threads: int, n_gpu_layers: int) -> Model:
    return Model(path, n_ctx=n_ctx, n_threads=threads, n_gpu_layers=n_gpu_layers)


def _local_drafter(draft: Model, spec: SpecConfig) -> SyncDrafts | ThreadDrafts:
    if spec.mode == "sync":
        return SyncDrafts(draft)
    cores = set(spec.draft_cores) if spec.draft_cores else None
    return ThreadDrafts(draft, max_ahead=spec.max_ahead, cores=cores)


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
