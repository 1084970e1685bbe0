"""`duo draft`: a drafter-driven client of a lead's verifier API (seed 003's Mac side).

    duo draft --server http://lead:5555 -m draft.gguf -p "best sport in the world is"

It sends the prompt (`POST /prefill`), then repeats: draft `--draft K` tokens with the
local model after the lead's last correction, verify them (`POST /verify`), keep what the
main model accepts. The text streams as it is accepted, and a summary in seed 003's terms
ends it. The lead's text is the main model's alone; the draft model only sets the pace.
Unlike `duo back`, which streams drafts to the lead as fast as it makes them, this waits
for every verification: simple, and one round trip per round.
"""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from duo import auth
from duo.cli import auth_args
from duo.cli.args import positive, read_prompt
from duo.cli.chat import TIMEOUT, http_url
from duo.errors import ClientError, UsageError
from duo.llama.backend import Model
from duo.session.config import resolve_models


class Verifier:
    """The lead's /prefill and /verify, for one session."""

    def __init__(self, client: httpx.Client, session: str | None) -> None:
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

    def prefill(self, prompt: str, sampling: dict[str, Any]) -> list[int]:
        return [int(t) for t in self.post("/prefill", {"prompt": prompt, **sampling})["prompt_ids"]]

    def verify(self, draft: list[int]) -> tuple[int, list[int]]:
        r = self.post("/verify", {"draft_tokens": draft})
        return int(r["accepted_prefix_len"]), [int(t) for t in r["preds"]]


@dataclass
class Tally:
    prompt: int = 0
    tokens: int = 0
    verifications: int = 0
    drafted: int = 0
    accepted: int = 0
    started: float = field(default_factory=time.perf_counter)

    def summary(self) -> list[str]:
        seconds = time.perf_counter() - self.started
        rate = self.accepted / self.drafted if self.drafted else 0.0
        per = self.accepted / self.verifications if self.verifications else 0.0
        return [
            f"prompt {self.prompt} tokens; generated {self.tokens} tokens in {seconds:.2f} s "
            f"({self.tokens / seconds if seconds else 0:.1f} tok/s), "
            f"{self.verifications} verifications",
            f"drafted {self.drafted}, accepted {self.accepted}, acceptance rate {rate:.2f}, "
            f"{per:.2f} tokens per verification",
        ]


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
    model: Model, lead: Verifier, prompt: list[int], k: int, n: int, tally: Tally
) -> Iterator[int]:
    """Seed 003's loop: the tokens the lead commits, in order, up to n or the end."""
    committed = list(prompt)
    head: list[int] = []  # the main model's correction, which the next draft starts with
    while tally.tokens < n:
        draft = [*head, *greedy(model, [*committed, *head], k)][: max(1, n - tally.tokens)]
        accepted, preds = lead.verify(draft)
        tally.verifications += 1
        tally.drafted += len(draft)
        tally.accepted += accepted
        for token in draft[:accepted]:
            if model.is_eog(token):
                return
            tally.tokens += 1
            committed.append(token)
            yield token
        head = [preds[accepted]]
        if model.is_eog(head[0]):
            return


def cmd_draft(args: argparse.Namespace) -> int:
    text = read_prompt(args)
    key = auth_args.client_key(args)
    tls = auth.client_tls(args.ca_file, httpx.URL(args.server).scheme == "https")
    if args.model is None:  # the default pair's draft
        path = resolve_models(None, None, args.pair)[1]
    else:
        path = resolve_models(args.model, None, args.pair)[0]
    assert path is not None
    sampling: dict[str, Any] = {"temperature": args.temp}
    if args.seed is not None:
        sampling["seed"] = args.seed
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with (
        Model(path, n_ctx=args.ctx_size, n_threads=args.threads) as model,
        httpx.Client(
            base_url=args.server, headers=headers, timeout=TIMEOUT, verify=tls or True
        ) as client,
    ):
        lead = Verifier(client, args.session)
        tally = Tally()
        prompt = lead.prefill(text, sampling)
        if prompt != model.vocab.tokenize(text):
            raise UsageError(
                f"{path.name} reads the prompt as other tokens than the lead's model: a "
                "draft model must share the main model's vocabulary"
            )
        tally.prompt = len(prompt)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        for token in drafted(model, lead, prompt, args.draft, args.n_predict, tally):
            print(decoder.decode(model.vocab.piece(token)), end="", flush=True)
        print(decoder.decode(b"", final=True), flush=True)
    for line in tally.summary():
        print(line, file=sys.stderr)
    return 0


def add_draft_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "draft", help="draft locally, verify on a lead: seed 003's drafter-driven client"
    )
    p.add_argument(
        "--server", type=http_url, default="http://127.0.0.1:5555", help="the lead's URL"
    )
    p.add_argument("-m", "--model", help="draft model GGUF (default: the default pair's draft)")
    p.add_argument("--pair", help="take the draft model of this named pair")
    p.add_argument("-p", "--prompt", help="prompt text")
    p.add_argument("-f", "--file", help="read the prompt from a file")
    p.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens to generate")
    p.add_argument("--draft", type=positive, default=4, help="tokens drafted per verification")
    p.add_argument("--temp", type=float, default=0.0, help="the lead's temperature (0: greedy)")
    p.add_argument("--seed", type=int, help="the lead's sampling seed")
    p.add_argument("--session", help="the session's name on the lead (default: 'default')")
    p.add_argument("-t", "--threads", type=positive, default=1, help="draft model threads")
    p.add_argument("-c", "--ctx-size", type=positive, default=4096, help="context size")
    auth_args.add_key_args(p, "the lead's API key")
    auth_args.add_ca_file_arg(p)
    p.set_defaults(func=cmd_draft)
