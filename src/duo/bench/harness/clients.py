"""`duo bench --clients 1,2,4`: concurrent clients against a server, duo's and llama.cpp's.

Each server is started afresh for each client count, on the cores its duo counterpart
uses, with as many slots as the most clients measured. For each client count c, c clients
stream completions at once: client j sends prompts j, j+c, j+2c, ... of the suite, one
after the other, so every count does the same work. Interleaved (`--order`, the default),
every server is up at once and they take turns block by block: each block is c prompts
(or sessions), one per client, and each server in turn answers it, the first one changing
from block to block. A host whose speed drifts then slows every server alike, where one
server after another would lay a drift between them (on this project's 2-vCPU machine,
consecutive half-minute runs of the same server differ by up to 10%). Sequential, each
server is started, loaded with the whole suite and stopped in turn.

Reported per server and count, from the repeat with the median tok/s: aggregate tokens per
second (all tokens / wall time, the blocks' times added up), and over every client's
requests the time to first token, the gap between streamed chunks, and the inter-token
latency (p50, p99: a client that starves shows in p99). A speculative round streams
several tokens in one chunk: its gap counts once among the gaps, and as gap / tokens for
each of its tokens among the inter-token latencies (tokens per chunk from duo's `duo`
field; llama-server streams one token a chunk).

    duo              duo lead --parallel N, free drafters, the main model on every core
    duo+back         the same lead on the main core, a back on the draft core
    llama-server     llama-server -np N --kv-unified on every core (one KV buffer for
                     all slots, as duo's lead and llama-server's default slots have)
    llama-server+md  llama-server -np N -md DRAFT on every core (main and draft share them)
    llama-server+ngram  llama-server -np N --spec-type ngram-mod on every core (its n-gram
                     pool, shared by the slots, with duo's key and draft lengths)

Prompts go as text already rendered through the chat template, to /v1/completions: both
servers read exactly the same tokens. With a workload of sessions (duo.bench.harness.workloads),
each client plays its sessions turn by turn: every request holds the session's earlier
turns and the server's own earlier answers, rendered by the bench with the main model's
chat template.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from duo.bench.harness.agents import AgentSession
from duo.bench.harness.fim import InfillRequest
from duo.bench.harness.llamacpp import DEFAULT_NGRAM
from duo.bench.harness.runners import Prompt, in_turn, prompt_text
from duo.bench.harness.servers import SPECULATIVE_PEERS, Server, start
from duo.bench.harness.traffic import ClientFigures, Render, Work, load, tally
from duo.bench.harness.workloads import WorkloadSession
from duo.core.sampling import SamplingParams
from duo.llama.backend import Model
from duo.llama.calibrate import this_cpu
from duo.session.config import ModelConfig, SpecConfig


@dataclass
class LoadResult:
    server: str
    clients: int
    tokens: int
    seconds: float
    ttft_ms: dict[str, float]  # p50, p90, p99
    gap_ms: dict[str, float]  # p50, p99 of the gaps between streamed chunks
    itl_ms: dict[str, float]  # p50, p99 of the inter-token latency (a gap over its tokens)
    devices: str = ""
    drafted: int = 0  # draft tokens verified, over every request (from their timings)
    accepted: int = 0
    sources: dict[str, list[int]] = field(default_factory=dict)  # duo: [accepted, drafted]

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class ClientsReport:
    settings: dict[str, Any]
    results: list[LoadResult] = field(default_factory=list)

    def median(self, server: str, clients: int) -> LoadResult | None:
        """The repeat whose tok/s is the median (of an even number, the lower middle)."""
        runs = [r for r in self.results if (r.server, r.clients) == (server, clients)]
        runs.sort(key=lambda r: r.tokens_per_second)
        return runs[(len(runs) - 1) // 2] if runs else None

    def table(self) -> str:
        counts = sorted({r.clients for r in self.results})
        width = max([len("server"), *(len(r.server) for r in self.results)])
        lines = [
            f"{'server':{width}} {'clients':>7} {'tok/s':>7} {'x 1 client':>10} "
            f"{'TTFT p50/p99 ms':>16} {'gap p50/p99 ms':>15} {'ITL p50/p99 ms':>15} "
            f"{'accept':>6}  devices"
        ]
        for server in dict.fromkeys(r.server for r in self.results):
            one = self.median(server, counts[0])
            for c in counts:
                r = self.median(server, c)
                if r is None:
                    continue
                scale = r.tokens_per_second / one.tokens_per_second if one else 0.0
                rate = r.acceptance_rate
                lines.append(
                    f"{server:{width}} {c:>7} {r.tokens_per_second:7.1f} {scale:9.2f}x "
                    f"{r.ttft_ms['p50']:7.0f}/{r.ttft_ms['p99']:<8.0f} "
                    f"{r.gap_ms['p50']:6.0f}/{r.gap_ms['p99']:<8.0f} "
                    f"{r.itl_ms['p50']:6.1f}/{r.itl_ms['p99']:<8.1f} "
                    f"{'' if rate is None else f'{rate:.2f}':>6}  {r.devices}"
                )
        return "\n".join(lines)

    def to_json(self) -> str:
        rows = [
            {
                **asdict(r),
                "tokens_per_second": r.tokens_per_second,
                "acceptance_rate": r.acceptance_rate,
            }
            for r in self.results
        ]
        return json.dumps({"settings": self.settings, "results": rows}, indent=2)


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90 and p99 (nearest rank below); 0 where there are no values."""
    v = sorted(values)
    return {f"p{q}": v[min(len(v) - 1, int(q / 100 * len(v)))] if v else 0.0 for q in (50, 90, 99)}


