"""`duo bench --clients 1,2,4`: concurrent clients against a server, duo's and llama.cpp's.

Each server is started afresh for each client count, on the cores its duo counterpart
uses, with as many slots as the most clients measured. For each client count c, c clients
stream
completions at once: client j sends prompts j, j+c, j+2c, ... of the suite, one after the
other, so every count does the same work. Reported per server and count: aggregate tokens
per second (all tokens / wall time), and over every client's requests the time to first
token, the gap between streamed chunks, and the inter-token latency (p50, p99: a client that
starves shows in p99). A speculative round streams several tokens in one chunk: its gap
counts once among the gaps, and as gap / tokens for each of its tokens among the
inter-token latencies (tokens per chunk from duo's `duo` field; llama-server streams one
token a chunk).

    duo              duo lead --parallel N, free drafters, the main model on every core
    duo+back         the same lead on the main core, a back on the draft core
    llama-server     llama-server -np N --kv-unified on every core (one KV buffer for
                     all slots, as duo's lead and llama-server's default slots have)
    llama-server+md  llama-server -np N -md DRAFT on every core (main and draft share them)

Prompts go as text already rendered through the chat template, to /v1/completions: both
servers read exactly the same tokens.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from duo.bench.llamacpp import find_bin
from duo.bench.runners import Prompt, cores_text, prompt_texts, wait_ready
from duo.core.sampling import SamplingParams
from duo.net import free_port
from duo.session.config import ModelConfig, SpecConfig

SERVERS = ("duo", "duo+back", "llama-server", "llama-server+md")


@dataclass
class LoadResult:
    server: str
    clients: int
    tokens: int
    seconds: float
    ttft_ms: dict[str, float]  # p50, p99
    gap_ms: dict[str, float]  # p50, p99 of the gaps between streamed chunks
    itl_ms: dict[str, float]  # p50, p99 of the inter-token latency (a gap over its tokens)
    devices: str = ""

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class ClientsReport:
    settings: dict[str, Any]
    results: list[LoadResult] = field(default_factory=list)

    def best(self, server: str, clients: int) -> LoadResult | None:
        runs = [r for r in self.results if (r.server, r.clients) == (server, clients)]
        return max(runs, key=lambda r: r.tokens_per_second, default=None)

    def table(self) -> str:
        counts = sorted({r.clients for r in self.results})
        lines = [
            f"{'server':16} {'clients':>7} {'tok/s':>7} {'x 1 client':>10} "
            f"{'TTFT p50/p99 ms':>16} {'gap p50/p99 ms':>15} {'ITL p50/p99 ms':>15}  devices"
        ]
        for server in dict.fromkeys(r.server for r in self.results):
            one = self.best(server, counts[0])
            for c in counts:
                r = self.best(server, c)
                if r is None:
                    continue
                scale = r.tokens_per_second / one.tokens_per_second if one else 0.0
                lines.append(
                    f"{server:16} {c:>7} {r.tokens_per_second:7.1f} {scale:9.2f}x "
                    f"{r.ttft_ms['p50']:7.0f}/{r.ttft_ms['p99']:<8.0f} "
                    f"{r.gap_ms['p50']:6.0f}/{r.gap_ms['p99']:<8.0f} "
                    f"{r.itl_ms['p50']:6.1f}/{r.itl_ms['p99']:<8.1f} {r.devices}"
                )
        return "\n".join(lines)

    def to_json(self) -> str:
        rows = [{**asdict(r), "tokens_per_second": r.tokens_per_second} for r in self.results]
        return json.dumps({"settings": self.settings, "results": rows}, indent=2)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0}
    v = sorted(values)
    return {"p50": v[len(v) // 2], "p99": v[min(len(v) - 1, int(0.99 * len(v)))]}


class Server:
    """A server process (or two) on loopback, started and stopped by the bench."""

    def __init__(self, name: str, cmds: list[list[str]], devices: str, url: str) -> None:
        self.name, self.devices, self.url = name, devices, url
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i, cmd in enumerate(cmds):
                self.procs.append(
                    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
                ready = functools.partial(_has_drafter if i else _healthy, url)
                wait_ready(ready, self.procs[-1])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(timeout=30)


def _healthy(url: str) -> bool:
    r = httpx.get(f"{url}/health", timeout=2)
    return r.status_code == 200 and r.json().get("status") == "ok"


def _has_drafter(url: str) -> bool:
    return int(httpx.get(f"{url}/health", timeout=2).json()["drafters"]) > 0


def start(
    name: str,
    models: ModelConfig,
    spec: SpecConfig,
    slots: int,
    bin_dir: str | None,
) -> Server:
    """Start one of SERVERS with `slots` slots."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    every = str(len(os.sched_getaffinity(0)))
    duo = [sys.executable, "-m", "duo"]
    ctx = str(models.n_ctx)
    if name in ("duo", "duo+back"):
        lead = [
            *duo, "lead", "-m", str(models.main), "--port", str(port), "--quiet",
            "--parallel", str(slots), "-c", ctx, "--draft", str(spec.draft_max),
            "--spec-type", ",".join(sorted(spec.spec_types)) or "none",
        ]  # fmt: skip
        if name == "duo":
            return Server(name, [[*lead, "-t", every]], f"main: all cores x{every}t", url)
        assert models.draft is not None
        main_cores, draft_cores = cores_text(spec.main_cores, ""), cores_text(spec.draft_cores, "")
        lead += ["-t", str(models.threads), *(["--pin", f"{main_cores}:"] if main_cores else [])]
        back = [
            *duo, "back", "-m", str(models.draft), "--lead", url, "-t", str(models.draft_threads),
            "-c", ctx, *(["--pin", draft_cores] if draft_cores else []),
        ]  # fmt: skip
        devices = f"main: cores {main_cores or 'all'}; back: cores {draft_cores or 'all'}"
        return Server(name, [lead, back], devices, url)
    server = [
        str(find_bin(bin_dir, "llama-server")), "-m", str(models.main), "--host", "127.0.0.1",
        "--port", str(port), "-np", str(slots), "-c", str(models.n_ctx * slots), "-t", every,
        "--kv-unified", "-tb", every, "-ngl", str(models.n_gpu_layers), "--no-webui",
    ]  # fmt: skip
    devices = f"main: all cores x{every}t (llama.cpp)"
    if name == "llama-server+md":
        assert models.draft is not None
        server += [
            "-md", str(models.draft), "--spec-type", "draft-simple", "--spec-draft-n-max",
            str(spec.draft_max), "-td", every, "-ngld", str(models.n_gpu_layers_draft),
        ]  # fmt: skip
        devices = f"main + draft: all cores x{every}t (llama.cpp)"
    return Server(name, [server], devices, url)


