"""`duo draft`: a drafter-driven client of a lead's verifier API (seed 003's Mac side).

    duo draft --server http://lead:5555 -m draft.gguf -p "best sport in the world is"

It sends the prompt (`POST /prefill`), then repeats: draft `--draft K` tokens with the
local model after the lead's last correction, verify them (`POST /verify`), keep what the
main model accepts (duo.drafting.client). The text streams as it is accepted, and a
summary in seed 003's terms ends it. The text is the main model's alone; the draft model
only sets the pace.
"""

from __future__ import annotations

import argparse
import codecs
import sys
import time
from typing import Any

import httpx

from duo import auth
from duo.cli import auth_args
from duo.cli.args import half_type, read_prompt
from duo.cli.chat import TIMEOUT, http_url
from duo.cli.hub import add_hub_args
from duo.cli.values import non_negative, positive
from duo.core.stats import Stats
from duo.drafting.client import VerifierClient, drafted
from duo.errors import UsageError
from duo.llama.backend import Model
from duo.session.config import resolve_models
from duo.session.threads import math_cores


def cmd_draft(args: argparse.Namespace) -> int:
    text = read_prompt(args)
    key = auth_args.client_key(args)
    tls = auth.client_tls(args.ca_file, httpx.URL(args.server).scheme == "https")
    if args.model is None:  # the default pair's draft
        path = resolve_models(None, None, args.pair, half=half_type())[1]
    else:
        path = resolve_models(args.model, None, args.pair, half=half_type())[0]
    assert path is not None
    sampling: dict[str, Any] = {"temperature": args.temp}
    if args.seed is not None:
        sampling["seed"] = args.seed
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with (
        Model(path, n_ctx=args.ctx_size, n_threads=args.threads or math_cores()) as model,
        httpx.Client(
            base_url=args.server, headers=headers, timeout=TIMEOUT, verify=tls or True
        ) as client,
    ):
        lead = VerifierClient(client, args.session)
        stats = Stats()
        t0 = time.perf_counter()
        prompt = lead.prefill(text, sampling)
        stats.prefill_seconds = time.perf_counter() - t0
        if prompt != model.vocab.tokenize(text):
            raise UsageError(
                f"{path.name} reads the prompt as other tokens than the lead's model: a "
                "draft model must share the main model's vocabulary"
            )
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        for token in drafted(model, lead, prompt, args.draft, args.n_predict, stats):
            print(decoder.decode(model.vocab.piece(token)), end="", flush=True)
        print(decoder.decode(b"", final=True), flush=True)
    for line in stats.summary():
        print(line, file=sys.stderr)
    per = stats.accepted / stats.rounds if stats.rounds else 0.0
    print(f"{stats.rounds} verifications, {per:.2f} tokens per verification", file=sys.stderr)
    return 0


def add_draft_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "draft", help="draft locally, verify on a lead: seed 003's drafter-driven client"
    )
    p.add_argument(
        "--server", type=http_url, default="http://127.0.0.1:5555", help="the lead's URL"
    )
    p.add_argument("-m", "--model", help="draft model GGUF (default: the default pair's draft)")
    add_hub_args(p, draft=False, model="draft model")
    p.add_argument("--pair", help="take the draft model of this named pair")
    p.add_argument("-p", "--prompt", help="prompt text")
    p.add_argument("-f", "--file", help="read the prompt from a file")
    p.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens to generate")
    p.add_argument("--draft", type=positive, default=4, help="tokens drafted per verification")
    p.add_argument("--temp", type=float, default=0.0, help="the lead's temperature (0: greedy)")
    p.add_argument("--seed", type=int, help="the lead's sampling seed")
    p.add_argument("--session", help="the session's name on the lead (default: 'default')")
    p.add_argument(
        "-t",
        "--threads",
        type=positive,
        help="draft model threads (default: the physical cores, as llama.cpp counts them)",
    )
    p.add_argument(
        "-c",
        "--ctx-size",
        type=non_negative,
        default=4096,
        help="context size (0: the model's own)",
    )
    auth_args.add_key_args(p, "the lead's API key")
    auth_args.add_ca_file_arg(p)
    p.set_defaults(func=cmd_draft)
