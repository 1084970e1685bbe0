"""`duo` command line: main(argv) -> exit code. Flags follow llama.cpp's names."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from duo import __version__
from duo.bench.clients import SERVERS
from duo.bench.runners import Prompt
from duo.bench.suite import MODES as BENCH_MODES
from duo.bench.suite import PEER_MODES
from duo.bench.variants import REMOTE_DRAFT
from duo.cli.args import (
    Parser,
    add_model_args,
    add_rpc_arg,
    add_sampling_args,
    add_spec_args,
    client_counts,
    fanouts,
    milliseconds,
    model_config,
    positive,
    round_trips,
    sampling_params,
    spec_config,
    usage_error,
)
from duo.cli.chat import add_chat_parser
from duo.cli.load import OtherLoad, busy_note
from duo.cli.progress import Spinner
from duo.cli.rpc_server import add_rpc_server_parser
from duo.cli.serve import add_back_parser, add_lead_parser
from duo.cli.sim import add_sim_parser
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.core.text import TextStream
from duo.errors import DuoError, UsageError, exit_code
from duo.llama.models import PAIRS, is_ready, prepare, verify_file
from duo.llama.rpc import setup_rpc
from duo.session.config import MODES, ModelConfig, SpecConfig, parse_pin, parse_spec_types
from duo.session.session import Session

DEMO_PROMPT = "Explain the difference between concurrency and parallelism in Python."


def prompt_tokens(session: Session, text: str, chat: bool) -> list[int]:
    if chat:
        return session.chat_tokens([{"role": "user", "content": text}])
    return session.main.vocab.tokenize(text)


def show_generation(
    session: Session,
    prompt: list[int],
    n_predict: int,
    *,
    color: bool,
    sampling: SamplingParams,
    stops: list[str] | None = None,
) -> Stats:
    """Generate, printing the text as it comes (accepted draft text in green)."""
    text = TextStream(session.main.vocab.piece, stops or ())
    stats = Stats()
    for r in session.rounds(prompt, n_predict, stats, sampling):
        chunk = text.feed(r)
        print(chunk.colored() if color else chunk.text, end="", flush=True)
        if text.stopped:
            break
    print(text.finish(), flush=True)
    return stats


def cmd_generate(args: argparse.Namespace) -> int:
    if args.prompt is None and args.file is None:
        raise UsageError("give a prompt with -p TEXT or -f FILE")
    if args.prompt is not None and args.file is not None:
        raise UsageError("give the prompt with -p TEXT or -f FILE, not both")
    text = args.prompt
    if args.file is not None:
        try:
            text = Path(args.file).read_text()
        except OSError as e:
            raise UsageError(f"cannot read prompt file {args.file}: {e.strerror}") from None
    spec = spec_config(args)
    sampling = sampling_params(args)
    config = model_config(args, need_draft=spec.mode != "target")
    setup_rpc(args.rpc, n_gpu_layers=args.n_gpu_layers)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    with Session(config, spec) as session:
        tokens = prompt_tokens(session, text, args.chat)
        stats = show_generation(
            session, tokens, args.n_predict, color=color, sampling=sampling, stops=args.stop
        )
    for line in stats.summary():
        print(line, file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the default pair: each mode on the same prompt, side by side."""
    spec = spec_config(args)
    config = model_config(args, need_draft=True)
    color = sys.stdout.isatty()
    results = {}
    load = OtherLoad()
    for mode in MODES:
        print(f"\n=== {mode} ===", flush=True)
        with Session(config, replace(spec, mode=mode)) as session:
            tokens = prompt_tokens(session, args.prompt, chat=True)
            stats = show_generation(session, tokens, args.n_predict, color=color, sampling=GREEDY)
        for line in stats.summary():
            print(line)
        results[mode] = stats
    base = results["target"].tokens_per_second
    print(f"\n{'mode':8} {'tok/s':>8} {'vs target':>10} {'accept':>8} {'mean len':>9}")
    for mode, s in results.items():
        speedup = s.tokens_per_second / base if base else 0.0
        print(
            f"{mode:8} {s.tokens_per_second:8.2f} {speedup:9.2f}x "
            f"{s.acceptance_rate:8.2f} {s.mean_acceptance_length:9.2f}"
        )
    if note := busy_note(load.share()):
        print(note)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "prepare":
        names = [args.name] if args.name else list(PAIRS)
        for name in names:
            if name not in PAIRS:
                raise UsageError(f"unknown model pair {name!r} (known: {', '.join(PAIRS)})")
            main, draft = prepare(PAIRS[name], progress=Spinner)
            print(f"{name}: ready\n  main  {main}\n  draft {draft}")
        return 0
    status = 0
    for pair in PAIRS.values():
        print(f"{pair.name:10} {pair.description}")
        for which in ("main", "draft"):
            path = pair.path(which)
            if args.action == "verify":
                ok = verify_file(path)
                state = "ok" if ok else "MISSING OR CORRUPT"
                status |= 0 if ok or not path.exists() else 1
            else:
                state = "ready" if is_ready(path) else "not prepared"
            print(f"  {which:5} {path}  [{state}]")
    return status


