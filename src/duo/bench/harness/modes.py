"""The modes of `duo bench`, each a runner made from one variant's settings (`Opening`):
a registry from mode name to the function that opens its runner.

Modes:
    default     what `duo generate` does with no placement flags: every core, every draft
                source, the draft model's cores lent to the main model where it does not pay
    target-1    the main model alone on the main device (one core set)
    target-all  the main model alone on every core (the strongest single-box alternative)
    sync        classic speculative decoding on the main device
    async       the drafter on its own thread and device, in one process
    lead+back   `duo lead` and `duo back` as separate processes over loopback
    lead+back-default  the same as a user starts them on one machine: no threads or cores
                given (the lead lends the back's threads while it drafts), n-gram lookup
    lead-default  `duo lead` alone as a user starts it, with lead+back-default's sources: what
                a back on the lead's machine costs or brings, over the same HTTP path
    lead+client `duo lead` and a drafter-driven client (seed 003's /verify), synchronous
    free-1, free-all, async+free, lead+back+free: with the free drafters (n-gram, suffix)
    llama.cpp*  llama.cpp's own binaries, same prompts and cores (duo.bench.harness.llamacpp)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from duo.bench.harness.isolated import Isolated
from duo.bench.harness.llamacpp import NGRAM_TYPES
from duo.bench.harness.peers import LlamaCpp, RemoteDraft
from duo.bench.harness.runners import InProcess, LeadBack, Prompt, Runner
from duo.bench.harness.verifier import LeadClient
from duo.bench.net.link import Link
from duo.bench.variants import REMOTE_DRAFT
from duo.core.sampling import SamplingParams
from duo.session.config import Mode, ModelConfig, SpecConfig
from duo.session.threads import with_threads

MODEL_ONLY = frozenset({"model"})  # sync, async, lead+back: the draft model alone
FREE = frozenset({"ngram", "suffix"})  # free-1, free-all: no draft model


@dataclass(frozen=True)
class Opening:
    """What a mode's runner is made of: one variant's label, models, settings and link."""

    label: str
    models: ModelConfig  # with the variant's main model
    spec: SpecConfig  # with the variant's fan-out
    prompts: list[Prompt]
    n: int
    sampling: SamplingParams
    link: Link  # a back's (a draft's), at the variant's round trip
    llama_cpp_bin: str | None
    cores: int  # every core the bench may use

    @property
    def target(self) -> ModelConfig:
        return replace(self.models, draft=None)

    @property
    def every_core(self) -> ModelConfig:
        return replace(self.target, threads=self.cores)

    def in_process(self, models: ModelConfig, spec: SpecConfig) -> Runner:
        """A Session, in a process of its own (duo.bench.harness.isolated); in this one
        with rpc-servers, which are registered here and serve one client at a time."""
        args = (self.label, models, spec, self.prompts, self.n, self.sampling)
        if models.rpc or models.rpcd:
            return InProcess(*args)
        return Isolated(self.label, InProcess, *args)


Opener = Callable[[Opening], Runner]


def _default(o: Opening) -> Runner:
    """As a user runs it: no cores, threads or sources given."""
    cfg = SpecConfig(draft_max=o.spec.draft_max, max_ahead=o.spec.max_ahead, fanout=o.spec.fanout)
    return o.in_process(with_threads(o.models, cfg), cfg)


def _model(mode: Mode) -> Opener:
    """sync, async: the draft model alone, in this process."""
    return lambda o: o.in_process(o.models, replace(o.spec, mode=mode, spec_types=MODEL_ONLY))


def _lead_back(types: str, as_user: bool = False, back: bool = True) -> Opener:
    return lambda o: LeadBack(
        o.label, o.models, o.spec, o.prompts, o.n, o.sampling, types, o.link, as_user, back
    )


def _lead_client(o: Opening) -> Runner:
    return LeadClient(o.label, o.models, o.spec, o.prompts, o.n, o.sampling, o.link)


def _llama_cpp(o: Opening) -> Runner:
    return LlamaCpp(o.label, o.models, o.spec, o.prompts, o.n, o.llama_cpp_bin)


def _remote_draft(o: Opening) -> Runner:
    return RemoteDraft(o.label, o.models, o.spec, o.prompts, o.n, o.llama_cpp_bin, o.link)


# duo's modes, in the order they run and report
OWN: dict[str, Opener] = {
    "default": _default,
    "target-1": lambda o: o.in_process(o.target, replace(o.spec, mode="target", draft_cores=None)),
    "target-all": lambda o: o.in_process(o.every_core, SpecConfig(mode="target")),
    "sync": _model("sync"),
    "async": _model("async"),
    # free drafters, the main model on the main device
    "free-1": lambda o: o.in_process(o.target, replace(o.spec, draft_cores=None, spec_types=FREE)),
    # free drafters need no core: the main model takes them all
    "free-all": lambda o: o.in_process(
        o.every_core, replace(o.spec, main_cores=None, draft_cores=None, spec_types=FREE)
    ),
    "async+free": lambda o: o.in_process(o.models, o.spec),
    "lead+back": _lead_back("model"),
    "lead+back+free": _lead_back("model,ngram"),  # no suffix: see LeadBack
    "lead+back-default": _lead_back("model,ngram", as_user=True),
    "lead-default": _lead_back("model,ngram", as_user=True, back=False),
    "lead+client": _lead_client,
}
# llama.cpp's own binaries, when available (duo.bench.harness.llamacpp says which is whose peer)
PEERS: dict[str, Opener] = {
    "llama.cpp": _llama_cpp,
    "llama.cpp-all": _llama_cpp,
    "llama.cpp-default": _llama_cpp,
    "llama.cpp-spec": _llama_cpp,
    **{f"llama.cpp-{t}": _llama_cpp for t in NGRAM_TYPES},
    "llama.cpp-spec+ngram": _llama_cpp,
}
RUNNERS: dict[str, Opener] = {**OWN, **PEERS, REMOTE_DRAFT: _remote_draft}  # every mode
MODES = tuple(OWN)
PEER_MODES = tuple(PEERS)
