"""A drafter-driven client of a lead's verifier API (seed 003's drafter side): draft K
tokens with a local model after the lead's last correction, POST them to /verify, keep what
the main model accepts, repeat. `duo draft` and the bench's lead+client mode run it.

Unlike a back (duo.channel.back), which streams drafts to the lead as fast as it makes them
and never waits, this waits for every verification: one round trip per round.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from duo.core.stats import Stats
from duo.errors import ClientError
from duo.llama.backend import Model


class VerifierClient:
    """The lead's /prefill and /verify, for one session (None: the lead's 'default')."""

    def __init__(self, client: httpx.Client, session: str | None = None) -> None:
        self.client = client
        self.session = session

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.session is not None:
            body = {**body, "session": self.session}
        try:
            r = self.client.post(path, json=body)
        except httpx.HTTPError as e:
            raise ClientError(f"cannot reach the lead at {self.client.base_url}: {e}") from None
        if r.status_code != 200:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {r.status_code} (is this a duo lead?)"
            raise ClientError(f"{path}: {message}")
        return r.json()  # type: ignore[no-any-return]

    def prefill(self, prompt: str | list[int], sampling: dict[str, Any]) -> list[int]:
        return [int(t) for t in self.post("/prefill", {"prompt": prompt, **sampling})["prompt_ids"]]

    def verify(self, draft: list[int]) -> tuple[int, list[int]]:
        r = self.post("/verify", {"draft_tokens": draft})
        return int(r["accepted_prefix_len"]), [int(t) for t in r["preds"]]


def greedy(model: Model, context: list[int], k: int) -> list[int]:
    """The draft model's k most likely next tokens after `context`, its KV reused."""
    kept = model.reuse_prefix(context[:-1])
    out: list[int] = []
    logits = model.decode(context[kept:], all_logits=False)
    while len(out) < k and len(context) + len(out) < model.n_ctx - 1:
        out.append(int(logits[-1].argmax()))
        logits = model.decode(out[-1:], all_logits=False)
    return out


def drafted(
    model: Model, lead: VerifierClient, prompt: list[int], k: int, n: int, stats: Stats
) -> Iterator[int]:
    """The tokens the lead commits, in order, up to n or the end of the generation;
    `stats` counts the verifications (as rounds), drafts and time."""
    committed = list(prompt)
    head: list[int] = []  # the main model's correction, which the next draft starts with
    stats.prompt_tokens = len(prompt)
    t0 = time.perf_counter()
    try:
        while stats.tokens < n:
            draft = [*head, *greedy(model, [*committed, *head], k)][: n - stats.tokens]
            accepted, preds = lead.verify(draft)
            stats.rounds += 1
            stats.drafted += len(draft)
            stats.accepted += accepted
            for token in draft[:accepted]:
                if model.is_eog(token):
                    return
                stats.tokens += 1
                committed.append(token)
                yield token
            head = [preds[accepted]]
            if model.is_eog(head[0]):
                return
    finally:
        stats.decode_seconds = time.perf_counter() - t0
