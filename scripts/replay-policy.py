#!/usr/bin/env python3
"""Replay a workload's answers through duo's lookups and policy (duo.bench.replay).

    .venv/bin/python scripts/replay-policy.py --suite multiturn
    .venv/bin/python scripts/replay-policy.py --suite code-edit --pair qwen-coder -n 512
    .venv/bin/python scripts/replay-policy.py --suite fim --pair qwen-coder-1.5b

Records the main model's greedy answers to a workload, one request at a time, as
`duo bench --clients 1 --suite SUITE` sends them (agent, multiturn, code-edit; fim and
fim-holdout, laid out as `duo lead`'s /infill lays them out with the editor presets'
-b 1024), or to a prompt suite (chat, grounded), and measures the main model's pass
costs on this machine (each size's median, duo.llama.calibrate.median_costs).
Both are kept in --out, so a second run with the same --out replays at once: change the
policy or the lookups, run it again, compare. Prints tokens per second for the lead's
adaptive policy, the oracle (which knows the answer), plain decoding and a drafter
that knows every answer (duo.bench.replay.known).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from duo.bench.harness import fim, workloads
from duo.bench.harness.runners import prompt_tokens
from duo.bench.harness.suite import load_prompts
from duo.bench.replay import POLICIES, Request, known, replay
from duo.core.policy import CostModel
from duo.core.rounds import Generation, run
from duo.lead.native.infill import FIM_BATCH, FileChunk, infill_prompt
from duo.llama.backend import Model
from duo.llama.calibrate import median_costs, spread
from duo.session.config import SpecConfig, resolve_models

FIM_SUITES = ("fim", "fim-holdout")
PROMPTS = (64, 128, 256, 512)  # pass sizes a prompt is read in, timed beside the drafts'


def greedy(model: Model, prompt: list[int], n: int) -> Request:
    """The main model alone's answer, by the lead's own loop."""
    g = Generation(model, prompt, max_tokens=n)
    for _ in run(model, g):
        pass
    return Request(prompt, g.committed[len(prompt) :], g.finish == "stop")


def infill_tokens(model: Model, body: dict[str, Any], n: int) -> list[int]:
    """A fill-in-the-middle request's prompt, as /infill lays it out."""

    def tokenize(text: str) -> list[int]:
        return model.vocab.tokenize(text, add_special=False, parse_special=False)

    extra = [FileChunk(c["text"], c.get("filename", "tmp")) for c in body["input_extra"]]
    prompt, _ = infill_prompt(
        model.vocab.fim_tokens(),
        tokenize,
        tokenize(body["input_prefix"]),
        tokenize(body["input_suffix"]),
        extra,
        model.vocab.tokenize(body["prompt"], add_special=False),
        n_batch=FIM_BATCH,
        n_ctx=model.n_ctx,
        n_predict=n,
    )
    return prompt


def record(model: Model, suite: str, n: int) -> list[Request]:
    if suite in ("chat", "grounded"):
        return [greedy(model, prompt_tokens(model, p), n) for p in load_prompts(None, suite)]
    if suite in FIM_SUITES:
        return [greedy(model, infill_tokens(model, b, n), n) for b in fim.requests(suite)]
    requests = []
    for session in workloads.sessions(suite):
        messages = session.start()
        for turn in session.turns:
            messages += turn
            text = model.vocab.render_chat(messages)
            requests.append(greedy(model, model.vocab.tokenize(text, add_special=True), n))
            answer = b"".join(model.vocab.piece(t) for t in requests[-1].answer)
            messages.append({"role": "assistant", "content": answer.decode(errors="replace")})
    return requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suites = [*workloads.WORKLOADS, "chat", "grounded", *FIM_SUITES]
    parser.add_argument("--suite", default="multiturn", choices=suites)
    parser.add_argument("--pair", default="smollm2")
    parser.add_argument("-n", type=int, default=128, help="most tokens per answer")
    parser.add_argument(
        "--lookup-max", type=int, default=SpecConfig.lookup_max, help="--spec-ngram-size-m"
    )
    parser.add_argument(
        "--out", type=Path, help="answers and costs (default /tmp/duo-replay-SUITE.json)"
    )
    args = parser.parse_args()
    out = args.out or Path(f"/tmp/duo-replay-{args.suite}.json")
    if out.exists():
        saved = json.loads(out.read_text())
    else:
        main_path, _ = resolve_models(None, None, args.pair)
        n_ctx = 4096 if args.suite in FIM_SUITES else 8192  # the bench's lead's -c for /infill
        model = Model(main_path, n_ctx=n_ctx, n_threads=len(os.sched_getaffinity(0)))
        requests = record(model, args.suite, args.n)
        # at the context the rounds run at, on average: the prompt and half the answer
        context = sum(len(r.prompt) + len(r.answer) // 2 for r in requests) // len(requests)
        sizes = spread(args.lookup_max + 1) + [s for s in PROMPTS if s > args.lookup_max + 1]
        costs = median_costs(model, sizes, repeats=5, context=context)
        saved = {
            "requests": [r.__dict__ for r in requests],
            "seconds": {str(k): v for k, v in costs.seconds.items()},
        }
        out.write_text(json.dumps(saved))
    requests = [Request(**r) for r in saved["requests"]]
    costs = CostModel({int(k): v for k, v in saved["seconds"].items()})
    print(f"{args.suite}: {len(requests)} requests, answers and costs in {out}")
    replays = {name: replay(requests, costs, name, lookup_max=args.lookup_max) for name in POLICIES}
    replays["known"] = known(requests, costs)  # a drafter that knows every answer
    for name, r in replays.items():
        print(
            f"  {name:9s} {r.tokens_per_second:6.1f} tok/s: {r.tokens} tokens in "
            f"{r.seconds:6.2f} s, {r.rounds} rounds, {r.rejected} draft tokens rejected"
        )


if __name__ == "__main__":
    main()
