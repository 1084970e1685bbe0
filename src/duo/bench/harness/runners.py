"""The modes of `duo bench` as runners: each is opened once (models loaded, processes
started, warmed up), then asked to generate for one prompt at a time, so that the bench can
let the modes take turns.

    InProcess   target-1, target-all, sync and async: a Session in the runner's process
                (the bench opens each in a process of its own: duo.bench.harness.isolated)
    LeadBack    `duo lead` and `duo back` as two processes over loopback, through the API

llama.cpp's binaries and servers, the peers to beat, are runners too (duo.bench.harness.peers).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from duo.bench.harness.traffic import stream
from duo.bench.net.link import LOOPBACK, Link
from duo.core.sampling import SamplingParams
from duo.core.stats import Readiness, SourceStats, Stats
from duo.errors import UsageError
from duo.llama.backend import Model
from duo.llama.hugepages import user_environment
from duo.net import free_port
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session

T = TypeVar("T")


@dataclass(frozen=True)
class Prompt:
    kind: str  # "chat" (the model's chat template) or "raw"
    category: str
    text: str


def in_turn(items: Sequence[T], turn: int) -> list[T]:
    """`items` with the one at `turn` (modulo their number) first and the rest in order
    after it: whoever goes first meets a host that the last one left busy or idle, so
    over a run each goes first as often as the others."""
    k = turn % len(items)
    return [*items[k:], *items[:k]]


def prompt_text(model: Model, p: Prompt) -> str:
    """The text the model reads: a chat prompt through the model's own chat template."""
    if p.kind == "chat":
        return model.vocab.render_chat([{"role": "user", "content": p.text}])
    return p.text


def prompt_texts(main: Path, prompts: list[Prompt]) -> list[str]:
    """The prompts as text for llama.cpp's tools and servers: chat prompts rendered with the
    main model's template, as duo's modes render them."""
    with Model(main, n_ctx=512) as model:
        return [prompt_text(model, p) for p in prompts]


def prompt_tokens(model: Model, p: Prompt) -> list[int]:
    """The prompt's tokens (the chat template brings its own special tokens)."""
    return model.vocab.tokenize(prompt_text(model, p), add_special=p.kind != "chat")


class Runner:
    """One mode of the bench: opened once, then asked for one prompt at a time."""

    mode: str
    devices: str

    def one(self, i: int) -> tuple[Stats, float]:
        """Generate for prompt i: its stats and its time to first token (s)."""
        raise NotImplementedError

    def extras(self) -> dict[str, Any]:
        """What only this mode can tell: fields of its summary (bench.ModeResult)."""
        return {}

    def renew(self) -> None:
        """A repeat starts: a mode in a process of its own starts a new one
        (duo.bench.harness.isolated); the others go on as they are."""

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
        self.tokenized = [prompt_tokens(self.session.main, p) for p in prompts]
        self.session.run(self.tokenized[-1], min(n, 16), sampling=sampling)  # warm-up

    def one(self, i: int) -> tuple[Stats, float]:
        if i == 0:  # a new repeat: the suffix cache must not remember the answers
            self.session.forget()
        clock = _FirstRound()
        return self.session.run(self.tokenized[i], self.n, clock, self.sampling), clock.seconds

    def extras(self) -> dict[str, Any]:
        if self.session.share is None:
            return {}
        sources = ",".join(sorted(self.session.types)) or "none"
        return {"placement": f"{self.session.sharing().describe()}; sources {sources}"}

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


def cores_text(cores: frozenset[int] | None, unpinned: str) -> str:
    """A core set as `--pin`/`--devices` write it ("0,1"), or `unpinned`."""
    return ",".join(map(str, sorted(cores))) if cores else unpinned


def _devices(spec: SpecConfig, models: ModelConfig) -> str:
    text = f"main: cores {cores_text(spec.main_cores, 'all')} x{models.threads}t"
    if models.threads_alone:
        text += f" (x{models.threads_alone}t while the drafter rests)"
    if models.rpc:
        text += f" + rpc-servers {models.rpc}"
    if spec.mode != "target" and models.draft is not None and "model" in spec.spec_types:
        text += f"; draft: cores {cores_text(spec.draft_cores, 'all')} x{models.draft_threads}t"
        if models.rpcd:
            text += f" + rpc-servers {models.rpcd}"
    return text


