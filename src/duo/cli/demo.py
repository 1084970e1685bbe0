"""`duo demo` (what `make demo` runs): what duo is for, on the default pair, in a minute.

1. `duo lead` with the main model and `duo back` with the draft model, two processes on
   loopback (each on a core of its own where there are two), as `duo bench`'s lead+back
   mode starts them; one chat request through the OpenAI API, its answer streamed with
   the back's accepted drafts highlighted.
2. A short table, with `duo bench`'s names for the modes: `target-all` (the main model
   alone on every core), `default` (duo as a user starts it, no flags) and `lead+back`,
   on the same prompt, one interleaved run.
3. Where a mode is slower than the main model alone, a line says why, and where to read
   more (docs/placement.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from duo.bench.harness import suite
from duo.bench.harness.report import ModeResult
from duo.bench.harness.runners import LeadBack, Prompt
from duo.bench.harness.traffic import Streamed, stream
from duo.cli.args import model_config, spec_config
from duo.core.sampling import GREEDY
from duo.session.config import ModelConfig, SpecConfig

GREEN, RESET = "\x1b[32m", "\x1b[0m"
MODES = ("target-all", "default", "lead+back")
WHY = "docs/placement.md"


def cmd_demo(args: argparse.Namespace) -> int:
    spec = spec_config(args)
    models = model_config(args, need_draft=True, spec=spec)
    prompt = Prompt("chat", "demo", args.prompt)
    color = sys.stdout.isatty()
    print(f"== duo lead and duo back, two processes: {args.prompt}", flush=True)
    answer = _streamed(models, spec, prompt, args.n_predict, color)
    print(f"\n== the same prompt, {args.n_predict} tokens, mode by mode (duo bench's names)")
    report = suite.run(
        models,
        spec,
        list(MODES),
        [prompt],
        args.n_predict,
        1,
        log=lambda msg: print(f"\r\x1b[K{msg}", end="", file=sys.stderr, flush=True),
        sampling=GREEDY,
        costs=False,
    )
    print(file=sys.stderr)
    print(table(report.modes))
    if not answer.text:
        print("the lead and its back gave no answer")
    for line in reasons(report.modes):
        print(line)
    return 0


def _streamed(
    models: ModelConfig, spec: SpecConfig, prompt: Prompt, n: int, color: bool
) -> Streamed:
    """The answer of a lead and a back of its own, streamed: the back's text in green."""
    runner = LeadBack("lead+back", models, spec, [prompt], n, GREEDY, "model")
    try:
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": prompt.text}],
            "max_tokens": n,
            "stream": True,
            **GREEDY.to_request(),
        }
        answer = stream(runner.client, "/v1/chat/completions", body, _piece(color))
    finally:
        runner.close()
    print(flush=True)
    return answer


def _piece(color: bool) -> Any:
    """Print each delta as it comes, a back's accepted draft text highlighted."""

    def piece(chunk: dict[str, Any]) -> tuple[str, int]:
        choices = chunk.get("choices") or [{}]
        text = (choices[0].get("delta") or {}).get("content") or ""
        duo = chunk.get("duo") or {}
        drafted = str(duo.get("source") or "").startswith("back:")
        sys.stdout.write(f"{GREEN}{text}{RESET}" if drafted and color else text)
        sys.stdout.flush()
        return text, max(1, int(duo.get("tokens", 1)))

    return piece


def table(modes: list[ModeResult]) -> str:
    alone = next((m.tokens_per_second for m in modes if m.mode == "target-all"), 0.0)
    rows = [
        f"{'mode':12} {'tok/s':>7} {'vs target-all':>14} {'acceptance':>11} {'drafted rounds':>15}"
    ]
    for m in modes:
        vs = m.tokens_per_second / alone if alone else 0.0
        drafted = m.drafted_rounds or 0.0
        accept = f"{m.acceptance_rate:.2f}" if drafted else "-"
        rows.append(
            f"{m.mode:12} {m.tokens_per_second:7.1f} {vs:13.2f}x {accept:>11} {drafted:14.0%}"
        )
    return "\n".join(rows)


def reasons(modes: list[ModeResult]) -> list[str]:
    """A line for each mode slower than the main model alone: why, on this machine."""
    by_mode = {m.mode: m for m in modes}
    alone = by_mode["target-all"].tokens_per_second
    lines = []
    default = by_mode["default"]
    if default.tokens_per_second < alone:
        lines.append(
            f"default is {default.tokens_per_second / alone:.2f}x the main model alone here: "
            f"it ended on {default.placement or 'its default placement'}. A drafter beside "
            f"the main model on this CPU takes cores a batch needs; see {WHY}."
        )
    back = by_mode["lead+back"]
    if back.tokens_per_second < alone:
        lines.append(
            f"lead+back is {back.tokens_per_second / alone:.2f}x: its back takes one of this "
            "machine's cores, which the main model alone had, and the lead verifies its "
            f"drafts only where a batch is worth its cost here ({back.drafted_rounds or 0:.0%} "
            "of the rounds), resting it where they do not pay; on a device of its own a back "
            f"costs the lead nothing. See {WHY}."
        )
    return lines