def cmd_bench(args: argparse.Namespace) -> int:
    from duo.bench import suite as bench

    if args.prompts and args.suite != "chat":
        raise UsageError("give either --prompts FILE or --suite, not both")
    prompts = bench.load_prompts(args.prompts, args.suite)
    if args.repeat > 1 and len(prompts) < 2:
        raise UsageError("--repeat needs at least two prompts (a drafter would cache the answer)")
    devices = args.devices
    if devices is None and len(os.sched_getaffinity(0)) > 1:
        devices = "0:1"
    main_cores, draft_cores = parse_pin(devices)
    spec = SpecConfig(
        mode="async",
        draft_max=args.draft,
        max_ahead=args.max_ahead,
        fanout=args.fanout[0],
        main_cores=main_cores,
        draft_cores=draft_cores,
        adaptive=args.policy == "adaptive",
    )
    if args.spec_type is not None:
        if not args.clients:
            raise UsageError("--spec-type sets the draft sources of --clients' servers")
        spec = replace(spec, spec_types=parse_spec_types(args.spec_type))
    models = model_config(args, need_draft=True)
    if args.clients:
        return _bench_clients(args, models, spec, prompts)
    modes = list(args.modes)
    if args.modes == list(BENCH_MODES) and (
        args.llama_cpp_bin or shutil.which("llama-speculative-simple")
    ):
        modes += PEER_MODES  # the peer to beat, where its binaries are at hand
    report = bench.run(
        models,
        spec,
        modes,
        prompts,
        args.n_predict,
        args.repeat,
        sampling=sampling_params(args),
        llama_cpp_bin=args.llama_cpp_bin,
        interleave=_interleave(args.order, models),
        fanouts=args.fanout,
        rtts=args.rtt,
        jitter_ms=args.jitter,
        log=lambda msg: print(f"\r\x1b[K{msg}", end="", file=sys.stderr, flush=True),
    )
    print(file=sys.stderr)
    print(report.table())
    if args.json:
        Path(args.json).write_text(bench.to_json(report))
    if args.plot:
        from duo.bench.plot import plot

        plot(report, Path(args.plot))
    return 0


def _bench_clients(
    args: argparse.Namespace, models: ModelConfig, spec: SpecConfig, prompts: list[Prompt]
) -> int:
    from duo.bench import clients

    servers = args.servers or [
        s for s in SERVERS if not s.startswith("llama-server") or args.llama_cpp_bin
    ]
    report = clients.run(
        models,
        spec,
        servers,
        prompts,
        args.clients,
        args.n_predict,
        args.repeat,
        sampling_params(args),
        args.llama_cpp_bin,
        log=lambda msg: print(f"\r\x1b[K{msg}", end="", file=sys.stderr, flush=True),
    )
    print(file=sys.stderr)
    print(report.table())
    if args.json:
        Path(args.json).write_text(report.to_json())
    return 0


