"""How `duo lead` serves (duo.cli.lead): its uvicorn server, which ends the events feed's
streams when told to stop; with --rpc, a supervisor (duo.supervisor.supervise) on the
public address, the lead itself its worker on a private loopback port."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from duo import auth
from duo.llama.models import DEFAULT_PAIR, get_pair
from duo.llama.rpc import check_endpoints
from duo.net import free_port

if TYPE_CHECKING:
    import uvicorn


def public_url(host: str, port: int, tls: auth.ServerTls | None) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{host}:{port}"


def exit_hook_server(on_exit: Callable[[], None], config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that calls on_exit when told to stop (Ctrl-C, SIGTERM), before it
    waits for the open responses: the events feed's streams end then, not never."""
    import uvicorn

    class ExitHookServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            on_exit()
            super().handle_exit(sig, frame)

    return ExitHookServer(config)


def supervise_lead(
    args: argparse.Namespace,
    tls: auth.ServerTls | None,
    half: Callable[[], str],
    show: Callable[[str], object],
) -> int:
    """The lead's model runs on rpc-servers: serve through a supervisor (duo.supervisor).
    `half`: the 16-bit type of a pair's main model, as the command reads it; `show`: the
    console, which hears the supervisor's first line and the worker's, relayed as is."""
    import uvicorn

    from duo.supervisor.supervise import Served, Supervisor, Worker

    check_endpoints(args.rpc)  # fail now, in one line, rather than in a restart loop
    check_endpoints(args.rpcd, "--rpcd")
    port = free_port()
    served = Served(_served_name(args, half), args.parallel, args.model_draft is not None)
    supervisor = Supervisor(Worker(worker_argv(args.argv, port), port, show), served)
    show(
        f"duo lead: supervising the model's worker (rpc-servers {args.rpc}) "
        f"on {public_url(args.host, args.port, tls)}"
    )
    config = uvicorn.Config(
        supervisor.app(),
        host=args.host,
        port=args.port,
        log_level="warning",
        ssl_keyfile=tls.keyfile if tls else None,
        ssl_certfile=tls.certfile if tls else None,
    )
    uvicorn.Server(config).run()
    return 0


def _served_name(args: argparse.Namespace, half: Callable[[], str]) -> str:
    """The model's name as the lead gives it (--alias, else its file's stem), before it
    loads: the default pair's main model, where none is given."""
    if args.alias:
        return str(args.alias)
    if args.model:
        return Path(args.model).stem
    return get_pair(args.pair or DEFAULT_PAIR).path("main", half()).stem


def worker_argv(argv: Sequence[str], private_port: int) -> list[str]:
    """Our own command line, bound to a private loopback port instead of the public one."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port"):
            skip = True
            continue
        if arg.startswith(("--host=", "--port=")):
            continue
        out.append(arg)
    return [sys.executable, "-m", "duo", *out, "--host", "127.0.0.1", "--port", str(private_port)]
