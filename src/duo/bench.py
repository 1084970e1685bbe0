"""`duo bench`: every mode on the same prompts, in the same run, on pinned "devices".

Modes:
    target-1    the main model alone on the main device (one core set)
    target-all  the main model alone on every core (the strongest single-box alternative)
    sync        classic speculative decoding on the main device
    async       the drafter on its own thread and device, in one process
    lead+back   `duo lead` and `duo back` as separate processes over loopback

Warm-up runs are excluded; each figure is the median over repeats of the whole suite. The
suite is run in order, so no prompt follows itself (a drafter would otherwise still hold
the previous answer in its cache and look better than it is). By default every mode stays
loaded and the modes take turns prompt by prompt: a shared host's speed drifts by tens of
percent over a minute, and taking turns spreads that drift over all modes alike.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from duo.backend import Model
from duo.costs import Profiler
from duo.errors import UsageError
from duo.local import ModelConfig, Session, SpecConfig
from duo.sampling import GREEDY, SamplingParams
from duo.sim import DeviceProfile, Trace, simulate_async
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
    # lead+back: the lead process's CPU time outside the main model's passes (event loop,
    # drafter messages, API streaming, bookkeeping) per generated token (Linux only)
    lead_cpu_ms_per_token: float | None = None
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
                f"ceiling (a drafter that costs nothing, at sync's measured agreement): "
                f"{self.ceiling_tokens_per_second:.1f} tok/s"
            )
        if self.profile:
            rows.append(profile_line(self.profile))
        return "\n".join(rows)


def profile_line(profile: dict[str, Any]) -> str:
    """The device costs in one line, with how much the host drifted during the run."""
    main = profile["main_ms_by_batch"]
    parts = [f"main {main[1]:.1f} ms (1 token), {main[max(main)]:.1f} ms ({max(main)} tokens)"]
    if "draft_ms_by_batch" in profile:
        parts.append(f"draft {profile['draft_ms_by_batch'][1]:.1f} ms/token")
    drift = max(profile["drift_percent"].values())
    return (
        f"device costs after {profile['context_tokens']} tokens of context: {', '.join(parts)}; "
        f"median of {profile['rounds']} rounds spread over the run, which drifted {drift:.0f}%"
    )


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


def _mean_context(main: ModelConfig, prompts: list[Prompt], n: int) -> int:
    """Tokens of context a pass sees on average in this bench: prompt + half the output."""
    with Session(main, SpecConfig(mode="target")) as session:
        lengths = [len(_tokens(session, p)) for p in prompts]
    return round(statistics.mean(lengths)) + n // 2


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


class Runner:
    """One mode of the bench: opened once, then asked for one prompt at a time."""

    mode: str
    devices: str

    def one(self, i: int) -> tuple[Stats, float]:
        """Generate for prompt i: its stats and its time to first token (s)."""
        raise NotImplementedError

    def finish(self, result: ModeResult) -> None:
        """Add what only this mode can tell to its summary."""

    def close(self) -> None:
        pass


class InProcess(Runner):
    """target-1, target-all, sync and async: a Session in this process."""

    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        sampling: SamplingParams,
    ) -> None:
        self.mode, self.n, self.sampling = mode, n, sampling
        self.devices = _devices(spec, models)
        self.session = Session(models, spec)
        self.tokenized = [_tokens(self.session, p) for p in prompts]
        self.session.run(self.tokenized[-1], min(n, 16), sampling=sampling)  # warm-up

    def one(self, i: int) -> tuple[Stats, float]:
        clock = _FirstRound()
        return self.session.run(self.tokenized[i], self.n, clock, self.sampling), clock.seconds

    def close(self) -> None:
        self.session.close()


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


class LeadBack(Runner):
    """`duo lead` and `duo back` as two processes over loopback, through the HTTP API."""

    mode = "lead+back"

    def __init__(
        self,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        sampling: SamplingParams,
    ) -> None:
        assert models.draft is not None
        self.prompts, self.n, self.sampling = prompts, n, sampling
        self.devices = _devices(spec, models) + " (2 processes)"
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        pin_main = _cores(spec.main_cores, "")
        pin_draft = _cores(spec.draft_cores, "")
        lead_cmd = [
            sys.executable, "-m", "duo", "lead", "-m", str(models.main), "--port", str(port),
            "--quiet", "--draft", str(spec.draft_max), "-t", str(models.threads),
            "--policy", "adaptive" if spec.adaptive else "fixed",
            "-ngl", str(models.n_gpu_layers), "-c", str(models.n_ctx),
        ]  # fmt: skip
        if pin_main:
            lead_cmd += ["--pin", f"{pin_main}:"]
        back_cmd = [
            sys.executable, "-m", "duo", "back", "-m", str(models.draft), "--lead", url,
            "-t", str(models.draft_threads), "--max-ahead", str(spec.max_ahead),
            "-ngl", str(models.n_gpu_layers_draft), "-c", str(models.n_ctx),
        ]  # fmt: skip
        if pin_draft:
            back_cmd += ["--pin", pin_draft]
        self.procs = [_quiet(lead_cmd)]
        try:
            _wait(
                lambda: httpx.get(f"{url}/health", timeout=2).json()["status"] == "ok",
                self.procs[0],
            )
            self.procs.append(_quiet(back_cmd))
            _wait(
                lambda: httpx.get(f"{url}/health", timeout=2).json()["drafters"] > 0, self.procs[1]
            )
            self.client = httpx.Client(base_url=url, timeout=600)
            _complete(self.client, prompts[-1], min(n, 16), sampling)  # warm-up
            self.bytes_before = _wire_bytes(self.client)
            self.tokens = 0
            self.lead_cpu: float | None = 0.0
        except BaseException:
            self._stop()
            raise

    def one(self, i: int) -> tuple[Stats, float]:
        before = _cpu_seconds(self.procs[0].pid)
        stats, ttft = _complete(self.client, self.prompts[i], self.n, self.sampling)
        after = _cpu_seconds(self.procs[0].pid)
        if self.lead_cpu is not None and before is not None and after is not None:
            in_model = stats.prefill_seconds + stats.llama_seconds
            self.lead_cpu += after - before - in_model
        else:
            self.lead_cpu = None
        self.tokens += stats.tokens
        return stats, ttft

    def finish(self, result: ModeResult) -> None:
        if not self.tokens:
            return
        wire = _wire_bytes(self.client) - self.bytes_before
        result.wire_bytes_per_token = wire / self.tokens
        if self.lead_cpu is not None:
            result.lead_cpu_ms_per_token = 1000 * max(0.0, self.lead_cpu) / self.tokens

    def close(self) -> None:
        self.client.close()
        self._stop()

    def _stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(timeout=30)


class LlamaCpp(Runner):
    """The same prompts through llama.cpp's binaries, greedy, on the main device."""

    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        bin_dir: str | None,
    ) -> None:
        self.mode, self.models, self.spec, self.n, self.bin_dir = mode, models, spec, n, bin_dir
        with Model(models.main, n_ctx=512) as model:  # the chat template, as the other modes
            self.texts = [
                model.render_chat([{"role": "user", "content": p.text}])
                if p.kind == "chat"
                else p.text
                for p in prompts
            ]
        main = _cores(spec.main_cores, "all")
        models_on = "main" if mode == "llama.cpp" else "main + draft, one process"
        self.devices = f"{models_on}: cores {main} (llama.cpp's binaries)"

    def one(self, i: int) -> tuple[Stats, float]:
        from duo import llamacpp

        m, spec = self.models, self.spec
        if self.mode == "llama.cpp":
            r = llamacpp.target(
                self.bin_dir, m.main, self.texts[i], self.n, m.threads, spec.main_cores,
                m.n_gpu_layers,
            )  # fmt: skip
        else:
            assert m.draft is not None
            r = llamacpp.speculative(
                self.bin_dir, m.main, m.draft, self.texts[i], self.n, spec.draft_max,
                m.threads, m.draft_threads, spec.main_cores, m.n_gpu_layers,
                m.n_gpu_layers_draft,
            )  # fmt: skip
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