@dataclass
class _Client:
    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tokens: int = 0


def load(
    url: str, texts: list[str], clients: int, n: int, sampling: SamplingParams
) -> tuple[int, float, list[float], list[float], list[float]]:
    """`clients` clients at once over the prompts: (tokens, seconds, TTFTs, chunk gaps,
    inter-token latencies)."""
    runs = [_Client() for _ in range(clients)]
    errors: list[BaseException] = []

    def client(j: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=600) as http:
                for text in texts[j::clients]:
                    _stream(http, text, n, sampling, runs[j])
        except BaseException as e:  # reported after the others finish
            errors.append(e)

    threads = [threading.Thread(target=client, args=(j,)) for j in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    tokens = sum(r.tokens for r in runs)
    return (
        tokens,
        seconds,
        [x for r in runs for x in r.ttft],
        [x for r in runs for x in r.gaps],
        [x for r in runs for x in r.itl],
    )


def _stream(http: httpx.Client, text: str, n: int, sampling: SamplingParams, out: _Client) -> None:
    body = {
        "prompt": text,
        "max_tokens": n,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": sampling.temperature,
        "seed": sampling.seed if sampling.seed is not None else -1,
        "cache_prompt": True,
    }
    t0 = last = time.perf_counter()
    first, tokens = True, 0
    # One connection per request: llama-server may close a connection after a stream,
    # and a reused one then fails; both servers pay the same loopback connect.
    headers = {"Connection": "close"}
    with http.stream("POST", "/v1/completions", json=body, headers=headers) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                now = time.perf_counter()
                if first:
                    out.ttft.append(now - t0)
                    first = False
                else:
                    out.gaps.append(now - last)
                    n_tokens = max(1, int((chunk.get("duo") or {}).get("tokens", 1)))
                    out.itl.extend([(now - last) / n_tokens] * n_tokens)
                last = now
            usage = chunk.get("usage") or {}
            timings = chunk.get("timings") or {}
            if usage.get("completion_tokens") or timings.get("predicted_n"):
                tokens = usage.get("completion_tokens") or timings["predicted_n"]
    out.tokens += int(tokens)


def run(
    models: ModelConfig,
    spec: SpecConfig,
    servers: list[str],
    prompts: list[Prompt],
    counts: list[int],
    n: int,
    repeat: int,
    sampling: SamplingParams,
    bin_dir: str | None,
    log: Callable[[str], None] = lambda _: None,
) -> ClientsReport:
    """Every server with every client count, `repeat` times, servers taking turns."""
    texts = prompt_texts(models.main, prompts)
    slots = max(counts)
    report = ClientsReport(
        {
            "n_predict": n,
            "clients": counts,
            "slots": slots,
            "repeat": repeat,
            "prompts": len(prompts),
            "draft_max": spec.draft_max,
            "temperature": sampling.temperature,
        }
    )
    for rep in range(repeat):
        for c in counts:
            for name in servers:
                # A fresh server for each count: duo's suffix cache must not remember the
                # answers of the last one.
                log(f"repeat {rep + 1}/{repeat}: {name}, {c} client(s)")
                server = start(name, models, spec, slots, bin_dir)
                try:
                    load(server.url, texts[-1:], 1, min(n, 16), sampling)  # warm-up
                    tokens, seconds, ttft, gaps, itl = load(server.url, texts, c, n, sampling)
                finally:
                    server.stop()
                report.results.append(
                    LoadResult(
                        name,
                        c,
                        tokens,
                        seconds,
                        {k: 1000 * v for k, v in percentiles(ttft).items()},
                        {k: 1000 * v for k, v in percentiles(gaps).items()},
                        {k: 1000 * v for k, v in percentiles(itl).items()},
                        server.devices,
                    )
                )
    return report
