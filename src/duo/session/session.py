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
policy verifies the proposal worth the most tokens per second (duo.core.choice.PerSource),
in sync mode the longest. The target mode uses none.

Slots: the main model holds `slots` sequences, so a lead can decode several generations
in one pass (duo.core.rounds.step). Each generation gets draft sources of its own: its
own n-gram index, a view of the suffix cache every generation shares, and its share of
the model drafters, which draft for every running generation at once (the local one in
a sequence of the draft model per slot, a back in one per session). Each slot has its own
policy; all share the measured cost of a pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from duo.channel.backs import Backs
from duo.core.choice import Chooser, Longest, PerSource
from duo.core.logprobs import TokenLogprob
from duo.core.policy import CostModel, StreakAcceptance
from duo.core.rounds import DraftPool, DraftSource, Generation, NoDrafts, Round, run
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.sharing import ALONE, SPLIT
from duo.core.stats import Stats
from duo.drafting.lookup import NGRAM, SUFFIX, NgramDrafts, SuffixDrafts, SuffixMemory
from duo.drafting.sources import MODEL, Sources, SyncDrafts, ThreadDrafts
from duo.errors import IncompatibleModels, UsageError
from duo.llama.backend import CACHE_BYTES, Model
from duo.llama.calibrate import cached
from duo.llama.grammar import Grammar
from duo.llama.rpc import device_list, parse_endpoints
from duo.net import is_loopback
from duo.session.config import ModelConfig, SpecConfig, open_draft
from duo.session.placement import BackPlacement
from duo.session.share import FIXED, CoreShare, Sharing


def check_compatible(main: Model, draft: Model) -> None:
    if main.vocab.fingerprint != draft.vocab.fingerprint:
        raise IncompatibleModels(
            f"the draft model {draft.path.name} has another vocabulary than the main model "
            f"{main.path.name} (n_vocab {draft.n_vocab} vs {main.n_vocab}, fingerprint "
            f"{draft.vocab.fingerprint} vs {main.vocab.fingerprint}); their token IDs are not "
            "interchangeable"
        )


