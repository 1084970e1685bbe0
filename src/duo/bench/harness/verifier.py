"""lead+client: seed 003's drafter-driven design as a bench mode. `duo lead` drafts nothing
of its own; this process is the client (duo.drafting.client), its draft model on the draft
cores, drafting `--draft` tokens and waiting for each verification, across the bench's link
if one is asked for. Beside lead+back (the lead drives, the back never waits), on the same
cores."""

from __future__ import annotations

import time
from typing import Any

import httpx

from duo.bench.harness.runners import Prompt, Runner, _devices, prompt_tokens, start_lead
from duo.bench.net.link import LOOPBACK, Link
from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.drafting.client import VerifierClient, drafted
from duo.llama.backend import Model
from duo.net import free_port
from duo.session.config import ModelConfig, SpecConfig, open_draft
from duo.session.session import pinned


class LeadClient(Runner):
    def __init__(
        self,
        mode: str,
        models: ModelConfig,
        spec: SpecConfig,
        prompts: list[Prompt],
        n: int,
        sampling: SamplingParams,
        link: Link = LOOPBACK,
    ) -> None:
        assert models.draft is not None
        self.mode, self.n, self.k = mode, n, spec.draft_max
        self.cores = spec.draft_cores
        self.devices = _devices(spec, models) + " (lead process + client)"
        self.sampling: dict[str, Any] = dict(sampling.to_request())
        port = free_port()
        self.lead = start_lead(models, spec, port, "none")
        # the client drafts in this process, so its link stays on loopback, delayed
        self.link = Link(link.rtt_ms, link.jitter_ms).proxy(("127.0.0.1", port), "127.0.0.1")
        self.model: Model | None = None
        try:
            self.model = open_draft(models, models.n_ctx)
            self.tokenized = [prompt_tokens(self.model, p) for p in prompts]
            url = f"http://127.0.0.1:{self.link.port if self.link else port}"
            self.client = httpx.Client(base_url=url, timeout=600)
            self.verifier = VerifierClient(self.client)
            self._run(self.tokenized[-1], min(n, 16))  # warm-up
        except BaseException:
            self.close()
            raise

    def one(self, i: int) -> tuple[Stats, float]:
        return self._run(self.tokenized[i], self.n)

    def _run(self, prompt: list[int], n: int) -> tuple[Stats, float]:
        assert self.model is not None
        stats = Stats()
        ttft = 0.0
        with pinned(self.cores):
            t0 = time.perf_counter()
            self.verifier.prefill(prompt, self.sampling)
            stats.prefill_seconds = time.perf_counter() - t0
            for _ in drafted(self.model, self.verifier, prompt, self.k, n, stats):
                ttft = ttft or time.perf_counter() - t0
        return stats, ttft

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()
        if self.model is not None:
            self.model.close()
        self.lead.terminate()
        self.lead.wait(timeout=30)
        if self.link is not None:
            self.link.stop()