def run(
    models: ModelConfig,
    spec: SpecConfig,
    servers: list[str],
    prompts: list[Prompt] | list[WorkloadSession] | list[InfillRequest] | list[AgentSession],
    counts: list[int],
    n: int,
    repeat: int,
    sampling: SamplingParams,
    bin_dir: str | None,
    log: Callable[[str], None] = lambda _: None,
    suite: str = "",
    peer_drafts: list[int] | None = None,
    peer_keys: list[int] | None = None,
    peer_ngrams: list[str] | None = None,
    interleave: bool = True,
    fim: bool = False,
) -> ClientsReport:
    """Every server with every client count, `repeat` times, servers taking turns block by
    block (`interleave`) or one after another; over prompts, or over sessions of dependent
    requests. llama-server's speculative peers run at each of `peer_drafts` (draft
    lengths) and, for its n-gram pool, `peer_keys` (key lengths) and `peer_ngrams` (its
    --spec-type: ngram-mod unless asked), as servers of their own.
    With `fim` (fill-in-the-middle requests), llama-server runs with llama.cpp's FIM
    preset flags."""
    slots = max(counts)
    ngrams = peer_ngrams or [DEFAULT_NGRAM]
    variants = _variants(servers, spec, peer_drafts or [spec.draft_max], peer_keys or [3], ngrams)
    with Model(models.main, n_ctx=512) as model:  # its chat template renders every prompt
        render = _renderer(model)
        sessions = [p for p in prompts if isinstance(p, WorkloadSession)]
        agents = [p for p in prompts if isinstance(p, AgentSession)]
        texts = [prompt_text(model, p) for p in prompts if isinstance(p, Prompt)]
        infills = [p for p in prompts if isinstance(p, dict)]
        work: Work = sessions or agents or infills or texts
        warm_up = texts[-1:] or [render([{"role": "user", "content": "Say hello."}])]
        requests = (
            sum(len(s.turns) for s in sessions)
            or sum(len(a.asks) for a in agents)
            or len(infills)
            or len(texts)
        )
        report = ClientsReport(
            {
                "n_predict": n,
                "clients": counts,
                "slots": slots,
                "repeat": repeat,
                "suite": suite,
                "prompts": len(work),
                "requests": requests,
                "draft_max": spec.draft_max,
                "peer_drafts": peer_drafts or [spec.draft_max],
                "peer_keys": peer_keys or [3],
                "peer_ngrams": ngrams,
                "temperature": sampling.temperature,
                "order": "interleaved" if interleave else "sequential",
                "cpu": this_cpu(),
            }
        )
        for rep in range(repeat):
            for c in counts:
                # Fresh servers for each count: duo's suffix cache must not remember the
                # answers of the last one.
                turn = Turn(f"repeat {rep + 1}/{repeat}", c, n, sampling, render, log)
                start = functools.partial(_started, models=models, slots=slots, bin_dir=bin_dir)
                report.results += turn.run(variants, work, warm_up, interleave, start, fim)
    return report


