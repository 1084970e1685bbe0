"""Arguments several commands share, and the configs they parse into (below every command)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from duo.cli.hub import add_hub_args
from duo.cli.progress import Spinner
from duo.cli.values import non_negative, positive, proportions
from duo.core.sampling import SamplingParams
from duo.errors import UsageError
from duo.llama.backend import CACHE_TYPES, SPLIT_MODES, Split
from duo.llama.models import HALVES, PAIRS
from duo.llama.rpc import ALL_LAYERS, Placement, setup_rpc
from duo.llama.vocab import check_chat_template
from duo.session.config import (
    MODES,
    SPEC_TYPES,
    ModelConfig,
    SpecConfig,
    parse_pin,
    parse_spec_types,
    resolve_models,
)
from duo.session.threads import with_threads

HALF_ENV = "DUO_HALF"


def half_type() -> str:
    """The 16-bit type a pair's main model is made in: $DUO_HALF (BF16 or F16), F16 by
    default. Read here, by the commands, and handed down."""
    chosen = os.environ.get(HALF_ENV, "").upper() or "F16"
    if chosen not in HALVES:
        raise UsageError(f"${HALF_ENV} must be BF16 or F16, not {chosen!r}")
    return chosen


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("-m", "--model", help="main model GGUF (default: the default pair's main)")
    g.add_argument("-md", "--model-draft", help="draft model GGUF (default: the pair's draft)")
    g.add_argument("--pair", help=f"a named default pair: {', '.join(PAIRS)} (default smollm2)")
    add_hub_args(g, draft=True)
    g.add_argument(
        "-t",
        "--threads",
        type=positive,
        help="main model threads (default: the physical cores, less an in-process "
        "drafter's; see docs/placement.md)",
    )
    g.add_argument(
        "-td",
        "--threads-draft",
        type=positive,
        help="draft model threads (default: a quarter of the cores, at least one, for a "
        "drafter beside the main model; the main model's otherwise)",
    )
    g.add_argument(
        "-ngl", "--n-gpu-layers", type=non_negative, default=0, help="main layers on GPU"
    )
    g.add_argument(
        "-ngld",
        "--n-gpu-layers-draft",
        type=non_negative,
        help="draft layers on GPU (default 0; every layer with --rpcd)",
    )
    g.add_argument(
        "-c",
        "--ctx-size",
        type=non_negative,
        default=4096,
        help="context size in tokens (0: the model's own; default %(default)s)",
    )
    g.add_argument(
        "-b",
        "--batch-size",
        type=positive,
        default=512,
        help="most tokens of the main model in one pass, prompts read in passes of this "
        "many (llama.cpp's n_batch; llama-server's default is 2048; default %(default)s)",
    )
    g.add_argument(
        "-fa",
        "--flash-attn",
        choices=("on", "off", "auto"),
        default="auto",
        help="the main model's flash attention (default %(default)s: llama.cpp decides)",
    )
    g.add_argument(
        "-ctk", "--cache-type-k", choices=list(CACHE_TYPES), default="f16", help="K cache type"
    )
    g.add_argument(
        "-ctv", "--cache-type-v", choices=list(CACHE_TYPES), default="f16", help="V cache type"
    )
    g.add_argument("--no-mmap", action="store_true", help="read the models into memory")
    g.add_argument(
        "-sm",
        "--split-mode",
        choices=list(SPLIT_MODES),
        default="layer",
        help="the main model over several GPUs: by layer (default), by row, or none (one GPU)",
    )
    g.add_argument(
        "-ts",
        "--tensor-split",
        type=proportions,
        metavar="N0,N1,...",
        help="the share of the main model on each GPU, e.g. 3,1 (default: by free memory)",
    )
    g.add_argument(
        "-mg", "--main-gpu", type=non_negative, default=0, metavar="INDEX",
        help="the GPU for -sm none, and for intermediate results with -sm row (default 0)",
    )  # fmt: skip
    g.add_argument(
        "--chat-template-file",
        metavar="PATH",
        help="a Jinja chat template for the main model, in place of the one in its GGUF",
    )


def add_spec_args(p: argparse.ArgumentParser, *, modes: bool = True) -> None:
    g = p.add_argument_group("speculation")
    if modes:
        g.add_argument(
            "--mode",
            choices=MODES,
            default="async",
            help="target: main model alone; sync: draft then verify; "
            "async: concurrent drafter (default %(default)s)",
        )
    g.add_argument(
        "--draft",
        type=positive,
        default=8,
        metavar="K",
        help="most draft tokens verified per round (default %(default)s)",
    )
    add_max_ahead_arg(g, "the async drafter")
    add_fanout_arg(g, "the async drafter")
    g.add_argument(
        "--policy",
        choices=("adaptive", "fixed"),
        default="adaptive",
        help="async: verify only the draft prefix worth its cost (adaptive, default) "
        "or every draft token ready (fixed)",
    )
    g.add_argument(
        "--spec-type",
        metavar="LIST",
        help="draft sources, comma-separated: model (the draft model, -md, and backs), "
        "ngram (lookup in the request itself), suffix (earlier requests); llama.cpp's "
        "names work too (draft-simple, ngram-simple, ngram-map-k, ngram-mod, ngram-cache); "
        f"none = no drafting (default {','.join(SPEC_TYPES)}, with the draft model only "
        "where it pays for the cores it takes: see docs/placement.md)",
    )
    g.add_argument(
        "--spec-ngram-size-n",
        type=positive,
        default=5,
        metavar="N",
        help="longest n-gram looked up, down to 2 (default %(default)s)",
    )
    g.add_argument(
        "--spec-ngram-size-m",
        type=positive,
        default=SpecConfig.lookup_max,
        metavar="M",
        help="most tokens a lookup (ngram, suffix) drafts per round; the adaptive policy "
        "verifies only the part worth its cost (default %(default)s)",
    )
    g.add_argument(
        "--pin", metavar="MAIN:DRAFT", help="pin main and drafter to cores, e.g. 0:1 (Linux)"
    )
    g.add_argument(
        "--deterministic",
        action="store_true",
        help="evaluate every round as a batch, so every mode computes bit-identical logits "
        "(a seed then gives the same text in every mode; slower on CPUs)",
    )


def add_sampling_args(
    p: argparse.ArgumentParser, temperature: float = 0.8, stops: bool = True
) -> None:
    g = p.add_argument_group("sampling (lossless: speculation never changes the distribution)")
    g.add_argument(
        "--temp",
        type=float,
        default=temperature,
        help="temperature, 0 = greedy (default %(default)s)",
    )
    g.add_argument("--top-k", type=int, default=40, help="0 = off (default %(default)s)")
    g.add_argument("--top-p", type=float, default=0.95, help="1 = off (default %(default)s)")
    g.add_argument("--min-p", type=float, default=0.05, help="0 = off (default %(default)s)")
    g.add_argument(
        "--repeat-penalty", type=float, default=1.0, help="1 = off (default %(default)s)"
    )
    g.add_argument(
        "--repeat-last-n",
        type=int,
        default=64,
        help="history the penalty looks at (default %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed: the same seed gives the same text (default: random)",
    )
    if stops:
        g.add_argument(
            "--stop",
            action="append",
            default=[],
            metavar="TEXT",
            help="stop before this text (repeatable)",
        )


def read_prompt(args: argparse.Namespace) -> str:
    """-p TEXT or the text of -f FILE (exactly one of them)."""
    if args.prompt is None and args.file is None:
        raise UsageError("give a prompt with -p TEXT or -f FILE")
    if args.prompt is not None and args.file is not None:
        raise UsageError("give the prompt with -p TEXT or -f FILE, not both")
    if args.file is None:
        return str(args.prompt)
    try:
        return Path(args.file).read_text()
    except OSError as e:
        raise UsageError(f"cannot read prompt file {args.file}: {e.strerror}") from None


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        repeat_last_n=args.repeat_last_n,
        seed=args.seed,
    ).check()


def model_config(
    args: argparse.Namespace,
    *,
    need_draft: bool,
    placement: Placement | None = None,
    spec: SpecConfig | None = None,
) -> ModelConfig:
    """The models and where they run; their threads as the flags say, else as `spec`
    places them (duo.session.threads)."""
    placement = placement or Placement()
    draft_path = args.model_draft if need_draft else None
    main, draft = resolve_models(
        args.model, draft_path, args.pair, progress=Spinner, half=half_type()
    )
    models = ModelConfig(
        main=main,
        draft=draft if need_draft else None,
        n_gpu_layers=args.n_gpu_layers,
        n_gpu_layers_draft=draft_layers(args),
        devices=placement.main,
        draft_devices=placement.draft,
        rpc=getattr(args, "rpc", None),
        rpcd=getattr(args, "rpcd", None),
        n_ctx=args.ctx_size,
        n_batch=args.batch_size,
        flash_attn=args.flash_attn,
        cache_types=(args.cache_type_k, args.cache_type_v),
        mmap=not args.no_mmap,
        split=Split(args.split_mode, args.tensor_split or (), args.main_gpu),
        chat_template=read_template(args.chat_template_file),
        kv_unified=getattr(args, "kv_unified", True),
    )
    explicit = getattr(args, "spec_type", None) is not None
    return with_threads(
        models, spec or SpecConfig(), args.threads, args.threads_draft, explicit=explicit
    )


def read_template(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        template = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--chat-template-file: cannot read {path}: {e}") from None
    try:
        check_chat_template(template)
    except UsageError as e:
        raise UsageError(f"--chat-template-file {path}: {e}") from None
    return template


def spec_config(args: argparse.Namespace) -> SpecConfig:
    main_cores, draft_cores = parse_pin(args.pin)
    return SpecConfig(
        mode=getattr(args, "mode", "async"),
        draft_max=args.draft,
        max_ahead=args.max_ahead,
        fanout=args.fanout,
        main_cores=main_cores,
        draft_cores=draft_cores,
        adaptive=args.policy == "adaptive",
        deterministic=args.deterministic,
        spec_types=parse_spec_types(args.spec_type or ",".join(SPEC_TYPES)),
        ngram_max=max(2, args.spec_ngram_size_n),
        lookup_max=args.spec_ngram_size_m,
    )


def add_max_ahead_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup, who: str) -> None:
    parser.add_argument(
        "--max-ahead",
        type=positive,
        default=12,
        metavar="N",
        help=f"most tokens {who} drafts past the committed ones (default %(default)s)",
    )


def add_fanout_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup, who: str) -> None:
    parser.add_argument(
        "--fanout",
        type=non_negative,
        default=0,
        metavar="F",
        help=f"branches {who} drafts at its least sure guesses when it is --max-ahead "
        "ahead, each starting with its runner-up token there: a draft ready when the lead "
        "rejects a guess (0: one chain of guesses; default %(default)s)",
    )


def add_rpc_arg(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, draft: bool = True
) -> None:
    parser.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="put the layers given by -ngl on these `duo rpc-server`s (llama.cpp RPC)",
    )
    parser.add_argument(
        "--rpcd",
        metavar="HOST:PORT[,...]",
        help="put the draft model's layers (-ngld, default all) on these rpc-servers, and "
        "no main model layer"
        if draft
        else "the same as --rpc (a back's model is a draft model), every layer by default",
    )


def draft_layers(args: argparse.Namespace) -> int:
    return offloaded(args.n_gpu_layers_draft, getattr(args, "rpcd", None))


def offloaded(given: int | None, rpcd: str | None) -> int:
    """The draft's layers to offload: as given; else every layer with --rpcd (the point of
    naming its servers), none without."""
    if given is not None:
        return given
    return ALL_LAYERS if rpcd else 0


def rpc_placement(args: argparse.Namespace) -> Placement:
    """--rpc and --rpcd: register their servers before any model loads (a one-line error
    for one that does not answer); which devices each model may use."""
    return setup_rpc(
        args.rpc,
        n_gpu_layers=args.n_gpu_layers,
        rpcd=getattr(args, "rpcd", None),
        n_gpu_layers_draft=draft_layers(args),
    )