def _interleave(order: str, models: ModelConfig) -> bool:
    """Modes take turns prompt by prompt unless asked otherwise, or unless layers are
    offloaded: every mode holds its own copy of the models on the device then."""
    if order == "auto":
        return not (models.n_gpu_layers or models.n_gpu_layers_draft)
    return order == "interleaved"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="duo", description="Asynchronous, distributed speculative decoding on llama.cpp."
    )
    parser.add_argument("--version", action="version", version=f"duo {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = sub.add_parser("generate", help="generate text from a prompt")
    add_model_args(gen)
    add_rpc_arg(gen)
    add_spec_args(gen)
    g = gen.add_argument_group("generation")
    g.add_argument("-p", "--prompt", help="prompt text")
    g.add_argument("-f", "--file", help="read the prompt from a file")
    g.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens to generate")
    g.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt as a user message in the model's chat template",
    )
    add_sampling_args(gen)
    g.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="show accepted draft tokens in green (default: when stdout is a terminal)",
    )
    gen.set_defaults(func=cmd_generate)

    demo = sub.add_parser("demo", help="target vs sync vs async on the default pair")
    add_model_args(demo)
    add_spec_args(demo)
    demo.add_argument("-p", "--prompt", default=DEMO_PROMPT, help="prompt text")
    demo.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens to generate")
    demo.set_defaults(func=cmd_demo)

    models = sub.add_parser("models", help="list, prepare or verify the default model pairs")
    models.add_argument("action", nargs="?", choices=("list", "prepare", "verify"), default="list")
    models.add_argument("name", nargs="?", help="pair name (prepare only; default: all)")
    models.set_defaults(func=cmd_models)

    bench = sub.add_parser("bench", help="measure every mode on the same prompts, side by side")
    add_model_args(bench)
    g = bench.add_argument_group("benchmark")
    g.add_argument(
        "--modes",
        nargs="+",
        choices=BENCH_MODES + PEER_MODES + (REMOTE_DRAFT,),
        default=list(BENCH_MODES),
        help="modes to measure (default: all)",
    )
    g.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens per prompt")
    g.add_argument("--prompts", help="a JSON-lines prompt file of your own")
    g.add_argument(
        "--suite",
        choices=("chat", "grounded", "all"),
        default="chat",
        help="bundled prompts: chat (12 everyday prompts), grounded (18 prompts whose "
        "answers reuse the prompt), all (default %(default)s)",
    )
    g.add_argument("--repeat", type=positive, default=3, help="repeats of the suite (median)")
    g.add_argument("--draft", type=positive, default=8, metavar="K", help="draft tokens per round")
    g.add_argument("--max-ahead", type=positive, default=12, metavar="N", help="drafter run-ahead")
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
    g.add_argument("--policy", choices=("adaptive", "fixed"), default="adaptive")
    g.add_argument(
        "--order",
        choices=("auto", "interleaved", "sequential"),
        default="auto",
        help="interleaved: the modes take turns prompt by prompt, all loaded at once (fair "
        "on a host whose speed drifts); sequential: one mode after another, one loaded at a "
        "time; auto: interleaved unless layers are offloaded with -ngl/-ngld",
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
        "--spec-type",
        metavar="TYPES",
        help="for --clients: the draft sources of duo's servers, as duo lead takes them "
        "('none': the main model alone; default: duo lead's)",
    )
    add_sampling_args(bench, temperature=0.0, stops=False)
    bench.set_defaults(func=cmd_bench)

    add_lead_parser(sub)
    add_back_parser(sub)
    add_chat_parser(sub)
    add_rpc_server_parser(sub)
    add_sim_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command whose flags they are not
        message = f"unrecognized arguments: {' '.join(extra)}"
        print(usage_error(f"duo {args.command}", message), file=sys.stderr)
        return 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for `duo lead --rpc` workers
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
        return code
    except DuoError as e:
        print(f"duo: error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print("\nduo: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: say so in one line; the traceback is for -v
        logging.getLogger("duo").debug("unexpected error", exc_info=True)
        print(
            f"duo: internal error: {type(e).__name__}: {e} (run with -v for details)",
            file=sys.stderr,
        )
        return 1


def run() -> None:
    sys.exit(main())
