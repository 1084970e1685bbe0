"""`duo` command line: main(argv) -> exit code. Flags follow llama.cpp's names."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from duo import __version__
from duo.cli.args import (
    HALF_ENV,
    add_model_args,
    add_rpc_arg,
    add_sampling_args,
    add_spec_args,
    half_type,
    model_config,
    read_prompt,
    rpc_placement,
    sampling_params,
    spec_config,
)
from duo.cli.back import add_back_parser
from duo.cli.bench import add_bench_parser
from duo.cli.chat import add_chat_parser
from duo.cli.completion import add_completion_parser
from duo.cli.draft import add_draft_parser
from duo.cli.hub import hub_models
from duo.cli.lead import add_lead_parser
from duo.cli.parser import Parser, env_defaults, usage_error
from duo.cli.progress import Spinner
from duo.cli.rpc_server import add_rpc_server_parser
from duo.cli.sim import add_sim_parser
from duo.cli.values import positive
from duo.core.sampling import SamplingParams
from duo.core.stats import Stats
from duo.core.text import TextStream
from duo.errors import DuoError, UsageError, exit_code
from duo.llama.models import (
    PAIRS,
    file_type,
    is_ready,
    native_bf16,
    prepare,
    verify_file,
)
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
    text = read_prompt(args)
    spec = spec_config(args)
    sampling = sampling_params(args)
    placement = rpc_placement(args)
    config = model_config(args, need_draft=spec.mode != "target", placement=placement, spec=spec)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    with Session(config, spec) as session:
        tokens = prompt_tokens(session, text, args.chat)
        stats = show_generation(
            session, tokens, args.n_predict, color=color, sampling=sampling, stops=args.stop
        )
        sharing = session.sharing().describe()
    for line in stats.summary():
        print(line, file=sys.stderr)
    print(f"placement: {sharing}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from duo.cli.demo import cmd_demo  # the bench's harness, loaded only for the demo

    return cmd_demo(args)


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "prepare":
        names = [args.name] if args.name else list(PAIRS)
        for name in names:
            if name not in PAIRS:
                raise UsageError(f"unknown model pair {name!r} (known: {', '.join(PAIRS)})")
            main, draft = prepare(PAIRS[name], progress=Spinner, half=half_type())
            print(f"{name}: ready\n  main  {main}\n  draft {draft}")
        return 0
    status = 0
    if os.environ.get(HALF_ENV):
        why = f"${HALF_ENV}"
    elif native_bf16():
        why = "the default; this CPU has AVX512_BF16: DUO_HALF=BF16 is faster, see docs/models.md"
    else:
        why = "the default; this CPU has no native BF16"
    print(f"main models in {half_type()} ({why})")
    for pair in PAIRS.values():
        print(f"{pair.name:10} {pair.description}")
        for which in ("main", "draft"):
            path = pair.path(which, half_type())
            if args.action == "verify":
                ok = verify_file(path)
                state = "ok" if ok else "MISSING OR CORRUPT"
                status |= 0 if ok or not path.exists() else 1
            else:
                kind = file_type(path)
                state = (
                    "not prepared"
                    if not is_ready(path)
                    else ", ".join(["ready", *([kind] if kind else [])])
                )
            print(f"  {which:5} {path}  [{state}]")
    if args.action == "list":
        _list_hub_models()
    return status


def _list_hub_models() -> None:
    """The GGUF files -hf has put in huggingface_hub's cache."""
    from duo.llama.hub import cached_repos

    repos = cached_repos()
    if repos:
        print("from the Hugging Face Hub (-hf REPO[:QUANT])")
    for repo in repos:
        print(f"{repo.repo}  ({repo.size / 1e6:.0f} MB)")
        for name, path in repo.paths.items():
            if name.lower().endswith(".gguf"):
                print(f"  {name}  {path}")


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

    demo = sub.add_parser(
        "demo",
        help="what duo is for: a lead and a back streaming an answer, then the main model "
        "alone, duo with no flags and lead+back side by side",
    )
    add_model_args(demo)
    add_spec_args(demo)
    demo.add_argument("-p", "--prompt", default=DEMO_PROMPT, help="prompt text")
    demo.add_argument("-n", "--n-predict", type=positive, default=128, help="tokens to generate")
    demo.set_defaults(func=_demo)

    models = sub.add_parser("models", help="list, prepare or verify the default model pairs")
    models.add_argument("action", nargs="?", choices=("list", "prepare", "verify"), default="list")
    models.add_argument("name", nargs="?", help="pair name (prepare only; default: all)")
    models.set_defaults(func=cmd_models)

    add_bench_parser(sub)

    add_lead_parser(sub)
    add_back_parser(sub)
    add_chat_parser(sub)
    add_rpc_server_parser(sub)
    add_draft_parser(sub)
    add_sim_parser(sub)
    add_completion_parser(sub, build_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        env_defaults(parser, os.environ)
    except UsageError as e:
        print(f"duo: error: {e}", file=sys.stderr)
        return 2
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
        hub_models(args)
        code: int = args.func(args)
        return code
    except DuoError as e:
        print(f"duo: error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print("\nduo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `duo models | head`: the reader has all it wants
        _silence_stdout()
        return 141  # as a shell reports a command ended by SIGPIPE
    except Exception as e:  # a bug: say so in one line; the traceback is for -v
        logging.getLogger("duo").debug("unexpected error", exc_info=True)
        print(
            f"duo: internal error: {type(e).__name__}: {e} (run with -v for details)",
            file=sys.stderr,
        )
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush of what is left in its
    buffer does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def run() -> None:
    sys.exit(main())
