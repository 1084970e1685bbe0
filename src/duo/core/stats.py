"""Speculation statistics, in the words llama.cpp and vLLM use.

acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / rounds
(tokens committed per verification round, counting the correction or bonus).

Readiness: of the rounds after a rejection (or a full acceptance, or no draft), how many
found a usable draft offered when they were planned. A drafter running one chain ahead of
the commits is rarely ready right after a rejection: it must first hear the correction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from duo.core.prompt import Prefill
from duo.core.rounds import After, Round


@dataclass(slots=True)
class SourceStats:
    """Draft tokens verified and accepted from one source ("model", "ngram", "back:NAME"),
    and how many reached the lead from it (a drafter's whole work, usable or not)."""

    drafted: int = 0
    accepted: int = 0
    received: int = 0

    def add(self, drafted: int, accepted: int, received: int = 0) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.received += received

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(slots=True)
class Readiness:
    """Rounds of one kind (by what the round before did), and how many had a draft ready."""

    rounds: int = 0
    ready: int = 0

    def add(self, ready: bool) -> None:
        self.rounds += 1
        self.ready += ready

    @property
    def fraction(self) -> float | None:
        return self.ready / self.rounds if self.rounds else None


@dataclass(slots=True)
class Stats:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of which the KV was kept from the slot's last request
    prefill_seconds: float = 0.0
    tokens: int = 0
    rounds: int = 0
    rounds_drafted: int = 0  # of which verified a draft
    drafted: int = 0
    accepted: int = 0
    decode_seconds: float = 0.0  # wall time of all rounds
    llama_seconds: float = 0.0  # of which inside llama_decode (main model)
    accepted_at: list[int] = field(default_factory=list)  # per draft position
    drafted_at: list[int] = field(default_factory=list)
    trace: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per round
    by_source: dict[str, SourceStats] = field(default_factory=dict)  # whose drafts came
    after: dict[After, Readiness] = field(default_factory=dict)  # by the round before

    def add_prefill(self, p: Prefill) -> None:
        self.prompt_tokens += p.prompt_tokens
        self.cached_tokens += p.reused
        self.prefill_seconds += p.seconds

    def add(self, r: Round) -> None:
        self.tokens += len(r.tokens)
        self.rounds += 1
        self.rounds_drafted += r.drafted > 0
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.decode_seconds += r.seconds
        self.llama_seconds += r.llama_seconds
        self.trace.append((r.drafted, r.accepted))
        if r.source is not None and r.drafted:
            self.by_source.setdefault(r.source, SourceStats()).add(r.drafted, r.accepted)
        if r.ready is not None:
            self.after.setdefault(r.after, Readiness()).add(r.ready)
        while len(self.drafted_at) < r.drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(r.drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < r.accepted

    def merge(self, other: Stats) -> None:
        """Add another generation's counts (not its trace)."""
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.prefill_seconds += other.prefill_seconds
        self.tokens += other.tokens
        self.rounds += other.rounds
        self.rounds_drafted += other.rounds_drafted
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.decode_seconds += other.decode_seconds
        self.llama_seconds += other.llama_seconds
        for name, theirs in other.by_source.items():
            self.by_source.setdefault(name, SourceStats()).add(
                theirs.drafted, theirs.accepted, theirs.received
            )
        for after, counts in other.after.items():
            mine = self.after.setdefault(after, Readiness())
            mine.rounds += counts.rounds
            mine.ready += counts.ready
        for i, (d, a) in enumerate(zip(other.drafted_at, other.accepted_at, strict=True)):
            if i == len(self.drafted_at):
                self.drafted_at.append(0)
                self.accepted_at.append(0)
            self.drafted_at[i] += d
            self.accepted_at[i] += a

    def add_received(self, received: Mapping[str, int]) -> None:
        """A generation's draft tokens received, by source (DraftSource.received)."""
        for name, n in received.items():
            if n:
                self.by_source.setdefault(name, SourceStats()).received += n

    def readiness(self, after: After) -> Readiness:
        return self.after.get(after, Readiness())

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def overhead_ms_per_round(self) -> float:
        """Lead time per round outside the main model's llama_decode."""
        if not self.rounds:
            return 0.0
        return 1000 * (self.decode_seconds - self.llama_seconds) / self.rounds

    def summary(self) -> list[str]:
        """The seeds' summary lines, plus the speculation figures."""
        enc = self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0
        return [
            f"encoded {self.prompt_tokens:4d} tokens in {self.prefill_seconds:8.3f} s, "
            f"speed: {enc:8.2f} t/s",
            f"decoded {self.tokens:4d} tokens in {self.decode_seconds:8.3f} s, "
            f"speed: {self.tokens_per_second:8.2f} t/s",
            f"drafted {self.drafted}, accepted {self.accepted}, "
            f"acceptance rate {self.acceptance_rate:.2f}, "
            f"mean acceptance length {self.mean_acceptance_length:.2f} "
            f"({self.rounds} rounds)",
            *([f"by source: {self.sources_text()}"] if self.by_source else []),
        ]

    def sources_text(self) -> str:
        """'ngram 35/40, model 5/9 (80 received)': accepted/verified per source, most
        verified first, and the draft tokens a drafter sent, if it counts them."""
        ranked = sorted(self.by_source.items(), key=lambda kv: -kv[1].drafted)
        return ", ".join(
            f"{name} {s.accepted}/{s.drafted}" + (f" ({s.received} received)" if s.received else "")
            for name, s in ranked
        )
