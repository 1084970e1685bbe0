"""`duo bench`: every mode on the same prompts, in the same run, on pinned "devices".

Modes:
    target-1    the main model alone on the main device (one core set)
    target-all  the main model alone on every core (the strongest single-box alternative)
    sync        classic speculative decoding on the main device
    async       the drafter on its own thread and device, in one process
    lead+back   `duo lead` and `duo back` as separate processes over loopback

Warm-up runs are excluded; each figure is the median over repeats of the whole suite. The
suite is run in order, so no prompt follows itself (a drafter would otherwise still hold
the previous answer in its cache and look better than it is).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from duo.backend import Model
from duo.costs import profile
from duo.errors import UsageError
from duo.local import ModelConfig, Session, SpecConfig
from duo.sampling import GREEDY, SamplingParams
from duo.stats import Stats

MODES = ("target-1", "target-all", "sync", "async", "lead+back")
PEER_MODES = ("llama.cpp", "llama.cpp-spec")  # llama.cpp's own binaries, when available


@dataclass(frozen=True)
class Prompt:
    kind: str  # "chat" (the model's chat template) or "raw"
    category: str
    text: str


@dataclass
class ModeResult:
    mode: str
    tokens_per_second: float
    tokens_per_second_runs: list[float]
    ttft_ms: float
    acceptance_rate: float
    mean_acceptance_length: float
    accepted_at: list[float]
    overhead_ms_per_round: float
    wire_bytes_per_token: float | None = None
    speedup_vs_target_1: float | None = None
    speedup_vs_sync: float | None = None
    devices: str = ""
    trace: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per round


@dataclass
class Report:
    machine: dict[str, Any]
    settings: dict[str, Any]
    modes: list[ModeResult] = field(default_factory=list)
    ceiling_tokens_per_second: float | None = None
    profile: dict[str, Any] = field(default_factory=dict)  # measured device costs

    def table(self) -> str:
        rows = [
            f"{'mode':14} {'tok/s':>7} {'vs t-1':>7} {'vs sync':>8} {'ttft ms':>8} "
            f"{'accept':>7} {'mean len':>9} {'ovh ms':>7} {'B/tok':>6}  devices"
        ]
        for m in self.modes:
            rows.append(
                f"{m.mode:14} {m.tokens_per_second:7.1f} {_x(m.speedup_vs_target_1):>7} "
                f"{_x(m.speedup_vs_sync):>8} {m.ttft_ms:8.1f} {m.acceptance_rate:7.2f} "
                f"{m.mean_acceptance_length:9.2f} {m.overhead_ms_per_round:7.2f} "
                f"{'' if m.wire_bytes_per_token is None else f'{m.wire_bytes_per_token:.1f}':>6}"
                f"  {m.devices}"
            )
        if self.ceiling_tokens_per_second:
            rows.append(
                f"ceiling (zero-cost drafter at the measured acceptance): "
                f"{self.ceiling_tokens_per_second:.1f} tok/s"
            )
        return "\n".join(rows)


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def load_prompts(path: str | None) -> list[Prompt]:
    if path is None:
        text = resources.files("duo").joinpath("prompts/suite.jsonl").read_text()
    else:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
    prompts = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            prompts.append(Prompt(obj.get("kind", "chat"), obj.get("category", ""), obj["text"]))
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{path}:{i}: expected a JSON object with a 'text' field") from None
    if not prompts:
        raise UsageError("the prompt suite is empty")
    return prompts


def _tokens(session: Session, p: Prompt) -> list[int]:
    if p.kind == "chat":
        text = session.main.render_chat([{"role": "user", "content": p.text}])
        return session.main.tokenize(text, add_special=False)
    return session.main.tokenize(p.text)


def _summarise(mode: str, runs: list[list[Stats]], ttfts: list[float], devices: str) -> ModeResult:
    per_run = [sum(s.tokens for s in r) / sum(s.decode_seconds for s in r) for r in runs]
    total = Stats()
    for r in runs:
        for s in r:
            total.merge(s)
            total.trace.extend(s.trace)
    return ModeResult(
        mode=mode,
        tokens_per_second=statistics.median(per_run),
        tokens_per_second_runs=per_run,
        ttft_ms=1000 * statistics.median(ttfts),
        acceptance_rate=total.acceptance_rate,
        mean_acceptance_length=total.mean_acceptance_length if total.drafted else 1.0,
        accepted_at=[a / d for a, d in zip(total.accepted_at, total.drafted_at, strict=True) if d],
        overhead_ms_per_round=total.overhead_ms_per_round,
        devices=devices,
        trace=total.trace if total.drafted else [],
    )


def run_in_process(
    mode: str,
    models: ModelConfig,
    spec: SpecConfig,
    prompts: list[Prompt],
    n: int,
    repeat: int,
    log: Any,
    sampling: SamplingParams = GREEDY,
) -> ModeResult:
    with Session(models, spec) as session:
        tokenized = [_tokens(session, p) for p in prompts]
        session.run(tokenized[-1], min(n, 16), sampling=sampling)  # warm-up, not measured

        def one(i: int) -> tuple[Stats, float]:
            clock = _FirstRound()
            return session.run(tokenized[i], n, clock, sampling), clock.seconds

        runs, ttfts = _repeat(mode, len(prompts), repeat, log, one)
        return _summarise(mode, runs, ttfts, _devices(spec, models))


def _repeat(
    mode: str, count: int, repeat: int, log: Any, one: Callable[[int], tuple[Stats, float]]
) -> tuple[list[list[Stats]], list[float]]:
    """Run prompt 0..count-1 `repeat` times in order: (stats per repeat, every TTFT)."""
    runs: list[list[Stats]] = []
    ttfts: list[float] = []
    for rep in range(repeat):
        runs.append([])
        for i in range(count):
            stats, ttft = one(i)
            runs[-1].append(stats)
            ttfts.append(ttft)
            log(
                f"{mode}: run {rep + 1}/{repeat}, prompt {i + 1}/{count}: "
                f"{stats.tokens_per_second:.1f} tok/s"
            )
    return runs, ttfts


class _FirstRound:
    """Time from creation to the first round: prompt evaluation + first token."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.seconds = 0.0

    def __call__(self, _round: object) -> None:
        if not self.seconds:
            self.seconds = time.perf_counter() - self.t0