class Session:
    """Loaded models plus draft sources and a policy, reusable across generations."""

    def __init__(
        self,
        models: ModelConfig,
        spec: SpecConfig,
        remote: DraftPool | None = None,
        slots: int = 1,
        cache_bytes: int = CACHE_BYTES,  # an in-process drafter's idle sequences (Model.park)
    ) -> None:
        types = spec.spec_types if spec.mode != "target" else frozenset()
        if types == {"model"} and models.draft is None and remote is None:
            raise UsageError(f"mode {spec.mode} with --spec-type model needs a draft model (-md)")
        self.spec = spec
        self.types = types
        self.slots = slots
        self.main = Model(
            models.main,
            n_ctx=models.n_ctx,
            n_threads=max(models.threads, models.threads_alone),  # the share may lend less
            n_batch=models.n_batch,
            n_gpu_layers=models.n_gpu_layers,
            devices=device_list(models.devices),
            flash_attn=models.flash_attn,
            cache_types=models.cache_types,
            mmap=models.mmap,
            split=models.split,
            n_seq=slots,
            deterministic=spec.deterministic,
            shared=models.kv_unified,
        )
        self.main.vocab.template = models.chat_template or self.main.vocab.template
        self.draft: Model | None = None
        self.local: SyncDrafts | ThreadDrafts | None = None
        self.suffix = SuffixMemory() if "suffix" in types else None
        self._ngrams: dict[int, NgramDrafts] = {}  # by slot, kept for its next request
        self._costs: CostModel | None = None
        self._policies: dict[int, Chooser] = {}
        self._learnt: dict[str, StreakAcceptance] = {}  # acceptance by source, for every slot
        self.share: CoreShare | None = None  # the cores lent between main model and drafter
        try:
            if "model" in types and models.draft is not None:
                self._open_drafter(models, cache_bytes)
        except BaseException:
            self.close()
            raise
        remote = remote if spec.mode != "target" else None
        self.pools: list[DraftPool] = [s for s in (self.local, remote) if s is not None]
        # the backs, judged as the in-process drafter is (duo.session.placement)
        self.placement: BackPlacement | None = None
        if isinstance(remote, Backs) and spec.mode == "async" and spec.adaptive:
            lendable = models.threads_lendable if self.share is None else 0
            self.placement = BackPlacement(
                self.main, remote, self.costs, draft_max=spec.draft_max, lendable=lendable
            )

    def _open_drafter(self, models: ModelConfig, cache_bytes: int) -> None:
        """The draft model in this process, its drafter, and the judge of its cores."""
        spec, slots = self.spec, self.slots
        forks = slots * spec.fanout if spec.mode == "async" else 0
        self.draft = open_draft(models, self.main.n_ctx, n_seq=slots, forks=forks)
        check_compatible(self.main, self.draft)
        if _lends_cores(models, spec) or _shares_servers_machine(models, spec):
            # On rpc-servers that share the machine with the main model's layers, no
            # threads can move: the drafter only rests where it does not pay.
            self.share = CoreShare(
                self.main,
                self.draft,
                split=models.threads,
                alone=models.threads_alone or models.threads,
                draft_max=spec.draft_max,
            )
        self.local = _local_drafter(self.draft, spec, slots, cache_bytes)
        if self.share is not None and isinstance(self.local, ThreadDrafts):
            self.share.start(self.local.worker)

    def drafts(self, slot: int = 0) -> DraftSource:
        """The draft sources of one generation in `slot`: the slot's n-gram index, the
        shared suffix cache, and the model drafters' drafts for it."""
        sources: list[DraftSource] = []
        if "ngram" in self.types:
            if slot not in self._ngrams:
                self._ngrams[slot] = NgramDrafts(2, self.spec.ngram_max)
            sources.append(self._ngrams[slot])
        if self.suffix is not None:
            sources.append(SuffixDrafts(self.suffix))
        caps = [self.spec.lookup_max] * len(sources)
        sources.extend(pool.source(slot) for pool in self.pools)
        caps += [self.spec.draft_max] * len(self.pools)
        if not sources:
            return NoDrafts()
        # A lone source's cap is the round's own (SpecConfig.round_max).
        return sources[0] if len(sources) == 1 else Sources(sources, caps)

    def generation(
        self,
        prompt: list[int],
        max_tokens: int,
        sampling: SamplingParams = GREEDY,
        slot: int = 0,
        record: list[TokenLogprob] | None = None,
    ) -> Generation:
        """A generation on sequence `slot` of the main model (not started). With
        `sampling.logprobs` set, each sampled token's entry is appended to `record` (a
        round samples its tokens before it is settled; past an end-of-generation token,
        entries belong to no emitted token). A response_format's grammar lives as long as
        the generation."""
        grammar = Grammar(self.main, sampling.grammar) if sampling.grammar else None
        return Generation(
            self.main.sequence(slot),
            prompt,
            max_tokens=max_tokens,
            drafts=self.drafts(slot),
            draft_max=self.spec.round_max,
            sampler=sampling.sampler(grammar, record, self.main.vocab),
            policy=self.policy(slot),
            on_end=grammar.close if grammar else None,
        )

    def rounds(
        self,
        prompt: list[int],
        max_tokens: int,
        stats: Stats,
        sampling: SamplingParams = GREEDY,
        record: list[TokenLogprob] | None = None,
    ) -> Iterator[Round]:
        """Generate on the calling thread (pinned to the main cores, if any), round by round
        (`record`: see generation)."""
        g = self.generation(prompt, max_tokens, sampling, record=record)
        with pinned(self.spec.main_cores):
            for r in run(g.main, g, stats.add_prefill):
                stats.add(r)
                self.after_pass([r])
                yield r
        stats.add_received(g.received())

    def sharing(self) -> Sharing:
        """How the main model and an in-process drafter share the machine now."""
        if self.share is not None:
            return self.share.sharing()
        drafter = self.draft.n_threads if self.draft is not None else 0
        return Sharing(FIXED, self.main.n_threads, drafter)

    def after_pass(self, rounds: Sequence[Round]) -> None:
        """Every pass of the main model's rounds (a slot each), on the generation thread:
        the sharing of the cores is weighed, and looked at again now and then
        (duo.session.share)."""
        looks = self.placement.observe(rounds) if self.placement is not None else []
        if self.share is not None:
            held = self.share.state == ALONE
            self.share.observe(rounds)
            if held and self.share.state == SPLIT:
                looks.append(MODEL)
        # A look: a drafter drafts again. Held, it had no draft ready round after round,
        # and each slot's policy took that for drafts that do not pay and rested it (up to
        # 256 rounds at a time): the look would have gone by without a draft verified, the
        # main model on fewer cores for nothing.
        for source in looks:
            for chooser in self._policies.values():
                chooser.wake(source)

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
        vocab = self.main.vocab
        return vocab.tokenize(vocab.render_chat(messages), add_special=False)

    def policy(self, slot: int = 0) -> Chooser:
        """Async verifies what is worth it, per source (the main model's costs measured on
        first use, on the calling thread: call it where generation runs); sync verifies
        the longest proposal whole, as classic speculative decoding does. Each slot has
        its own policy (its own streaks and rests); all share the cost model and what
        each source's drafts are worth."""
        if slot not in self._policies:
            adaptive = self.spec.mode == "async" and self.spec.adaptive
            lookups = frozenset({NGRAM, SUFFIX})
            chooser = PerSource(self.costs(), lookups, self._learnt) if adaptive else Longest()
            self._policies[slot] = chooser
        return self._policies[slot]

    def ready(self) -> None:
        """Measure what generation goes by, on the calling thread, where it will run: the
        drafts' policy goes by the main model's pass costs, and so does the size of
        prompt pieces with several slots."""
        if self.slots > 1:
            self.costs()
        self.policy()

    def costs(self) -> CostModel:
        """The main model's pass times by batch size, measured once: sizes up to one
        slot's largest round (every one up to 9, then spread out), and every slot's
        (the sizes between are interpolated: past one slot's round, each token adds about
        the same)."""
        if self._costs is None:
            k = self.spec.round_max + 1
            extra = [self.slots * k] if self.slots > 1 else []
            self._costs = cached(self.main, k, extra=extra)
            if self.share is not None:
                self.share.costs = self._costs
        return self._costs

    def forget(self) -> None:
        """Forget earlier requests (the suffix cache, the slots' n-gram indexes): a
        benchmark's repeat starts afresh."""
        if self.suffix is not None:
            self.suffix.forget()
        self._ngrams.clear()

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
        for model in (self.draft, self.main):
            if model is not None:
                model.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _local_drafter(
    draft: Model, spec: SpecConfig, slots: int, cache_bytes: int
) -> SyncDrafts | ThreadDrafts:
    if spec.mode == "sync":
        return SyncDrafts(draft, slots)
    cores = set(spec.draft_cores) if spec.draft_cores else None
    return ThreadDrafts(
        draft,
        max_ahead=spec.max_ahead,
        fanout=spec.fanout,
        cores=cores,
        slots=slots,
        cache_bytes=cache_bytes,
    )


def _lends_cores(models: ModelConfig, spec: SpecConfig) -> bool:
    """Whether the main model may take the in-process drafter's cores while it rests."""
    return spec.mode == "async" and models.threads_alone > models.threads


def _shares_servers_machine(models: ModelConfig, spec: SpecConfig) -> bool:
    """Whether the in-process drafter runs on rpc-servers (--rpcd) on this machine, as
    the main model does (on its CPU, or with layers on rpc-servers here too): its work
    then slows the main model's, though no thread of this process moves."""
    if spec.mode != "async" or not models.rpcd or not models.n_gpu_layers_draft:
        return False
    if not all(is_loopback(e.rpartition(":")[0]) for e in parse_endpoints(models.rpcd)):
        return False
    if not models.n_gpu_layers or not models.rpc:
        return True
    return any(is_loopback(e.rpartition(":")[0]) for e in parse_endpoints(models.rpc))


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
