"""`duo bench`: every mode on the same prompts, side by side (duo.bench.harness.suite), or
concurrent clients against servers (duo.bench.harness.clients)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path

from duo.bench.harness import plan
from duo.bench.harness.fim import SUITES as FIM_SUITES
from duo.bench.harness.fim import InfillRequest
from duo.bench.harness.llamacpp import NGRAM_TYPES
from duo.bench.harness.modes import MODES as BENCH_MODES
from duo.bench.harness.modes import PEER_MODES
from duo.bench.harness.plan import SESSION_SUITES
from duo.bench.harness.runners import Prompt
from duo.bench.harness.servers import SERVERS
from duo.bench.net import netns
from duo.bench.net.netns import FarHost
from duo.bench.variants import REMOTE_DRAFT
from duo.cli.args import (
    add_max_ahead_arg,
    add_model_args,
    add_rpc_arg,
    add_sampling_args,
    model_config,
    rpc_placement,
    sampling_params,
)
from duo.cli.progress import Spinner
from duo.cli.values import (
    client_counts,
    draft_lengths,
    fanouts,
    halves,
    megabits,
    milliseconds,
    percent,
    positive,
    round_trips,
)
from duo.errors import UsageError
from duo.session.config import ModelConfig, SpecConfig


def ngram_types(text: str) -> list[str]:
    """--peer-ngram's kinds of n-gram pool, checked."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in NGRAM_TYPES]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'}: give any of {', '.join(NGRAM_TYPES)}"
        )
    return list(dict.fromkeys(kinds))


