"""Speculation statistics, in the words llama.cpp and vLLM use.

acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / rounds
(tokens committed per verification round, counting the correction or bonus).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from duo.core.engine import Prefill, Round


@dataclass(slots=True)
class SourceStats:
    """Draft tokens verified and accepted from one source ("model", "ngram", "back:NAME")."""

    drafted: int = 0
    accepted: int = 0

    def add(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(slots=True)
class Stats:
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_seconds: float = 0.0  # wall time of all rounds
    llama_seconds: float = 0.0  # of which inside llama_decode (main model)
    accepted_at: list[int] = field(default_factory=list)  # per draft position
    drafted_at: list[int] = field(default_factory=list)
    trace: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per round
    by_source: dict[str, SourceStats] = field(default_factory=dict)  # whose drafts were verified

    def add_prefill(self, p: Prefill) -> None:
        self.prompt_tokens += p.prompt_tokens
        self.prefill_seconds += p.seconds

    def add(self, r: Round) -> None:
        self.tokens += len(r.tokens)
        self.rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.decode_seconds += r.seconds
        self.llama_seconds += r.llama_seconds
        self.trace.append((r.drafted, r.accepted))
        if r.source is not None and r.drafted:
            self.by_source.setdefault(r.source, SourceStats()).add(r.drafted, r.accepted)
        while len(self.drafted_at) < r.drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(r.drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < r.accepted

    def merge(self, other: Stats) -> None:
        """Add another generation's counts (not its trace)."""
        self.prompt_tokens += other.prompt_tokens
        self.prefill_seconds += other.prefill_seconds
        self.tokens += other.tokens
        self.rounds += other.rounds
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.decode_seconds += other.decode_seconds
        self.llama_seconds += other.llama_seconds
        for name, theirs in other.by_source.items():
            self.by_source.setdefault(name, SourceStats()).add(theirs.drafted, theirs.accepted)
        for i, (d, a) in enumerate(zip(other.drafted_at, other.accepted_at, strict=True)):
            if i == len(self.drafted_at):
                self.drafted_at.append(0)
                self.accepted_at.append(0)
            self.drafted_at[i] += d
            self.accepted_at[i] += a

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
        """'ngram 40/35, model 9/5': accepted/drafted per source, most drafted first."""
        ranked = sorted(self.by_source.items(), key=lambda kv: -kv[1].drafted)
        return ", ".join(f"{name} {s.accepted}/{s.drafted}" for name, s in ranked)
