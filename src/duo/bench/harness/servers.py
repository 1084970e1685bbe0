"""The servers `duo bench --clients` measures (duo.bench.harness.clients): each started afresh on
loopback, on the cores its duo counterpart uses, and stopped after its load."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import httpx

from duo.bench.harness.llamacpp import DEFAULT_NGRAM, llama_server_command, ngram_flags
from duo.bench.harness.runners import cores_text, lead_command, quiet, wait_ready
from duo.net import free_port
from duo.session.config import DEFAULT_SPEC_TYPES, ModelConfig, SpecConfig

SERVERS = (
    "duo",
    "duo-editor",
    "duo+back",
    "llama-server",
    "llama-server-default",
    "llama-server+md",
    "llama-server+ngram",
)
SPECULATIVE_PEERS = ("llama-server+md", "llama-server+ngram")  # they take a draft length
STOP_SECONDS = 30.0  # how long a server may take to end when asked
# llama.cpp's presets for editors (--fim-qwen-1.5b-default and its kin): what a user runs
# llama-server with for llama.vim or llama.vscode
FIM_PRESET = ("-b", "1024", "-ub", "1024", "--cache-reuse", "256")
# duo lead as the editor setup (docs/editors.md) runs it: the preset's prompt reuse
EDITOR_FLAGS = ("--cache-reuse", "256")


class Server:
    """A server process (or two) on loopback, started and stopped by the bench."""

    def __init__(self, name: str, cmds: list[list[str]], devices: str, url: str) -> None:
        self.name, self.devices, self.url = name, devices, url
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i, cmd in enumerate(cmds):
                self.procs.append(quiet(cmd))
                ready = functools.partial(_has_drafter if i else _healthy, url)
                wait_ready(ready, self.procs[-1])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Ask each process to end; one still running after STOP_SECONDS is killed
        (llama-server has hung in its shutdown, and the run's figures went with it)."""
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
    key: int = 3,
    fim: bool = False,
    ngram: str = DEFAULT_NGRAM,
) -> Server:
    """Start one of SERVERS with `slots` slots (`key` and `ngram`: llama-server+ngram's n-gram
    key length and kind of pool; `fim`: llama-server with FIM_PRESET's flags, as an
    editor's user runs it)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if name in ("duo", "duo-editor", "duo+back"):
        return _duo(name, models, spec, slots, port)
    every = str(len(os.sched_getaffinity(0)))
    server = llama_server_command(
        bin_dir, models.main, port, ctx=models.n_ctx * slots, ngl=models.n_gpu_layers,
        extra=["-np", str(slots), *(FIM_PRESET if fim else ())],
    )  # fmt: skip
    if name == "llama-server-default":  # as a user types it: no thread or cache flags
        return Server(name, [server], "llama-server's defaults", url)
    server += ["-t", every, "--kv-unified", "-tb", every]
    devices = f"main: all cores x{every}t (llama.cpp)"
    if name == "llama-server+md":
        assert models.draft is not None
        server += [
            "-md", str(models.draft), "--spec-type", "draft-simple", "--spec-draft-n-max",
            str(spec.draft_max), "-td", every, "-ngld", str(models.n_gpu_layers_draft),
        ]  # fmt: skip
        devices = f"main + draft: all cores x{every}t (llama.cpp)"
    if name == "llama-server+ngram":
        server += ["--spec-type", ngram, *ngram_flags(ngram, spec.draft_max, key)]
    return Server(name, [server], devices, url)


def _duo(name: str, models: ModelConfig, spec: SpecConfig, slots: int, port: int) -> Server:
    """duo's servers: `duo lead` as a user types it (duo-editor: with the editor setup's
    flags), or a lead and a back of its own on the bench's cores (duo+back)."""
    url = f"http://127.0.0.1:{port}"
    duo = [sys.executable, "-m", "duo"]
    ctx = str(models.n_ctx)
    lead = lead_command(
        models.main, port, ctx=models.n_ctx, draft_max=spec.draft_max,
        extra=["--parallel", str(slots)],
    )  # fmt: skip
    types = ["--spec-type", ",".join(sorted(spec.spec_types)) or "none"]
    if name != "duo+back":  # as a user types it: the pair, no placement flags
        if spec.spec_types != DEFAULT_SPEC_TYPES:  # --spec-type: as given
            lead += types
        if models.draft is not None:
            lead += ["-md", str(models.draft)]
        if name == "duo-editor":
            lead += EDITOR_FLAGS
            return Server(name, [lead], "duo's default placement, --cache-reuse 256", url)
        return Server(name, [lead], "duo's default placement", url)
    assert models.draft is not None
    lead += types
    main_cores, draft_cores = cores_text(spec.main_cores, ""), cores_text(spec.draft_cores, "")
    lead += ["-t", str(models.threads), *(["--pin", f"{main_cores}:"] if main_cores else [])]
    back = [
        *duo, "back", "-m", str(models.draft), "--lead", url, "-t", str(models.draft_threads),
        "-c", ctx, *(["--pin", draft_cores] if draft_cores else []),
    ]  # fmt: skip
    devices = f"main: cores {main_cores or 'all'}; back: cores {draft_cores or 'all'}"
    return Server(name, [lead, back], devices, url)