def add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="measure every mode on the same prompts, side by side")
    add_model_args(bench)
    add_rpc_arg(bench)
    g = bench.add_argument_group("benchmark")
    g.add_argument(
        "--modes",
        nargs="+",
        choices=BENCH_MODES + PEER_MODES + (REMOTE_DRAFT,),
        default=list(BENCH_MODES),
        help="modes to measure (default: all)",
    )
    g.add_argument(
        "-n",
        "--n-predict",
        type=positive,
        help="tokens per prompt (default 128; 512 with --suite code-edit and agent-edit, whose "
        "answers are whole files)",
    )
    g.add_argument("--prompts", help="a JSON-lines prompt file of your own")
    g.add_argument(
        "--suite",
        choices=("chat", "grounded", "all", *SESSION_SUITES, *FIM_SUITES),
        default="chat",
        help="bundled prompts: chat (12 everyday prompts), grounded (18 prompts whose "
        "answers reuse the prompt), all (default %(default)s); with --clients, sessions "
        "of dependent requests too: agent, multiturn, code-edit (see duo.bench.harness.workloads), "
        "and agent-edit, a coding agent's sessions through /v1/messages, sent by the anthropic "
        "SDK with tools (duo.bench.harness.agents); "
        "and an editor's fill-in-the-middle requests to /infill, from the standard library: "
        "fim, fim-holdout for a final measurement, and fim-edit, an editing session whose "
        "chunks move (duo.bench.harness.fim); llama-server "
        "peers then run with llama.cpp's FIM preset flags (-b 1024 -ub 1024 --cache-reuse 256)",
    )
    g.add_argument("--repeat", type=positive, default=3, help="repeats of the suite (median)")
    g.add_argument("--draft", type=positive, default=8, metavar="K", help="draft tokens per round")
    add_max_ahead_arg(g, "an async drafter")
    g.add_argument(
        "--fanout",
        type=fanouts,
        default=[0],
        metavar="LIST",
        help="branches of the async drafters (see duo generate --fanout); several "
        "settings (0,2) measure each of those modes at each, as MODE:fF (default 0)",
    )
    g.add_argument(
        "--rtt",
        type=round_trips,
        default=[0.0],
        metavar="MS[,MS...]",
        help="put each back across a link with this round-trip time (a delaying TCP proxy "
        "on loopback); several measure each mode with a back at each, as MODE@Nms",
    )
    g.add_argument(
        "--jitter",
        type=milliseconds,
        default=0.0,
        metavar="MS",
        help="with --rtt: each way's delay varies by up to this much (never reordering)",
    )
    g.add_argument(
        "--link",
        choices=("auto", "netns", "loopback"),
        default="auto",
        help="netns: each back and rpc-server runs in a network namespace of its own, across "
        "a veth pair (needs root and iproute2); loopback: on this host's loopback; auto: "
        "netns where it can be made, with --rtt/--rate/--loss",
    )
    g.add_argument(
        "--rate", type=megabits, metavar="MBIT", help="limit the link to this rate each way"
    )
    g.add_argument(
        "--loss",
        type=percent,
        metavar="PCT",
        help="drop this share of the link's packets each way (needs the kernel's netem)",
    )
    g.add_argument(
        "--half",
        type=halves,
        metavar="BF16,F16",
        help="the pair's main model in these 16-bit types, each mode with each, as "
        "MODE/BF16 and MODE/F16 (default: F16, or $DUO_HALF's)",
    )
    g.add_argument("--policy", choices=("adaptive", "fixed"), default="adaptive")
    g.add_argument(
        "--order",
        choices=("auto", "interleaved", "sequential"),
        default="auto",
        help="interleaved: the modes take turns prompt by prompt, each going first in turn, "
        "all loaded at once (fair on a host whose speed drifts; with --clients, the servers "
        "take turns a block of a prompt per client at a time); sequential: one mode after "
        "another, one loaded at a time; auto: interleaved unless layers are offloaded with "
        "-ngl/-ngld",
    )
    g.add_argument(
        "--devices",
        metavar="MAIN:DRAFT",
        default=None,
        help="cores of the main and draft devices (default 0:1 with 2+ cores)",
    )
    g.add_argument(
        "--llama-cpp-bin",
        metavar="DIR",
        help="llama.cpp's binaries (scripts/build-llama-cpp.sh) to measure as the "
        "peer; found on PATH otherwise",
    )
    g.add_argument(
        "--no-costs",
        action="store_true",
        help="skip the device-cost rounds (each loads both models and times their passes): "
        "a quicker run, whose report has no device profile for `duo sim --bench`",
    )
    g.add_argument("--json", metavar="OUT", help="write the report as JSON")
    g.add_argument("--plot", metavar="OUT.png", help="draw the report (needs matplotlib)")
    g.add_argument(
        "--clients",
        type=client_counts,
        metavar="1,2,4",
        help="instead of the modes: concurrent clients against servers with that many "
        "slots (aggregate tok/s, time to first token, gaps between streamed chunks)",
    )
    g.add_argument(
        "--servers",
        nargs="+",
        choices=SERVERS,
        help="servers for --clients (default: duo's, and llama-server's with --llama-cpp-bin)",
    )
    g.add_argument(
        "--peer-draft",
        type=draft_lengths,
        metavar="LIST",
        help="for --clients: the draft lengths llama-server's speculative peers run at, each "
        "measured as a server of its own, SERVER/kK (default: --draft)",
    )
    g.add_argument(
        "--peer-key",
        type=draft_lengths,
        metavar="LIST",
        help="for --clients: the n-gram key lengths llama-server+ngram runs at "
        "(--spec-ngram-mod-n-match), each a server of its own, SERVER/nN (default 3)",
    )
    g.add_argument(
        "--peer-ngram",
        type=ngram_types,
        metavar="LIST",
        help="for --clients: the kinds of n-gram pool llama-server+ngram runs with "
        f"(--spec-type; any of {', '.join(NGRAM_TYPES)}), each a server of its own, "
        "llama-server+KIND (default ngram-mod)",
    )
    g.add_argument(
        "--spec-type",
        metavar="TYPES",
        help="for --clients: the draft sources of duo's servers, as duo lead takes them "
        "('none': the main model alone; default: duo lead's)",
    )
    add_sampling_args(bench, temperature=0.0, stops=False)
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    prompts, infills = plan.work(args)
    if args.n_predict is None:
        args.n_predict = plan.answer_tokens(args.suite)
    spec = plan.spec(args)
    mains = plan.halves(args, Spinner)
    models = model_config(args, need_draft=True, placement=rpc_placement(args), spec=spec)
    if mains:
        models = replace(models, main=next(iter(mains.values())))
    if args.clients:
        if args.rpc or args.rpcd:
            raise UsageError("--clients does not take rpc-servers: measure the modes instead")
        return _bench_clients(args, models, spec, infills or prompts)
    return _bench_modes(args, models, spec, prompts, mains)


