"""Counters of the lead, rendered in the Prometheus text format for GET /metrics."""

from __future__ import annotations

from dataclasses import dataclass

from duo.hub import WireStats
from duo.stats import Stats


@dataclass
class Metrics:
    requests: int = 0
    requests_failed: int = 0
    prompt_tokens: int = 0
    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    llama_seconds: float = 0.0

    def add(self, s: Stats) -> None:
        self.requests += 1
        self.prompt_tokens += s.prompt_tokens
        self.tokens += s.tokens
        self.rounds += s.rounds
        self.drafted += s.drafted
        self.accepted += s.accepted
        self.prefill_seconds += s.prefill_seconds
        self.decode_seconds += s.decode_seconds
        self.llama_seconds += s.llama_seconds

    def render(self, wire: WireStats, drafters: int, local_drafter: bool) -> str:
        acceptance = self.accepted / self.drafted if self.drafted else 0.0
        mean_len = 1 + self.accepted / self.rounds if self.rounds else 0.0
        wire_bytes = wire.bytes_in + wire.bytes_out
        per_token = wire_bytes / self.tokens if self.tokens else 0.0
        overhead = (self.decode_seconds - self.llama_seconds) / self.rounds if self.rounds else 0.0
        rows = [
            ("duo_requests_total", "counter", "Finished generation requests.", self.requests),
            (
                "duo_requests_failed_total",
                "counter",
                "Requests that ended in an error.",
                self.requests_failed,
            ),
            ("duo_prompt_tokens_total", "counter", "Prompt tokens processed.", self.prompt_tokens),
            ("duo_tokens_generated_total", "counter", "Tokens generated.", self.tokens),
            ("duo_rounds_total", "counter", "Verification rounds of the main model.", self.rounds),
            ("duo_draft_tokens_total", "counter", "Draft tokens verified.", self.drafted),
            ("duo_draft_tokens_accepted_total", "counter", "Draft tokens accepted.", self.accepted),
            ("duo_acceptance_rate", "gauge", "Accepted / drafted, since start.", acceptance),
            (
                "duo_mean_acceptance_length",
                "gauge",
                "1 + accepted / rounds, since start.",
                mean_len,
            ),
            (
                "duo_prefill_seconds_total",
                "counter",
                "Time spent evaluating prompts.",
                self.prefill_seconds,
            ),
            (
                "duo_decode_seconds_total",
                "counter",
                "Time spent in verification rounds.",
                self.decode_seconds,
            ),
            (
                "duo_lead_overhead_seconds_per_round",
                "gauge",
                "Mean time per round outside the main model's llama_decode.",
                overhead,
            ),
            ("duo_drafters_connected", "gauge", "Backs connected now.", drafters),
            (
                "duo_local_drafter",
                "gauge",
                "1 if the lead runs its own drafter (-md).",
                int(local_drafter),
            ),
            (
                "duo_drafters_refused_total",
                "counter",
                "Backs refused at the handshake.",
                wire.drafters_refused,
            ),
            (
                "duo_drafters_dropped_total",
                "counter",
                "Backs disconnected for protocol errors.",
                wire.drafters_dropped,
            ),
            (
                "duo_wire_bytes_sent_total",
                "counter",
                "Drafter channel bytes sent by the lead.",
                wire.bytes_out,
            ),
            (
                "duo_wire_bytes_received_total",
                "counter",
                "Drafter channel bytes received.",
                wire.bytes_in,
            ),
            (
                "duo_wire_bytes_per_token",
                "gauge",
                "Drafter channel bytes (both ways) per generated token.",
                per_token,
            ),
        ]
        lines = []
        for name, kind, help_text, value in rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value:g}"]
        return "\n".join(lines) + "\n"