@dataclass
class Turn:
    """One repeat at one client count: every server started fresh, its blocks of work
    taken in turns (interleaved) or one server after another."""

    name: str
    clients: int
    n: int
    sampling: SamplingParams
    render: Render
    log: Callable[[str], None]

    def run(
        self,
        variants: dict[str, Variant],
        work: Work,
        warm_up: list[str],
        interleave: bool,
        start: Callable[..., Server],
        fim: bool,
    ) -> list[LoadResult]:
        c, n = self.clients, self.n
        with contextlib.ExitStack() as up:
            live: dict[str, Server] = {}
            tally: dict[str, tuple[list[ClientFigures], float]] = {}
            for name, part, step in schedule(list(variants), work, c, interleave):
                say = f"{self.name}: {name}, {c} client(s){step}"
                if name not in live:
                    if not interleave:
                        up.close()  # one server at a time
                    self.log(say + ": starting")
                    live[name] = start(variants[name], fim=fim)
                    up.callback(live[name].stop)
                    load(live[name].url, warm_up, 1, min(n, 16), self.sampling)
                self.log(say)
                runs, seconds = load(live[name].url, part, c, n, self.sampling, self.render)
                done, took = tally.get(name, ([], 0.0))
                tally[name] = (done + runs, took + seconds)
            return [
                _result(name, c, runs, seconds, live[name].devices)
                for name, (runs, seconds) in tally.items()
            ]


# the server, its settings, its n-gram key length and kind (llama-server's --spec-type)
Variant = tuple[str, SpecConfig, int, str]


def schedule(
    names: list[str], work: Work, clients: int, interleave: bool
) -> list[tuple[str, Work, str]]:
    """One client count's loads in order: (server, its prompts or sessions, which block).
    Interleaved, the servers take turns block by block: `clients` prompts at a time, one
    per client, and each server goes first as often as the others (the first of a block
    meets a host that the last one's requests left busy or idle). Sequential, each server
    takes the whole work in turn."""
    if not interleave:
        return [(name, work, "") for name in names]
    parts = [work[i : i + clients] for i in range(0, len(work), clients)]
    return [
        (name, part, f", block {b + 1}/{len(parts)}")
        for b, part in enumerate(parts)
        for name in in_turn(names, b)
    ]


def _started(
    variant: Variant, models: ModelConfig, slots: int, bin_dir: str | None, fim: bool = False
) -> Server:
    kind, settings, key, ngram = variant
    return start(kind, models, settings, slots, bin_dir, key, fim, ngram)


def _variants(
    servers: list[str], spec: SpecConfig, drafts: list[int], keys: list[int], ngrams: list[str]
) -> dict[str, Variant]:
    """Each server to measure by its label: a speculative llama-server once per draft
    length (labelled SERVER/kK when there are several), its n-gram pool once per kind of
    pool (llama-server+KIND, unless it is ngram-mod alone) and key length (SERVER/nN), the
    others once."""
    out = {}
    for name in servers:
        if name not in SPECULATIVE_PEERS:
            out[name] = (name, spec, 3, DEFAULT_NGRAM)
            continue
        pools = ngrams if name == "llama-server+ngram" else [DEFAULT_NGRAM]
        for k in drafts:
            for ngram in pools:
                label = name if pools == [DEFAULT_NGRAM] else f"llama-server+{ngram}"
                label += f"/k{k}" if len(drafts) > 1 else ""
                for key in keys if name == "llama-server+ngram" else [3]:
                    tag = f"/n{key}" if len(keys) > 1 and name == "llama-server+ngram" else ""
                    out[label + tag] = (name, replace(spec, draft_max=k), key, ngram)
    return out


def _renderer(model: Model) -> Render:
    lock = threading.Lock()  # the clients' threads share the template

    def render(messages: list[dict[str, Any]]) -> str:
        with lock:
            return model.vocab.render_chat(messages)

    return render


def _result(
    name: str, clients: int, runs: list[ClientFigures], seconds: float, devices: str
) -> LoadResult:
    def ms(values: list[float]) -> dict[str, float]:
        return {k: 1000 * v for k, v in percentiles(values).items()}

    sources: dict[str, list[int]] = {}
    for r in runs:
        for source, (accepted, drafted) in r.sources.items():
            tally(sources, source, accepted, drafted)
    return LoadResult(
        name,
        clients,
        sum(r.tokens for r in runs),
        seconds,
        ms([x for r in runs for x in r.ttft]),
        ms([x for r in runs for x in r.gaps]),
        ms([x for r in runs for x in r.itl]),
        devices,
        sum(r.drafted for r in runs),
        sum(r.accepted for r in runs),
        sources,
    )