def _bench_modes(
    args: argparse.Namespace,
    models: ModelConfig,
    spec: SpecConfig,
    prompts: list[Prompt],
    mains: dict[str, Path],
) -> int:
    """The modes on the prompts (llama.cpp's peers too, where their binaries are at hand),
    reported as a table, and as --json and --plot ask."""
    from duo.bench.harness import suite as bench

    with contextlib.ExitStack() as stack:
        report = bench.run(
            models,
            spec,
            plan.modes(args),
            prompts,
            args.n_predict,
            args.repeat,
            sampling=sampling_params(args),
            llama_cpp_bin=args.llama_cpp_bin,
            interleave=plan.interleave(args.order, models),
            fanouts=args.fanout,
            rtts=args.rtt,
            jitter_ms=args.jitter,
            far=_far_side(args, stack),
            costs=not args.no_costs,
            halves=mains,
            log=lambda msg: print(f"\r\x1b[K{msg}", end="", file=sys.stderr, flush=True),
        )
    print(file=sys.stderr)
    print(report.table())
    if args.json:
        from duo.bench.harness.report import to_json

        Path(args.json).write_text(to_json(report))
    if args.plot:
        from duo.bench.harness.plot import plot

        plot(report, Path(args.plot))
    return 0


def _far_side(args: argparse.Namespace, stack: contextlib.ExitStack) -> FarHost | None:
    """The namespace the backs and rpc-servers run in, for the bench's run; None: loopback."""
    shaped = args.rate is not None or args.loss is not None
    if args.link == "loopback":
        if shaped:
            raise UsageError("--rate and --loss shape a namespace's link, not --link loopback")
        return None
    if args.link == "auto" and args.rtt == [0.0] and not shaped:
        return None
    why = netns.unavailable()
    if why and args.link == "auto" and not shaped:
        print(f"duo bench: {why}, so the link runs on loopback", file=sys.stderr)
        return None
    if why:
        raise UsageError(f"--link netns: {why}")
    try:
        return stack.enter_context(netns.far_host(args.rate, args.loss))
    except netns.NamespaceError as e:
        raise UsageError(f"--link netns: {e}") from None


def _bench_clients(
    args: argparse.Namespace,
    models: ModelConfig,
    spec: SpecConfig,
    prompts: list[Prompt] | list[InfillRequest],
) -> int:
    from duo.bench.harness import clients

    fim_peers = bool(prompts) and isinstance(prompts[0], dict)
    report = clients.run(
        models,
        spec,
        plan.servers(args, fim_peers),
        plan.client_work(args.suite, prompts),
        args.clients,
        args.n_predict,
        args.repeat,
        sampling_params(args),
        args.llama_cpp_bin,
        log=lambda msg: print(f"\r\x1b[K{msg}", end="", file=sys.stderr, flush=True),
        suite=args.suite,
        peer_drafts=args.peer_draft,
        peer_keys=args.peer_key,
        peer_ngrams=args.peer_ngram,
        interleave=plan.interleave(args.order, models),
        fim=fim_peers,
    )
    print(file=sys.stderr)
    print(report.table())
    if args.json:
        Path(args.json).write_text(report.to_json())
    return 0
