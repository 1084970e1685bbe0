"""The servers `duo bench --clients` measures (duo.bench.harness.clients): each started afresh on
loopback, on the cores its duo counterpart uses, and stopped after its load. A registry from
server name to the function that makes its command lines (`BUILDERS`), as modes has for modes."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from duo.bench.harness.llamacpp import DEFAULT_NGRAM, llama_server_command, ngram_flags
from duo.bench.harness.runners import cores_text, lead_command, quiet, wait_ready
from duo.net import free_port
from duo.session.config import DEFAULT_SPEC_TYPES, ModelConfig, SpecConfig

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


@dataclass(frozen=True)
class Launch:
    """What a server is made from: the bench's models and settings, its slots and port,
    llama.cpp's binaries, and llama-server+ngram's key length and kind of pool."""

    models: ModelConfig
    spec: SpecConfig
    slots: int
    port: int
    bin_dir: str | None
    key: int
    fim: bool  # llama-server with FIM_PRESET's flags, as an editor's user runs it
    ngram: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# A server's processes' command lines (the one that serves first) and where they run
Commands = tuple[list[list[str]], str]
Builder = Callable[[Launch], Commands]


def _lead(o: Launch) -> list[str]:
    """`duo lead` with the bench's slots, as every duo server starts it."""
    m = o.models
    extra = ["--parallel", str(o.slots)]
    return lead_command(m.main, o.port, ctx=m.n_ctx, draft_max=o.spec.draft_max, extra=extra)


def _spec_types(spec: SpecConfig) -> list[str]:
    return ["--spec-type", ",".join(sorted(spec.spec_types)) or "none"]


def _duo(editor: bool) -> Builder:
    """duo, duo-editor: `duo lead` as a user types it, the pair and no placement flags
    (--spec-type: as given; duo-editor: with the editor setup's flags)."""

    def build(o: Launch) -> Commands:
        lead = _lead(o)
        if o.spec.spec_types != DEFAULT_SPEC_TYPES:
            lead += _spec_types(o.spec)
        if o.models.draft is not None:
            lead += ["-md", str(o.models.draft)]
        if editor:
            lead += EDITOR_FLAGS
            return [lead], "duo's default placement, --cache-reuse 256"
        return [lead], "duo's default placement"

    return build


def _duo_back(o: Launch) -> Commands:
    """duo+back: a lead and a back of its own on the bench's cores."""
    m, spec = o.models, o.spec
    assert m.draft is not None
    main_cores, draft_cores = cores_text(spec.main_cores, ""), cores_text(spec.draft_cores, "")
    lead = [*_lead(o), *_spec_types(spec), "-t", str(m.threads)]
    lead += ["--pin", f"{main_cores}:"] if main_cores else []
    back = [
        sys.executable, "-m", "duo", "back", "-m", str(m.draft), "--lead", o.url,
        "-t", str(m.draft_threads), "-c", str(m.n_ctx),
        *(["--pin", draft_cores] if draft_cores else []),
    ]  # fmt: skip
    return [lead, back], f"main: cores {main_cores or 'all'}; back: cores {draft_cores or 'all'}"


def _llama_server(o: Launch) -> list[str]:
    """llama-server with the bench's slots (and FIM_PRESET for editors' requests)."""
    m = o.models
    return llama_server_command(
        o.bin_dir, m.main, o.port, ctx=m.n_ctx * o.slots, ngl=m.n_gpu_layers,
        extra=["-np", str(o.slots), *(FIM_PRESET if o.fim else ())],
    )  # fmt: skip


def _every_core() -> str:
    return str(len(os.sched_getaffinity(0)))


def _on_every_core(o: Launch) -> list[str]:
    """llama-server on every core, its slots in one KV buffer, as duo lead's are."""
    every = _every_core()
    return [*_llama_server(o), "-t", every, "--kv-unified", "-tb", every]


def _llama_default(o: Launch) -> Commands:
    """As a user types it: no thread or cache flags."""
    return [_llama_server(o)], "llama-server's defaults"


def _llama(o: Launch) -> Commands:
    return [_on_every_core(o)], f"main: all cores x{_every_core()}t (llama.cpp)"


def _llama_md(o: Launch) -> Commands:
    """llama-server drafting with the draft model."""
    m, every, server = o.models, _every_core(), _on_every_core(o)
    assert m.draft is not None
    server += [
        "-md", str(m.draft), "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(o.spec.draft_max), "-td", every,
        "-ngld", str(m.n_gpu_layers_draft),
    ]  # fmt: skip
    return [server], f"main + draft: all cores x{every}t (llama.cpp)"


def _llama_ngram(o: Launch) -> Commands:
    """llama-server drafting by n-gram lookup."""
    flags = ["--spec-type", o.ngram, *ngram_flags(o.ngram, o.spec.draft_max, o.key)]
    return [[*_on_every_core(o), *flags]], f"main: all cores x{_every_core()}t (llama.cpp)"


# Every server, in the order they run and report
BUILDERS: dict[str, Builder] = {
    "duo": _duo(editor=False),
    "duo-editor": _duo(editor=True),
    "duo+back": _duo_back,
    "llama-server": _llama,
    "llama-server-default": _llama_default,
    "llama-server+md": _llama_md,
    "llama-server+ngram": _llama_ngram,
}
SERVERS = tuple(BUILDERS)


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
    launch = Launch(models, spec, slots, free_port(), bin_dir, key, fim, ngram)
    cmds, devices = BUILDERS[name](launch)
    return Server(name, cmds, devices, launch.url)
