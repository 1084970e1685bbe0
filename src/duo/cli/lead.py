"""`duo lead`: the main model behind the API, composed in one place (behind a supervisor
with --rpc; with a back of its own with --rpcd)."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from dataclasses import replace
from urllib.parse import urlsplit

from duo import auth
from duo.cli import auth_args
from duo.cli.args import (
    add_model_args,
    add_rpc_arg,
    add_spec_args,
    draft_layers,
    half_type,
    model_config,
    spec_config,
)
from duo.cli.back import BACK_KEY_ENV
from duo.cli.console import Console
from duo.cli.values import bind_address, mebibytes, non_negative, port, positive, stretch
from duo.errors import UsageError
from duo.lead.engine.lead import Lead, LeadConfig
from duo.lead.openai.reasoning import FORMATS
from duo.llama.rpc import check_endpoints, setup_rpc
from duo.net import check_port, is_loopback
from duo.session.config import ModelConfig, parse_pin
from duo.supervisor.launch import exit_hook_server, public_url, supervise_lead
from duo.supervisor.local_back import LocalBack, back_argv
from duo.supervisor.supervise import WORKER_ENV

log = logging.getLogger(__name__)

# The largest WebSocket message the lead accepts: drafters send small frames (a HELLO, or
# at most duo.channel.protocol.MAX_DRAFT_TOKENS tokens); nothing else arrives on a socket.
WS_MAX_SIZE = 16 * 1024


def add_lead_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lead = sub.add_parser("lead", help="serve the main model: OpenAI-compatible API + drafters")
    add_model_args(lead)
    add_rpc_arg(lead)
    add_spec_args(lead, modes=False)
    g = lead.add_argument_group("server")
    g.add_argument(
        "--host",
        type=bind_address,
        default="127.0.0.1",
        help="address to bind: an IP address (0.0.0.0 or :: for every interface) or a host "
        "name (default %(default)s)",
    )
    g.add_argument("--port", type=port, default=5555, help="port (default %(default)s)")
    auth_args.add_key_args(
        g, "require this Bearer key on the API (and the drafter channel)", drafter=True
    )
    auth_args.add_server_tls_args(g)
    g.add_argument(
        "--cors-origins",
        type=cors_origins,
        default=(),
        metavar="LIST",
        help="let web pages of these origins call the API from a browser: comma-separated, "
        "e.g. https://app.example.com,http://localhost:3000, or '*' for any (default: none)",
    )
    g.add_argument(
        "--max-body",
        type=positive,
        default=LeadConfig.max_body,
        metavar="BYTES",
        help="refuse request bodies larger than this with 413 (default %(default)s bytes: "
        "a 128K-token context of text, escaped as JSON, with room to spare)",
    )
    g.add_argument(
        "-np",
        "--parallel",
        type=positive,
        default=LeadConfig.parallel,
        metavar="N",
        help="decode up to N requests together, one pass per round, each in a slot with a "
        "context of its own of -c tokens; more requests wait (default %(default)s, as "
        "llama-server)",
    )
    g.add_argument(
        "-kvu",
        "--kv-unified",
        dest="kv_unified",
        action="store_true",
        default=True,
        help="one KV buffer of N times -c cells for every slot (the default): a pass with "
        "drafts or a prompt in some slots is one batch; every token attends over every "
        "slot's cells, the others' masked out",
    )
    g.add_argument(
        "-no-kvu",
        "--no-kv-unified",
        dest="kv_unified",
        action="store_false",
        help="a KV buffer of -c cells per slot, as llama-server -np N: a token attends over "
        "its own slot's cells only, but llama.cpp splits a pass into a batch per number of "
        "tokens per slot (slower once several slots verify drafts)",
    )
    g.add_argument(
        "-cram",
        "--cache-ram",
        type=mebibytes,
        default=LeadConfig.cache_ram,
        metavar="MIB",
        help="host memory for idle slots: when a request takes a slot, the other idle "
        "slots' KV cells are saved here and leave the shared buffer, where every token "
        "would attend over them, and come back when a request uses them again, as "
        "llama-server's --cache-idle-slots (default %(default)s MiB, as llama-server, for "
        "the main model and as much for an in-process drafter (-md); 0: none, -1: no limit)",
    )
    g.add_argument(
        "--cache-reuse",
        type=non_negative,
        default=LeadConfig.cache_reuse,
        metavar="N",
        help="a prompt's runs of at least N tokens that a slot's cache holds at other "
        "positions (an editor's moved chunks) have their KV shifted into place instead of "
        "read again, as llama-server's --cache-reuse (llama.cpp's presets for editors use "
        "256; default %(default)s: off)",
    )
    g.add_argument(
        "--spm-infill",
        action="store_true",
        help="/infill lays its prompt out suffix first, then prefix (SPM), as llama-server's "
        "--spm-infill; the default is prefix, suffix, middle",
    )
    g.add_argument(
        "--prompt-stretch",
        type=stretch,
        default=LeadConfig.prompt_stretch,
        metavar="X",
        help="while other requests decode, a new prompt is read beside their rounds: whole "
        "by default (inf), as llama-server reads it; with X, in pieces, each round costing "
        "at most X times a round without it (2.5, say: shorter gaps in the others' streams, "
        "a later first token for the new one)",
    )
    g.add_argument("--quiet", action="store_true", help="do not print generations")
    g.add_argument(
        "--alias",
        metavar="NAME",
        help="the model's name in the API: /v1/models and every answer's `model` "
        "(default: its file's name)",
    )
    g.add_argument(
        "--reasoning-format",
        choices=FORMATS,
        default="auto",
        help="a reasoning model's <think> text: deepseek (auto, the default) puts it in "
        "reasoning_content; deepseek-legacy there and in content; none leaves it in content",
    )
    lead.set_defaults(func=cmd_lead)


def cmd_lead(args: argparse.Namespace) -> int:
    import uvicorn

    from duo.lead.build import build_lead

    keys = auth_args.lead_keys(args)
    worker = bool(os.environ.get(WORKER_ENV))  # behind a supervisor, which serves the TLS
    tls = None if worker else auth.server_tls(args.ssl_key_file, args.ssl_cert_file)
    check_port(args.host, args.port)
    if not args.verbose:  # one INFO line per request, drafters joining and leaving
        logging.getLogger("duo").setLevel(logging.INFO)
    if args.rpc and not worker:
        return supervise_lead(args, tls, half_type, functools.partial(print, flush=True))
    remote_draft = args.rpcd is not None  # drafted by a back of the lead's own
    config = lead_config(args, keys)
    models = config.models
    _warn_if_exposed(args.host, keys.api, tls)
    setup_rpc(args.rpc, n_gpu_layers=args.n_gpu_layers)
    console = None if args.quiet else Console(sys.stdout.isatty())
    local_back = _local_back(args, models, keys, tls) if remote_draft else None
    if local_back is not None:
        config = replace(config, models=replace(models, draft=None))
    service = build_lead(config, console.show if console else None)
    try:
        local = f" + local drafter {models.draft.name}" if models.draft else ""
        if local_back is not None:
            local += f" on rpc-servers {args.rpcd}"
            local_back.start()
        url = public_url(args.host, args.port, tls)
        print(f"duo lead: {models.main.name}{local} on {url} ({back_hint(url, keys)})", flush=True)
        lead = service.lead
        print(f"duo lead: {_slots_text(config, lead)}", flush=True)
        print(f"duo lead: placement: {lead.session.sharing().describe()}", flush=True)
        settings = uvicorn.Config(
            service.app,
            host=args.host,
            port=args.port,
            log_level="warning",
            lifespan="off",
            ws_max_size=WS_MAX_SIZE,
            ssl_keyfile=tls.keyfile if tls else None,
            ssl_certfile=tls.certfile if tls else None,
        )
        exit_hook_server(service.feed.close, settings).run()
    finally:
        if local_back is not None:
            local_back.close()
        service.close()
    return 0


def lead_config(args: argparse.Namespace, keys: auth.Keys) -> LeadConfig:
    """The lead's settings from its command line (the models resolved and placed; with
    --rpcd, whose back drafts, the draft model's servers checked now, in one line)."""
    spec = spec_config(args)
    remote_draft = args.rpcd is not None
    models = model_config(args, need_draft=args.model_draft is not None or remote_draft, spec=spec)
    if remote_draft:
        if models.draft is None:
            raise UsageError("--rpcd needs a draft model (-md) to put on its rpc-servers")
        check_endpoints(args.rpcd, "--rpcd")
    return LeadConfig(
        models=models,
        spec=spec,
        api_key=keys,
        max_body=args.max_body,
        cors_origins=args.cors_origins,
        parallel=args.parallel,
        prompt_stretch=args.prompt_stretch,
        cache_ram=args.cache_ram,
        cache_reuse=args.cache_reuse,
        spm_infill=args.spm_infill,
        alias=args.alias,
        reasoning_format=args.reasoning_format,
    )