def _cores(cores: frozenset[int] | None, unpinned: str) -> str:
    """A core set as `--pin`/`--devices` write it ("0,1"), or `unpinned`."""
    return ",".join(map(str, sorted(cores))) if cores else unpinned


def _devices(spec: SpecConfig, models: ModelConfig) -> str:
    text = f"main: cores {_cores(spec.main_cores, 'all')} x{models.threads}t"
    if spec.mode != "target":
        text += f"; draft: cores {_cores(spec.draft_cores, 'all')} x{models.draft_threads}t"
    return text


def run_lead_back(
    models: ModelConfig,
    spec: SpecConfig,
    prompts: list[Prompt],
    n: int,
    repeat: int,
    log: Any,
    sampling: SamplingParams = GREEDY,
) -> ModeResult:
    assert models.draft is not None
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    pin_main = _cores(spec.main_cores, "")
    pin_draft = _cores(spec.draft_cores, "")
    lead_cmd = [
        sys.executable,
        "-m",
        "duo",
        "lead",
        "-m",
        str(models.main),
        "--port",
        str(port),
        "--quiet",
        "--draft",
        str(spec.draft_max),
        "-t",
        str(models.threads),
        "--policy",
        "adaptive" if spec.adaptive else "fixed",
    ]
    if pin_main:
        lead_cmd += ["--pin", f"{pin_main}:"]
    back_cmd = [
        sys.executable,
        "-m",
        "duo",
        "back",
        "-m",
        str(models.draft),
        "--lead",
        url,
        "-t",
        str(models.draft_threads),
        "--max-ahead",
        str(spec.max_ahead),
    ]
    if pin_draft:
        back_cmd += ["--pin", pin_draft]
    procs = [subprocess.Popen(lead_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait(lambda: httpx.get(f"{url}/health", timeout=2).json()["status"] == "ok", procs[0])
        procs.append(
            subprocess.Popen(back_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait(lambda: httpx.get(f"{url}/health", timeout=2).json()["drafters"] > 0, procs[1])
        with httpx.Client(base_url=url, timeout=600) as client:
            _complete(client, prompts[-1], min(n, 16), sampling)  # warm-up
            bytes_before = _wire_bytes(client)
            runs, ttfts = _repeat(
                "lead+back",
                len(prompts),
                repeat,
                log,
                lambda i: _complete(client, prompts[i], n, sampling),
            )
            wire = _wire_bytes(client) - bytes_before
        result = _summarise("lead+back", runs, ttfts, _devices(spec, models) + " (2 processes)")
        tokens = sum(s.tokens for r in runs for s in r)
        result.wire_bytes_per_token = wire / tokens if tokens else None
        return result
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


def run_llama_cpp(
    mode: str,
    models: ModelConfig,
    spec: SpecConfig,
    prompts: list[Prompt],
    n: int,
    repeat: int,
    log: Any,
    bin_dir: str | None,
) -> ModeResult:
    """The same prompts through llama.cpp's binaries, greedy, on the main device."""
    from duo import llamacpp

    with Model(models.main, n_ctx=512) as model:  # the chat template, as the other modes
        texts = [
            model.render_chat([{"role": "user", "content": p.text}]) if p.kind == "chat" else p.text
            for p in prompts
        ]

    def one(i: int) -> tuple[Stats, float]:
        if mode == "llama.cpp":
            r = llamacpp.target(bin_dir, models.main, texts[i], n, models.threads, spec.main_cores)
        else:
            assert models.draft is not None
            r = llamacpp.speculative(
                bin_dir,
                models.main,
                models.draft,
                texts[i],
                n,
                spec.draft_max,
                models.threads,
                models.draft_threads,
                spec.main_cores,
            )
        # Each round emits its accepted draft tokens plus one: rounds = tokens - accepted.
        stats = Stats(
            tokens=r["tokens"],
            decode_seconds=r["seconds"],
            drafted=r["drafted"],
            accepted=r["accepted"],
            rounds=r["tokens"] - r["accepted"],
            llama_seconds=r["seconds"],
        )
        return stats, 0.0  # llama.cpp's tools do not report the time to first token

    runs, ttfts = _repeat(mode, len(texts), repeat, log, one)
    main = _cores(spec.main_cores, "all")
    models_on = "main" if mode == "llama.cpp" else "main + draft, one process"
    return _summarise(mode, runs, ttfts, f"{models_on}: cores {main} (llama.cpp's binaries)")


def _complete(
    client: httpx.Client, p: Prompt, n: int, sampling: SamplingParams
) -> tuple[Stats, float]:
    body: dict[str, Any] = {
        "max_tokens": n,
        "stream": True,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": sampling.repeat_last_n,
        "seed": sampling.seed,
    }
    if p.kind == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": p.text}]
    else:
        path, body["prompt"] = "/v1/completions", p.text
    t0 = time.perf_counter()
    ttft = 0.0
    timings: dict[str, Any] = {}
    with client.stream("POST", path, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if (
                not ttft
                and chunk["choices"]
                and (
                    chunk["choices"][0].get("text")
                    or chunk["choices"][0].get("delta", {}).get("content")
                )
            ):
                ttft = time.perf_counter() - t0
            timings = chunk.get("timings", timings)
    s = Stats(
        prompt_tokens=timings["prompt_n"],
        prefill_seconds=timings["prompt_ms"] / 1000,
        tokens=timings["predicted_n"],
        rounds=timings["rounds"],
        drafted=timings["draft_n"],
        accepted=timings["draft_n_accepted"],
        decode_seconds=timings["predicted_ms"] / 1000,
        llama_seconds=timings["main_decode_ms"] / 1000,
    )
    return s, ttft


def _wire_bytes(client: httpx.Client) -> int:
    text = client.get("/metrics").text
    total = 0
    for line in text.splitlines():
        if line.startswith(("duo_wire_bytes_sent_total", "duo_wire_bytes_received_total")):
            total += int(float(line.split()[1]))
    return total


def _wait(predicate: Any, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UsageError(f"a benchmark process exited early (code {proc.returncode})")
        try:
            if predicate():
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    raise UsageError("a benchmark process did not become ready in time")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ceiling(main_ms_by_batch: dict[int, float], sync: ModeResult) -> float:
    """Tokens/s with a drafter that costs nothing, at the acceptance measured for sync.

    sync verifies k tokens every round, so accepted_at[i] estimates P(at least i+1 draft
    tokens accepted); a round verifying L tokens then yields 1 + sum(accepted_at[:L]).
    """
    n_max = min(len(sync.accepted_at), max(main_ms_by_batch) - 1)
    return max(
        1000 * (1 + sum(sync.accepted_at[:n])) / main_ms_by_batch[n + 1] for n in range(n_max + 1)
    )


def run(
    models: ModelConfig,
    spec: SpecConfig,
    modes: list[str],
    prompts: list[Prompt],
    n: int,
    repeat: int,
    log: Any,
    sampling: SamplingParams = GREEDY,
    llama_cpp_bin: str | None = None,
) -> Report:
    all_cores = sorted(os.sched_getaffinity(0))
    report = Report(
        machine={
            "cpus": len(all_cores),
            "platform": sys.platform,
            "python": sys.version.split()[0],
        },
        settings={
            "main": str(models.main),
            "draft": str(models.draft),
            "n": n,
            "repeat": repeat,
            "draft_max": spec.draft_max,
            "max_ahead": spec.max_ahead,
            "prompts": len(prompts),
            "policy": "adaptive" if spec.adaptive else "fixed",
            "sampling": asdict(sampling),
        },
    )
    target = ModelConfig(models.main, None, threads=models.threads)
    if any(mode in PEER_MODES for mode in modes):  # fail before measuring anything
        from duo.llamacpp import find_bin

        find_bin(llama_cpp_bin, "llama-completion")
        find_bin(llama_cpp_bin, "llama-speculative-simple")
    for mode in modes:
        if mode == "target-1":
            cfg = SpecConfig(**{**asdict(spec), "mode": "target", "draft_cores": None})
            result = run_in_process(mode, target, cfg, prompts, n, repeat, log, sampling)
        elif mode == "target-all":
            every_core = ModelConfig(models.main, None, threads=len(all_cores))
            result = run_in_process(
                mode, every_core, SpecConfig(mode="target"), prompts, n, repeat, log, sampling
            )
        elif mode in ("sync", "async"):
            cfg = SpecConfig(**{**asdict(spec), "mode": mode})
            result = run_in_process(mode, models, cfg, prompts, n, repeat, log, sampling)
        elif mode in PEER_MODES:
            result = run_llama_cpp(mode, models, spec, prompts, n, repeat, log, llama_cpp_bin)
        else:
            result = run_lead_back(models, spec, prompts, n, repeat, log, sampling)
        report.modes.append(result)
    by_mode = {m.mode: m for m in report.modes}
    for m in report.modes:
        if "target-1" in by_mode:
            m.speedup_vs_target_1 = m.tokens_per_second / by_mode["target-1"].tokens_per_second
        if "sync" in by_mode:
            m.speedup_vs_sync = m.tokens_per_second / by_mode["sync"].tokens_per_second
    report.profile = profile(models, spec, spec.draft_max + 1)
    if "sync" in by_mode and by_mode["sync"].accepted_at:
        report.ceiling_tokens_per_second = ceiling(
            report.profile["main_ms_by_batch"], by_mode["sync"]
        )
    return report


def to_json(report: Report) -> str:
    return json.dumps(asdict(report), indent=1)