def _quiet(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used, from /proc; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def ceiling(main_ms_by_batch: dict[int, float], sync: ModeResult, k: int) -> float:
    """Tokens/s with a drafter that costs nothing and always has guesses ready.

    The sync run's agreement trace is replayed by `duo sim` on the measured main-model
    costs, verifying a fixed L tokens every round (the best L) or as the adaptive policy
    chooses, whichever does better; never less than the main model alone. Replaying the
    trace keeps the streaks of agreement that a per-position average would miss.
    """
    alone = 1000 / main_ms_by_batch[1]
    if not any(d for d, _ in sync.trace):
        return alone
    trace = Trace.from_rounds(sync.trace, k)
    free = DeviceProfile("a drafter that costs nothing", main_ms_by_batch, draft_ms=1e-9)
    ahead = 2 * k  # always enough guesses ready
    runs = [
        simulate_async(trace, free, n, max_ahead=ahead, policy="fixed") for n in range(1, k + 1)
    ]
    runs.append(simulate_async(trace, free, k, max_ahead=ahead, policy="adaptive"))
    return max(alone, *(r.tokens_per_second for r in runs))


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
    interleave: bool = True,
) -> Report:
    """Measure `modes` on `prompts`. Interleaved (the default), every mode stays loaded and
    they take turns prompt by prompt, so a host that drifts over the run slows them all
    alike; otherwise each mode runs alone, one after another (for models that fit in
    memory only once). Device costs are measured between turns (`costs.Profiler`)."""
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
            "order": "interleaved" if interleave else "sequential",
            "sampling": asdict(sampling),
        },
    )
    if any(mode in PEER_MODES for mode in modes):  # fail before measuring anything
        from duo.llamacpp import find_bin

        find_bin(llama_cpp_bin, "llama-completion")
        find_bin(llama_cpp_bin, "llama-speculative-simple")
    target = replace(models, draft=None)
    profiler = Profiler(models, spec, spec.draft_max + 1, _mean_context(target, prompts, n))

    def open_runner(mode: str) -> Runner:
        log(f"{mode}: loading")
        if mode == "target-1":
            cfg = SpecConfig(**{**asdict(spec), "mode": "target", "draft_cores": None})
            return InProcess(mode, target, cfg, prompts, n, sampling)
        if mode == "target-all":
            every_core = replace(target, threads=len(all_cores))
            return InProcess(mode, every_core, SpecConfig(mode="target"), prompts, n, sampling)
        if mode in ("sync", "async"):
            cfg = SpecConfig(**{**asdict(spec), "mode": mode})
            return InProcess(mode, models, cfg, prompts, n, sampling)
        if mode in PEER_MODES:
            return LlamaCpp(mode, models, spec, prompts, n, llama_cpp_bin)
        return LeadBack(models, spec, prompts, n, sampling)

    turns = [modes] if interleave else [[mode] for mode in modes]
    results: dict[str, ModeResult] = {}
    for group in turns:
        with contextlib.ExitStack() as stack:
            runners = []
            for mode in group:
                runner = open_runner(mode)
                stack.callback(runner.close)
                runners.append(runner)
            results.update(_take_turns(runners, len(prompts), repeat, log, profiler, interleave))
    log("device costs: last round")
    profiler.measure()
    report.profile = profiler.result()
    report.modes = [results[mode] for mode in modes]
    by_mode = {m.mode: m for m in report.modes}
    for m in report.modes:
        if "target-1" in by_mode:
            m.speedup_vs_target_1 = m.tokens_per_second / by_mode["target-1"].tokens_per_second
        if "sync" in by_mode:
            m.speedup_vs_sync = m.tokens_per_second / by_mode["sync"].tokens_per_second
    if "sync" in by_mode:
        report.ceiling_tokens_per_second = ceiling(
            report.profile["main_ms_by_batch"], by_mode["sync"], spec.draft_max
        )
    return report