def _warn_if_exposed(host: str, api_keys: object, tls: auth.ServerTls | None) -> None:
    """A lead reachable from other machines without a key, or without TLS, says so."""
    if not is_loopback(host) and not api_keys:
        print(
            f"duo lead: warning: listening on {host} without --api-key; anyone who can "
            "reach this address can use the model",
            file=sys.stderr,
        )
    if not is_loopback(host) and tls is None:
        print(
            f"duo lead: warning: listening on {host} without TLS; keys, prompts and "
            "answers cross the network in clear text (see --ssl-key-file, --ssl-cert-file)",
            file=sys.stderr,
        )


def _slots_text(config: LeadConfig, lead: Lead) -> str:
    """What the lead's slots are, as its start-up line says."""
    slots = f"{config.parallel} slots (-np) of {lead.info.n_ctx:,} tokens (-c)"
    if config.parallel > 1:
        shared = lead.session.main.shares_cells
        slots += ", one KV buffer (-kvu)" if shared else ", a KV buffer each (-no-kvu)"
        if shared and config.cache_ram:
            room = (
                "host memory without a limit"
                if config.cache_ram < 0
                else f"{config.cache_ram:,} MiB of host memory"
            )
            slots += f", idle slots parked in {room} (-cram)"
    return slots


def _local_back(
    args: argparse.Namespace, models: ModelConfig, keys: auth.Keys, tls: auth.ServerTls | None
) -> LocalBack:
    """--rpcd: the draft model drafts from a `duo back` of the lead's own (duo.supervisor.
    local_back), on loopback, with the lead's drafting settings and a key it accepts."""
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "localhost") else args.host
    url = public_url(host, args.port, tls)
    options = [
        "-t", str(models.draft_threads), "-c", str(args.ctx_size), "--parallel", str(args.parallel),
        "--max-ahead", str(args.max_ahead), "--fanout", str(args.fanout),
    ]  # fmt: skip
    _, draft_cores = parse_pin(args.pin)
    if draft_cores:
        options += ["--pin", ",".join(map(str, sorted(draft_cores)))]
    if tls is not None:
        options += ["--ca-file", tls.certfile]
    if args.verbose:
        options.append("-v")
    env = {k: v for k, v in os.environ.items() if k not in BACK_KEY_ENV}
    if key := (keys.drafter or keys.api or (None,))[0]:
        env[auth.DRAFTER_KEY_ENV] = key
    assert models.draft is not None
    argv = back_argv(url, str(models.draft), args.rpcd, draft_layers(args), options)
    return LocalBack(argv, env, f"the draft model on rpc-servers {args.rpcd}")


def cors_origins(text: str) -> tuple[str, ...]:
    """'*', or origins (scheme://host[:port], no path) separated by commas."""
    origins = tuple(o.strip().rstrip("/") for o in text.split(",") if o.strip())
    for origin in origins:
        parts = urlsplit(origin)
        is_origin = parts.scheme in ("http", "https") and parts.netloc and not parts.path
        if origin != "*" and not is_origin:
            raise argparse.ArgumentTypeError(
                f"expected '*' or origins such as https://app.example.com, got {origin!r}"
            )
    if "*" in origins and len(origins) > 1:
        raise argparse.ArgumentTypeError("'*' allows every origin: give it alone")
    return origins


def back_hint(url: str, keys: auth.Keys) -> str:
    """How a drafter joins: the command, with the key it must present if there is one."""
    hint = f"drafters: duo back --lead {url}"
    if keys.drafter:
        return f"{hint} --api-key-file FILE (a drafter key; or ${auth.DRAFTER_KEY_ENV})"
    if keys.api:
        return f"{hint} --api-key-file FILE (an API key; or ${auth.API_KEY_ENV})"
    return hint
