"""`duo lead` and `duo back`: the distributed services, each composed in one place."""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys

from duo.errors import UsageError
from duo.llama.rpc import add_rpc_arg, setup_rpc
from duo.service.local import parse_pin
from duo.service.supervise import WORKER_ENV

log = logging.getLogger(__name__)


def add_lead_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from duo.cli.main import add_model_args, add_spec_args, positive

    lead = sub.add_parser("lead", help="serve the main model: OpenAI-compatible API + drafters")
    add_model_args(lead)
    add_rpc_arg(lead)
    add_spec_args(lead, modes=False)
    g = lead.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    g.add_argument("--port", type=positive, default=5555, help="port (default %(default)s)")
    g.add_argument("--api-key", help="require this Bearer token on the API and drafter channel")
    g.add_argument(
        "--max-body",
        type=positive,
        default=8 * 1024 * 1024,
        metavar="BYTES",
        help="refuse request bodies larger than this with 413 (default %(default)s = 8 MiB: "
        "a 128K-token context of text, escaped as JSON, with room to spare)",
    )
    g.add_argument("--quiet", action="store_true", help="do not print generations")
    lead.set_defaults(func=cmd_lead)


def add_back_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from duo.cli.main import non_negative, positive

    back = sub.add_parser("back", help="run a drafter for a lead (on a spare device or machine)")
    back.add_argument("-m", "--model", help="draft model GGUF (default: the default pair's draft)")
    back.add_argument("--pair", help="take the draft model of this named pair")
    back.add_argument("--lead", default="http://127.0.0.1:5555", help="the lead's URL")
    back.add_argument("-t", "--threads", type=positive, default=1, help="threads")
    back.add_argument("-ngl", "--n-gpu-layers", type=non_negative, default=0, help="GPU layers")
    add_rpc_arg(back)
    back.add_argument("-c", "--ctx-size", type=positive, default=4096, help="context size")
    back.add_argument(
        "--max-ahead",
        type=positive,
        default=12,
        metavar="N",
        help="most tokens drafted past the committed ones (default %(default)s)",
    )
    back.add_argument("--api-key", help="the lead's API key")
    back.add_argument("--name", default="", help="name shown in the lead's logs")
    back.add_argument("--pin", metavar="CORES", help="pin the drafter to cores, e.g. 1 or 2,3")
    back.set_defaults(func=cmd_back)


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UsageError(f"port {port} on {host} is already in use") from None
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def cmd_lead(args: argparse.Namespace) -> int:
    import uvicorn

    from duo.cli.main import model_config, spec_config
    from duo.service.api import Api
    from duo.service.lead import Lead, LeadConfig

    _check_port(args.host, args.port)
    if not args.verbose:  # one INFO line per request, drafters joining and leaving
        logging.getLogger("duo").setLevel(logging.INFO)
    if args.rpc and not os.environ.get(WORKER_ENV):
        return supervise_lead(args)
    spec = spec_config(args)
    models = model_config(args, need_draft=args.model_draft is not None)
    config = LeadConfig(
        models=models,
        spec=spec,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        max_body=args.max_body,
        console=not args.quiet,
        color=sys.stdout.isatty(),
    )
    if not _is_loopback(args.host) and not args.api_key:
        print(
            f"duo lead: warning: listening on {args.host} without --api-key; anyone who can "
            "reach this address can use the model",
            file=sys.stderr,
        )
    setup_rpc(args.rpc, n_gpu_layers=args.n_gpu_layers)
    lead = Lead(config)
    try:
        app = Api(lead).app()
        local = f" + local drafter {models.draft.name}" if models.draft else ""
        print(
            f"duo lead: {models.main.name}{local} on http://{args.host}:{args.port} "
            f"(drafters: duo back --lead http://{args.host}:{args.port})",
            flush=True,
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="off")
        )
        server.run()
    finally:
        lead.close()
    return 0


def supervise_lead(args: argparse.Namespace) -> int:
    """The lead's model runs on rpc-servers: serve through a supervisor (duo.supervise)."""
    import uvicorn

    from duo.llama.rpc import parse_endpoints, probe
    from duo.service.supervise import Supervisor, Worker, worker_argv

    for endpoint in parse_endpoints(args.rpc):
        probe(endpoint)  # fail now, in one line, rather than in a restart loop
    port = _free_port()
    supervisor = Supervisor(Worker(worker_argv(args.argv, port), port))
    print(
        f"duo lead: supervising the model's worker (rpc-servers {args.rpc}) "
        f"on http://{args.host}:{args.port}",
        flush=True,
    )
    uvicorn.Server(
        uvicorn.Config(supervisor.app(), host=args.host, port=args.port, log_level="warning")
    ).run()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cmd_back(args: argparse.Namespace) -> int:
    from duo.channel.back import Back, BackConfig, Refused, drafter_url
    from duo.llama.backend import Model
    from duo.service.local import resolve_models

    drafter_url(args.lead)  # a bad URL fails before the model loads
    if args.model is None:
        _, draft = resolve_models(None, None, args.pair)
        path = draft
    else:
        path = resolve_models(args.model, None, None)[0]
    assert path is not None
    cores, _ = parse_pin(args.pin) if args.pin else (None, None)
    setup_rpc(args.rpc, n_gpu_layers=args.n_gpu_layers)
    model = Model(path, n_ctx=args.ctx_size, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)
    config = BackConfig(
        lead=args.lead, max_ahead=args.max_ahead, api_key=args.api_key, name=args.name, cores=cores
    )
    back = Back(
        model, config, on_connect=lambda url: print(f"duo back: connected to {url}", flush=True)
    )
    print(f"duo back: {path.name} drafting for {args.lead}", flush=True)
    try:
        asyncio.run(back.run())
    except Refused as e:
        print(f"duo back: refused by the lead: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("duo back: stopped", file=sys.stderr)
        return 0
    finally:
        model.close()
    return 0