def _take_turns(
    runners: list[Runner], count: int, repeat: int, log: Any, profiler: Profiler, often: bool
) -> dict[str, ModeResult]:
    """Prompt 0..count-1, `repeat` times, each prompt through every runner in turn. A round
    of device costs is measured first and, when `often`, after every half of the prompts."""
    runs: dict[str, list[list[Stats]]] = {r.mode: [] for r in runners}
    ttfts: dict[str, list[float]] = {r.mode: [] for r in runners}
    log("device costs: measuring a round")
    profiler.measure()
    half = max(1, math.ceil(count / 2))
    for rep in range(repeat):
        for r in runners:
            runs[r.mode].append([])
        for i in range(count):
            for r in runners:
                stats, ttft = r.one(i)
                runs[r.mode][-1].append(stats)
                ttfts[r.mode].append(ttft)
                log(
                    f"{r.mode}: run {rep + 1}/{repeat}, prompt {i + 1}/{count}: "
                    f"{stats.tokens_per_second:.1f} tok/s"
                )
            last = rep == repeat - 1 and i == count - 1
            if often and (i + 1) % half == 0 and not last:
                log("device costs: measuring a round")
                profiler.measure()
    out = {}
    for r in runners:
        out[r.mode] = _summarise(r.mode, runs[r.mode], ttfts[r.mode], r.devices)
        r.finish(out[r.mode])
    return out


def to_json(report: Report) -> str:
    return json.dumps(asdict(report), indent=1)