class LeadBack(Runner):
    """lead+back(+free): `duo lead` and `duo back` as two processes on loopback (lead-default:
    the lead alone). The lead's suffix cache would remember a repeat's answers, so these
    modes leave it out."""

    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        sampling: SamplingParams,
        spec_types: str,
        link: Link = LOOPBACK,
        as_user: bool = False,
        back: bool = True,
    ) -> None:
        """`as_user`: no threads or cores given to either, as a user starts them on one
        machine (the lead lends the back threads while it drafts: duo.session.placement);
        `back`: False for the lead alone, with no drafter but its own free ones."""
        assert models.draft is not None
        self.mode = mode
        self.prompts, self.n, self.sampling = prompts, n, sampling
        placed = "threads as each chooses (a back's lent)" if as_user else _devices(spec, models)
        self.devices = placed + (" (2 processes)" if back else " (the lead alone)")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        # the back reaches the lead across the link (a proxy, a namespace), if one is asked for
        self.link = link.proxy(("127.0.0.1", port), link.near_host)
        back_url = f"http://{link.near_host}:{self.link.port}" if self.link else url
        pin_draft = "" if as_user else cores_text(spec.draft_cores, "")
        back_cmd = [
            sys.executable, "-m", "duo", "back", "-m", str(models.draft), "--lead", back_url,
            "--max-ahead", str(spec.max_ahead), "--fanout", str(spec.fanout),
            "-ngl", str(models.n_gpu_layers_draft), "-c", str(models.n_ctx),
        ]  # fmt: skip
        if not as_user:
            back_cmd += ["-t", str(models.draft_threads)]
        if pin_draft:
            back_cmd += ["--pin", pin_draft]
        if models.rpcd:
            back_cmd += ["--rpcd", models.rpcd]
        self.procs = [start_lead(models, spec, port, spec_types, as_user)]
        try:
            if back:
                self.procs.append(quiet(link.command(back_cmd)))
                wait_ready(
                    lambda: httpx.get(f"{url}/health", timeout=2).json()["drafters"] > 0,
                    self.procs[1],
                )
            self.client = httpx.Client(base_url=url, timeout=600)
            _complete(self.client, prompts[-1], min(n, 16), sampling)  # warm-up
            self.bytes_before = _wire_bytes(self.client)
            self.frames_before = _metric(self.client, FRAMES)
            self.tokens = self.rounds = 0
            self.lead_cpu: float | None = 0.0
        except BaseException:
            self._stop()
            raise

    def one(self, i: int) -> tuple[Stats, float]:
        """One request; the lead's CPU outside the model is its process's CPU time less
        the CPU time its engine thread spent in llama_decode (both CPU clocks: a pinned
        lead whose event loop preempts a pass makes the pass's wall time longer, not its
        CPU time)."""
        decoded_before = _metric(self.client, DECODE_CPU)  # read outside the window measured
        before = _cpu_seconds(self.procs[0].pid)
        stats, ttft = _complete(self.client, self.prompts[i], self.n, self.sampling)
        after = _cpu_seconds(self.procs[0].pid)
        in_model = _metric(self.client, DECODE_CPU) - decoded_before
        if self.lead_cpu is not None and before is not None and after is not None:
            self.lead_cpu += after - before - in_model
        else:
            self.lead_cpu = None
        self.tokens += stats.tokens
        self.rounds += stats.rounds
        return stats, ttft

    def extras(self) -> dict[str, Any]:
        if not self.tokens:
            return {}
        wire = _wire_bytes(self.client) - self.bytes_before
        frames = _metric(self.client, FRAMES) - self.frames_before
        out: dict[str, Any] = {"wire_bytes_per_token": wire / self.tokens}
        if self.rounds:
            out["wire_messages_per_round"] = frames / self.rounds
        if self.lead_cpu is not None:
            out["lead_cpu_ms_per_token"] = 1000 * max(0.0, self.lead_cpu) / self.tokens
        return out

    def close(self) -> None:
        self.client.close()
        self._stop()

    def _stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(timeout=30)
        if self.link is not None:
            self.link.stop()


