"""llama.cpp's own programs as runners of `duo bench`: the peers to beat, on the same
prompts, models and cores as the duo modes they answer.

    LlamaCpp     llama-completion and llama-speculative-simple (see duo.bench.harness.llamacpp)
    RemoteDraft  llama-server with its draft model on a ggml rpc-server, across the same
                 delayed link as duo's backs (llama-server-rd)
"""

from __future__ import annotations

import os
import socket
from typing import Any, NamedTuple

import httpx

from duo.bench.harness import llamacpp
from duo.bench.harness.llamacpp import llama_server_command, rpc_server_bin
from duo.bench.harness.runners import (
    Prompt,
    Runner,
    cores_text,
    prompt_texts,
    quiet,
    wait_ready,
)
from duo.bench.net.link import LOOPBACK, DelayProxy, Link
from duo.core.stats import Stats
from duo.net import free_port
from duo.session.config import ModelConfig, SpecConfig


class Peer(NamedTuple):
    """How a llama.cpp peer runs."""

    spec_types: str | None  # llama-speculative-simple's --spec-type; None: llama-completion
    drafted: bool  # with the draft model
    cores: frozenset[int] | None  # pinned to these (None: every core)
    threads: int | None  # of the main model (None: llama.cpp's default)


class LlamaCppRunner(Runner):
    """A peer: the same prompts, as text, through llama.cpp's own programs."""

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
        self.texts = prompt_texts(models.main, prompts)


class LlamaCpp(LlamaCppRunner):
    """The same prompts through llama.cpp's binaries, greedy, on the cores of the duo mode
    each one is the peer of (see duo.bench.harness.llamacpp)."""

    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        bin_dir: str | None,
    ) -> None:
        super().__init__(mode, models, spec, prompts, n, bin_dir)
        kind = mode.removeprefix("llama.cpp").removeprefix("-")
        every = len(os.sched_getaffinity(0))
        both = spec.main_cores | spec.draft_cores if spec.main_cores and spec.draft_cores else None
        self.peer = {
            "": Peer(None, False, spec.main_cores, models.threads),
            "all": Peer(None, False, None, every),
            "default": Peer(None, False, None, None),  # as a user runs it: no -t
            "spec": Peer("draft-simple", True, both, models.threads),
            "spec+ngram": Peer("draft-simple,ngram-mod", True, both, models.threads),
        }.get(kind, Peer(kind, False, None, every))
        models_on = "main + draft, one process" if self.peer.drafted else "main"
        cores = cores_text(self.peer.cores, "all")
        threads = f"x{self.peer.threads}t" if self.peer.threads else "default threads"
        self.devices = f"{models_on}: cores {cores} {threads} (llama.cpp)"

    def one(self, i: int) -> tuple[Stats, float]:
        m, spec, peer = self.models, self.spec, self.peer
        if peer.spec_types is None:
            r = llamacpp.target(
                self.bin_dir, m.main, self.texts[i], self.n, peer.threads, peer.cores,
                m.n_gpu_layers,
            )  # fmt: skip
        else:
            r = llamacpp.speculative(
                self.bin_dir, m.main, m.draft if peer.drafted else None, self.texts[i], self.n,
                spec.draft_max, peer.threads or m.threads, m.draft_threads, peer.cores,
                m.n_gpu_layers, m.n_gpu_layers_draft, spec_types=peer.spec_types,
            )  # fmt: skip
        # Each round emits its accepted draft tokens plus one: rounds = tokens - accepted.
        stats = Stats(
            tokens=r["tokens"],
            decode_seconds=r["seconds"],
            drafted=r["drafted"],
            accepted=r["accepted"],
            rounds=r["tokens"] - r["accepted"],
            llama_seconds=r["pass_seconds"],
        )
        return stats, 0.0  # llama.cpp's tools do not report the time to first token


class RemoteDraft(LlamaCppRunner):
    """llama-server-rd: llama.cpp's remote drafting, the peer of lead+back across a link.
    llama-server holds the main model on the main cores; its draft model lives on a
    ggml rpc-server on the draft cores (`--spec-draft-device RPC0 -ngld 99`), reached
    through the same link as duo's backs (`link`).
    Greedy, through llama-server's own /completion, timed by its `predicted_ms` (the
    generation after the prompt)."""

    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        bin_dir: str | None,
        link: Link = LOOPBACK,
    ) -> None:
        assert models.draft is not None
        super().__init__(mode, models, spec, prompts, n, bin_dir)
        main, draft = cores_text(spec.main_cores, "all"), cores_text(spec.draft_cores, "all")
        self.devices = f"main: cores {main}; draft on an rpc-server: cores {draft} (llama.cpp)"
        rpc_port, port = free_port(), free_port()
        rpc = [
            str(rpc_server_bin(bin_dir)), "-H", link.far_host, "-p", str(rpc_port),
            "-t", str(models.draft_threads),
        ]  # fmt: skip
        self.procs = [quiet(link.command(rpc), spec.draft_cores)]
        self.link: DelayProxy | None = None
        try:
            wait_ready(lambda: _accepts(link.far_host, rpc_port), self.procs[0])
            self.link = link.proxy((link.far_host, rpc_port), "127.0.0.1")
            remote = self.link.port if self.link else rpc_port
            server = llama_server_command(
                bin_dir, models.main, port, ctx=models.n_ctx, ngl=models.n_gpu_layers,
                extra=[
                    "-md", str(models.draft), "--rpc", f"127.0.0.1:{remote}",
                    "--spec-draft-device", "RPC0", "-ngld", "99",
                    "--spec-type", "draft-simple", "--spec-draft-n-max", str(spec.draft_max),
                    "-t", str(models.threads),
                ],
            )  # fmt: skip
            self.procs.append(quiet(server, spec.main_cores))
            url = f"http://127.0.0.1:{port}"
            wait_ready(
                lambda: httpx.get(f"{url}/health", timeout=2).json()["status"] == "ok",
                self.procs[1],
                timeout=600,  # the draft model's weights cross the link at load
            )
            self.client = httpx.Client(base_url=url, timeout=1800)
            self._generate(self.texts[-1], min(n, 16))  # warm-up
        except BaseException:
            self.close()
            raise

    def _generate(self, text: str, n: int) -> dict[str, Any]:
        body = {"prompt": text, "n_predict": n, "temperature": 0.0, "cache_prompt": False}
        r = self.client.post("/completion", json=body)
        r.raise_for_status()
        timings: dict[str, Any] = r.json()["timings"]
        return timings

    def one(self, i: int) -> tuple[Stats, float]:
        t = self._generate(self.texts[i], self.n)
        tokens, accepted = int(t["predicted_n"]), int(t.get("draft_n_accepted", 0))
        stats = Stats(
            tokens=tokens,
            decode_seconds=t["predicted_ms"] / 1000,
            drafted=int(t.get("draft_n", 0)),
            accepted=accepted,
            rounds=tokens - accepted,
            llama_seconds=t["predicted_ms"] / 1000,
        )
        return stats, t["prompt_ms"] / 1000

    def close(self) -> None:
        if hasattr(self, "client"):
            self.client.close()
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(timeout=30)
        if self.link is not None:
            self.link.stop()


def _accepts(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0
