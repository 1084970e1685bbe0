"""Counters of the lead, rendered in the Prometheus text format for GET /metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from duo.channel.endpoint import WireStats
from duo.core.rounds import AFTER
from duo.core.stats import Stats
from duo.lead.engine.events import ENDINGS, Ending


@dataclass
class Metrics:
    wire: WireStats  # the drafter channel's counters
    drafters: Callable[[], int]  # backs connected now
    local_drafter: bool  # the lead runs a drafter of its own (-md)
    decode_cpu: Callable[[], float] = lambda: 0.0  # the main model's Model.decode_cpu_seconds
    # each back's name and state now (duo.session.placement)
    drafter_states: Callable[[], list[tuple[str, str]]] = lambda: []
    requests: int = 0
    # by why they ended (vLLM's request_success_total, whose "abort" is "cancelled")
    ended: dict[Ending, int] = field(default_factory=lambda: dict.fromkeys(ENDINGS, 0))
    requests_failed: int = 0
    total: Stats = field(default_factory=Stats)  # all finished generations
    # (busy slots, queued requests, slots) now: the lead's engine
    load: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 1)
    # told of each finished generation, on the engine thread (the dashboard's feed)
    listeners: list[Callable[[Stats], None]] = field(default_factory=list)

    def add(self, s: Stats, ending: Ending) -> None:
        """A request ended without an error: finished ("stop", "length") or cancelled by
        its client ("cancelled"), with what it did until then."""
        self.requests += 1
        self.ended[ending] += 1
        self.total.merge(s)
        for listener in self.listeners:
            listener(s)

    def fail(self) -> None:
        self.requests_failed += 1

    def render(self) -> str:
        rows = [*self._load_rows(), *self._generation_rows(), *self._channel_rows()]
        lines = []
        for name, kind, help_text, value in rows:
            lines += _family(name, kind, help_text, [("", f"{value:g}")])
        return "\n".join([*lines, *self._labelled()]) + "\n"

    def _load_rows(self) -> list[Row]:
        busy, queued, slots = self.load()
        return [
            ("slots", "gauge", "Requests the lead decodes together (--parallel).", slots),
            ("slots_busy", "gauge", "Slots running a request now.", busy),
            ("requests_queued", "gauge", "Requests waiting for a free slot.", queued),
            (
                "requests_total",
                "counter",
                "Generation requests ended without an error (finished or cancelled).",
                self.requests,
            ),
            (
                "requests_failed_total",
                "counter",
                "Requests ended by an error.",
                self.requests_failed,
            ),
        ]

    def _generation_rows(self) -> list[Row]:
        t = self.total
        return [
            ("prompt_tokens_total", "counter", "Prompt tokens processed.", t.prompt_tokens),
            ("tokens_generated_total", "counter", "Tokens generated.", t.tokens),
            ("rounds_total", "counter", "Verification rounds of the main model.", t.rounds),
            ("draft_tokens_total", "counter", "Draft tokens verified.", t.drafted),
            ("draft_tokens_accepted_total", "counter", "Draft tokens accepted.", t.accepted),
            ("acceptance_rate", "gauge", "Accepted / drafted, since start.", t.acceptance_rate),
            (
                "mean_acceptance_length",
                "gauge",
                "1 + accepted / rounds, since start.",
                t.mean_acceptance_length,
            ),
            ("prefill_seconds_total", "counter", "Time evaluating prompts.", t.prefill_seconds),
            ("decode_seconds_total", "counter", "Time in verification rounds.", t.decode_seconds),
            (
                "main_decode_cpu_seconds_total",
                "counter",
                "CPU time of the thread calling the main model's llama_decode, in it "
                "(llama.cpp's worker threads not counted).",
                self.decode_cpu(),
            ),
            (
                "lead_overhead_seconds_per_round",
                "gauge",
                "Mean time per round outside the main model's llama_decode.",
                t.overhead_ms_per_round / 1000,
            ),
        ]

    def _channel_rows(self) -> list[Row]:
        wire, tokens = self.wire, self.total.tokens
        wire_bytes = wire.bytes_in + wire.bytes_out
        return [
            ("drafters_connected", "gauge", "Backs connected now.", self.drafters()),
            (
                "local_drafter",
                "gauge",
                "1 if the lead runs its own drafter (-md).",
                int(self.local_drafter),
            ),
            (
                "drafters_refused_total",
                "counter",
                "Backs refused at the handshake.",
                wire.drafters_refused,
            ),
            (
                "drafters_dropped_total",
                "counter",
                "Backs disconnected for protocol errors.",
                wire.drafters_dropped,
            ),
            (
                "wire_bytes_sent_total",
                "counter",
                "Drafter channel bytes sent by the lead.",
                wire.bytes_out,
            ),
            (
                "wire_bytes_received_total",
                "counter",
                "Drafter channel bytes received.",
                wire.bytes_in,
            ),
            (
                "wire_frames_sent_total",
                "counter",
                "Drafter channel messages (WebSocket frames) sent by the lead.",
                wire.frames_out,
            ),
            (
                "wire_frames_received_total",
                "counter",
                "Drafter channel messages (WebSocket frames) received.",
                wire.frames_in,
            ),
            (
                "wire_bytes_per_token",
                "gauge",
                "Drafter channel bytes (both ways) per generated token.",
                wire_bytes / tokens if tokens else 0.0,
            ),
        ]

    def _labelled(self) -> list[str]:
        """The families with a sample per label: why requests ended, each source's draft
        tokens, each back's state, the rounds by what the round before did."""
        t = self.total
        lines = _family(
            "requests_ended_total",
            "counter",
            "Generation requests by why they ended: stop (an end-of-generation token or a stop "
            "string), length (max_tokens or the context), cancelled (the client went away or "
            "stopped it).",
            [(f'reason="{why}"', str(n)) for why, n in self.ended.items()],
        )
        sources = sorted(t.by_source.items())
        for name, help_text, attr in (
            ("source_draft_tokens_total", "Draft tokens verified, by source.", "drafted"),
            ("source_draft_tokens_accepted_total", "Draft tokens accepted, by source.", "accepted"),
            (
                "source_draft_tokens_received_total",
                "Draft tokens a drafter sent, usable or not, by source.",
                "received",
            ),
        ):
            samples = [(f'source="{_label(s)}"', str(getattr(c, attr))) for s, c in sources]
            lines += _family(name, "counter", help_text, samples)
        states = [
            (f'drafter="{_label(drafter)}",state="{state}"', str(int(state == now)))
            for drafter, now in self.drafter_states()
            for state in ("drafting", "resting", "looking")
        ]
        lines += _family(
            "drafter_state",
            "gauge",
            "1 for each back's state now (drafting, resting: told to draft nothing, its drafts "
            "did not pay; looking: drafting again to be judged).",
            states,
        )
        for name, help_text, attr in (
            (
                "rounds_after_total",
                "Rounds, by what the round before did: acceptance (its whole draft "
                "accepted), rejection, no draft.",
                "rounds",
            ),
            ("rounds_ready_after_total", "Of those, rounds with a usable draft ready.", "ready"),
        ):
            samples = [
                (f'after="{after.replace(" ", "_")}"', str(getattr(t.readiness(after), attr)))
                for after in AFTER
            ]
            lines += _family(name, "counter", help_text, samples)
        return lines


Row = tuple[str, str, str, float]  # name, kind, help, value


def _family(name: str, kind: str, help_text: str, samples: list[tuple[str, str]]) -> list[str]:
    """A metric family in Prometheus' text format: its help, its type, and a line per
    sample (labels, value as written; labels "": none)."""
    lines = [f"# HELP duo_{name} {help_text}", f"# TYPE duo_{name} {kind}"]
    for labels, value in samples:
        lines.append(f"duo_{name}{{{labels}}} {value}" if labels else f"duo_{name} {value}")
    return lines


def _label(text: str) -> str:
    """A Prometheus label value: backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')