def lead_command(main: Path, port: int, *, ctx: int, draft_max: int, extra: list[str]) -> list[str]:
    """`duo lead` on loopback, quiet: the one command line the bench starts it with
    (`extra`: its sources, threads, cores, slots)."""
    return [
        sys.executable, "-m", "duo", "lead", "-m", str(main), "--port", str(port), "--quiet",
        "-c", str(ctx), "--draft", str(draft_max), *extra,
    ]  # fmt: skip


def start_lead(
    models: ModelConfig, spec: SpecConfig, port: int, spec_types: str, as_user: bool = False
) -> subprocess.Popen[bytes]:
    """`duo lead` on the main cores (`as_user`: on the threads it chooses), serving on
    loopback once this returns."""
    cmd = lead_command(
        models.main, port, ctx=models.n_ctx, draft_max=spec.draft_max,
        extra=[
            "--policy", "adaptive" if spec.adaptive else "fixed", "--spec-type", spec_types,
            "-ngl", str(models.n_gpu_layers),
        ],
    )  # fmt: skip
    if not as_user:
        cmd += ["-t", str(models.threads)]
    if spec.main_cores and not as_user:
        cmd += ["--pin", f"{cores_text(spec.main_cores, '')}:"]
    if models.rpc:
        cmd += ["--rpc", models.rpc]
    proc = quiet(cmd)
    try:
        url = f"http://127.0.0.1:{port}/health"
        wait_ready(lambda: httpx.get(url, timeout=2).json()["status"] == "ok", proc)
    except BaseException:
        proc.terminate()
        proc.wait(timeout=30)
        raise
    return proc


def _complete(
    client: httpx.Client, p: Prompt, n: int, sampling: SamplingParams
) -> tuple[Stats, float]:
    body: dict[str, Any] = {"max_tokens": n, "stream": True, **sampling.to_request()}
    if p.kind == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": p.text}]
    else:
        path, body["prompt"] = "/v1/completions", p.text
    answer = stream(client, path, body)
    timings, ttft = answer.timings[-1], answer.ttft or 0.0
    s = Stats(
        prompt_tokens=timings["prompt_n"] + timings["cache_n"],
        prefill_seconds=timings["prompt_ms"] / 1000,
        tokens=timings["predicted_n"],
        rounds=timings["rounds"],
        rounds_drafted=timings["rounds_drafted"],
        drafted=timings["draft_n"],
        accepted=timings["draft_n_accepted"],
        decode_seconds=timings["predicted_ms"] / 1000,
        llama_seconds=timings["main_decode_ms"] / 1000,
        by_source={
            name: SourceStats(x["draft_n"], x["draft_n_accepted"], x.get("draft_n_received", 0))
            for name, x in timings.get("draft_sources", {}).items()
        },
        after={
            after: Readiness(timings[f"rounds_after_{after}"], timings[f"ready_after_{after}"])
            for after in ("rejection", "acceptance")
            if f"rounds_after_{after}" in timings
        },
    )
    return s, ttft


def quiet(cmd: list[str], cores: frozenset[int] | None = None) -> subprocess.Popen[bytes]:
    def pin() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pin,
        env=user_environment(),  # as the user runs them (duo.llama.hugepages)
    )


def _cpu_seconds(pid: int) -> float | None:
    """CPU time a process's threads have used, to the nanosecond (/proc's schedstat; the
    user and system times in /proc/PID/stat count 10 ms ticks); None where there is none."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except FileNotFoundError:  # a thread that just ended
                continue
    except (OSError, IndexError, ValueError):
        return None
    return total / 1e9


WIRE = ("duo_wire_bytes_sent_total", "duo_wire_bytes_received_total")
FRAMES = ("duo_wire_frames_sent_total", "duo_wire_frames_received_total")
DECODE_CPU = ("duo_main_decode_cpu_seconds_total",)


def _metric(client: httpx.Client, names: tuple[str, ...]) -> float:
    """The sum of these counters in the lead's /metrics."""
    total = 0.0
    for line in client.get("/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            total += float(value)
    return total


def _wire_bytes(client: httpx.Client) -> int:
    return int(_metric(client, WIRE))


def wait_ready(predicate: Any, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
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
