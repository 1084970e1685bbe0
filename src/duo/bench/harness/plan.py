"""What a `duo bench` run measures, from its parsed command line (duo.cli.bench): the suite's
prompts or requests, the modes or the servers, the speculation settings they share, and
--half's main models."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from duo.bench.harness import fim
from duo.bench.harness.agents import SUITE as AGENT_SUITE
from duo.bench.harness.agents import agent_sessions
from duo.bench.harness.fim import SUITES as FIM_SUITES
from duo.bench.harness.fim import InfillRequest
from duo.bench.harness.modes import MODES, PEER_MODES
from duo.bench.harness.runners import Prompt
from duo.bench.harness.servers import SERVERS
from duo.bench.harness.workloads import ANSWER_TOKENS, WORKLOADS, sessions
from duo.errors import UsageError
from duo.llama.models import DEFAULT_PAIR, Step, get_pair, prepare
from duo.session.config import ModelConfig, SpecConfig, parse_pin, parse_spec_types

SESSION_SUITES = (*WORKLOADS, AGENT_SUITE)  # requests in sessions, to a server
ANSWER = 128  # -n's default, but for suites whose answers are whole files (ANSWER_TOKENS)


def work(args: argparse.Namespace) -> tuple[list[Prompt], list[InfillRequest]]:
    """The prompts of --prompts or --suite, or the fill-in-the-middle requests of either
    (none of the prompts then, nor for a suite of sessions, which --clients sends)."""
    from duo.bench.harness.suite import load_prompts

    if args.prompts and args.suite != "chat":
        raise UsageError("give either --prompts FILE or --suite, not both")
    requests = infills(args)
    if (args.suite in SESSION_SUITES or requests) and not args.clients:
        raise UsageError(f"--suite {args.suite} is requests to a server: add --clients")
    listed = args.suite in SESSION_SUITES or requests
    prompts = [] if listed else load_prompts(args.prompts, args.suite)
    if args.repeat > 1 and len(prompts) == 1:
        raise UsageError("--repeat needs at least two prompts (a drafter would cache the answer)")
    return prompts, requests


def answer_tokens(suite: str) -> int:
    """-n's default for the suite: room for a whole answer."""
    return ANSWER_TOKENS.get(suite, ANSWER)


def infills(args: argparse.Namespace) -> list[InfillRequest]:
    """The fill-in-the-middle requests of --suite fim / fim-holdout, or of a --prompts file
    of them (JSON lines with input_prefix and input_suffix); none otherwise."""
    if args.suite in FIM_SUITES:
        return fim.requests(args.suite)
    if args.prompts is None:
        return []
    try:
        lines = Path(args.prompts).read_text().splitlines()
        first = next((line for line in lines if line.strip()), "")
        if "input_prefix" not in json.loads(first or "{}"):
            return []
        return fim.load(args.prompts)
    except OSError as e:
        raise UsageError(f"cannot read {args.prompts}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"{args.prompts}: {e}") from None


def spec(args: argparse.Namespace) -> SpecConfig:
    """The modes' speculation settings: async, on the cores --devices gives (main on core
    0, drafter on core 1 where there are two), the --clients servers' sources."""
    devices = args.devices
    if devices is None and len(os.sched_getaffinity(0)) > 1:
        devices = "0:1"
    main_cores, draft_cores = parse_pin(devices)
    settings = SpecConfig(
        mode="async",
        draft_max=args.draft,
        max_ahead=args.max_ahead,
        fanout=args.fanout[0],
        main_cores=main_cores,
        draft_cores=draft_cores,
        adaptive=args.policy == "adaptive",
    )
    if (args.peer_draft or args.peer_key or args.peer_ngram) and not args.clients:
        raise UsageError(
            "--peer-draft, --peer-key and --peer-ngram set --clients' llama-server peers"
        )
    if args.spec_type is not None:
        if not args.clients:
            raise UsageError("--spec-type sets the draft sources of --clients' servers")
        settings = replace(settings, spec_types=parse_spec_types(args.spec_type))
    return settings


def halves(args: argparse.Namespace, progress: Step) -> dict[str, Path]:
    """--half's main model files (prepared on first use, each step shown by `progress`),
    by type; {} without --half."""
    if not args.half:
        return {}
    if args.model:
        raise UsageError("--half makes a pair's main model in each type: give --pair, not -m")
    if args.clients:
        raise UsageError("--half measures the modes: run --clients once per DUO_HALF instead")
    pair = get_pair(args.pair or DEFAULT_PAIR)
    return {h: prepare(pair, half=h, progress=progress)[0] for h in args.half}


def modes(args: argparse.Namespace) -> list[str]:
    """--modes, and llama.cpp's peers with the default modes, where their binaries are at
    hand: the peer to beat."""
    chosen = list(args.modes)
    if args.modes == list(MODES) and (
        args.llama_cpp_bin or shutil.which("llama-speculative-simple")
    ):
        chosen += PEER_MODES
    return chosen


def servers(args: argparse.Namespace, fim_peers: bool) -> list[str]:
    """--servers, or duo's and, with --llama-cpp-bin, llama-server's; duo-editor, the
    editor setup, for editors' requests (`fim_peers`)."""
    return args.servers or [
        s
        for s in SERVERS
        if (not s.startswith("llama-server") or args.llama_cpp_bin)
        and (s != "duo-editor" or fim_peers)
    ]


def client_work(suite: str, prompts: list[Prompt] | list[InfillRequest]) -> list[Any]:
    """What --clients sends: the suite's sessions, else the prompts or requests."""
    if suite == AGENT_SUITE:
        return agent_sessions()
    if suite in WORKLOADS:
        return sessions(suite)
    return prompts


def interleave(order: str, models: ModelConfig) -> bool:
    """Modes take turns prompt by prompt unless asked otherwise, or unless layers are
    offloaded: every mode holds its own copy of the models on the device then."""
    if order == "auto":
        return not (models.n_gpu_layers or models.n_gpu_layers_draft)
    return order == "interleaved"
